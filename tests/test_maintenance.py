"""When GKE may upgrade the cluster and its nodes: the maintenance policy at load, in the stack, and the rules."""

from __future__ import annotations

import re
from typing import Any

import pytest

from infra.cdk.layout import read_stack


def _maintenance(**window: str) -> dict[str, Any]:
    return {
        "window": {"start": "2026-01-03T02:00:00Z", "end": "2026-01-03T10:00:00Z", "recurrence": "FREQ=DAILY", **window}
    }


@pytest.mark.parametrize(
    ("maintenance", "fragment"),
    [
        (_maintenance(recurrence="FREQ=MONTHLY"), "write FREQ=DAILY or FREQ=WEEKLY;BYDAY=<days>"),
        (_maintenance(recurrence="FREQ=WEEKLY;BYDAY=SAT"), "write FREQ=DAILY or FREQ=WEEKLY;BYDAY=<days>"),
        (_maintenance(end="2026-01-03T01:00:00Z"), "is not after start"),
        (_maintenance(end="2026-01-05T01:00:00Z"), "lasts at most 24"),
        (_maintenance(start="2026-01-03 02:00"), "String should match pattern"),
        (
            {
                **_maintenance(),
                "exclusions": [
                    {
                        "name": f"x{i}",
                        "start": "2026-02-01T00:00:00Z",
                        "end": "2026-02-10T00:00:00Z",
                        "scope": "NO_UPGRADES",
                    }
                    for i in range(4)
                ],
            },
            "at most 3 items",
        ),
        (
            {
                **_maintenance(),
                "exclusions": [
                    {
                        "name": "campaign",
                        "start": "2026-02-01T00:00:00Z",
                        "end": "2026-02-10T00:00:00Z",
                        "scope": "NO_NODES",
                    }
                ],
            },
            "NO_MINOR_OR_NODE_UPGRADES",
        ),
        (
            {
                **_maintenance(),
                "exclusions": [
                    {"name": "campaign", "start": "2026-02-01T00:00:00Z", "scope": "NO_MINOR_OR_NODE_UPGRADES"}
                ],
            },
            "Field required",
        ),
    ],
)
def test_a_bad_maintenance_policy_is_refused_at_load(maintenance: dict[str, Any], fragment: str) -> None:
    from infra.config.compute import Cluster

    with pytest.raises(ValueError, match=re.escape(fragment)):
        Cluster(
            name="c",
            release_channel="REGULAR",
            min_master_version="1.35",
            deletion_protection=False,
            maintenance=maintenance,
        )


def test_the_maintenance_policy_reaches_the_cluster_and_slices_upgrade_without_surge(
    stacks: dict[str, dict[str, Any]], envs: dict[str, Any]
) -> None:
    for name, stack in stacks.items():
        (cluster,) = stack["resource"]["google_container_cluster"].values()
        window = envs[name].cluster.maintenance.window
        assert cluster["maintenance_policy"]["recurring_window"] == {
            "start_time": window.start,
            "end_time": window.end,
            "recurrence": window.recurrence,
        }
        for pool in stack["resource"]["google_container_node_pool"].values():
            reserved = (pool["node_config"].get("reservation_affinity") or {}).get("consume_reservation_type")
            # A TPU slice, and any pool on a specific reservation (prod's A3 Mega: no reserved node to surge into).
            if pool["node_config"]["machine_type"].startswith(("ct", "tpu")) or reserved == "SPECIFIC_RESERVATION":
                assert pool["upgrade_settings"] == {"strategy": "SURGE", "max_surge": 0, "max_unavailable": 1}


def test_an_exclusion_reaches_the_cluster(envs: dict[str, Any], tmp_path: Any) -> None:
    """Before the fix any exclusion (the one dev.yaml's comment suggests) stopped the synth with a jsii
    deserialization error: the list of blocks was given as dicts."""

    from infra.config.maintenance import Maintenance
    from infra.synth.app import synth

    dev = envs["dev"]
    window = dev.cluster.maintenance.window.model_dump()
    campaign = {"name": "campaign", "start": "2026-12-01T00:00:00Z", "end": "2026-12-20T00:00:00Z"}
    maintenance = Maintenance(window=window, exclusions=[{**campaign, "scope": "NO_MINOR_OR_NODE_UPGRADES"}])
    env = dev.model_copy(update={"cluster": dev.cluster.model_copy(update={"maintenance": maintenance})})
    synth({"dev": env}, tmp_path)
    stack = read_stack(tmp_path, "platform-dev")
    (cluster,) = stack["resource"]["google_container_cluster"].values()
    assert cluster["maintenance_policy"]["maintenance_exclusion"] == [
        {
            "exclusion_name": "campaign",
            "start_time": "2026-12-01T00:00:00Z",
            "end_time": "2026-12-20T00:00:00Z",
            "exclusion_options": {"scope": "NO_MINOR_OR_NODE_UPGRADES"},
        }
    ]
