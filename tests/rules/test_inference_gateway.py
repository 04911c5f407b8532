"""The rules of `infra/rules/inference_gateway.py`, each failing on its example: an edit of dev.yaml or a change to
dev's synthesized stack or a change to one of dev's rendered releases (the dev stack as it ships passes them all:
tests/rules/test_framework.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from infra.rules import RULES
from tests.helpers import of_type, one_of_kind
from tests.rules.examples import (
    EnvironmentExample,
    ManifestExample,
    TerraformExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
    gke_cluster,
)


def _pool_selects_workers(objs: list[dict[str, Any]]) -> None:
    one_of_kind(objs, "InferencePool")["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] = "worker"


ENVIRONMENT: dict[str, EnvironmentExample] = {
    "gke.inference-gateway-needs-proxy-only-subnet": (
        lambda d, mp: d["network"].pop("proxy_only_cidr"),
        "serving.llama70b-vllm.gateway",
        "needs a proxy-only subnet: set network.proxy_only_cidr",
    ),
}


TERRAFORM: dict[str, TerraformExample] = {
    "gke.inference-gateway-prerequisites": (
        lambda s: gke_cluster(s).pop("gateway_api_config"),
        "need CHANNEL_STANDARD",
    ),
}


MANIFEST: dict[str, ManifestExample] = {
    "gaie.pool-selects-servers": ("serve-llama70b-vllm", _pool_selects_workers, "selects no pod of the release"),
    "gaie.failure-mode-explicit": (
        "serve-llama70b-vllm",
        lambda o: one_of_kind(o, "InferencePool")["spec"]["endpointPickerRef"].pop("failureMode"),
        "set FailOpen or FailClose",
    ),
    # The GAIE chart's own shape: a port without portSpecification.
    "gke.inference-gateway-policies": (
        "serve-llama70b-vllm",
        lambda o: one_of_kind(o, "HealthCheckPolicy")["spec"]["default"]["config"]["httpHealthCheck"].pop(
            "portSpecification"
        ),
        "a port needs portSpecification: USE_FIXED_PORT",
    ),
    # Before the fix the proxy-only subnet's firewall rule opened 8000 only, not the endpoint picker's 9002.
    "gaie.proxies-reach-picker-and-servers": (
        "serve-llama70b-vllm",
        lambda o: one_of_kind(o, "InferencePool")["spec"]["endpointPickerRef"]["port"].update(number=9009),
        "may not reach this port: no INGRESS firewall rule allows tcp:9009",
    ),
}


def test_the_inference_gateway_without_the_network_services_api_is_refused(stacks: dict[str, dict[str, Any]]) -> None:
    """Before the fix the stack did not enable networkservices.googleapis.com, which the endpoint picker's
    Service Extensions callout needs."""
    stack = copy.deepcopy(stacks["dev"])
    services = of_type(stack, "google_project_service")
    key = next(k for k, s in services.items() if s["service"] == "networkservices.googleapis.com")
    assert RULES["gke.inference-gateway-prerequisites"].run(stack) == []
    del services[key]
    found = RULES["gke.inference-gateway-prerequisites"].run(stack)
    assert [(v.field, v.value) for v in found] == [("google_project_service", "networkservices.googleapis.com")]


EXAMPLES = {**ENVIRONMENT, **TERRAFORM, **MANIFEST}


@pytest.mark.parametrize("rule_id", sorted(EXAMPLES))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, EXAMPLES[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("inference_gateway", EXAMPLES)
