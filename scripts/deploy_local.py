"""`make deploy-local ENV=`: the deploy's own path, applied to the local cluster (infra/localcluster).

Like `make deploy`, it synthesizes the environment once into a folder at the repository root (where the releases'
chart and post-renderer paths resolve), checks every file the apply opens, and gates the stack, here with the rules
of the real systems `make plan` runs (the preflight and the plan review need a real project); then it starts the
local control plane with the stack's nodes and applies the stack's Kubernetes half to it with the real engine:
OpenTofu and the kubernetes and helm providers the stacks pin, built from source, against the real API server and
the real controllers (infra/localcluster/apply.py). A second run is the real plan and apply of the change: what
changed is updated in place or replaced as the providers decide, and what the stack no longer has is destroyed.
The Google half is not applied: nothing here can stand for the Google APIs.

  python -m scripts.deploy_local <env> [--dir .cache/cluster-local]
  python -m scripts.deploy_local --destroy <env> [--dir ...]     (make destroy-local)

The synthesized folder is kept at cdktf.out.local-<env>/; OpenTofu's workspace and state are in the cluster's
folder (engine/platform-<env>).

--destroy is `tofu destroy` of that state, as `make destroy` does on GKE; then every object the cluster holds that it
did not before the stack's first apply is listed (infra/localcluster/destroy.py): left by design (a CRD Helm keeps,
a namespace Helm made) or left behind.

Exit codes: 0 applied (destroyed, nothing left behind), 1 OpenTofu or a real component refused a resource (OpenTofu's
words name the resource and the component's), a destroy that did not finish or left something behind, 2 bad input,
a refused gate, or nothing deployed to destroy.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

from infra.cdk import layout
from infra.config import ConfigError
from infra.delivery.apply_paths import unresolved
from infra.engine.build import BuildError
from infra.engine.tofu import EngineError
from infra.localcluster.apply import ApplyError, LocalApply, UnsupportedResource, run_helm
from infra.localcluster.cluster import Cluster, ClusterError
from infra.localcluster.destroy import left_behind
from infra.localcluster.verdicts import Verdicts, collect, undecided
from infra.synth.load import load_named
from scripts.parser import ArgumentParser, refuse


def gate(stack: dict[str, object]) -> list[str]:
    """The rules `make plan` runs, on this stack and its rendered releases: each violation, as make plan says it."""
    from infra.rules.run import check_synthesized

    terraform, manifests, _ = check_synthesized(stack)
    return [v.line() for v in terraform] + [v.line(f"release {release}") for release, v in manifests]


def main(argv: list[str] | None = None) -> int:
    from infra.constructs.releases import REPO
    from infra.synth.app import synth

    parser = ArgumentParser(prog="python -m scripts.deploy_local", description=__doc__.split("\n\n")[0])
    parser.add_argument("env")
    parser.add_argument("--dir", type=Path, default=Path(".cache/cluster-local"), help="the local cluster's folder")
    parser.add_argument("--destroy", action="store_true", help="destroy what deploy-local applied (make destroy-local)")
    parser.add_argument(
        "--drift", action="store_true", help="what changed on the cluster outside OpenTofu since the last apply"
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        env = load_named(args.env)
    except ConfigError as err:
        return refuse(err)
    # A direct child of the repository root, as make deploy's folder: the stack's ../../../ paths resolve.
    folder = REPO / f"cdktf.out.local-{env.name}"
    if args.destroy:
        return destroy(f"platform-{env.name}", folder, Cluster(args.dir.resolve()))
    if args.drift:
        return drift(f"platform-{env.name}", Cluster(args.dir.resolve()))
    shutil.rmtree(folder, ignore_errors=True)
    synth({env.name: env}, folder)
    stack_dir = layout.stack_dir(folder, layout.stack_name(env.name))
    stack = layout.read_stack(folder, layout.stack_name(env.name))
    problems = unresolved(stack_dir, stack)
    if problems:
        print("\n".join(f"error: platform-{env.name}: {p}" for p in problems), file=sys.stderr)
        return 2
    refused = gate(stack)
    if refused:
        print(f"error: platform-{env.name}: the gate refused the stack:", *refused, sep="\n  ", file=sys.stderr)
        return 2
    print(f"deploy-local: platform-{env.name} synthesized in {stack_dir}; the gate passed", file=sys.stderr)
    cluster = Cluster(args.dir.resolve())
    try:
        cluster.up(stack, env.region)
        summary = LocalApply(cluster, f"platform-{env.name}").run(stack_dir)
    except (ApplyError, UnsupportedResource) as err:
        print(f"error: platform-{env.name}: {err}", file=sys.stderr)
        return 1
    except (BuildError, ClusterError, EngineError) as err:
        print(f"error: deploy-local: {err}", file=sys.stderr)
        return 1
    print(
        f"deploy-local: platform-{env.name}: {summary} ({time.monotonic() - started:.0f} s); kubeconfig "
        f"{cluster.kubeconfig}; logs {cluster.logs}",
        file=sys.stderr,
    )
    found = settle(cluster, stack)
    report(found, folder / "verdicts.json")
    return 1 if found.unexpected() else 0


def drift(stack_name: str, cluster: Cluster) -> int:
    """`--drift` (make drift-local): OpenTofu's plan of the state deploy-local's last apply left against what the
    cluster holds now. Each resource changed outside OpenTofu that the next apply would change back (its refresh,
    `resource_drift`, of what the configuration sets) is listed with what the gate says of such a change (security
    weakened, data or capacity lost, a dependency cut), then what the next apply would do. 0 nothing drifted, 2
    something did, 1 nothing applied or the engine failed."""
    from infra.review.diff import review_plan
    from infra.review.drift import report

    engine = LocalApply(cluster, stack_name)
    if not engine.applied():
        print(f"error: {stack_name}: deploy-local has applied nothing of it to this cluster", file=sys.stderr)
        return 1
    try:
        review = review_plan(stack_name, engine.plan())
    except EngineError as err:
        print(f"error: drift-local: {err}", file=sys.stderr)
        return 1
    code, lines = report(stack_name, review, engine="OpenTofu", next_apply="the next deploy-local")
    print("\n".join(lines))
    return code


def destroy(stack_name: str, folder: Path, cluster: Cluster) -> int:
    """`--destroy`: `tofu destroy` of the state deploy-local's apply left on `cluster`; what is left, listed.
    `folder`, the synthesized stack deploy-local keeps, goes with it."""
    started = time.monotonic()
    engine = LocalApply(cluster, stack_name)
    if not engine.applied():
        env = stack_name.removeprefix("platform-")
        print(
            f"error: {stack_name}: nothing to destroy: deploy-local has applied nothing of it to the cluster in "
            f"{cluster.folder} (make deploy-local ENV={env} applies it)",
            file=sys.stderr,
        )
        return 2
    if not cluster.ready():
        print(f"error: destroy-local: the local cluster in {cluster.folder} is not running", file=sys.stderr)
        return 1
    try:
        summary = engine.destroy()
        kept, left = left_behind(cluster, engine.configuration())
    except (ApplyError, ClusterError, EngineError) as err:
        print(
            f"error: {stack_name}: the destroy stopped; what is not destroyed is still in the state: {err}",
            file=sys.stderr,
        )
        return 1
    print(f"destroy-local: {stack_name}: {summary} ({time.monotonic() - started:.0f} s)", file=sys.stderr)
    for line in kept:
        print(f"left by design: {line}")
    for line in left:
        print(f"left behind: {line}")
    shutil.rmtree(folder, ignore_errors=True)
    if left:
        print(f"error: {stack_name}: the destroy left {len(left)} object(s) behind", file=sys.stderr)
        return 1
    return 0


def settle(cluster: Cluster, stack: dict[str, object], timeout: float = 60) -> Verdicts:
    """The components' verdicts once they stop changing (the controllers reconcile, the scheduler binds): read
    every 3 s until two reads agree and every pod and template has a verdict (bound, or a component's reason), for
    at most `timeout` seconds. On a loaded machine two reads can agree before the scheduler has looked at a pod."""
    import dataclasses

    last = None
    deadline = time.monotonic() + timeout
    while True:
        listed = json.loads(
            run_helm(cluster, ["list", "--all-namespaces", "--all", "--output", "json"], cluster.folder).stdout or "[]"
        )
        found = collect(cluster, stack, listed)
        snapshot = json.dumps(dataclasses.asdict(found), sort_keys=True)
        if (snapshot == last and not undecided(found)) or time.monotonic() > deadline:
            return found
        last = snapshot
        time.sleep(3)


def report(found: Verdicts, path: Path) -> None:
    """What the components decided, to stdout (and as JSON to `path`)."""
    import dataclasses

    path.write_text(json.dumps(dataclasses.asdict(found), indent=1, sort_keys=True) + "\n")
    not_deployed = {r: s for r, s in found.releases.items() if s != "deployed"}
    print(f"releases: {len(found.releases)} ({not_deployed if not_deployed else 'all deployed'})")
    print("pods bound per pool (scheduler): " + ", ".join(f"{p} {n}" for p, n in found.bound_by_pool().items()))
    for pod in found.pods:
        if pod.pool is None:
            print(f"pending: {pod.namespace}/{pod.name} ({pod.template or 'no template'}): {pod.pending}")
    for key, state in sorted(found.workloads.items()):
        print(f"kueue workload {key}: {state}")
    for key, count in sorted(found.objects.items()):
        print(f"{key}: {count} pod(s) made by its controller")
    for template in found.held:
        print(f"queued: {template}: {found.missing[template]}")
    for line in found.unexpected():
        print(f"disagrees with the placement report: {line}")
    print(f"verdicts: {path}")


if __name__ == "__main__":
    sys.exit(main())
