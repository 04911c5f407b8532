"""The rules of `infra/rules/controller_objects.py`, each failing on its example: a change to one of dev's rendered
releases (the dev stack as it ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from infra.rules import RULES
from infra.rules.manifest_subject import ReleaseContext
from tests.helpers import one_of_kind
from tests.rules.examples import (
    ManifestExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
)


def _service_named_after_the_lws(objs: list[dict[str, Any]]) -> None:
    service = one_of_kind(objs, "Service")
    service["metadata"]["name"] = one_of_kind(objs, "LeaderWorkerSet")["metadata"]["name"]


MANIFEST: dict[str, ManifestExample] = {
    # Before the fix: the JetStream Service took the LWS's name, so LWS made no headless Service.
    "k8s.controller-created-names": (
        "serve-llama405b",
        _service_named_after_the_lws,
        "already has a Service of this name",
    ),
}


def test_controller_names_over_their_limits_are_refused(
    stacks: dict[str, dict[str, Any]], releases: dict[str, list[dict[str, Any]]]
) -> None:
    """A 53-character LWS name passes LWS's webhook (63) but its StatefulSet's pods are never created."""
    objects = copy.deepcopy(releases["serve-llama405b"])
    one_of_kind(objects, "LeaderWorkerSet")["metadata"]["name"] = "l" * 53
    ctx = ReleaseContext(name="serve-llama405b", namespace="ml-serving", stack=stacks["dev"], stack_objects=releases)
    found = RULES["k8s.controller-created-names"].run(objects, ctx)
    assert [v.field.split(": ", 1)[1] for v in found] == [f"StatefulSet {'l' * 53}", f"StatefulSet {'l' * 53}-0"]
    assert all("over 52 characters" in v.message for v in found)


@pytest.mark.parametrize("rule_id", sorted(MANIFEST))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, MANIFEST[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("controller_objects", MANIFEST)
