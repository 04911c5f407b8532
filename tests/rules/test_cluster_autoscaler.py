"""The rules of `infra/rules/cluster_autoscaler.py`, each failing on its example: a change to one of dev's rendered
releases (the dev stack as it ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

import pytest

from tests.helpers import one_of_kind
from tests.rules.examples import (
    ManifestExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
)

MANIFEST: dict[str, ManifestExample] = {
    # Ten endpoint pickers: the system pool's 5 nodes cannot hold them beside the other releases' pods.
    "gke.pools-hold-their-pods-together": (
        "serve-llama70b-vllm",
        lambda o: one_of_kind(o, "Deployment")["spec"].update(replicas=10),
        "find no room in system (at most 5 nodes)",
    ),
}


@pytest.mark.parametrize("rule_id", sorted(MANIFEST))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, MANIFEST[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("cluster_autoscaler", MANIFEST)
