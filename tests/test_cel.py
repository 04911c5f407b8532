"""The CRDs' own CEL rules, evaluated on the rendered custom resources as the API server would on create:
one refusal per CRD family, with the rule's message."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from infra.charts.cel import evaluate, rule_counts
from infra.charts.check import ChartCheckError, crd_openapi, validate
from tests.helpers import needs_crds, one_of_kind, rendered


def _in_order_with_depends_on(objs: list[dict[str, Any]]) -> dict[str, Any]:
    jobset = one_of_kind(objs, "JobSet")
    jobset["spec"]["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    jobset["spec"]["replicatedJobs"][0]["dependsOn"] = [{"name": "other", "status": "Ready"}]
    return jobset


def _borrowing_without_cohort(objs: list[dict[str, Any]]) -> dict[str, Any]:
    """The platform's queue (dev's team has one too) out of its cohort, with a borrowing limit."""
    queue = next(o for o in objs if o["kind"] == "ClusterQueue" and o["metadata"]["name"] == "gpu")
    queue["spec"].pop("cohortName", None)
    queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowingLimit"] = 1
    return queue


def _managed_by_someone_else(objs: list[dict[str, Any]]) -> dict[str, Any]:
    ray = one_of_kind(objs, "RayCluster")
    ray["spec"]["managedBy"] = "example.com/my-operator"
    return ray


CASES: dict[str, tuple[str, Callable[[list[dict[str, Any]]], dict[str, Any]], str]] = {
    "JobSet": ("nccl-test", _in_order_with_depends_on, "StartupPolicy and DependsOn APIs are mutually exclusive"),
    "Kueue ClusterQueue": (
        "kueue-queues",
        _borrowing_without_cohort,
        "borrowingLimit must be nil when cohort is empty",
    ),
    "KubeRay RayCluster": ("ray-training", _managed_by_someone_else, "the managedBy field value must be either"),
}


@needs_crds
@pytest.mark.parametrize("family", sorted(CASES))
def test_a_custom_resource_breaking_its_crds_cel_rule_is_refused_with_the_rules_message(
    family: str, stacks: dict[str, dict[str, Any]]
) -> None:
    release, breaks, message = CASES[family]
    objects = copy.deepcopy(rendered(stacks["dev"], release))
    obj = breaks(objects)
    with pytest.raises(ChartCheckError) as err:
        validate(obj)
    assert message in str(err.value) and "x-kubernetes-validations rule:" in str(err.value)


@needs_crds
def test_every_rule_of_the_pinned_crds_compiles_and_only_transition_rules_wait_for_updates() -> None:
    evaluated, skipped = rule_counts(crd_openapi())
    assert evaluated >= 30
    assert [s for s in skipped if not s.reason.startswith("transition rule")] == []
    assert all("oldSelf" in s.rule for s in skipped)


def test_a_rule_the_runtime_cannot_compile_is_listed_not_passed() -> None:
    """A Kubernetes-only function (isURL) that the CEL runtime lacks: reported as not evaluated."""
    schema = {
        "type": "object",
        "properties": {"spec": {"type": "object", "x-kubernetes-validations": [{"rule": "isURL(self.url)"}]}},
    }
    evaluated, skipped = rule_counts({("example.com/v1", "Thing"): schema})
    assert evaluated == 0
    (only,) = skipped
    assert only.path == "spec" and only.reason.startswith("does not compile here: ")


def test_defaults_apply_before_the_rules_and_an_evaluation_error_refuses() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {"mode": {"type": "string", "default": "a"}, "items": {"type": "array"}},
                "x-kubernetes-validations": [
                    {"rule": "self.mode == 'a'", "message": "mode must be a"},
                    {"rule": "size(self.items) > 0", "message": "items must not be empty"},
                ],
            }
        },
    }
    failures = evaluate({"spec": {}}, schema)  # mode defaults to a; items is missing: evaluation error
    assert [(f.path, f.message.split(" (")[0]) for f in failures] == [("spec", "items must not be empty")]
    assert "evaluation error" in failures[0].message
    assert [f.message for f in evaluate({"spec": {"mode": "b", "items": [1]}}, schema)] == ["mode must be a"]
