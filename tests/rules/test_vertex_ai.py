"""The rules of `infra/rules/vertex_ai.py`, each failing on its example: an edit of dev.yaml (the dev stack as it
ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

import pytest

from tests.rules.examples import (
    EnvironmentExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
)

ENVIRONMENT: dict[str, EnvironmentExample] = {
    "vertex.capacity": (
        lambda d, mp: d["slices"]["a3mega-vertex"].update(capacity={"type": "queued"}),
        "slices.a3mega-vertex.capacity.type",
        "queued provisioning is GKE's",
    ),
    "vertex.accelerator": (
        lambda d, mp: mp.setattr(
            "infra.catalogue.accelerators.MachineShape.vertex_accelerator", property(lambda self: None), raising=False
        ),
        "vertex.nccl_test.slice",
        "a3-megagpu-8g has no Vertex AI accelerator in the catalogue",
    ),
}


@pytest.mark.parametrize("rule_id", sorted(ENVIRONMENT))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, ENVIRONMENT[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("vertex_ai", ENVIRONMENT)
