"""The batch queues of a stack, as the review shows them: who can use and borrow what. Read from the kueue-queues
release's values: the platform's own queue and each team's, the accelerators each is guaranteed on each flavor
(a batch slice), what it may borrow from the cohort, and when it preempts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infra.review.model import TeamQueue
from infra.review.releases import release_values

ACCELERATORS = ("nvidia.com/gpu", "google.com/tpu")


def team_queues(stack_json: Mapping[str, Any]) -> list[TeamQueue]:
    """One row per queue and flavor; none without teams (one queue alone borrows from no one)."""
    for _, chart, values in release_values(stack_json):
        if chart != "kueue-queues":
            continue
        if not values.get("teams"):
            return []
        rows = []
        # (queue, its LocalQueue's namespace, its borrowing limits, the values that hold its quota and preemption)
        queues: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
            (values["clusterQueue"], values["localQueue"]["namespace"], {}, values)
        ]
        queues += [(t["name"], t["namespace"], t["borrowingLimit"], t) for t in values["teams"]]
        for f in values["flavors"]:
            resource = next((r for r in ACCELERATORS if r in f["quota"]), "")
            for name, namespace, limits, holder in queues:
                quota = f["quota"] if holder is values else holder["quota"][f["name"]]
                limit = (limits.get(f["name"]) or {}).get(resource)
                p = holder["preemption"]
                preempts = (
                    f"reclaims its share ({p['reclaimWithinCohort']}); {p['withinClusterQueue']} within; "
                    f"while borrowing: {p['borrowWithinCohort']['policy']}"
                )
                rows.append(
                    TeamQueue(
                        name,
                        namespace,
                        f["name"],
                        resource,
                        int(quota.get(resource, 0)),
                        None if limit is None else int(limit),
                        preempts,
                    )
                )
        return rows
    return []
