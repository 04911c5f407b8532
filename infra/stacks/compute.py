"""The stack's compute: the GKE cluster, its system pool, a node pool per slice it holds (per slice of a counted
one) and the CPU pools (`cluster`, `slices`, `cpu_pools`)."""

from __future__ import annotations

from infra.cdk import TerraformStack
from infra.config import Environment
from infra.constructs.cluster import GkeCluster
from infra.constructs.network import PODS_RANGE, SERVICES_RANGE
from infra.constructs.node_pools import CpuNodePool, SliceNodePool
from infra.derive.names import SYSTEM_POOL, compute_class
from infra.stacks.identity import NodeIdentities
from infra.stacks.network import Networking


class Compute:
    """The cluster and every node pool of it."""

    def __init__(self, stack: TerraformStack, env: Environment, net: Networking, nodes: NodeIdentities) -> None:
        gke = GkeCluster(
            stack,
            "gke",
            project=env.project,
            region=env.region,
            name=env.cluster.name,
            network=net.network.vpc.id,
            subnetwork=net.network.subnet.id,
            pods_range=PODS_RANGE,
            services_range=SERVICES_RANGE,
            master_cidr=env.network.master_cidr,
            authorized_networks={n.name: n.cidr for n in env.network.authorized_networks},
            release_channel=env.cluster.release_channel,
            min_master_version=env.cluster.min_master_version,
            deletion_protection=env.cluster.deletion_protection,
            workload_pool=env.workload_pool,
            labels=env.labels,
            multi_networking=bool(env.gke_gpudirect_networks),
            gateway_api=env.inference_gateway,
            maintenance=env.cluster.maintenance,
            gpu_metrics=any(spec.slice.kind == "gpu" for spec in env.gke_slices.values()),
            multi_tier_checkpointing=env.training is not None and env.training.resilience.local_tier is not None,
        )
        self.cluster = gke.cluster
        system = env.cluster.system_pool
        self.system_pool = CpuNodePool(
            stack,
            "system-pool",
            project=env.project,
            cluster=self.cluster.id,
            location=env.region,
            name=SYSTEM_POOL,
            machine_type=system.machine_type,
            min_nodes=system.min_nodes,
            max_nodes=system.max_nodes,
            disk_size_gb=system.disk_size_gb,
            disk_type=system.disk_type,
            service_account=nodes.nodes.email,
            dedicated=False,
        )
        # Each slice's node pools (one per slice of its count), by slice key.
        self.slice_pools = {key: self._slice_pools(stack, env, key, net, nodes) for key in env.gke_slices}
        for key, cpu in env.cpu_pools.items():
            CpuNodePool(
                stack,
                f"cpu-{key}",
                project=env.project,
                cluster=self.cluster.id,
                location=env.region,
                name=key,
                machine_type=cpu.machine_type,
                min_nodes=0,
                max_nodes=cpu.max_nodes,
                disk_size_gb=200,
                disk_type=cpu.shape.disk_type,
                service_account=nodes.nodes.email,
                dedicated=True,
                zones=env.zones,
            )

    def _slice_pools(
        self, stack: TerraformStack, env: Environment, key: str, net: Networking, nodes: NodeIdentities
    ) -> list[SliceNodePool]:
        """Slice `key`'s node pools: one per slice of its count, or one per capacity tier (each joining the slice's
        ComputeClass, which the `compute-classes` release declares)."""
        spec = env.slices[key]
        return [
            SliceNodePool(
                stack,
                f"slice-{pool}",
                project=env.project,
                cluster=self.cluster.id,
                location=env.region,
                zone=env.zone_of(key),
                name=pool,
                slice_=spec.slice,
                capacity_type=tier.type,
                reservation=tier.reservation,
                max_run_hours=tier.max_run_hours,
                node_range=node_range,
                auto_repair=spec.repairs_tier(tier),
                auto_upgrade=spec.auto_upgrade,
                service_account=nodes.of_slice(key),
                metadata="GCE_METADATA" if key in env.pathways_slices else "GKE_METADATA",
                extra_networks=net.gpu_nics[: spec.slice.gpudirect.extra_nics] if spec.slice.gpudirect else [],
                copies=env.slice_copies(key),
                compute_class=compute_class(key) if spec.falls_back else None,
            )
            for (pool, tier), node_range in zip(spec.tier_pools(key), env.pool_node_ranges(key), strict=True)
        ]

    def pools_of(self, *keys: str) -> list[object]:
        """The node pool resources of these slices (what a release on them waits for)."""
        return [p.pool for key in keys for p in self.slice_pools[key]]
