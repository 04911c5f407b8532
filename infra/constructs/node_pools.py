"""Node pools: the system CPU pool and one pool per accelerator slice."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from constructs import Construct

from infra.catalogue.accelerators import Slice
from infra.cdk import TerraformResourceLifecycle
from infra.cdk.bindings import google
from infra.derive.names import COMPUTE_CLASS_LABEL

SHIELDED = {"enable_secure_boot": True, "enable_integrity_monitoring": True}
OAUTH_SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]


def _node_config(*, machine_type: str, service_account: str, metadata: str = "GKE_METADATA", **extra: object) -> dict:
    return {
        "machine_type": machine_type,
        "service_account": service_account,
        "oauth_scopes": OAUTH_SCOPES,
        "workload_metadata_config": {"mode": metadata},
        "shielded_instance_config": SHIELDED,
        **extra,
    }


def _pool_size(slice_: Slice, copies: int, node_range: tuple[int, int] | None) -> dict[str, object]:
    """A slice pool's node count, or its autoscaling range: `copies` of a single-host slice (one per replica of its
    server) are that many independent hosts."""
    if node_range is None:
        return {"node_count": slice_.hosts * copies}
    low, high = node_range
    # A TPU slice lives in one zone and GKE sizes it by the per-zone maximum: total_*
    # counts are refused ("Maximum node count 0 is not a valid size of TPU pod slice").
    # GPU pools scale over the pool's zones (the DWS guides' --total-max-nodes).
    counts = "" if slice_.kind == "tpu" else "total_"
    return {
        "initial_node_count": low,
        "autoscaling": {
            f"{counts}min_node_count": low,
            f"{counts}max_node_count": high,
            "location_policy": "ANY",
        },
    }


def _capacity(
    capacity_type: str, reservation: str | None, max_run_hours: int | None
) -> tuple[dict[str, object], dict[str, object]]:
    """(node_config fields, pool fields) of a capacity type."""
    if capacity_type == "spot":
        return {"spot": True}, {}
    if capacity_type == "reservation":
        affinity = {
            "consume_reservation_type": "SPECIFIC_RESERVATION",
            "key": "compute.googleapis.com/reservation-name",
            "values": [reservation],
        }
        return {"reservation_affinity": affinity}, {}
    if capacity_type in ("flex-start", "queued"):
        # Dynamic Workload Scheduler: no static node count (node_range is
        # 0..hosts); the slice's hosts arrive together when capacity is found.
        # Both run flex-start VMs: GKE's "flex-start with queued provisioning" guide creates the
        # queued pool with --enable-queued-provisioning --flex-start (nodes for up to 7 days).
        config: dict[str, object] = {"reservation_affinity": {"consume_reservation_type": "NO_RESERVATION"}}
        config["flex_start"] = True
        if capacity_type == "flex-start":
            config["max_run_duration"] = f"{(max_run_hours or 0) * 3600}s"
            return config, {}
        return config, {"queued_provisioning": {"enabled": True}}
    return {}, {}


CPU_POOL_TAINT = "platform.pool"


class CpuNodePool(Construct):
    """An autoscaled CPU pool: the system pool, or a dedicated pool for the jobs placed on it.

    The system pool (`dedicated=False`) takes system pods, controllers, Ray heads
    and the chipless Pathways leaders. A dedicated pool scales from zero and is
    tainted so nothing else lands there: its jobs select
    `cloud.google.com/gke-nodepool: <name>` and tolerate `platform.pool=<name>:NoSchedule`.
    `zones` pins the pool's nodes (`node_locations`): without it a pool spans every zone
    of the cluster's region, and creating it fails in any zone without the machine type.
    """

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        project: str,
        cluster: str,
        location: str,
        name: str,
        machine_type: str,
        min_nodes: int,
        max_nodes: int,
        disk_size_gb: int,
        disk_type: str,
        service_account: str,
        dedicated: bool,
        zones: Sequence[str] | None = None,
    ) -> None:
        super().__init__(scope, id_)
        dedication: dict[str, Any] = (
            {
                "labels": {"platform-pool": name},
                "taint": [{"key": CPU_POOL_TAINT, "value": name, "effect": "NO_SCHEDULE"}],
            }
            if dedicated
            else {}
        )
        autoscaling: dict[str, object] = {"total_min_node_count": min_nodes, "total_max_node_count": max_nodes}
        if dedicated:
            autoscaling["location_policy"] = "ANY"
        self.pool = google("container_node_pool").ContainerNodePool(
            self,
            "pool",
            project=project,
            cluster=cluster,
            location=location,
            node_locations=list(zones) if zones else None,
            name=name,
            initial_node_count=0 if dedicated else None,
            autoscaling=autoscaling,
            management={"auto_repair": True, "auto_upgrade": True},
            node_config=_node_config(
                machine_type=machine_type,
                service_account=service_account,
                disk_size_gb=disk_size_gb,
                disk_type=disk_type,
                image_type="COS_CONTAINERD",
                **dedication,
            ),
        )


class SliceNodePool(Construct):
    """The node pool of one accelerator slice, every number taken from its `Slice`.

    A multi-host TPU slice is one atomic unit: a fixed node count equal to the
    slice's hosts, in one zone, with COMPACT placement and the slice's
    topology, so GKE provisions (and repairs) the hosts together; a single-host
    slice's pool may hold `copies` of it, one per server replica. A GPU slice
    whose machines have GPUDirect NICs gets one additional node network per
    NIC (`extra_networks`: (network, subnetwork) pairs, in NIC order). A pool of one
    capacity tier of a slice that falls back carries its `compute_class`'s label and
    taint.
    """

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        project: str,
        cluster: str,
        location: str,
        zone: str,
        name: str,
        slice_: Slice,
        capacity_type: str,
        reservation: str | None,
        max_run_hours: int | None,
        node_range: tuple[int, int] | None,
        auto_repair: bool,
        auto_upgrade: bool,
        service_account: str,
        extra_networks: Sequence[tuple[str, str]] = (),
        metadata: str = "GKE_METADATA",
        copies: int = 1,
        compute_class: str | None = None,
    ) -> None:
        super().__init__(scope, id_)
        pool_module = google("container_node_pool")
        extra: dict[str, object] = {}
        labels = {"platform-slice": name}
        if compute_class is not None:
            # A tier of a custom ComputeClass: GKE's label and taint for a manually created pool of the class (only
            # Pods that select the class and tolerate the taint land here: releases.slice_tolerations).
            labels[COMPUTE_CLASS_LABEL] = compute_class
            extra["taint"] = [{"key": COMPUTE_CLASS_LABEL, "value": compute_class, "effect": "NO_SCHEDULE"}]
        pool = _pool_size(slice_, copies, node_range)
        capacity, queued = _capacity(capacity_type, reservation, max_run_hours)
        extra.update(capacity)
        pool.update(queued)
        if slice_.kind == "gpu":
            extra.update(_gpu(pool_module, slice_))
        if extra_networks:
            pool["network_config"] = {
                "additional_node_network_configs": [
                    pool_module.ContainerNodePoolNetworkConfigAdditionalNodeNetworkConfigs(
                        network=network, subnetwork=subnetwork
                    )
                    for network, subnetwork in extra_networks
                ]
            }
        if slice_.kind == "tpu" or capacity_type == "reservation":
            # A slice is a fixed set of hosts, and a pool on a reservation has no reserved node to surge into (prod's
            # A3 Mega pool is its reservation's two nodes: a surge node would wait for capacity nobody reserved): a
            # surge upgrade would need a second slice's worth of capacity (GKE: "ensure ... enough quota, resource
            # availability, or reservation capacity to upgrade your nodes using that strategy",
            # https://cloud.google.com/kubernetes-engine/docs/concepts/node-pool-upgrade-strategies), and a
            # multi-host slice is interrupted whole anyway. No surge, one node at a time: Cluster Toolkit's
            # gke-node-pool default (v1.95.0 modules/compute/gke-node-pool/variables.tf upgrade_settings), whose
            # preconditions also refuse BLUE_GREEN with COMPACT placement. When it happens is the cluster's
            # maintenance window and exclusions (cluster.maintenance).
            pool["upgrade_settings"] = {"strategy": "SURGE", "max_surge": 0, "max_unavailable": 1}
        placement = self._placement(project, location, name, slice_)
        if slice_.shape.disk_type:
            extra["disk_type"] = slice_.shape.disk_type
        self.slice = slice_
        self.pool = pool_module.ContainerNodePool(
            self,
            "pool",
            project=project,
            cluster=cluster,
            location=location,
            node_locations=[zone],
            name=name,
            placement_policy=placement,
            management={"auto_repair": auto_repair, "auto_upgrade": auto_upgrade},
            **pool,
            # The size an autoscaled pool is created at: read only at creation, and ForceNew in the provider, so a
            # pool that came to autoscale (a fixed pool of a multi-host server) or whose minimum moved would be
            # replaced, its nodes and what runs there lost, for a value GKE no longer reads.
            lifecycle=TerraformResourceLifecycle(ignore_changes=["initial_node_count"])
            if "initial_node_count" in pool
            else None,
            node_config=_node_config(
                machine_type=slice_.machine_type,
                service_account=service_account,
                metadata=metadata,
                labels=labels,
                **extra,
            ),
        )

    def _placement(self, project: str, location: str, name: str, slice_: Slice) -> dict[str, object] | None:
        """A multi-host TPU slice's COMPACT placement with its topology (and, for TPU7x, its workload policy)."""
        self.workload_policy = None
        if not (slice_.kind == "tpu" and slice_.multi_host):
            return None
        placement: dict[str, object] = {"type": "COMPACT", "tpu_topology": slice_.topology}
        if slice_.accelerator.workload_policy:
            # TPU7x: a HIGH_THROUGHPUT workload policy for the topology places the slice (GKE's Ironwood
            # guide: `resource-policies create workload-policy --type=HIGH_THROUGHPUT
            # --accelerator-topology=<t>`, then `node-pools create --placement-policy=<policy>`). The
            # pool block keeps type COMPACT and the topology, as Cluster Toolkit's gke-node-pool and
            # resource-policy modules (v1.95.0) send them: the provider requires `type`. Not checked on a
            # real project: whether GKE then reports the block back unchanged (a plan after the first
            # apply shows it).
            self.workload_policy = google("compute_resource_policy").ComputeResourcePolicy(
                self,
                "workload-policy",
                project=project,
                region=location,
                name=f"{name}-{slice_.topology}-placement",
                workload_policy={"type": "HIGH_THROUGHPUT", "accelerator_topology": slice_.topology},
            )
            placement["policy_name"] = self.workload_policy.name
        return placement


def _gpu(pool_module: Any, slice_: Slice) -> dict[str, object]:
    """A GPU slice's node config: its GPUs with GKE's managed driver, and gVNIC."""
    return {
        "guest_accelerator": [
            pool_module.ContainerNodePoolNodeConfigGuestAccelerator(
                type=slice_.accelerator.node_label,
                count=slice_.chips_per_host,
                gpu_driver_installation_config={"gpu_driver_version": "DEFAULT"},
            )
        ],
        # gVNIC: the NIC driver GPUDirect needs (and the fastest for the primary NIC).
        "gvnic": {"enabled": True},
    }
