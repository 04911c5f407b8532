"""The rules of `infra/rules/ray_train.py`, each failing on its example: an edit of dev.yaml (the dev stack as it
ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

import pytest

from tests.rules.examples import (
    EnvironmentExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
)

ENVIRONMENT: dict[str, EnvironmentExample] = {
    # dev's training slice is one v6e-16: nothing to shrink to.
    "ray-train.elastic-range": (
        lambda d, mp: d["training"].update(resilience={"min_slices": 1}),
        "training.resilience.min_slices",
        "elastic slices need a training slice of several",
    ),
    "ray-train.restarts-on-any-worker-error": (
        lambda d, mp: d["training"].update(resilience={"retry_exit_codes": [42]}),
        "training.resilience.retry_exit_codes",
        "cannot tell exit codes apart",
    ),
}


@pytest.mark.parametrize("rule_id", sorted(ENVIRONMENT))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, ENVIRONMENT[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("ray_train", ENVIRONMENT)
