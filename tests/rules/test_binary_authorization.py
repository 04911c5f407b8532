"""The rules of `infra/rules/binary_authorization.py`, each failing on its example: a change to dev's synthesized
stack or a change to one of dev's rendered releases (the dev stack as it ships passes them all:
tests/rules/test_framework.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import of_type
from tests.rules.examples import (
    ManifestExample,
    TerraformExample,
    assert_every_rule_has_an_example,
    container_named,
    fails_on_its_example,
)


def _binauthz_policy(stack: dict[str, Any]) -> dict[str, Any]:
    (policy,) = of_type(stack, "google_binary_authorization_policy").values()
    return policy


def _allowlist_by_tag(stack: dict[str, Any]) -> None:  # an upstream image allowlisted by its tag
    _binauthz_policy(stack)["admission_whitelist_patterns"].append({"name_pattern": "docker.io/library/ubuntu:24.04"})


TERRAFORM: dict[str, TerraformExample] = {
    # Before the fix: the cluster enforced the project policy, the stack declared none;
    # and an upstream image allowlisted by tag.
    "binauthz.policy-denies-by-default": (_allowlist_by_tag, "allowlist an upstream image by digest"),
}


MANIFEST: dict[str, ManifestExample] = {
    # Before the fix: the privileged host set-up ran ubuntu:24.04 by tag; a new image by tag.
    "binauthz.images-pinned-by-digest": (
        "gpu-networking",
        lambda o: container_named(o, "host-setup").update(image="ubuntu:24.04"),
        "pin it by digest",
    ),
}


EXAMPLES = {**TERRAFORM, **MANIFEST}


@pytest.mark.parametrize("rule_id", sorted(EXAMPLES))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, EXAMPLES[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("binary_authorization", EXAMPLES)
