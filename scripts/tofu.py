"""The real Terraform engine, offline: OpenTofu and the three providers built from source (infra/engine).

  python -m scripts.tofu build                       build OpenTofu and the providers, or find them cached
  python -m scripts.tofu validate [--env dev ...]    each environment's stack validated by OpenTofu against the
                                                     real providers' schemas (synthesized now)
  python -m scripts.tofu plan [--env dev ...] [--out cdktf.out/tofu]
                                                     the real providers' plan of each stack from an empty state,
                                                     offline (no credential, no refresh), as `tofu show -json`
                                                     writes it: <out>/platform-<env>.plan.json, which
                                                     `platform review --plan` reads
  python -m scripts.tofu plan --base <cdktf.out> | --base-ref main [--env dev ...] [--stacks <cdktf.out>]
                                                     the real providers' plan of the change from the baseline's
                                                     stacks to this checkout's (or to those of --stacks), against
                                                     a stand-in state of the baseline (infra/engine/state.py),
                                                     reviewed and gated; with each resource the offline review
                                                     plans otherwise. The plan and its subject go to <out>, where
                                                     the offline review (`make plan`) reads them
  ... plan --if-built --no-gate                      as `make plan BASE_REF=` runs it: nothing if the engine is
                                                     not built yet (never waits for a build), and the review step
                                                     judges the plans
  python -m scripts.tofu computed [--write]          the attributes the providers keep when the configuration
                                                     leaves them out (optional and computed in their schemas), by
                                                     resource type: infra/catalogue/optional_computed.json

Exit codes: 0 done, 1 a build failed or OpenTofu found an error (each named), 2 bad input, 3 the gate blocks a
change of the real plan (CONFIRM_CHANGE=<address> confirms one).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from infra.catalogue.optional_computed import CATALOGUE_FILE
from infra.cdk.layout import read_stacks, stack_file
from infra.config import ConfigError
from infra.engine import providers
from infra.engine.build import BuildError
from infra.engine.tofu import EngineError, Workspace, plan, tofu
from infra.localcluster.apply import as_registry_planned, registry_charts
from infra.synth.load import load_all, load_named
from scripts.parser import ArgumentParser, refuse
from scripts.plan import BaselineError


def build() -> dict[str, Path]:
    started = time.monotonic()
    built = {"tofu": tofu(), **providers.build_all()}
    print(f"build: the engine ready in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return built


def diagnostics_text(stack: str, found: list[dict[str, Any]]) -> list[str]:
    """One line per diagnostic: the stack, the severity, OpenTofu's summary and detail, and where."""
    lines = []
    for d in found:
        at = d.get("range") or {}
        context = (d.get("snippet") or {}).get("context") or ""
        place = f"{at.get('filename', '')}:{(at.get('start') or {}).get('line', '')}" if at else ""
        where = d.get("address") or ", ".join(p for p in (context, place) if p)
        detail = " ".join((d.get("detail") or "").split())
        lines.append(f"{stack}: {d.get('severity')}: {d.get('summary')}{f': {detail}' if detail else ''} ({where})")
    return lines


def validate(stacks: dict[str, dict[str, Any]], folder: Path) -> int:
    """Each stack validated in a workspace of its own under `folder`; prints every diagnostic, 1 on any error."""
    failed = 0
    for name, stack in stacks.items():
        workspace = Workspace(folder / name, stack)
        workspace.init(backend=False)
        found = workspace.validate()
        for line in diagnostics_text(name, found):
            print(line)
        errors = sum(d.get("severity") == "error" for d in found)
        failed += errors
        print(f"{name}: tofu validate: {'valid' if not errors else f'{errors} error(s)'}", file=sys.stderr)
    return 1 if failed else 0


