"""The rules of `infra/rules/jetstream.py`, each failing on its example: an edit of dev.yaml or a change to one of
dev's rendered releases (the dev stack as it ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.rules.examples import (
    EnvironmentExample,
    ManifestExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
    leader_worker_template,
)


def _jetstream(objs: list[dict[str, Any]]) -> dict[str, Any]:
    return next(
        c for c in leader_worker_template(objs)["leaderTemplate"]["spec"]["containers"] if c["name"] == "jetstream"
    )


def _old_probe(objs: list[dict[str, Any]]) -> None:
    _jetstream(objs)["startupProbe"] = {"httpGet": {"path": "/healthcheck", "port": 8000}, "periodSeconds": 10}
    _jetstream(objs)["startupProbe"]["failureThreshold"] = 180


ENVIRONMENT: dict[str, EnvironmentExample] = {
    "jetstream.prefill-and-decode-one-shape": (
        lambda d, mp: d["slices"]["decode"].update(topology="4x4"),
        "serving.llama70b-disagg.decode_slice",
        "prefill and decode slices must have one shape: 2x4 on ct6e-standard-4t vs 4x4",
    ),
}


MANIFEST: dict[str, ManifestExample] = {
    # Before the fix the probe allowed 30 minutes.
    "jetstream.startup-probe-covers-restore": ("serve-llama405b", _old_probe, "allows 1800 s; at least 10600 s"),
}


EXAMPLES = {**ENVIRONMENT, **MANIFEST}


@pytest.mark.parametrize("rule_id", sorted(EXAMPLES))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, EXAMPLES[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("jetstream", EXAMPLES)
