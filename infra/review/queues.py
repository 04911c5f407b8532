"""The batch queues of a stack, as the review shows them: who can use and borrow what. Read from the kueue-queues
release's values: the platform's own queue and each team's, the accelerators each is guaranteed on each flavor
(a batch slice, or the training slice's pools they may borrow), what it may borrow from the cohort, and when it
preempts; and from the ray-training release's, the training queue that lends its slice."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infra.derive.queues import WAIT_WHY
from infra.review.model import TeamQueue
from infra.review.releases import release_values

ACCELERATORS = ("nvidia.com/gpu", "google.com/tpu")


def team_queues(stack_json: Mapping[str, Any]) -> list[TeamQueue]:
    """One row per queue and flavor; none without teams (one queue alone borrows from no one). Where teams may
    borrow the training slice, its lender too: the training cluster's queue, in the same cohort."""
    rows: list[TeamQueue] = []
    lender: tuple[str, str, dict[str, Any], str] | None = None
    fair = False  # Kueue's fair sharing: on where a team has a weight (every other queue then weighs 1)
    for release, chart, values in release_values(stack_json):
        queue = values.get("queue") if chart == "ray-training" else None
        if queue and queue.get("cohort"):
            lender = (queue["name"], str(release.get("namespace", "")), queue, _lends(values.get("runs", "cluster")))
        if chart != "kueue-queues" or not values.get("teams"):
            continue
        # (queue, its LocalQueue's namespace, its borrowing limits, the values that hold its quota and preemption)
        queues: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
            (values["clusterQueue"], values["localQueue"]["namespace"], values.get("borrowingLimit") or {}, values)
        ]
        queues += [(t["name"], t["namespace"], t["borrowingLimit"], t) for t in values["teams"]]
        fair = any("weight" in t for t in values["teams"])
        for f in values["flavors"]:
            resource = next((r for r in ACCELERATORS if r in f["quota"]), "")
            for name, namespace, limits, holder in queues:
                quota = f["quota"] if holder is values else holder["quota"][f["name"]]
                limit = (limits.get(f["name"]) or {}).get(resource)
                rows.append(
                    TeamQueue(
                        name,
                        namespace,
                        f["name"],
                        resource,
                        int(quota.get(resource, 0)),
                        None if limit is None else int(limit),
                        _preempts(holder["preemption"]),
                        weight=float(holder.get("weight", 1)) if fair else None,
                    )
                )
    if rows and lender is not None:
        name, namespace, queue, lends = lender
        for f in queue["flavors"]:
            resource = next((r for r in ACCELERATORS if r in f["quota"]), "")
            if int(f["quota"].get(resource, 0)):  # its slice's pools (the head's flavor holds no accelerator)
                rows.append(TeamQueue(name, namespace, f["name"], resource, int(f["quota"][resource]), 0,
                                      _preempts(queue["preemption"]), lends, 1.0 if fair else None))  # fmt: skip
    return rows


def _lends(runs: str) -> str:
    """When the training slice is free to borrow: a standing cluster (training.runs: cluster) holds it while it is
    admitted, whether or not it trains; runs as jobs free it between runs."""
    if runs == "cluster":
        return (
            "only while the training cluster is paused (make training-pause; training.runs: cluster holds the slice "
            "whenever the cluster is admitted, training or not)"
        )
    return "between runs, with no step (training.runs: jobs: each run a RayJob Kueue admits and ends)"


def _preempts(p: Mapping[str, Any]) -> str:
    return (
        f"reclaims its share ({p['reclaimWithinCohort']}); {p['withinClusterQueue']} within; "
        f"while borrowing: {p['borrowWithinCohort']['policy']}"
    )


def pods_ready_wait(stack_json: Mapping[str, Any]) -> dict[str, Any] | None:
    """Kueue's waitForPodsReady as the stack's Kueue release writes it (its Configuration, one value of the chart),
    with `why` where the Configuration says where it comes from (WAIT_WHY); None where it writes none."""
    import yaml

    for _, chart, values in release_values(stack_json):
        if chart == "kueue":
            text = ((values.get("managerConfig") or {}).get("controllerManagerConfigYaml")) or ""
            wait = (yaml.safe_load(text) or {}).get("waitForPodsReady") if text else None
            if not isinstance(wait, dict):
                return None
            why = next((line.removeprefix(WAIT_WHY) for line in text.splitlines() if line.startswith(WAIT_WHY)), None)
            return {**wait, "why": why} if why else wait
    return None