def summary(planned: dict[str, Any]) -> str:
    """OpenTofu's own count of a plan's changes: `Plan: N to add, N to change, N to destroy.`"""
    actions = [tuple((e.get("change") or {}).get("actions") or ()) for e in planned.get("resource_changes") or []]
    add = sum(a in (("create",), ("delete", "create"), ("create", "delete")) for a in actions)
    change = sum(a == ("update",) for a in actions)
    destroy = sum(a in (("delete",), ("delete", "create"), ("create", "delete")) for a in actions)
    return f"Plan: {add} to add, {change} to change, {destroy} to destroy."


def plan_all(stacks: dict[str, dict[str, Any]], folder: Path, out: Path) -> int:
    """Each stack planned in `folder`/<stack> (three folders below the repository, as make deploy's: the stacks'
    `../../../` chart and post-renderer paths resolve there), its plan written to `out`."""
    from infra.delivery.apply_paths import unresolved

    out.mkdir(parents=True, exist_ok=True)
    for name, stack in stacks.items():
        problems = unresolved(folder / name, stack)
        if problems:
            raise EngineError(f"{folder / name}: the stack's files do not resolve there: {problems[0]}")
        planned = plan(Workspace(folder / name, stack, overrides=registry_charts(stack, folder / name)))
        target = out / f"{name}.plan.json"
        target.write_text(json.dumps(planned, indent=1))
        print(f"{name}: {summary(planned)} ({target})")
    return 0


def baseline(base: Path | None, ref: str | None, names: list[str]) -> dict[str, dict[str, Any]]:
    """The baseline's synthesized stacks by name: from a cdktf.out folder, or made from a git ref."""
    from scripts.plan import baseline_of

    if base is not None and ref is not None:
        raise BaselineError("give --base or --base-ref, not both")
    folder = base if base is not None else baseline_of(str(ref))
    found = {n: stack_file(folder, n) for n in names}
    if not any(p.is_file() for p in found.values()):
        raise BaselineError(f"baseline {folder}: no synthesized stack at {', '.join(map(str, found.values()))}")
    return {n: json.loads(p.read_text()) for n, p in found.items() if p.is_file()}


def plan_changes(
    base: dict[str, dict[str, Any]], stacks: dict[str, dict[str, Any]], folder: Path, out: Path, *, gate: bool = True
) -> int:
    """Each stack's change from its baseline planned by the real providers against the baseline's stand-in state,
    written to `out`/<stack>.plan.json with its subject (infra/review/real_plan.py) and reviewed; 3 where the gate
    blocks (CONFIRM_CHANGE confirms), unless `gate` is off (the review that reads the plans gates)."""
    from infra.delivery.apply_paths import unresolved
    from infra.engine.state import plan_change, settle
    from infra.review import diff, real_plan, review_plan
    from scripts.apply import confirmed_from_env

    confirmed = confirmed_from_env()
    out.mkdir(parents=True, exist_ok=True)
    blocked = False
    for name, stack in stacks.items():
        before = base.get(name, {})  # a stack the baseline has not: every resource new, from an empty state
        workspace = folder / name
        problems = unresolved(workspace, stack)
        if problems:
            raise EngineError(f"{workspace}: the stack's files do not resolve there: {problems[0]}")
        started = time.monotonic()
        engine = Workspace(workspace, before or stack, overrides=registry_charts(before or stack, workspace))
        rounds = settle(engine) if before else 0
        planned = plan_change(engine, stack, registry_charts(stack, workspace)) if before else plan(engine)
        planned = as_registry_planned(planned, before, stack)
        target = real_plan.write(out, name, planned, stack, before)
        review = review_plan(name, planned, confirmed)
        took = time.monotonic() - started
        made = f"settled in {rounds} plans" if rounds else "as made before"
        print(f"{name}: {summary(planned)} ({target}; the baseline's stand-in state {made}; {took:.0f} s)")
        for change in review.changes:
            print(f"  {change.action} {change.address}")
        for d in real_plan.disagreements(diff(before, stack), review.changes):
            print(f"  the offline review plans {d.offline} for {d.address}; the real plan {d.real}")
        for change in review.gated:
            state = "confirmed" if review.is_confirmed(change) else "BLOCKING"
            print(f"{state}: {change.action} {change.address} ({name}): {change.blocked}", file=sys.stderr)
        blocked = blocked or bool(review.blocking)
    return 3 if blocked and gate else 0


