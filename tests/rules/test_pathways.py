"""The rules of `infra/rules/pathways.py`, each failing on its example: a change to one of dev's rendered releases
(the dev stack as it ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

import pytest

from tests.rules.examples import (
    ManifestExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
    leader_worker_template,
)

MANIFEST: dict[str, ManifestExample] = {
    # Before the fix the 405B group was one pod per host, leader on a TPU host: with a chipless
    # leader that size is one TPU host short.
    "pathways.workers-match-instance": (
        "serve-llama405b",
        lambda o: leader_worker_template(o).update(size=4),
        "1 x 4x4 is 16 chips; the group's TPU pods hold 12",
    ),
}


@pytest.mark.parametrize("rule_id", sorted(MANIFEST))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, MANIFEST[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("pathways", MANIFEST)
