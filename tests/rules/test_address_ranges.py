"""The rules of `infra/rules/address_ranges.py`, each failing on its example: an edit of dev.yaml (the dev stack as
it ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

import pytest

from tests.rules.examples import (
    EnvironmentExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
)

ENVIRONMENT: dict[str, EnvironmentExample] = {
    # dev's pools reach 61 nodes with their surge nodes; its VMs and internal load balancers need more of the subnet.
    "vpc.subnet-holds-every-node": (
        lambda d, mp: d["network"].update(subnet_cidr="10.10.0.0/26"),
        "network.subnet_cidr",
        "holds 60 addresses (64 less 4 reserved)",
    ),
    "gke.pod-range-holds-every-node": (
        lambda d, mp: d["network"].update(pods_cidr="10.16.0.0/19"),
        "network.pods_cidr",
        "holds 32 node(s) of a /24 each",
    ),
    "gke.services-range-holds-every-service": (
        lambda d, mp: d["network"].update(services_cidr="10.20.0.0/27"),
        "network.services_cidr",
        "holds 32 Service addresses",
    ),
}


@pytest.mark.parametrize("rule_id", sorted(ENVIRONMENT))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, ENVIRONMENT[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("address_ranges", ENVIRONMENT)
