"""`python -m scripts.rules [cdktf.out/stacks]`: every rule on every environment, stack and rendered release.

`python -m scripts.rules --table` prints the rules as docs/rules.md's Markdown table.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from infra.cdk.layout import STACK_FILE
from infra.config import ConfigError, environments_dir
from infra.rules.run import Report, run, shown_file
from infra.synth.load import load_planned
from scripts.parser import ArgumentParser, refuse


def table() -> str:
    """Where each system's rules live (one module per system), then every rule as a Markdown table row:
    docs/rules.md's tables are this output."""
    import inspect

    from infra.rules import all_rules

    modules: dict[str, list[str]] = {}
    for r in all_rules():
        module = inspect.getmodule(r.check)
        modules.setdefault(module.__name__ if module else "?", []).append(r.id)
    rows = ["| module | its rules |", "|---|---|"]
    for name, ids in sorted(modules.items()):
        rows.append(f"| `{name.replace('.', '/')}.py` | {', '.join(f'`{i}`' for i in sorted(ids))} |")
    rows += [
        "",
        "| rule | reads | system | refused at | what it enforces | source |",
        "|---|---|---|---|---|---|",
    ]
    for r in sorted(all_rules(), key=lambda r: (r.subject, r.id)):
        source = r.source.replace("|", "/")
        narrowed = ", ".join(r.kinds or r.types or ((r.api,) if r.api else ()))
        reads = f"{r.subject}: {narrowed}" if narrowed else r.subject
        rows.append(f"| `{r.id}` | {reads} | {r.system} | {r.layer} | {r.summary} | {source} |")
    return "\n".join(rows)


def write_rendered(stacks: Path, report: Report) -> None:
    """Every rendered release as <out>/rendered/<stack>/<release>.json: what the Helm provider will send, for a
    reviewer and for the scripts step (the charts' shell scripts, infra/shell/charts.py)."""
    for name, (_, releases) in sorted(report.rendered.items()):
        out = stacks.parent / "rendered" / name
        out.mkdir(parents=True, exist_ok=True)
        for release, (_, objects) in releases.items():
            (out / f"{release}.json").write_text(json.dumps(objects, indent=1, sort_keys=True) + "\n")


def placement_summary(stacks: Path, report: Report) -> str:
    """Write every pod's placement verdict to <out>/placement/<stack>.md; one line saying what was found."""
    from infra.rules.cluster_autoscaler import pack, packing_report
    from infra.rules.scheduler import placement_report

    out = stacks.parent / "placement"
    out.mkdir(exist_ok=True)
    pods = unplaced = left_out = 0
    shared: list[str] = []
    for name, (stack, releases) in sorted(report.rendered.items()):
        table, count, missing = placement_report(stack, releases)
        objects = {release: objs for release, (_, objs) in releases.items()}
        packing = pack(stack, objects, {release: r["namespace"] for release, (r, _) in releases.items()})
        (out / f"{name}.md").write_text(
            f"# Where each pod of {name} can run\n\n{table}\n"
            f"## Every pod together: what each pool holds at once (rule gke.pools-hold-their-pods-together)\n\n"
            f"{packing_report(packing)}"
        )
        pods, unplaced = pods + count, unplaced + missing
        left_out += sum(n for _, n, _ in packing.left_out)
        for pool, p in sorted(packing.pools.items()):
            if len({pod.release for pod, _ in p.placed}) > 1:
                shared.append(f"{name} {pool} {len(p.nodes)}/{p.max_nodes} nodes")
    return (
        f"placement: {pods} pod templates simulated against every node pool, {unplaced} fit none; every pod "
        f"together: {left_out} without room (shared pools: {', '.join(shared)}) ({out})"
    )


def cel_summary() -> str:
    """How many of the pinned CRDs' CEL rules run on create, and each one that does not, with why."""
    from infra.charts.cel import rule_counts
    from infra.charts.check import crd_openapi
    from infra.charts.crds import CrdsMissing

    try:
        evaluated, skipped = rule_counts(crd_openapi())
    except CrdsMissing as err:
        return f"CRD validation rules: not evaluated: {err}"
    transition = [s for s in skipped if s.reason.startswith("transition")]
    uncompiled = [s for s in skipped if s not in transition]
    lines = [
        f"CRD validation rules: {evaluated} evaluated on every custom resource at create; {len(transition)} transition "
        f"rules (oldSelf) on every upgrade, in the review against its baseline; {len(uncompiled)} cannot be evaluated "
        "here"
    ]
    lines += [f"  not evaluated: {s.kind} {s.path}: {s.rule}: {s.reason}" for s in uncompiled]
    from infra.charts.crds import missing_optional

    missing = missing_optional()
    if missing:
        lines.append(
            f"optional CRDs not available here ({', '.join(missing)}): their objects are held to rule "
            "gke.inference-gateway-policies instead of their schema (`make crds` fetches them where GitHub is "
            "reachable)"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:

    parser = ArgumentParser(
        prog="python -m scripts.rules",
        description="Every rule of the real systems on every environment, synthesized stack and rendered release.",
        epilog="Exit codes: 0 no violations, 1 a violation (or a bad environment file), 2 nothing synthesized.",
    )
    parser.add_argument("stacks", nargs="?", type=Path, default=Path("cdktf.out/stacks"), help="cdktf.out/stacks")
    parser.add_argument("--table", action="store_true", help="print the rules as docs/rules.md's Markdown table")
    args = parser.parse_args(argv)
    if args.table:
        print(table())
        return 0
    stacks = args.stacks
    try:
        # Every environment loaded and held together; those PLATFORM_ENVS names (make plan ENV=) checked and shown.
        envs = load_planned(environments_dir())
    except ConfigError as err:  # environment rules run at load: their violations land here
        return refuse(err, 1)
    if not any(stacks.glob(f"*/{STACK_FILE}")):
        print(f"error: no synthesized stacks under {stacks}; run `make synth` first", file=sys.stderr)
        return 2
    from infra.rules.gke_versions import support_warnings

    for name, env in envs.items():
        for warning in support_warnings(env):
            print(f"warning: {shown_file(name)}: {warning}", file=sys.stderr)
    report = run(envs, stacks)
    for line in report.lines:
        print(f"error: {line}", file=sys.stderr)
    print(report.summary())
    print(placement_summary(stacks, report))
    write_rendered(stacks, report)
    print(cel_summary())
    from workloads.trainer.compiled import environment_recipes

    for env in envs.values():  # per environment, the recipes that run on its training slice (named one: *)
        for line in environment_recipes(env):
            print(f"recipes: {line}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
