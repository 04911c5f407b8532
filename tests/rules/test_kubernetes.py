"""The rules of `infra/rules/kubernetes.py`, each failing on its example: an edit of dev.yaml or a change to one of
dev's rendered releases (the dev stack as it ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from infra.rules import RULES
from tests.helpers import one_of_kind
from tests.rules.examples import (
    EnvironmentExample,
    ManifestExample,
    assert_every_rule_has_an_example,
    fails_on_environment_example,
    fails_on_manifest_example,
    gke_cluster,
    leader_worker_template,
    ray_worker_template,
)


def _tpu_selector_without_chips(objs: list[dict[str, Any]]) -> None:
    leader = leader_worker_template(objs)["leaderTemplate"]["spec"]
    leader["nodeSelector"] = {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice"}


def _requests_below_limits(objs: list[dict[str, Any]]) -> None:
    ray_worker_template(objs)["spec"]["containers"][0]["resources"]["requests"]["google.com/tpu"] = "2"


ENVIRONMENT: dict[str, EnvironmentExample] = {
    "k8s.service-account-in-the-pods-namespace": (
        lambda d, mp: d["identities"]["converter"].update(namespace="ml-training"),
        "serving.llama405b.conversion.identity",
        "its namespace 'ml-training' is not the deployment's ('ml-serving'",
    ),
}


@pytest.mark.parametrize("rule_id", sorted(ENVIRONMENT))
def test_environment_rule_fails_on_its_example(rule_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fails_on_environment_example(rule_id, ENVIRONMENT[rule_id], monkeypatch)


MANIFEST: dict[str, ManifestExample] = {
    "k8s.extended-resources-requests-equal-limits": ("ray-training", _requests_below_limits, "must equal the limit"),
    "k8s.tpu-taint-needs-request-or-toleration": (
        "serve-llama405b",
        _tpu_selector_without_chips,
        "add a google.com/tpu toleration",
    ),
    "k8s.names-and-label-values": (
        "serve-canary",
        lambda o: one_of_kind(o, "Deployment")["metadata"]["labels"].update(team="x" * 64),
        "at most 63 characters",
    ),
    # The releases as they are, on a cluster that may run 1.28.
    "k8s.native-sidecars-need-1.29": (
        "serve-llama405b",
        lambda o: None,
        "the cluster may run 1.28",
        lambda s: gke_cluster(s).update(min_master_version="1.28"),
    ),
}


@pytest.mark.parametrize("rule_id", sorted(MANIFEST))
def test_manifest_rule_fails_on_its_example(
    rule_id: str, stacks: dict[str, dict[str, Any]], releases: dict[str, list[dict[str, Any]]]
) -> None:
    fails_on_manifest_example(rule_id, MANIFEST[rule_id], stacks, releases)


def test_rbac_names_are_path_segments_and_other_names_dns_subdomains(
    stacks: dict[str, dict[str, Any]], releases: dict[str, list[dict[str, Any]]]
) -> None:
    """The API server holds RBAC objects' names to path segments (`custom-metrics:system:auth-delegator`, as the
    metrics adapter's binding is named upstream) and every other object's to DNS-1123 subdomains."""
    from infra.rules.manifest_subject import ReleaseContext

    objects = copy.deepcopy(releases["metrics-adapter"])
    ctx = ReleaseContext("metrics-adapter", "custom-metrics", stacks["dev"])
    binding = next(o for o in objects if o["kind"] == "ClusterRoleBinding" and ":" in o["metadata"]["name"])
    assert binding["metadata"]["name"] == "metrics-adapter:system:auth-delegator"
    assert RULES["k8s.names-and-label-values"].run(objects, ctx) == []
    binding["metadata"]["name"] = "metrics-adapter/auth"
    (found,) = RULES["k8s.names-and-label-values"].run(objects, ctx)
    assert "a path segment name" in found.message
    one_of_kind(objects, "Service")["metadata"]["name"] = "metrics:adapter"
    assert any("DNS-1123" in v.message for v in RULES["k8s.names-and-label-values"].run(objects, ctx))


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("kubernetes", ENVIRONMENT, MANIFEST)
