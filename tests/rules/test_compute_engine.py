"""The rules of `infra/rules/compute_engine.py`, each failing on its example: an edit of dev.yaml or a change to
dev's synthesized stack (the dev stack as it ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from infra.rules import RULES
from tests.helpers import of_type
from tests.rules.examples import (
    DEV,
    EnvironmentExample,
    TerraformExample,
    assert_every_rule_has_an_example,
    environment,
    fails_on_its_example,
    node_pool,
)


def _same_vpc_twice(stack: dict[str, Any]) -> None:
    nics = node_pool(stack, "a3mega")["network_config"]["additional_node_network_configs"]
    nics[1]["network"] = nics[0]["network"]


def _region(data: dict[str, Any], region: str) -> None:
    data.update(region=region, zones=[f"{region}-a"])
    for spec in data["slices"].values():
        if "zone" in spec:
            spec["zone"] = f"{region}-a"
    # the images move with the registry (release.images must be in the environment's own registry).
    images = data["release"]["images"]
    for name, ref in images.items():
        images[name] = f"{region}-docker.pkg.dev/" + ref.split("-docker.pkg.dev/", 1)[1]


ENVIRONMENT: dict[str, EnvironmentExample] = {
    # The Slurm nodeset on the reservation of a GKE slice.
    "gce.reservation-consumed-by-one-orchestrator": (
        lambda d, mp: (
            d["slices"]["train"].update(capacity={"type": "reservation", "reservation": "ml-platform-a3mega"}),
            d["slices"]["a3mega-slurm"].update(capacity={"type": "reservation", "reservation": "ml-platform-a3mega"}),
        ),
        "slices.a3mega-slurm.capacity",
        "reservation ml-platform-a3mega is drawn on by slice train (gke) too",
    ),
    # Before the fix: the convert pool's m1-ultramem-80 (no us-east5 zone offers it); A3 Mega in us-east5-b.
    "gce.machine-type-offered-in-zone": (
        lambda d, mp: d["cpu_pools"]["convert"].update(machine_type="m1-ultramem-80"),
        "cpu_pools.convert.machine_type",
        "not offered in us-east5-b, us-east5-a (the pool's zones); offered in this region: none",
    ),
    "gce.vm-capacity": (
        lambda d, mp: d["slices"]["a3mega-vms"].update(capacity={"type": "queued"}),
        "slices.a3mega-vms.capacity.type",
        "a VM has no queued provisioning",
    ),
}


TERRAFORM: dict[str, TerraformExample] = {
    # Before the fix: the Slurm controller's instanceAdmin on the whole project.
    "gce.instance-admin-held-to-its-instances": (
        lambda s: next(
            g for g in of_type(s, "google_project_iam_member").values() if g["role"] == "roles/compute.instanceAdmin.v1"
        ).pop("condition"),
        "roles/compute.instanceAdmin.v1 on the whole project",
    ),
    "gce.multinic.one-vpc-per-nic": (_same_vpc_twice, "a VPC used twice"),
    "gce.gpu-vm-template": (
        lambda s: next(iter(of_type(s, "google_compute_instance_template").values()))["scheduling"].update(
            on_host_maintenance="MIGRATE"
        ),
        "GPU VMs cannot live-migrate: TERMINATE",
    ),
    "gcp.resource-names": (lambda s: node_pool(s, "train").update(name="t" * 41), "allowed: 1-40"),
}


@pytest.mark.parametrize(
    ("change", "field", "fragment"),
    [
        (lambda d: d["slices"]["a3mega"].pop("zone"), "slices.a3mega", "offered in this region: us-east5-a"),
        (
            lambda d: d.update(zones=["us-east5-b", "us-east5-a", "us-east5-d"]),
            "zones[2]",
            "no such zone; us-east5 has",
        ),
        (
            lambda d: d["cpu_pools"]["convert"].update(machine_type="m3-ultramem-64"),
            "cpu_pools.convert.machine_type",
            "not in the zone catalogue",
        ),
        (lambda d: _region(d, "us-east9"), "region", "not a Compute Engine region"),
    ],
)
def test_places_and_machines_that_do_not_exist_are_refused(
    change: Callable[[dict[str, Any]], Any], field: str, fragment: str
) -> None:
    data = copy.deepcopy(DEV)
    change(data)
    found = RULES["gce.machine-type-offered-in-zone"].run(environment(data))
    assert any(v.field.startswith(field) and fragment in v.message for v in found), [v.line() for v in found]


EXAMPLES = {**ENVIRONMENT, **TERRAFORM}


@pytest.mark.parametrize("rule_id", sorted(EXAMPLES))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, EXAMPLES[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("compute_engine", EXAMPLES)
