"""The rules of `infra/rules/orchestrators.py`, each failing on its example: an edit of dev.yaml (the dev stack as it
ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

import pytest

from tests.rules.examples import (
    EnvironmentExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
)

ENVIRONMENT: dict[str, EnvironmentExample] = {
    "platform.queued-provisioning-through-kueue": (
        lambda d, mp: d["slices"]["sax-a"].update(capacity={"type": "queued"}),
        "slices.sax-a.capacity.type",
        "a TPU slice takes on-demand, spot, reservation or flex-start",
    ),
    "platform.jobs-within-their-slice": (
        lambda d, mp: d["batch"]["nccl_test"].update(nodes=3),
        "batch.nccl_test.nodes",
        "slice 'a3mega' has only 2 nodes",
    ),
    "platform.slurm-static-nodes-on-fixed-capacity": (
        lambda d, mp: d["slurm"]["partitions"]["a3mega"].update(static_nodes=1),
        "slurm.partitions.a3mega.static_nodes",
        "the slice's flex-start nodes come and go with the jobs: static_nodes must be 0",
    ),
    "platform.slurm-writes-one-bucket": (
        lambda d, mp: d["slurm"]["training"].update(bucket="datasets"),
        "slurm.training.bucket",
        "the cluster mounts and may write one bucket, slurm.bucket ('checkpoints')",
    ),
    "platform.network-attachment-for-vertex-only": (
        lambda d, mp: d.pop("vertex"),
        "network.network_attachment_cidr",
        "only Vertex AI jobs use a network attachment",
    ),
    "platform.vm-groups-on-tcpxo": (
        lambda d, mp: d["slices"]["a3mega-vms"].update(accelerator="a3-high"),
        "vm_groups.a3mega.slice",
        "sets up GPUDirect-TCPXO machines (A3 Mega) only",
    ),
    "platform.capacity-lists-for-whole-host-servers": (
        lambda d, mp: d["slices"]["a3mega-slurm"].update(nodes=1, capacity=[{"type": "spot"}, {"type": "on-demand"}]),
        "slices.a3mega-slurm.capacity",
        "slurm (slurm.partitions.a3mega.slice) takes one capacity type",
    ),
}


@pytest.mark.parametrize("rule_id", sorted(ENVIRONMENT))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, ENVIRONMENT[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("orchestrators", ENVIRONMENT)
