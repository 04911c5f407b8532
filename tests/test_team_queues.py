"""Teams sharing the batch slices through Kueue: a ClusterQueue per team in one cohort with the platform's own, each
guaranteed its quota of a slice and lending what it leaves unused; Kueue's priority classes; the review's table of
who can use and borrow what."""

from __future__ import annotations

from typing import Any

from infra.config import Environment
from infra.derive.queues import PRIORITIES, queue_shares
from infra.review import review_stack
from tests.helpers import rendered


def _kinds(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def _quota(queue: dict[str, Any]) -> dict[str, dict[str, str]]:
    """flavor -> resource -> nominal quota (and borrowing limit, where one is set) of a ClusterQueue."""
    (group,) = queue["spec"]["resourceGroups"]
    return {
        f["name"]: {
            r["name"]: r["nominalQuota"] + (f" (borrow {r['borrowingLimit']})" if "borrowingLimit" in r else "")
            for r in f["resources"]
        }
        for f in group["flavors"]
    }


def test_each_team_has_a_queue_in_the_cohort_and_the_platform_keeps_the_rest(
    stacks: dict[str, dict[str, Any]],
) -> None:
    objects = rendered(stacks["dev"], "kueue-queues")  # each validated against the pinned CRDs and their CEL rules
    queues = _kinds(objects, "ClusterQueue")
    assert set(queues) == {"gpu", "research"}
    assert {q["spec"]["cohortName"] for q in queues.values()} == {"platform"}
    # a3mega: 2 nodes of 8 H100s, 208 vCPUs and 1,872 GB each; research is guaranteed half, the platform the rest.
    half = {"cpu": "208", "memory": "1872G", "nvidia.com/gpu": "8"}
    assert _quota(queues["research"]) == {"a3mega": half}
    assert _quota(queues["gpu"]) == {"a3mega": half}
    assert queues["research"]["spec"]["preemption"] == {
        "reclaimWithinCohort": "Any",
        "borrowWithinCohort": {"policy": "Never"},
        "withinClusterQueue": "LowerPriority",
    }
    # The slice's queued provisioning is checked on the team's queue as on the platform's.
    assert queues["research"]["spec"]["admissionChecksStrategy"] == queues["gpu"]["spec"]["admissionChecksStrategy"]
    local = _kinds(objects, "LocalQueue")
    assert local["research"]["metadata"]["namespace"] == "ml-gpu"
    assert local["research"]["spec"]["clusterQueue"] == "research"
    classes = _kinds(objects, "WorkloadPriorityClass")
    assert {name: c["value"] for name, c in classes.items()} == PRIORITIES


def test_without_teams_the_platform_queue_is_what_it_was(stacks: dict[str, dict[str, Any]]) -> None:
    """prod has no teams: one ClusterQueue holding the whole slice, in no cohort, no priority classes."""
    objects = rendered(stacks["prod"], "kueue-queues")
    (queue,) = _kinds(objects, "ClusterQueue").values()
    assert "cohortName" not in queue["spec"] and "preemption" not in queue["spec"]
    assert _kinds(objects, "WorkloadPriorityClass") == {}


def test_a_borrowing_limit_caps_what_a_team_takes_from_the_cohort(envs: dict[str, Environment]) -> None:
    env = envs["dev"].model_copy(deep=True)
    env.teams["research"] = env.teams["research"].model_copy(update={"borrowing_limit": {"a3mega": 4}})
    platform, research = queue_shares(env)
    assert research.borrowing_limit == {"a3mega": {"nvidia.com/gpu": 4, "cpu": 104, "memory": 936}}
    assert platform.nominal["a3mega"]["nvidia.com/gpu"] == 8 and platform.borrowing_limit == {}


def test_the_review_says_who_can_use_and_borrow_what(stacks: dict[str, dict[str, Any]]) -> None:
    review = review_stack("platform-dev", stacks["dev"], None)
    rows = [(q.queue, q.namespace, q.flavor, q.guaranteed, q.borrow_limit) for q in review.queues]
    assert rows == [("gpu", "ml-gpu", "a3mega", 8, None), ("research", "ml-gpu", "a3mega", 8, None)]
    assert review_stack("platform-prod", stacks["prod"], None).queues == []
