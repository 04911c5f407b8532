"""The rules of `infra/rules/lws.py`, each failing on its example: a change to one of dev's rendered releases (the
dev stack as it ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

import pytest

from tests.rules.examples import (
    ManifestExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
    leader_worker_template,
)

MANIFEST: dict[str, ManifestExample] = {
    "lws.subgroup-size-divides-group": (
        "serve-llama70b-disagg",
        lambda o: leader_worker_template(o).update(size=4),
        "size-1 = 3 must be divisible by subGroupSize when using LeaderExcluded",
    ),
}


@pytest.mark.parametrize("rule_id", sorted(MANIFEST))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, MANIFEST[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("lws", MANIFEST)
