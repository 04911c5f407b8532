"""The rules of `infra/rules/gke_checkpointing.py`, each failing on its example (the rule also holds the object where
the pinned CRD is there: tests/test_training_jobset.py renders it through the schema check)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.rules.examples import ManifestExample, assert_every_rule_has_an_example, fails_on_its_example


def _xpk_shaped(objects: list[dict[str, Any]]) -> None:
    """A CheckpointConfiguration as xpk's template writes it (src/xpk/templates/mtc-cpc.yaml @ v1.13.1): its FUSE
    options under `mountOptions`, which the CRD does not have, so the API server would drop them."""
    objects.append(
        {
            "apiVersion": "checkpointing.gke.io/v1",
            "kind": "CheckpointConfiguration",
            "metadata": {"name": "ray-training"},
            "spec": {"cloudStorageBucketName": "b", "inMemoryVolumeSize": "32Gi", "mountOptions": ["implicit-dirs"]},
        }
    )


MANIFEST: dict[str, ManifestExample] = {
    "gke.checkpoint-configuration-fields": ("ray-training", _xpk_shaped, "not a field of the CRD"),
}


@pytest.mark.parametrize("rule_id", sorted(MANIFEST))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, MANIFEST[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("gke_checkpointing", MANIFEST)
