"""The rules of `infra/rules/project_iam.py`, each failing on its example: a change to dev's synthesized stack (the
dev stack as it ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import of_type
from tests.rules.examples import (
    TerraformExample,
    assert_every_rule_has_an_example,
    fails_on_terraform_example,
)

TERRAFORM: dict[str, TerraformExample] = {
    # A stack granting roles/owner: the deployer's conditioned projectIamAdmin could not (and must not).
    "iam.project-grants-the-deployer-may-make": (
        lambda s: next(iter(of_type(s, "google_project_iam_member").values())).update(role="roles/owner"),
        "the deployer may not grant it",
    ),
}


@pytest.mark.parametrize("rule_id", sorted(TERRAFORM))
def test_terraform_rule_fails_on_its_example(rule_id: str, stacks: dict[str, dict[str, Any]]) -> None:
    fails_on_terraform_example(rule_id, TERRAFORM[rule_id], stacks)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("project_iam", TERRAFORM)
