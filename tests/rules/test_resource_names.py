"""The rules of `infra/rules/resource_names.py`, each failing on its example: an edit of dev.yaml or a change to
dev's synthesized stack (the dev stack as it ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

import pytest

from tests.helpers import of_type
from tests.rules.examples import (
    EnvironmentExample,
    TerraformExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
)

ENVIRONMENT: dict[str, EnvironmentExample] = {
    "gcp.labels-per-resource": (
        lambda d, mp: d["labels"].update({f"l{i}": "x" for i in range(61)}),
        "labels",
        "a resource carries at most 64 labels",
    ),
    "gcs.bucket-names-unique": (
        lambda d, mp: d["buckets"]["datasets"].update(name="acme-ml-platform-dev-checkpoints"),
        "buckets.datasets.name",
        "the same bucket name as buckets.checkpoints",
    ),
    "gcs.bucket-location-exists": (
        lambda d, mp: d["buckets"]["datasets"].update(location="us-east9"),
        "buckets.datasets.location",
        "not a Cloud Storage location",
    ),
    "artifact-registry.images-in-own-registry": (
        lambda d, mp: d["release"]["images"].update(
            trainer=d["release"]["images"]["trainer"].replace("acme-ml-platform-dev", "acme-ml-platform-prod")
        ),
        "release.images.trainer",
        "not this environment's registry",
    ),
    "gcp.names-where-written": (
        lambda d, mp: d["cluster"].update(name="ml-platform-dev-abcdefgh"),
        "cluster.name",
        "the node service account 'ml-platform-dev-abcdefgh-pathways': 6-30 characters",
    ),
}


TERRAFORM: dict[str, TerraformExample] = {
    "iam.service-account-id": (
        lambda s: next(iter(of_type(s, "google_service_account").values())).update(account_id="ab"),
        "6-30 characters",
    ),
    "gcs.bucket-names": (
        lambda s: next(iter(of_type(s, "google_storage_bucket").values())).update(name="google-models"),
        "must not start with 'goog'",
    ),
}


EXAMPLES = {**ENVIRONMENT, **TERRAFORM}


@pytest.mark.parametrize("rule_id", sorted(EXAMPLES))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, EXAMPLES[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("resource_names", EXAMPLES)
