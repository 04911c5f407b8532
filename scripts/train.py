"""`make train ENV=`: one training run of the environment's recipe on its slice.

    python -m scripts.train submit --env <env> [--recipe R] [--run-name N] [--submission-id ID]
    python -m scripts.train local | args | run ...     the trainer's own commands (workloads/trainer)

Where `training.runs` is `jobs`, `submit` creates the run as a RayJob in the training namespace: the ray-training
chart rendered with the run (templates/rayjob.yaml) from the values the deploy gives it, so the run's cluster is the
deployed shape, image and identity. Kueue admits it whole through `training.queue` (the head, every slice and the
submitter) or it waits there, behind the runs before it; KubeRay makes its cluster, runs the trainer, and deletes the
cluster when the run ends, which frees the slice for the next run (or a team that borrows it). `make status ENV=`
shows which. Where it is `cluster`, `submit` sends the run to the standing cluster's job API (RAY_ADDRESS), as the
trainer does.

The cluster is reached as the deploy reaches it (gcloud's credentials through its DNS endpoint), or through
PLATFORM_KUBECONFIG (the local cluster's).

Exit codes: 0 submitted; 1 the cluster cannot be reached or refused the run (its words); 2 bad input (a refused
environment, recipe or run name). The trainer's own commands exit with its codes.
"""

from __future__ import annotations

import json
import re
import secrets
import sys
from datetime import UTC, datetime
from typing import Any

from infra.charts.check import ChartCheckError, render
from infra.charts.runs import with_run
from infra.config import ConfigError, Environment
from infra.constructs.releases import ray_training_values
from infra.synth.load import load_named
from scripts.cluster_access import ToolsMissing, Unreachable, cluster_env, kubectl_in
from scripts.parser import refuse
from scripts.training import training_namespace
from workloads.trainer import __main__ as trainer
from workloads.trainer.maxtext import GOODPUT_ARGS
from workloads.trainer.recipes import RecipeError

RELEASE = "ray-training"  # infra/stacks/releases.py: the training release's name (the run's labels carry it)
# KubeRay's limit on a RayJob's name (utils.MaxRayJobNameLength @ v1.5.0): its cluster's name adds 6 characters.
NAME_MAX = 47


def job_name(run_name: str, submission_id: str | None, now: datetime) -> str:
    """The RayJob's name: the submission id, else `<run name>-<MMDD-HHMMSS>-<4 hex>` (one per submission; the run
    name stays the checkpoints' folder, so a later run of it resumes), as a DNS label KubeRay accepts."""
    given = submission_id or f"{run_name}-{now:%m%d-%H%M%S}-{secrets.token_hex(2)}"
    name = re.sub(r"[^a-z0-9-]+", "-", given.lower()).strip("-")
    if len(name) > NAME_MAX:
        name = f"{name[: NAME_MAX - 5].rstrip('-')}-{secrets.token_hex(2)}"
    if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name):
        raise ValueError(f"--submission-id {given!r}: a RayJob's name starts with a letter (a-z, 0-9, -)")
    return name


def run_job(env: Environment, name: str, command: list[str], goodput: str | None = None) -> dict[str, Any]:
    """The RayJob, or the JobSet (training.launcher: jobset), of one run: the ray-training chart with the deploy's
    values and the run (`goodput`: the name MaxText records its goodput under, where it does)."""
    values = with_run(ray_training_values(env), name, command, goodput)
    (job,) = [o for o in render("ray-training", values, name=RELEASE, namespace=training_namespace(env)) if
              o["kind"] in ("RayJob", "JobSet")]  # fmt: skip
    return job


def submit(env: Environment, args: Any) -> int:
    """Create the run's RayJob; say where it is queued."""
    assert env.training is not None
    try:
        plan = trainer.cluster_plan(args)
        name = job_name(plan["run_name"], args.submission_id, datetime.now(UTC))
        records = set(GOODPUT_ARGS) <= set(plan.get("maxtext_args") or ())
        job = run_job(env, name, trainer.run_command(plan), plan["run_name"] if records else None)
    except (RecipeError, ValueError, ChartCheckError) as err:
        return refuse(err, then="nothing was submitted")
    namespace = training_namespace(env)
    try:
        with cluster_env(env) as run_env:
            done = kubectl_in(run_env)("create", "-n", namespace, "-f", "-", "-o", "name", stdin=json.dumps(job))
    except (ToolsMissing, Unreachable) as err:
        print(f"error: {err}; nothing was submitted", file=sys.stderr)
        return 1
    if done.returncode:
        print(f"error: {namespace}/{name}: {' '.join(done.stderr.split())}", file=sys.stderr)
        return 1
    queue = env.training.queue
    kind = job["kind"]
    print(json.dumps({**plan, kind.lower(): f"{namespace}/{name}", "queue": queue}))
    print(
        f"submitted: {kind} {namespace}/{name} in queue {queue}: Kueue admits it when the whole slice is free "
        f"(`make status ENV={env.name}` says whether it runs or waits, and why)",
        file=sys.stderr,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = trainer.parser()
    parser.prog, parser.description = "python -m scripts.train", __doc__
    if argv[:1] != ["submit"]:
        if not argv or argv[0] in ("-h", "--help"):
            parser.parse_args(argv)  # the usage, or the help: exits
        return trainer.main(argv)
    args = parser.parse_args(argv)
    try:
        env = load_named(args.env)
    except ConfigError as err:
        return refuse(err, then="nothing was submitted")
    if env.training is None or env.training.runs != "jobs":
        return trainer.main(argv)
    return submit(env, args)


if __name__ == "__main__":
    sys.exit(main())
