"""GKE: node pools of TPU slices and the Dynamic Workload Scheduler, GPUDirect, upgrades and maintenance. What the
private control plane reaches is `gke_control_plane.py`'s."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from infra.catalogue.accelerators import (
    TPU_ACCELERATOR_LABEL,
    TPU_RESOURCE,
    TPU_TOPOLOGY_LABEL,
    accelerator_for_machine,
    tpu_accelerator_for_label,
    tpu_accelerator_for_machine,
    tpu_slice_for_machine,
)
from infra.catalogue.errors import ShapeError
from infra.rules import Finding, rule
from infra.rules.manifest_subject import NODEPOOL_LABEL, ReleaseContext, _pods, _tpu_chips
from infra.rules.sources import (
    DOCS,
    FLEX_DOC,
    GPUDIRECT_DOC,
    IRONWOOD_DOC,
    QUEUED_DOC,
    TOOLKIT_POOL,
    TPU_DOC,
)
from infra.rules.terraform_subject import _clusters, _flex, _is_tpu, _queued, _ref

if TYPE_CHECKING:
    from infra.config import Environment


@rule(
    id="gke.tpu.selectors-and-whole-host",
    system="GKE",
    layer="pod-start",
    summary=(
        "A TPU pod selects both the accelerator and topology labels and requests all chips of its host "
        "(multi-host slices cannot share a host)."
    ),
    source=f"{TPU_DOC}#prepare-workloads (nodeSelector gke-tpu-accelerator and gke-tpu-topology; google.com/tpu)",
    subject="manifest",
)
def _tpu_pods(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    pools = ctx.pools()
    for at, _meta, spec in _pods(objects):
        chips = _tpu_chips(spec)
        if not chips:
            continue
        selector = spec.get("nodeSelector") or {}
        label, topology = selector.get(TPU_ACCELERATOR_LABEL), selector.get(TPU_TOPOLOGY_LABEL)
        if not label or not topology:
            yield Finding(
                f"{at}.spec.nodeSelector", selector, f"select both {TPU_ACCELERATOR_LABEL} and {TPU_TOPOLOGY_LABEL}"
            )
            continue
        acc = tpu_accelerator_for_label(label)
        if acc is None:
            yield Finding(f"{at}.spec.nodeSelector.{TPU_ACCELERATOR_LABEL}", label, "not a TPU generation GKE labels")
            continue
        pool = pools.get(selector.get(NODEPOOL_LABEL, ""))
        machines = [pool["node_config"]["machine_type"]] if pool else list(acc.machine_types)
        per_host = set()
        for machine in machines:
            try:
                per_host.add(tpu_slice_for_machine(machine, topology).chips_per_host)
            except ShapeError:
                continue
        if not per_host:
            yield Finding(f"{at}.spec.nodeSelector.{TPU_TOPOLOGY_LABEL}", topology, f"no {acc.name} machine offers it")
        for path, n in chips:
            if per_host and n not in per_host:
                yield Finding(
                    f"{at}.spec.{path}.resources.limits.{TPU_RESOURCE}",
                    n,
                    f"a {acc.name} {topology} host has {' or '.join(map(str, sorted(per_host)))} chips: request all",
                )


@rule(
    id="gke.tpu.multihost-compact-placement",
    system="GKE",
    layer="apply",
    summary="A multi-host TPU slice pool has placement policy COMPACT with its tpu_topology, in exactly one zone.",
    source=f"{TPU_DOC}#node_pool (multi-host TPU slice node pools); {TOOLKIT_POOL}",
    subject="terraform",
    types=("google_container_node_pool",),
)
def _tpu_compact(pools: list[tuple[str, dict[str, Any]]], stack: dict[str, Any]) -> Iterator[Finding]:
    for where, pool in pools:
        nc = pool.get("node_config") or {}
        placement = pool.get("placement_policy") or {}
        if not placement.get("tpu_topology"):
            continue
        if placement.get("type") != "COMPACT":
            yield Finding(
                f"{where}.placement_policy.type", placement.get("type"), "a TPU slice topology needs type COMPACT"
            )
        zones = pool.get("node_locations") or []
        if len(zones) != 1:
            yield Finding(f"{where}.node_locations", zones, "a multi-host TPU slice lives in exactly one zone")
        if not _is_tpu(nc):
            yield Finding(
                f"{where}.node_config.machine_type", nc.get("machine_type"), "tpu_topology is only for TPU machines"
            )


@rule(
    id="gke.tpu.workload-policy-placement",
    system="GKE",
    layer="apply",
    summary=(
        "A multi-host TPU7x pool is placed by a HIGH_THROUGHPUT workload policy of the stack, in the pool's "
        "region, whose accelerator topology is the slice's; a single-host pool has no placement policy."
    ),
    source=(
        f"{IRONWOOD_DOC} ('Ironwood (TPU7x) uses a workload policy [...] apply it by using the --placement-policy "
        "flag. This policy replaces the --tpu-topology flag'); GoogleCloudPlatform/cluster-toolkit "
        "modules/compute/resource-policy and gke-node-pool @ v1.95.0; AI-Hypercomputer/xpk src/xpk/core/"
        "nodepool.py (no policy for single-host slices: 'TPU topology can't be specified with single-host')"
    ),
    subject="terraform",
    types=("google_container_node_pool",),
)
def _workload_policy(pools: list[tuple[str, dict[str, Any]]], stack: dict[str, Any]) -> Iterator[Finding]:
    for where, pool in pools:
        nc = pool.get("node_config") or {}
        accelerator = tpu_accelerator_for_machine(str(nc.get("machine_type", "")))
        if accelerator is None or not accelerator.workload_policy:
            continue
        placement = pool.get("placement_policy")
        if pool.get("node_count", 0) == 1 and "autoscaling" not in pool:
            if placement:
                yield Finding(f"{where}.placement_policy", placement, "a single-host slice takes no placement policy")
            continue
        policy = _ref("google_compute_resource_policy", stack, str((placement or {}).get("policy_name", "")))
        if policy is None:
            yield Finding(
                f"{where}.placement_policy.policy_name",
                (placement or {}).get("policy_name"),
                ("a multi-host TPU7x slice needs a workload policy (google_compute_resource_policy) of this stack"),
            )
            continue
        workload = policy.get("workload_policy") or {}
        topology = (placement or {}).get("tpu_topology")
        if workload.get("type") != "HIGH_THROUGHPUT" or workload.get("accelerator_topology") != topology:
            yield Finding(
                f"{where}.placement_policy.policy_name",
                workload,
                (f"the workload policy must be HIGH_THROUGHPUT with accelerator_topology {topology}"),
            )
        if policy.get("region") != pool.get("location"):
            yield Finding(
                f"{where}.placement_policy.policy_name",
                policy.get("region"),
                (f"the workload policy must be in the pool's region {pool.get('location')}"),
            )


@rule(
    id="gke.tpu.node-count-equals-hosts",
    system="GKE",
    layer="apply",
    summary=(
        "A multi-host TPU slice pool has as many nodes as its topology has hosts (fixed, or the autoscaling maximum)."
    ),
    source=f"{TPU_DOC}#node_pool: 'the number of nodes ... must equal the number of VMs in the slice'",
    subject="terraform",
    types=("google_container_node_pool",),
)
def _tpu_node_count(pools: list[tuple[str, dict[str, Any]]], stack: dict[str, Any]) -> Iterator[Finding]:
    for where, pool in pools:
        nc = pool.get("node_config") or {}
        topology = (pool.get("placement_policy") or {}).get("tpu_topology")
        if not topology or not _is_tpu(nc):
            continue
        try:
            hosts = tpu_slice_for_machine(nc["machine_type"], topology).hosts
        except ShapeError as err:
            yield Finding(f"{where}.placement_policy.tpu_topology", topology, str(err))
            continue
        autoscaling = pool.get("autoscaling")
        if autoscaling is None:
            if pool.get("node_count") != hosts:
                yield Finding(
                    f"{where}.node_count",
                    pool.get("node_count"),
                    f"{topology} on {nc['machine_type']} is {hosts} hosts",
                )
        elif autoscaling.get("max_node_count") != hosts:
            yield Finding(
                f"{where}.autoscaling.max_node_count",
                autoscaling.get("max_node_count"),
                f"an autoscaled {topology} slice pool scales to exactly its {hosts} hosts",
            )


@rule(
    id="gke.tpu.multihost-autoscaling-per-zone",
    system="GKE",
    layer="apply",
    summary="An autoscaled multi-host TPU pool uses per-zone min/max node counts; total_* counts are refused.",
    source=(
        f"{TPU_DOC} (autoscaling multi-host slices); error seen: 'Maximum node count 0 is not a valid size of "
        "TPU pod slice'"
    ),
    subject="terraform",
    types=("google_container_node_pool",),
)
def _tpu_autoscaling(pools: list[tuple[str, dict[str, Any]]], stack: dict[str, Any]) -> Iterator[Finding]:
    for where, pool in pools:
        autoscaling = pool.get("autoscaling") or {}
        if not (pool.get("placement_policy") or {}).get("tpu_topology"):
            continue
        for key in ("total_min_node_count", "total_max_node_count"):
            if key in autoscaling:
                yield Finding(
                    f"{where}.autoscaling.{key}",
                    autoscaling[key],
                    "use min_node_count / max_node_count (per zone) for a TPU slice",
                )


@rule(
    id="gke.dws.queued-needs-autoscaling-from-zero",
    system="GKE",
    layer="apply",
    summary="Queued provisioning needs autoscaling with location policy ANY, no initial nodes and no fixed node_count.",
    source=f"{QUEUED_DOC}#create-node-pool (--enable-autoscaling --num-nodes=0 --location-policy=ANY); {TOOLKIT_POOL}",
    subject="terraform",
    types=("google_container_node_pool",),
)
def _queued_autoscaling(pools: list[tuple[str, dict[str, Any]]], stack: dict[str, Any]) -> Iterator[Finding]:
    for where, pool in pools:
        nc = pool.get("node_config") or {}
        if not (_queued(pool) or _flex(nc)):
            continue
        autoscaling = pool.get("autoscaling")
        if autoscaling is None:
            yield Finding(f"{where}.autoscaling", None, "Dynamic Workload Scheduler pools must autoscale")
            continue
        if "node_count" in pool:
            yield Finding(
                f"{where}.node_count", pool["node_count"], "no static node count with the Dynamic Workload Scheduler"
            )
        if pool.get("initial_node_count", 0) != 0:
            yield Finding(f"{where}.initial_node_count", pool["initial_node_count"], "must be 0")
        low = autoscaling.get("min_node_count", autoscaling.get("total_min_node_count", 0))
        if low != 0:
            yield Finding(
                f"{where}.autoscaling", autoscaling, "the minimum must be 0: nodes exist only while a job holds them"
            )
        if _queued(pool) and autoscaling.get("location_policy") != "ANY":
            yield Finding(f"{where}.autoscaling.location_policy", autoscaling.get("location_policy"), "must be ANY")


@rule(
    id="gke.dws.no-auto-repair",
    system="GKE",
    layer="apply",
    summary="Queued-provisioning and flex-start pools have node auto-repair off.",
    source=(
        f"{QUEUED_DOC}#create-node-pool (--no-enable-autorepair); {FLEX_DOC} (--no-enable-autorepair); {TOOLKIT_POOL}"
    ),
    subject="terraform",
    types=("google_container_node_pool",),
)
def _dws_repair(pools: list[tuple[str, dict[str, Any]]], stack: dict[str, Any]) -> Iterator[Finding]:
    for where, pool in pools:
        nc = pool.get("node_config") or {}
        if (_queued(pool) or _flex(nc)) and (pool.get("management") or {}).get("auto_repair", True):
            yield Finding(
                f"{where}.management.auto_repair",
                (pool.get("management") or {}).get("auto_repair", True),
                "repair would recreate nodes the Dynamic Workload Scheduler provisioned for a bounded run; turn it off",
            )


@rule(
    id="gke.dws.no-reservation-no-spot",
    system="GKE",
    layer="apply",
    summary="Queued-provisioning and flex-start pools consume no reservation (NO_RESERVATION) and are not Spot.",
    source=f"{QUEUED_DOC}#create-node-pool (--reservation-affinity=none); {FLEX_DOC}; {TOOLKIT_POOL}",
    subject="terraform",
    types=("google_container_node_pool",),
)
def _dws_reservation(pools: list[tuple[str, dict[str, Any]]], stack: dict[str, Any]) -> Iterator[Finding]:
    for where, pool in pools:
        nc = pool.get("node_config") or {}
        if not (_queued(pool) or _flex(nc)):
            continue
        affinity = (nc.get("reservation_affinity") or {}).get("consume_reservation_type")
        if affinity != "NO_RESERVATION":
            yield Finding(
                f"{where}.node_config.reservation_affinity.consume_reservation_type",
                affinity,
                "must be NO_RESERVATION",
            )
        if nc.get("spot") or nc.get("preemptible"):
            yield Finding(f"{where}.node_config.spot", True, "Dynamic Workload Scheduler capacity is not Spot capacity")


@rule(
    id="gke.dws.flex-start-max-run-duration",
    system="GKE",
    layer="apply",
    summary="A flex-start max_run_duration is whole seconds ('<n>s'), at most 7 days (the default when unset).",
    source=(
        f"{FLEX_DOC} (--max-run-duration, up to 7 days); {DOCS}/concepts/dws ('If you don't specify a value for "
        "the maxRunDurationSeconds parameter, the default is seven days'); provider v7.45.0 node_config.go"
    ),
    subject="terraform",
    types=("google_container_node_pool",),
)
def _flex_duration(pools: list[tuple[str, dict[str, Any]]], stack: dict[str, Any]) -> Iterator[Finding]:
    for where, pool in pools:
        nc = pool.get("node_config") or {}
        if not _flex(nc):
            continue
        duration = nc.get("max_run_duration")
        if duration is None:
            continue
        seconds = int(duration[:-1]) if isinstance(duration, str) and re.match(r"^[0-9]+s$", duration) else None
        if seconds is None or not 0 < seconds <= 7 * 24 * 3600:
            yield Finding(f"{where}.node_config.max_run_duration", duration, "between 1s and 604800s (7 days)")


@rule(
    id="gke.gpudirect.multinetwork-dataplane-v2-gvnic",
    system="GKE",
    layer="apply",
    summary="Additional node networks need cluster multi-networking and Dataplane V2, and gVNIC on the pool.",
    source=f"{GPUDIRECT_DOC}; {DOCS}/how-to/setup-multinetwork-support-for-pods#requirements",
    subject="terraform",
    types=("google_container_node_pool",),
)
def _multinetwork(pools: list[tuple[str, dict[str, Any]]], stack: dict[str, Any]) -> Iterator[Finding]:
    for where, pool in pools:
        nc = pool.get("node_config") or {}
        extra = (pool.get("network_config") or {}).get("additional_node_network_configs") or []
        if not extra:
            continue
        cluster = _ref("google_container_cluster", stack, str(pool.get("cluster", "")))
        if cluster is not None:
            if not cluster.get("enable_multi_networking"):
                yield Finding(f"{where}.cluster", pool.get("cluster"), "the cluster needs enable_multi_networking")
            if cluster.get("datapath_provider") != "ADVANCED_DATAPATH":
                yield Finding(
                    f"{where}.cluster", pool.get("cluster"), "the cluster needs datapath_provider ADVANCED_DATAPATH"
                )
        if not (nc.get("gvnic") or {}).get("enabled"):
            yield Finding(f"{where}.node_config.gvnic.enabled", False, "additional node networks need gVNIC")


@rule(
    id="tf.node-pool.node-count-or-initial",
    system="Terraform google provider",
    layer="apply",
    summary="A node pool sets node_count or initial_node_count, not both.",
    source=(
        "hashicorp/terraform-provider-google v7.45.0 google/services/container/resource_container_node_pool.go "
        "L1224: 'Cannot set both initial_node_count and node_count on node pool'"
    ),
    subject="terraform",
    types=("google_container_node_pool",),
)
def _count_xor_initial(pools: list[tuple[str, dict[str, Any]]], stack: dict[str, Any]) -> Iterator[Finding]:
    for where, pool in pools:
        if "node_count" in pool and "initial_node_count" in pool:
            yield Finding(f"{where}.initial_node_count", pool["initial_node_count"], "node_count is set too")


@rule(
    id="gke.compact-placement-no-blue-green",
    system="GKE",
    layer="apply",
    summary="Compact placement is not supported with blue-green node upgrades.",
    source=f"{DOCS}/how-to/compact-placement#limitations-standard; {TOOLKIT_POOL} L387-390",
    subject="terraform",
    types=("google_container_node_pool",),
)
def _compact_blue_green(pools: list[tuple[str, dict[str, Any]]], stack: dict[str, Any]) -> Iterator[Finding]:
    for where, pool in pools:
        strategy = (pool.get("upgrade_settings") or {}).get("strategy")
        if (pool.get("placement_policy") or {}).get("type") == "COMPACT" and strategy == "BLUE_GREEN":
            yield Finding(f"{where}.upgrade_settings.strategy", strategy, "use SURGE with COMPACT placement")


DISRUPTION_DOC = f"{DOCS}/concepts/handle-disruption-gpu-tpu"
MAINTENANCE_DOC = f"{DOCS}/concepts/maintenance-windows-and-exclusions"


@rule(
    id="gke.accelerator-upgrades-in-a-window",
    system="GKE",
    layer="pod-start",
    summary=(
        "A cluster with TPU or GPU node pools that upgrade automatically says when they may: a recurring "
        "maintenance window (and exclusions for campaigns). TPU and GPU nodes do not live-migrate: an upgrade "
        "stops what runs on them, a multi-host slice whole; without a window GKE upgrades at any time."
    ),
    source=f"{DISRUPTION_DOC}; {MAINTENANCE_DOC} (one recurring window per cluster, several exclusions)",
    subject="terraform",
    types=("google_container_node_pool",),
)
def _upgrade_window(pools: list[tuple[str, dict[str, Any]]], stack: dict[str, Any]) -> Iterator[Finding]:
    accelerated = [
        where
        for where, pool in pools
        if (pool.get("management") or {}).get("auto_upgrade")
        and accelerator_for_machine(str((pool.get("node_config") or {}).get("machine_type", "")))
    ]
    if not accelerated:
        return
    for _, where, cluster in _clusters(stack):
        window = (cluster.get("maintenance_policy") or {}).get("recurring_window")
        if not window:
            yield Finding(
                f"{where}.maintenance_policy.recurring_window",
                None,
                f"pools {', '.join(accelerated)} upgrade automatically at any time: set cluster.maintenance.window",
            )


@rule(
    id="gke.tpu.upgrade-without-surge",
    system="GKE",
    layer="apply",
    summary=(
        "A TPU slice pool upgrades with max_surge 0 (strategy SURGE): a fixed-size slice has no spare capacity for "
        "surge nodes, and BLUE_GREEN is refused with COMPACT placement."
    ),
    source=(
        f"{DOCS}/concepts/node-pool-upgrade-strategies (enough capacity for the strategy); GoogleCloudPlatform/"
        "cluster-toolkit modules/compute/gke-node-pool @ v1.95.0 (upgrade_settings default SURGE 0/1; "
        "precondition 'Compact placement is not supported with blue-green upgrades')"
    ),
    subject="terraform",
    types=("google_container_node_pool",),
)
def _tpu_no_surge(pools: list[tuple[str, dict[str, Any]]], stack: dict[str, Any]) -> Iterator[Finding]:
    for where, pool in pools:
        nc = pool.get("node_config") or {}
        if not _is_tpu(nc):
            continue
        settings = pool.get("upgrade_settings") or {}
        if settings.get("strategy") != "SURGE" or settings.get("max_surge") != 0:
            yield Finding(f"{where}.upgrade_settings", settings or None, "use strategy SURGE with max_surge 0")
        elif not settings.get("max_unavailable"):
            yield Finding(f"{where}.upgrade_settings.max_unavailable", settings.get("max_unavailable"), "at least 1")


@rule(
    id="gke.release-channel-auto-upgrade",
    system="GKE release channels",
    layer="apply",
    summary="On a cluster enrolled in a release channel, every node pool auto-upgrades: GKE refuses one that does not.",
    source=(
        "https://cloud.google.com/kubernetes-engine/docs/concepts/release-channels (node auto-upgrade is always on "
        "for clusters enrolled in a release channel)"
    ),
    subject="environment",
)
def _auto_upgrade(env: Environment) -> Iterator[Finding]:
    for key, spec in env.slices.items():
        if not spec.auto_upgrade and env.slice_holder(key) == "gke":
            yield Finding(
                ("slices", key, "auto_upgrade"),
                False,
                f"the cluster is on the {env.cluster.release_channel} release channel, where GKE refuses a node "
                "pool without auto-upgrade",
            )
