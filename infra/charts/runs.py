"""A training run as the ray-training chart renders it where `training.runs` is `jobs`: the RayJob `make train`
creates (the chart with values.run, templates/rayjob.yaml), and the RayCluster KubeRay makes from it; or, with
`training.launcher: jobset`, the JobSet (templates/jobset.yaml). The deploy renders none of them (no values.run); the
plan's rules, policy and placement hold them, rendered for a stand-in run, so a run that would be refused or not fit
is refused at plan, not at `make train`."""

from __future__ import annotations

import copy
import shlex
from typing import Any

# On each object a run makes, naming the RayJob: made by `make train` (or by KubeRay for it), never by the deploy.
PER_RUN = "platform.ml/made-per-run"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# The stand-in run the plan renders (a name KubeRay allows: at most 47 characters, utils.MaxRayJobNameLength).
PLAN_RUN_NAME = "run"
PLAN_RUN_COMMAND = ["python", "-m", "workloads.trainer", "run", "--plan", "<the plan make train sends>"]


def runs_as_jobs(values: dict[str, Any]) -> bool:
    """Whether these ray-training values make each run a RayJob (values.runs: jobs)."""
    return values.get("runs") == "jobs"


def with_run(values: dict[str, Any], name: str, command: list[str], goodput: str | None = None) -> dict[str, Any]:
    """The chart's values with one run, `command` in each JobSet pod (launcher jobset) or the RayJob's entrypoint:
    what `make train` renders; `goodput`: the name MaxText records the run's goodput under, where it records it."""
    run: dict[str, Any] = {"name": name, **({"goodput": goodput} if goodput else {})}
    if values.get("launcher") == "jobset":
        return {**values, "run": {**run, "command": list(command)}}
    return {**values, "run": {**run, "entrypoint": shlex.join(command)}}


def made_per_run(rendered: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The JobSet of a render with values.run (launcher jobset); or its RayJob, and the RayCluster KubeRay makes
    from its rayClusterSpec (named
    `<job>-<5 characters>` by KubeRay; here `<job>-xxxxx`; owned by the RayJob, without the queue label: Kueue admits
    the RayJob, not its cluster), each marked PER_RUN."""
    out = []
    for jobset in (o for o in rendered if o.get("kind") == "JobSet"):
        jobset = copy.deepcopy(jobset)
        jobset["metadata"].setdefault("annotations", {})[PER_RUN] = jobset["metadata"]["name"]
        out.append(jobset)
    for job in (o for o in rendered if o.get("kind") == "RayJob"):
        job = copy.deepcopy(job)
        name = job["metadata"]["name"]
        job["metadata"].setdefault("annotations", {})[PER_RUN] = name
        labels = {k: v for k, v in (job["metadata"].get("labels") or {}).items() if k != QUEUE_LABEL}
        cluster = {
            "apiVersion": job["apiVersion"],
            "kind": "RayCluster",
            "metadata": {
                "name": f"{name}-xxxxx",
                "labels": labels,
                "annotations": {PER_RUN: name},
                "ownerReferences": [
                    {"apiVersion": job["apiVersion"], "kind": "RayJob", "name": name, "controller": True}
                ],
            },
            "spec": copy.deepcopy(job["spec"]["rayClusterSpec"]),
        }
        out += [job, cluster]
    return out


def per_run(obj: dict[str, Any]) -> bool:
    """Whether an object is one a run makes (made_per_run), not one the deploy applies."""
    return PER_RUN in ((obj.get("metadata") or {}).get("annotations") or {})
