"""The rules of `infra/rules/cloud_storage_iam.py`, each failing on its example: an edit of dev.yaml or a change to
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
    "gcs.identity-writes-where-it-writes": (
        lambda d, mp: d["identities"]["trainer"]["bucket_roles"].update(checkpoints="roles/storage.objectViewer"),
        "training.identity",
        "must be able to write checkpoints to bucket 'checkpoints': give it roles/storage.objectUser there (it has "
        "roles/storage.objectViewer)",
    ),
    "gcs.identity-reads-its-buckets": (
        lambda d, mp: d["identities"]["serving"]["bucket_roles"].pop("models"),
        "serving.llama70b-vllm.identity",
        "has no role on bucket 'models' (bucket); add one to identities.serving.bucket_roles",
    ),
    "platform.servers-read-their-models": (
        lambda d, mp: d["identities"]["serving"]["bucket_roles"].update(models="roles/storage.objectUser"),
        "identities.serving.bucket_roles.models",
        "only reads its model from bucket 'models': give it roles/storage.objectViewer there",
    ),
    "platform.conversion-runs-as-its-own-identity": (
        lambda d, mp: d["serving"]["llama405b"]["conversion"].update(identity="serving"),
        "serving.llama405b.conversion.identity",
        "run(s) as 'serving' too: the conversion writes the models",
    ),
    "platform.saxml-identity-owns-its-bucket-only": (
        lambda d, mp: d["identities"]["saxml"]["bucket_roles"].update(models="roles/storage.objectViewer"),
        "identities.saxml.bucket_roles",
        "roles/storage.objectAdmin on bucket 'saxml' and no other role (remove models)",
    ),
}


TERRAFORM: dict[str, TerraformExample] = {
    # Before the fix: Vertex AI jobs held objectUser on the whole checkpoints bucket.
    "gcs.grant-within-its-prefix": (
        lambda s: next(g for k, g in of_type(s, "google_storage_bucket_iam_member").items() if "vertex" in k).pop(
            "condition"
        ),
        "vertex-jobs writes under vertex/ only",
    ),
}


EXAMPLES = {**ENVIRONMENT, **TERRAFORM}


@pytest.mark.parametrize("rule_id", sorted(EXAMPLES))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, EXAMPLES[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("cloud_storage_iam", EXAMPLES)
