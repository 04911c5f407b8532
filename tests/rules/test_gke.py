"""The rules of `infra/rules/gke.py`, each failing on its example: an edit of dev.yaml or a change to dev's
synthesized stack or a change to one of dev's rendered releases (the dev stack as it ships passes them all:
tests/rules/test_framework.py). The private control plane's are in test_gke_control_plane.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.rules.examples import (
    EnvironmentExample,
    ManifestExample,
    TerraformExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
    gke_cluster,
    node_pool,
    ray_worker_template,
)


def _tpu_total_autoscaling(stack: dict[str, Any]) -> None:
    pool = node_pool(stack, "train")
    pool.pop("node_count")
    pool["autoscaling"] = {"total_min_node_count": 0, "total_max_node_count": 4, "location_policy": "ANY"}


def _flex_too_long(stack: dict[str, Any]) -> None:
    config = node_pool(stack, "a3mega")["node_config"]
    config.update(flex_start=True, max_run_duration="864000s")


def _ironwood_without_policy(stack: dict[str, Any]) -> None:
    pool = node_pool(stack, "train")
    pool["node_config"]["machine_type"] = "tpu7x-standard-4t"
    pool["placement_policy"] = {"type": "COMPACT", "tpu_topology": "2x2x2"}
    pool["node_count"] = 2


def _two_chips(objs: list[dict[str, Any]]) -> None:
    resources = ray_worker_template(objs)["spec"]["containers"][0]["resources"]
    resources["requests"]["google.com/tpu"] = resources["limits"]["google.com/tpu"] = "2"


ENVIRONMENT: dict[str, EnvironmentExample] = {
    "gke.release-channel-auto-upgrade": (
        lambda d, mp: d["slices"]["train"].update(auto_upgrade=False),
        "slices.train.auto_upgrade",
        "where GKE refuses a node pool without auto-upgrade",
    ),
}


TERRAFORM: dict[str, TerraformExample] = {
    # Before the fix: no maintenance policy, every TPU and GPU pool upgraded at any time.
    "gke.accelerator-upgrades-in-a-window": (
        lambda s: gke_cluster(s).pop("maintenance_policy"),
        "upgrade automatically at any time: set cluster.maintenance.window",
    ),
    # Before the fix: the provider's default surge settings on a fixed-size slice.
    "gke.tpu.upgrade-without-surge": (
        lambda s: node_pool(s, "train").pop("upgrade_settings"),
        "use strategy SURGE with max_surge 0",
    ),
    "gke.tpu.workload-policy-placement": (_ironwood_without_policy, "needs a workload policy"),
    "gke.tpu.multihost-compact-placement": (
        lambda s: node_pool(s, "train").update(node_locations=["us-east5-a", "us-east5-b"]),
        "a multi-host TPU slice lives in exactly one zone",
    ),
    "gke.tpu.node-count-equals-hosts": (
        lambda s: node_pool(s, "train").update(node_count=3),
        "4x4 on ct6e-standard-4t is 4",
    ),
    "gke.tpu.multihost-autoscaling-per-zone": (_tpu_total_autoscaling, "use min_node_count / max_node_count"),
    "gke.dws.queued-needs-autoscaling-from-zero": (
        lambda s: node_pool(s, "a3mega")["autoscaling"].update(location_policy="BALANCED"),
        "must be ANY",
    ),
    # The queued A3 Mega pool as the platform synthesized it before following GKE's DWS guide.
    "gke.dws.no-auto-repair": (lambda s: node_pool(s, "a3mega")["management"].update(auto_repair=True), "turn it off"),
    "gke.dws.no-reservation-no-spot": (
        lambda s: node_pool(s, "a3mega")["node_config"]["reservation_affinity"].update(
            consume_reservation_type="ANY_RESERVATION"
        ),
        "must be NO_RESERVATION",
    ),
    "gke.dws.flex-start-max-run-duration": (_flex_too_long, "604800s (7 days)"),
    "gke.gpudirect.multinetwork-dataplane-v2-gvnic": (
        lambda s: gke_cluster(s).pop("enable_multi_networking"),
        "the cluster needs enable_multi_networking",
    ),
    "tf.node-pool.node-count-or-initial": (
        lambda s: node_pool(s, "train").update(initial_node_count=4),
        "node_count is set too",
    ),
    "gke.compact-placement-no-blue-green": (
        lambda s: node_pool(s, "train").update(upgrade_settings={"strategy": "BLUE_GREEN"}),
        "use SURGE with COMPACT placement",
    ),
}


MANIFEST: dict[str, ManifestExample] = {
    "gke.tpu.selectors-and-whole-host": ("ray-training", _two_chips, "host has 4 chips: request all"),
}


EXAMPLES = {**ENVIRONMENT, **TERRAFORM, **MANIFEST}


@pytest.mark.parametrize("rule_id", sorted(EXAMPLES))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, EXAMPLES[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("gke", EXAMPLES)
