"""The rules of `infra/rules/kueue.py`, each failing on its example: an edit of dev.yaml or a change to one of dev's
rendered releases (the dev stack as it ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.helpers import one_of_kind
from tests.rules.examples import (
    EnvironmentExample,
    ManifestExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
)


def _flavor_mismatch(objs: list[dict[str, Any]]) -> None:
    """The platform's ClusterQueue (`gpu`; dev's teams have theirs) with a flavor short of a resource."""
    queue = next(o for o in objs if o["kind"] == "ClusterQueue" and o["metadata"]["name"] == "gpu")
    group = queue["spec"]["resourceGroups"][0]
    group["flavors"][0]["resources"] = group["flavors"][0]["resources"][:-1]


ENVIRONMENT: dict[str, EnvironmentExample] = {
    "kueue.no-local-queue-named-default": (
        lambda d, mp: d["teams"].update(default=d["teams"].pop("research")),
        "teams.default",
        "Kueue's default LocalQueue name",
    ),
    "kueue.cluster-scoped-names-unique": (
        lambda d, mp: d["training"].update(queue=d["batch"]["queue"]),
        "training.queue",
        "batch.queue names a ClusterQueue",
    ),
    "kueue.team-quotas-within-the-slices": (
        lambda d, mp: d["teams"]["research"].update(quota={"a3mega": 24}),
        "teams.*.quota.a3mega",
        "add up to more than slice a3mega's 16 nvidia.com/gpu",
    ),
    # dev's research team guaranteed one A3 Mega node (8 GPUs) of the queued slice, at 93.41 USD/hour.
    "platform.team-quota-within-budget": (
        lambda d, mp: d["teams"]["research"].update(budget={"monthly_usd": 50000}),
        "teams.research.budget.monthly_usd",
        "its guaranteed quota commits 68,188.63 USD a month at list price (a3mega: 8 nvidia.com/gpu = 1 x "
        "a3-megagpu-8g at 93.41 USD/hour",
    ),
    "kueue.borrow-within-cohort-needs-reclaim": (
        lambda d, mp: d["teams"]["research"].update(
            preemption={"reclaim_within_cohort": "Never", "borrow_within_cohort": "LowerPriority"}
        ),
        "teams.research.preemption.borrow_within_cohort",
        "needs reclaim_within_cohort LowerPriority or Any",
    ),
}


MANIFEST: dict[str, ManifestExample] = {
    # A training cluster of 18 slices in dev's queue: one worker group more than a Kueue 0.19 Workload holds.
    "kueue.raycluster-queued-whole": (
        "ray-training",
        lambda o: one_of_kind(o, "RayCluster")["spec"]["workerGroupSpecs"].extend(
            copy.deepcopy(one_of_kind(o, "RayCluster")["spec"]["workerGroupSpecs"][0]) for _ in range(17)
        ),
        "at most 17 worker groups in a queued RayCluster",
    ),
    "kueue.queue-exists-and-covers-resources": (
        "nccl-test",
        lambda o: one_of_kind(o, "JobSet")["metadata"]["labels"].update({"kueue.x-k8s.io/queue-name": "nope"}),
        "no LocalQueue; known: ml-gpu/gpu",
    ),
    "kueue.flavors-list-covered-resources": ("kueue-queues", _flavor_mismatch, "must list"),
}


EXAMPLES = {**ENVIRONMENT, **MANIFEST}


@pytest.mark.parametrize("rule_id", sorted(EXAMPLES))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, EXAMPLES[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("kueue", EXAMPLES)
