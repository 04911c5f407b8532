"""The rules of `infra/rules/monitoring.py`, each failing on its example: an edit of dev.yaml or a change to one of
dev's rendered releases (the dev stack as it ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

import pytest

from tests.helpers import one_of_kind
from tests.rules.examples import (
    EnvironmentExample,
    ManifestExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
)

ENVIRONMENT: dict[str, EnvironmentExample] = {
    "hpa.signal-the-server-exports": (
        lambda d, mp: d["serving"]["llama70b-vllm"]["autoscaling"].update(signal="kv-cache", target=80),
        "serving.llama70b-vllm.autoscaling.target",
        "the KV cache's use is a fraction from 0 to 1",
    ),
    "hpa.replicas-left-to-the-autoscaler": (
        lambda d, mp: d["serving"]["llama70b-vllm"].update(replicas=2),
        "serving.llama70b-vllm.replicas",
        "the autoscaler sets the number of servers",
    ),
}


MANIFEST: dict[str, ManifestExample] = {
    # A PodMonitoring on a port the servers do not have is accepted and collects nothing.
    "monitoring.pod-monitoring-reaches-its-pods": (
        "serve-llama70b-vllm",
        lambda o: next(p for p in o if p["kind"] == "PodMonitoring" and p["metadata"]["name"] == "serve-llama70b-vllm")[
            "spec"
        ]["endpoints"][0].update(port="metrics"),
        "pods have no such container port",
    ),
    # An autoscaler on a metric the server does not export reads no value and never scales.
    "hpa.scales-on-a-collected-metric": (
        "serve-llama70b-vllm",
        lambda o: one_of_kind(o, "HorizontalPodAutoscaler")["spec"]["metrics"][0]["pods"]["metric"].update(
            name="prometheus.googleapis.com|vllm:gpu_cache_usage_perc|gauge"
        ),
        "not a metric the vllm's server exports",
    ),
}


EXAMPLES = {**ENVIRONMENT, **MANIFEST}


@pytest.mark.parametrize("rule_id", sorted(EXAMPLES))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, EXAMPLES[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("monitoring", EXAMPLES)
