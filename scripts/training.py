"""`make training-pause ENV=` and `make training-resume ENV=`: lend the queued training cluster's slices to the teams
that may borrow them (`borrow_training`), and take them back.

    python -m scripts.training pause <env> [--dry-run]
    python -m scripts.training resume <env> [--dry-run]

Pause sets the training cluster's Kueue Workload inactive (`spec.active: false`): Kueue evicts it, KubeRay's
cluster gives its pods up and the training queue's quota is free, so a team job waiting on the slice is admitted by
borrowing it. The run stops; its checkpoints stay in the bucket. Resume sets it active again: the training queue
reclaims its slices (`reclaimWithinCohort: Any`: Kueue preempts the borrowers) and admits the cluster whole; a
training run submitted again (make train) resumes from its newest complete checkpoint.

The cluster is reached as the deploy reaches it (gcloud's credentials through its DNS endpoint), or through
PLATFORM_KUBECONFIG (the local cluster's: .cache/cluster-local/kubeconfig).

Exit codes: 0 done, already so, or a dry run; 1 the cluster cannot be reached, or holds no training Workload;
2 a refused environment (one whose training is not queued: no Workload to pause).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from infra.config import ConfigError, Environment
from infra.synth.load import load_named
from scripts.cluster_access import ToolsMissing, Unreachable, cluster_env, kubectl_in
from scripts.parser import ArgumentParser, refuse

WORKLOADS = "workloads.kueue.x-k8s.io"


def training_namespace(env: Environment) -> str:
    """Where the training cluster and its Kueue Workload live: its identity's namespace."""
    assert env.training is not None
    return env.identities[env.training.identity].namespace


def training_workloads(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Workloads of a namespace that Kueue made for a RayCluster (the training release's)."""
    return [
        w for w in items if any(o.get("kind") == "RayCluster" for o in w.get("metadata", {}).get("ownerReferences", []))
    ]


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m scripts.training", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["pause", "resume"])
    parser.add_argument("env", help="the environment (infra/environments/<env>.yaml)")
    parser.add_argument("--dry-run", action="store_true", help="say what would change; change nothing")
    args = parser.parse_args(argv)
    try:
        env = load_named(args.env)
    except ConfigError as err:
        return refuse(err, then="nothing was changed")
    if env.training is None or env.training.queue is None:
        print(
            f"error: ENV={args.env!r}: its training is not queued (training.queue unset in {args.env}.yaml): no "
            "Kueue Workload holds the slice, so there is nothing to pause; a team borrows the training slice only "
            "from a queued cluster (docs/operations.md, 'Share the batch slices between teams')",
            file=sys.stderr,
        )
        return 2
    active = args.action == "resume"
    namespace = training_namespace(env)
    try:
        with cluster_env(env) as run_env:
            run = kubectl_in(run_env)
            listed = run("get", WORKLOADS, "-n", namespace, "-o", "json")
            if listed.returncode:
                raise Unreachable(" ".join(listed.stderr.split()))
            found = training_workloads(json.loads(listed.stdout).get("items", []))
            if not found:
                print(
                    f"error: {env.cluster.name}: no Kueue Workload of a RayCluster in namespace {namespace}: is the "
                    "training release deployed (make deploy)?",
                    file=sys.stderr,
                )
                return 1
            for workload in found:
                name = workload["metadata"]["name"]
                if workload.get("spec", {}).get("active", True) == active:
                    print(f"{namespace}/{name}: already {'active' if active else 'paused'}; nothing to change")
                    continue
                if args.dry_run:
                    print(f"dry run: {namespace}/{name}: would set spec.active to {str(active).lower()}")
                    continue
                patch = json.dumps({"spec": {"active": active}})
                done = run("patch", WORKLOADS, name, "-n", namespace, "--type=merge", "-p", patch)
                if done.returncode:
                    raise Unreachable(" ".join(done.stderr.split()))
                print(
                    f"{namespace}/{name}: "
                    + (
                        "active: the training queue reclaims its slices (Kueue preempts the borrowers) and admits "
                        "the cluster whole; then make train ENV=... resumes from the newest checkpoint"
                        if active
                        else "paused: Kueue evicts the training cluster; teams with borrow_training may borrow its "
                        f"slices until make training-resume ENV={env.name}"
                    )
                )
    except (ToolsMissing, Unreachable) as err:
        print(f"error: {err}; nothing was changed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
