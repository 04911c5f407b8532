"""The rules of `infra/rules/gke_versions.py`, each failing on its example: an edit of dev.yaml (the dev stack as it
ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

import pytest

from tests.rules.examples import (
    EnvironmentExample,
    assert_every_rule_has_an_example,
    fails_on_environment_example,
)

ENVIRONMENT: dict[str, EnvironmentExample] = {
    # Before the fix: both environments pinned 1.33, out of standard support since 2026-08-03.
    "gke.version-in-support": (
        lambda d, mp: d["cluster"].update(min_master_version="1.33"),
        "cluster.min_master_version",
        "GKE 1.33 left standard support on 2026-08-03",
    ),
    "gke.features-need-versions": (
        lambda d, mp: d["cluster"].update(min_master_version="1.31.1-gke.1146000"),
        "cluster.min_master_version",
        "slices.train.accelerator needs GKE 1.31.2-gke.1115000 or newer",
    ),
}


@pytest.mark.parametrize("rule_id", sorted(ENVIRONMENT))
def test_environment_rule_fails_on_its_example(rule_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fails_on_environment_example(rule_id, ENVIRONMENT[rule_id], monkeypatch)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("gke_versions", ENVIRONMENT)
