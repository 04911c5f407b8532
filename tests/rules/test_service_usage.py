"""The rules of `infra/rules/service_usage.py`, each failing on its example: a change to dev's synthesized stack (the
dev stack as it ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import of_type
from tests.rules.examples import (
    TerraformExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
)


def _drop_service(stack: dict[str, Any], api: str) -> None:
    services = of_type(stack, "google_project_service")
    (key,) = [k for k, v in services.items() if v["service"] == api]
    del services[key]


TERRAFORM: dict[str, TerraformExample] = {
    # Before the fix: Binary Authorization enforced, its API never enabled.
    "gcp.apis-enabled-before-use": (
        lambda s: _drop_service(s, "binaryauthorization.googleapis.com"),
        "this API is not enabled by the stack",
    ),
}


@pytest.mark.parametrize("rule_id", sorted(TERRAFORM))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, TERRAFORM[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("service_usage", TERRAFORM)
