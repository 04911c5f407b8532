"""The rules of `infra/rules/gke_control_plane.py`, each failing on its example: a change to dev's synthesized
stack or to one of dev's rendered releases."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.helpers import of_type
from tests.rules.examples import (
    ManifestExample,
    TerraformExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
    gke_cluster,
)


def _drop_webhook_firewall(stack: dict[str, Any]) -> None:
    firewalls = of_type(stack, "google_compute_firewall")
    (key,) = [k for k, f in firewalls.items() if f["name"].endswith("-control-plane-webhooks")]
    del firewalls[key]


def _webhook_firewall_ports(stack: dict[str, Any], ports: list[str]) -> None:
    """The control plane's firewall rule opening only `ports` (dev shipped with 9443 alone)."""
    (firewall,) = [f for f in of_type(stack, "google_compute_firewall").values() if f["name"].endswith("-webhooks")]
    firewall["allow"] = [{"protocol": "tcp", "ports": ports}]


TERRAFORM: dict[str, TerraformExample] = {
    # Before the fix: no rule let the control plane reach 9443.
    "gke.private.webhook-ports-open": (_drop_webhook_firewall, "reach the nodes on tcp:"),
    "gke.private.master-cidr-28": (
        lambda s: gke_cluster(s)["private_cluster_config"].update(master_ipv4_cidr_block="172.16.0.0/24"),
        "must be a private /28",
    ),
    "gke.dns-endpoint-allows-external-traffic": (
        lambda s: gke_cluster(s).pop("control_plane_endpoints_config"),
        "connect through the DNS endpoint: set it true",
    ),
}


MANIFEST: dict[str, ManifestExample] = {
    # Before the fix: the metrics adapter served custom.metrics.k8s.io on 6443 behind a rule that opened 9443 only,
    # so no autoscaler of dev could read its metric.
    "gke.private.control-plane-reaches-served-apis": (
        "metrics-adapter",
        lambda objs: None,
        "served on the pods' port 6443, which no firewall rule opens",
        lambda stack: _webhook_firewall_ports(stack, ["8082", "9443"]),
    ),
}


def test_kueues_visibility_api_port_is_one_the_control_plane_must_reach(stacks: dict[str, dict[str, Any]]) -> None:
    """Kueue's chart renders its visibility APIService (v1beta2.visibility.kueue.x-k8s.io) on 8082 whatever the
    values: a firewall that opens only the webhooks' 9443 leaves discovery of that group timing out."""
    from infra.rules import check_stack

    stack = copy.deepcopy(stacks["dev"])
    _webhook_firewall_ports(stack, ["6443", "9443"])
    lines = [v.line() for v in check_stack(stack) if v.rule.id == "gke.private.webhook-ports-open"]
    assert len(lines) == 1 and "tcp:8082 (kueue's aggregated API)" in lines[0], lines


EXAMPLES = {**TERRAFORM, **MANIFEST}


@pytest.mark.parametrize("rule_id", sorted(EXAMPLES))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, EXAMPLES[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("gke_control_plane", EXAMPLES)
