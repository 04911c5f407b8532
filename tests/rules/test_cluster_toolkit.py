"""The rules of `infra/rules/cluster_toolkit.py`, each failing on its example: an edit of dev.yaml (the dev stack as
it ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

import pytest

from tests.rules.examples import (
    EnvironmentExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
)


def _flex_and_reservation(mp: pytest.MonkeyPatch) -> None:
    """A blueprint generator that asks for both DWS flex and a reservation (what the nodeset refuses at plan)."""
    from infra.slurm import blueprint

    mp.setattr(blueprint, "_capacity", lambda env, p: {"reservation_name": "r", "dws_flex": {"enabled": True}})


ENVIRONMENT: dict[str, EnvironmentExample] = {
    "ctk.slurm-names": (
        lambda d, mp: d["slurm"].update(name="mlp-dev-slurm-for-the-hpc-team"),
        "slurm.name",
        "must match ^[a-z]([-a-z0-9]{0,19})$",
    ),
    "ctk.slurm-capacity": (
        lambda d, mp: d["slices"]["a3mega-slurm"].update(capacity={"type": "queued"}),
        "slices.a3mega-slurm.capacity.type",
        "Slurm has no queued provisioning",
    ),
    "ctk.slurm-nodeset-preconditions": (
        lambda d, mp: _flex_and_reservation(mp),
        "slurm.partitions.a3mega",
        "Cannot use more than one of a reservation, Spot VMs and DWS Flex",
    ),
}


@pytest.mark.parametrize("rule_id", sorted(ENVIRONMENT))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, ENVIRONMENT[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("cluster_toolkit", ENVIRONMENT)
