"""In-place updates that destroy what Terraform's plan calls an update: nodes recreated, or a bucket's or a
registry's data made deletable. `prevent_destroy` and the replacement table (terraform_google.py) do not see them:
the resource stays, what it holds goes. The plan gate (infra/review/gate.py) stops each until it is confirmed.

Each row: the resource type, the attribute path (a changed value at or under it matches; list indices dropped as
in the plan review's paths), whether it applies only to an accelerator slice's pool, a test of the values before
and after (None: any change), what the update does, and its source. Read on 2026-11-27 from
hashicorp/terraform-provider-google at v6.50.0 and GKE's and Cloud Storage's documentation; the provider's lines
read again at v7.45.0 (the pinned provider) on 2026-11-28, unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from infra.catalogue.change_tests import value_at
from infra.catalogue.consequences import CAPACITY_LOST, DATA_LOST, under

NODE_CONFIG_UPDATE = (
    "hashicorp/terraform-provider-google v7.45.0 google/services/container/node_config.go nodePoolNodeConfigUpdate "
    "(machine_type, image_type, workload_metadata_config, kubelet_config, linux_node_config, gvnic, gcfs_config "
    "updated in place); website/docs/r/container_cluster.html.markdown, node_config.image_type: "
    "'Note that changing the image type will delete and recreate all nodes in the node pool'"
)
NODE_POOL_SIZE = (
    "hashicorp/terraform-provider-google v7.45.0 google/services/container/resource_container_node_pool.go "
    "(node_count: SetSize; version and upgrade_settings: UpdateNodePool in place); "
    "https://cloud.google.com/kubernetes-engine/docs/concepts/tpus (a multi-host TPU slice node pool is atomic and "
    "immutable: no node can be added after it is created, and scaling takes the whole group to 0 and creates new "
    "nodes); "
    "https://cloud.google.com/kubernetes-engine/docs/concepts/node-pool-upgrade-strategies (an upgrade recreates "
    "every node)"
)
DNS_CACHE = (
    "hashicorp/terraform-provider-google v7.45.0 website/docs/r/container_cluster.html.markdown, "
    "dns_cache_config: 'All cluster nodes running GKE 1.15 and higher are recreated'"
)
CLUSTER_UPGRADE = (
    "https://cloud.google.com/kubernetes-engine/docs/concepts/cluster-upgrades (a control-plane version or release "
    "channel change is followed by node auto-upgrades, which recreate every node)"
)
SOFT_DELETE = (
    "https://cloud.google.com/storage/docs/soft-delete (a deleted object is kept for the retention duration, 0 "
    "turns it off); https://cloud.google.com/storage/docs/object-versioning (noncurrent versions kept only while "
    "versioning is on); https://cloud.google.com/storage/docs/lifecycle (a Delete action deletes matching objects "
    "without a request); hashicorp/terraform-provider-google v7.45.0 website/docs/r/storage_bucket.html.markdown "
    "(force_destroy: deleting the bucket deletes every object)"
)
REGISTRY_CLEANUP = (
    "https://cloud.google.com/artifact-registry/docs/repositories/cleanup-policy (a DELETE policy deletes the "
    "matching versions once cleanup_policy_dry_run is false)"
)


def _lowered(before: Any, after: Any) -> bool:
    try:
        return float(after or 0) < float(before or 0)
    except (TypeError, ValueError):
        return before != after


def _turned_off(before: Any, after: Any) -> bool:
    return bool(before) and not after


def _turned_on(before: Any, after: Any) -> bool:
    return not before and bool(after)


def _new_delete_rule(before: Any, after: Any) -> bool:
    """A lifecycle Delete rule in `after` that `before` does not have (rules compared whole)."""

    def deletes(rules: Any) -> set[str]:
        import json

        out = set()
        for rule in rules if isinstance(rules, list) else [rules] if rules else []:
            actions = (rule or {}).get("action") if isinstance(rule, dict) else None
            for one in actions if isinstance(actions, list) else [actions] if actions else []:
                if (one or {}).get("type") == "Delete":
                    out.add(json.dumps(rule, sort_keys=True))
        return out

    return bool(deletes(after) - deletes(before))


@dataclass(frozen=True)
class DestructiveUpdate:
    rtype: str
    path: str
    what: str
    source: str
    # Which node pools the row is for: "slice" (an accelerator slice's), "other" (the rest), "" (not a pool's row).
    pools: str = ""
    # Whether the change (values at `path`, before and after) is the destructive direction; None: any change.
    when: Callable[[Any, Any], bool] | None = None
    # Paths under `path` that update without harm (node labels and taints are updated on the running nodes).
    except_under: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        """Its consequence (infra/catalogue/consequences.py): a bucket's or registry's data, else nodes."""
        return DATA_LOST if self.rtype.startswith(("google_storage", "google_artifact")) else CAPACITY_LOST


DESTRUCTIVE_UPDATES: tuple[DestructiveUpdate, ...] = (
    DestructiveUpdate(
        "google_container_node_pool",
        "node_config",
        "recreates every node of the slice (a running job on it is stopped)",
        NODE_CONFIG_UPDATE,
        pools="slice",
        except_under=("node_config.labels", "node_config.resource_labels", "node_config.taint"),
    ),
    DestructiveUpdate(
        "google_container_node_pool",
        "node_count",
        "resizes the slice in place: a multi-host slice is not resized a host at a time, and a running job loses "
        "its hosts",
        NODE_POOL_SIZE,
        pools="slice",
    ),
    DestructiveUpdate(
        "google_container_node_pool",
        "autoscaling",
        "changes how many slice nodes may run (a lowered maximum removes running ones)",
        NODE_POOL_SIZE,
        pools="slice",
    ),
    DestructiveUpdate(
        "google_container_node_pool",
        "version",
        "upgrades the slice's nodes now, outside the maintenance window: every node is recreated",
        NODE_POOL_SIZE,
        pools="slice",
    ),
    DestructiveUpdate(
        "google_container_node_pool",
        "upgrade_settings",
        "changes how the slice's nodes are recreated at the next upgrade",
        NODE_POOL_SIZE,
        pools="slice",
    ),
    DestructiveUpdate(
        "google_container_node_pool",
        "node_config",
        "recreates every node of the pool, a surge at a time: its pods are evicted and scheduled again (on the "
        "system pool: every controller, webhook and router)",
        NODE_CONFIG_UPDATE,
        pools="other",
        except_under=("node_config.labels", "node_config.resource_labels", "node_config.taint"),
    ),
    DestructiveUpdate(
        "google_container_node_pool",
        "node_count",
        "removes running nodes of the pool: their pods are evicted",
        NODE_POOL_SIZE,
        pools="other",
        when=_lowered,
    ),
    DestructiveUpdate(
        "google_container_node_pool",
        "autoscaling.max_node_count",
        "lowers how many nodes the pool may run: nodes above it are removed",
        NODE_POOL_SIZE,
        pools="other",
        when=_lowered,
    ),
    DestructiveUpdate(
        "google_container_node_pool",
        "autoscaling.total_max_node_count",
        "lowers how many nodes the pool may run: nodes above it are removed",
        NODE_POOL_SIZE,
        pools="other",
        when=_lowered,
    ),
    DestructiveUpdate(
        "google_container_node_pool",
        "version",
        "upgrades the pool's nodes now, outside the maintenance window: every node is recreated",
        NODE_POOL_SIZE,
        pools="other",
    ),
    DestructiveUpdate(
        "google_container_cluster",
        "addons_config.dns_cache_config",
        "recreates every node of the cluster, every slice at once",
        DNS_CACHE,
    ),
    DestructiveUpdate(
        "google_container_cluster",
        "min_master_version",
        "upgrades the control plane; the node auto-upgrades that follow recreate every node",
        CLUSTER_UPGRADE,
    ),
    DestructiveUpdate(
        "google_container_cluster",
        "release_channel",
        "moves the cluster to another channel; the upgrades that follow recreate every node",
        CLUSTER_UPGRADE,
    ),
    DestructiveUpdate(
        "google_storage_bucket",
        "soft_delete_policy.retention_duration_seconds",
        "shortens or ends how long a deleted object can be restored",
        SOFT_DELETE,
        when=_lowered,
    ),
    DestructiveUpdate(
        "google_storage_bucket",
        "versioning.enabled",
        "stops keeping overwritten and deleted objects' versions",
        SOFT_DELETE,
        when=_turned_off,
    ),
    DestructiveUpdate(
        "google_storage_bucket",
        "lifecycle_rule",
        "adds a rule that deletes objects by itself",
        SOFT_DELETE,
        when=_new_delete_rule,
    ),
    DestructiveUpdate(
        "google_storage_bucket",
        "force_destroy",
        "lets a destroy of the bucket delete every object in it",
        SOFT_DELETE,
        when=_turned_on,
    ),
    DestructiveUpdate(
        "google_storage_bucket",
        "retention_policy",
        "changes the retention that keeps objects from deletion",
        SOFT_DELETE,
    ),
    DestructiveUpdate(
        "google_artifact_registry_repository",
        "cleanup_policies",
        "changes which image versions the registry deletes by itself",
        REGISTRY_CLEANUP,
    ),
    DestructiveUpdate(
        "google_artifact_registry_repository",
        "cleanup_policy_dry_run",
        "makes the cleanup policies delete image versions instead of only logging them",
        REGISTRY_CLEANUP,
        when=_turned_off,
    ),
)


def destructive(
    rtype: str, paths: list[str], before: Any, after: Any, accelerator_pool: bool
) -> list[tuple[DestructiveUpdate, list[str]]]:
    """(row, the changed paths it matches) of each row an update of `rtype` that changes `paths` matches; a pool's
    rows by whether it is an accelerator slice's."""
    found = []
    for row in DESTRUCTIVE_UPDATES:
        if row.rtype != rtype or row.pools not in ("", "slice" if accelerator_pool else "other"):
            continue
        hits = [
            p
            for p in paths
            if (under(p, row.path) or under(row.path, p)) and not any(under(p, e) for e in row.except_under)
        ]
        if not hits:
            continue
        if row.when is not None and not row.when(value_at(before, row.path), value_at(after, row.path)):
            continue
        found.append((row, sorted(set(hits))))
    return found
