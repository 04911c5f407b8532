"""The rules of `infra/rules/workload_identity.py`, each failing on its example: a change to dev's synthesized stack
or a change to one of dev's rendered releases (the dev stack as it ships passes them all:
tests/rules/test_framework.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import of_type, one_of_kind
from tests.rules.examples import (
    ManifestExample,
    TerraformExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
    gke_cluster,
)


def _drop_cluster_dependency(stack: dict[str, Any]) -> None:
    member = next(
        m for m in of_type(stack, "google_storage_bucket_iam_member").values() if "principal://" in m["member"]
    )
    member.pop("depends_on")


def _sax_pod(objs: list[dict[str, Any]]) -> dict[str, Any]:
    return one_of_kind(objs, "JobSet")["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]


TERRAFORM: dict[str, TerraformExample] = {
    # Before the fix: bindings to the identity pool did not wait for the cluster.
    "gke.wi.bindings-after-cluster": (_drop_cluster_dependency, "needs depends_on the cluster"),
    "gke.wi.gke-metadata-needs-workload-pool": (
        lambda s: gke_cluster(s).pop("workload_identity_config"),
        "the cluster has no workload pool",
    ),
}


MANIFEST: dict[str, ManifestExample] = {
    # Before the fix the Saxml model servers ran on the host network.
    "gke.wi.host-network-has-no-workload-identity": (
        "serve-saxml",
        lambda o: _sax_pod(o).update(hostNetwork=True),
        "the pod gets the node's identity",
    ),
}


EXAMPLES = {**TERRAFORM, **MANIFEST}


@pytest.mark.parametrize("rule_id", sorted(EXAMPLES))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, EXAMPLES[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("workload_identity", EXAMPLES)
