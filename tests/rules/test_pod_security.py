"""The rules of `infra/rules/pod_security.py`, each failing on its example: a change to dev's synthesized stack or a
change to one of dev's rendered releases (the dev stack as it ships passes them all:
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


def _namespace(stack: dict[str, Any], name: str) -> dict[str, Any]:
    return next(n for n in of_type(stack, "kubernetes_namespace_v1").values() if n["metadata"]["name"] == name)


def _drop_default_deny(stack: dict[str, Any], namespace: str) -> None:
    """The namespace left open: its default-deny ingress policy removed."""
    policies = of_type(stack, "kubernetes_network_policy_v1")
    (key,) = [
        k
        for k, p in policies.items()
        if p["metadata"]["namespace"] == namespace and p["metadata"]["name"] == "default-deny-ingress"
    ]
    del policies[key]


TERRAFORM: dict[str, TerraformExample] = {
    # Before the fix: no NetworkPolicy anywhere.
    "k8s.namespace-default-deny-ingress": (
        lambda s: _drop_default_deny(s, "ml-training"),
        "no default-deny ingress NetworkPolicy",
    ),
    # Before the fix: namespaces labelled managed-by only; and a namespace made privileged.
    "k8s.namespace-enforces-pod-security": (
        lambda s: _namespace(s, "ml-serving")["metadata"]["labels"].update(
            {"pod-security.kubernetes.io/enforce": "privileged"}
        ),
        "privileged is kept only where",
    ),
}


MANIFEST: dict[str, ManifestExample] = {
    # Before the fix: Saxml's model servers ran privileged for no documented reason.
    "k8s.privileged-only-where-reasoned": (
        "serve-saxml",
        lambda o: container_named(o, "sax-model-server").update(securityContext={"privileged": True}),
        "has no reason to run privileged",
    ),
    "k8s.pods-meet-their-namespaces-pod-security-level": (
        "serve-saxml",
        lambda o: container_named(o, "sax-model-server").update(securityContext={"privileged": True}),
        "ml-serving enforces baseline",
    ),
}


EXAMPLES = {**TERRAFORM, **MANIFEST}


@pytest.mark.parametrize("rule_id", sorted(EXAMPLES))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, EXAMPLES[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("pod_security", EXAMPLES)
