"""The rules of `infra/rules/crd_cel.py`, each failing on its example: a change to one of dev's rendered releases
(the dev stack as it ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

import pytest

from tests.helpers import one_of_kind
from tests.rules.examples import (
    ManifestExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
)

MANIFEST: dict[str, ManifestExample] = {
    "k8s.crd-validation-rules": (
        "ray-training",
        lambda o: one_of_kind(o, "RayCluster")["spec"].update(managedBy="example.com/other"),
        "the managedBy field value must be either",
    ),
}


@pytest.mark.parametrize("rule_id", sorted(MANIFEST))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, MANIFEST[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("crd_cel", MANIFEST)