def engine_built() -> bool:
    """Whether OpenTofu and the three providers are built (`make tofu`), without building anything."""
    from infra.catalogue.terraform_engine import PROVIDERS
    from infra.engine import build as gobuild

    return gobuild.is_cached("opentofu") and all(providers.cached(p) for p in PROVIDERS.values())


def of_folder(folder: Path, names: list[str]) -> dict[str, dict[str, Any]]:
    """The stacks synthesized in a cdktf.out folder (`--stacks`), by name; those of `names` (environments) only."""
    found = {k: v for k, v in read_stacks(folder).items() if not names or k.removeprefix("platform-") in names}
    if not found:
        raise BaselineError(f"--stacks {folder}: no synthesized stack under {folder}/stacks")
    return found


def synthesized(names: list[str]) -> dict[str, dict[str, Any]]:
    from infra.synth.app import synth

    # A name that is no environment is refused naming the environments (load_named).
    chosen = {name: load_named(name) for name in names} if names else load_all()
    with tempfile.TemporaryDirectory(prefix="platform-tofu-") as tmp:
        synth(chosen, Path(tmp))
        return read_stacks(Path(tmp))


def write_computed(stacks: dict[str, dict[str, Any]], write: bool) -> int:
    """The optional and computed attributes of every resource type the stacks declare, read from the real
    providers' schemas (infra/catalogue/optional_computed.py): printed, or with `write` written to its file."""
    from infra.engine.computed import catalogue, read_schemas, stack_types

    found = catalogue(read_schemas(next(iter(stacks.values()))), stack_types(stacks.values()))
    text = json.dumps(found, indent=1, sort_keys=True) + "\n"
    if write:
        CATALOGUE_FILE.write_text(text)
        print(f"wrote {CATALOGUE_FILE} ({len(found)} resource types)")
    else:
        sys.stdout.write(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m scripts.tofu", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["build", "validate", "plan", "computed"])
    parser.add_argument("--write", action="store_true", help=f"computed: write {CATALOGUE_FILE.name}")
    parser.add_argument("--env", action="append", default=[], help="this environment (default: every one)")
    parser.add_argument("--dir", type=Path, default=Path(".cache/tofu"), help="the workspaces' folder")
    parser.add_argument("--out", type=Path, default=Path("cdktf.out/tofu"), help="plan: where the plans go")
    parser.add_argument("--base", type=Path, default=None, help="plan: a baseline cdktf.out the change is from")
    parser.add_argument("--base-ref", default=None, help="plan: a git ref whose synthesized stacks the change is from")
    parser.add_argument("--stacks", type=Path, default=None, help="plan: a cdktf.out whose stacks to plan (not synth)")
    parser.add_argument("--if-built", action="store_true", help="plan nothing if the engine is not built yet")
    parser.add_argument("--no-gate", action="store_true", help="plan: write the plans; the review reading them gates")
    args = parser.parse_args(argv)
    try:
        if args.action == "build":
            for name, path in build().items():
                print(f"{name}\t{path}")
            return 0
        if args.if_built and not engine_built():
            print("tofu: the engine is not built (`make tofu` builds it): the review's actions are the offline ones")
            return 0
        # Bad input refused before anything is built.
        stacks = of_folder(args.stacks, args.env) if args.stacks else synthesized(args.env)
        build()
        if args.action == "computed":
            return write_computed(stacks, args.write)
        if args.action == "plan" and (args.base or args.base_ref):
            before = baseline(args.base, args.base_ref, list(stacks))
            return plan_changes(before, stacks, args.dir.resolve(), args.out, gate=not args.no_gate)
        if args.action == "plan":
            return plan_all(stacks, args.dir.resolve(), args.out)
        return validate(stacks, args.dir.resolve())
    except (ConfigError, BaselineError) as err:
        return refuse(err)
    except (BuildError, EngineError) as err:
        print(f"error: tofu: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
