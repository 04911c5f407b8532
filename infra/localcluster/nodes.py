"""The local cluster's nodes: one Node object per node of every node pool of a synthesized stack at its largest size,
as GKE makes it (labels, taints and allocatable from `infra.derive.gke_nodes.node_of`, the model the placement report
uses), marked for KWOK to run (its kubelet stand-in keeps them Ready and runs their pods' lifecycle), and named
<pool>-<generation>-<index> (a change that recreates a pool's nodes on GKE makes new ones here: `generation`).

Allocatable is what the placement report counts: GKE's reservations less the requests of GKE's own DaemonSets,
which do not run here. A pool of a machine the catalogue does not know has no node here (the report says so too).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from infra.catalogue.destructive_updates import DESTRUCTIVE_UPDATES
from infra.derive.gke_nodes import node_of

KWOK_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
# GKE's default maximum of pods per node on a VPC-native cluster
# (https://cloud.google.com/kubernetes-engine/docs/how-to/flexible-pod-cidr).
DEFAULT_MAX_PODS = 110


def generation(pool: dict[str, Any]) -> str:
    """A digest of what makes a pool's nodes: a change to any of it recreates them on GKE (the pool's node_config
    but what the gate's table says updates in place, infra/catalogue/destructive_updates.py; its shape,
    placement_policy, whose change replaces the pool; its version; its zones). GKE names a node after its pool's
    instance group, which a recreation renews: a node's name here carries this digest, so a change makes new nodes
    and the old ones go (Cluster.up drains and deletes them), as a slice's reshape does on GKE."""
    (entry,) = (
        u
        for u in DESTRUCTIVE_UPDATES
        if u.rtype == "google_container_node_pool" and u.path == "node_config" and u.pools == "slice"
    )
    config = {k: v for k, v in (pool.get("node_config") or {}).items() if f"node_config.{k}" not in entry.except_under}
    identity = {key: pool.get(key) for key in ("placement_policy", "version", "node_locations")}
    text = json.dumps({**identity, "node_config": config}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:6]


def pool_size(pool: dict[str, Any]) -> list[str]:
    """One zone per node of the pool at its largest: the autoscaler's maximum (total, or per zone), else its fixed
    count in each of its zones."""
    zones = list(pool.get("node_locations") or []) or [""]
    scaling = pool.get("autoscaling") or {}
    if scaling.get("total_max_node_count"):
        total = int(scaling["total_max_node_count"])
        return [zones[i % len(zones)] for i in range(total)]
    per_zone = int(scaling.get("max_node_count") or pool.get("node_count") or pool.get("initial_node_count") or 0)
    return [zone for zone in zones for _ in range(per_zone)]


def _quantity(resource: str, amount: float) -> str:
    if resource == "cpu":
        return f"{int(amount * 1000)}m"
    if resource == "memory":
        return f"{int(amount * 1024 * 1024)}Ki"
    return str(int(amount))


def nodes(stack: dict[str, Any], region: str) -> list[dict[str, Any]]:
    """The Node objects of every pool of `stack` (a synthesized cdk.tf.json)."""
    out = []
    pools = (stack.get("resource") or {}).get("google_container_node_pool") or {}
    for pool in sorted(pools.values(), key=lambda p: str(p["name"])):
        node = node_of(pool, region)
        if node is None:
            continue
        max_pods = int(pool.get("max_pods_per_node") or DEFAULT_MAX_PODS)
        resources = {name: _quantity(name, amount) for name, amount in node.allocatable.items()}
        resources["pods"] = str(max_pods)
        prefix = f"{node.pool}-{generation(pool)}"
        for index, zone in enumerate(pool_size(pool)):
            name = f"{prefix}-{index}"
            labels = {**node.labels, "kubernetes.io/hostname": name}
            if zone:
                labels["topology.kubernetes.io/zone"] = zone
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": name, "labels": labels, "annotations": dict([KWOK_ANNOTATION])},
                    "spec": {"taints": [{"key": k, "value": v, "effect": e} for k, v, e in node.taints]},
                    # KWOK's node stage fills nodeInfo and the conditions.
                    "status": {"allocatable": resources, "capacity": resources},
                }
            )
    return out
