"""The rules of `infra/rules/project_iam.py`, each failing on its example: a change to dev's synthesized stack (the
dev stack as it ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

import pytest

from tests.helpers import of_type
from tests.rules.examples import (
    TerraformExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
)

TERRAFORM: dict[str, TerraformExample] = {
    # A stack granting roles/owner: the deployer's conditioned projectIamAdmin could not (and must not).
    "iam.project-grants-the-deployer-may-make": (
        lambda s: next(iter(of_type(s, "google_project_iam_member").values())).update(role="roles/owner"),
        "the deployer may not grant it",
    ),
}


@pytest.mark.parametrize("rule_id", sorted(TERRAFORM))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, TERRAFORM[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("project_iam", TERRAFORM)
