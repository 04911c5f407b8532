"""What a node of a GKE node pool looks like to the Kubernetes scheduler: its labels, its taints and what
it can allocate, derived from the pool as Terraform creates it (a `google_container_node_pool` body).

Sources, each where GKE documents or shows it:
- labels: https://cloud.google.com/kubernetes-engine/docs/how-to/node-pools#nodepool-label
  (cloud.google.com/gke-nodepool), https://cloud.google.com/kubernetes-engine/docs/how-to/tpus (TPU
  accelerator and topology labels), https://cloud.google.com/kubernetes-engine/docs/how-to/gpus
  (cloud.google.com/gke-accelerator, gke-gpu), https://cloud.google.com/kubernetes-engine/docs/concepts/spot-vms
  (cloud.google.com/gke-spot), https://cloud.google.com/kubernetes-engine/docs/concepts/dws
  (cloud.google.com/gke-flex-start), and the well-known Kubernetes labels;
- taints: TPU nodes google.com/tpu=present:NoSchedule (GKE TPU docs), GPU nodes nvidia.com/gpu=present:NoSchedule
  (GKE GPU docs), queued-provisioning nodes cloud.google.com/gke-queued=true:NoSchedule (GKE
  provisioningrequest docs); spot nodes carry no taint on Standard unless the pool sets one;
- allocatable: https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes (memory and CPU
  reservation bands, 100 MiB eviction threshold);
- system DaemonSets on every node: measured `kubectl describe node` requests on GKE 1.36 (kube-proxy 100m,
  fluentbit-gke 105m/230Mi, gke-metrics-agent 21m/145Mi, gke-metadata-server 100m/100Mi, netd 8m/65Mi,
  pdcsi-node 10m/20Mi, ip-masq-agent 10m/16Mi, node-local-dns 30m/50Mi) plus the FUSE CSI node driver
  (gcs-fuse-csi-driver deploy/base/node: 15m/20Mi).
Not known offline (said here, not guessed): the TPU device plugin's requests and the size-scaled variants of
the metrics agent on very large nodes; the figures above are what a small node carries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from infra.catalogue.accelerators import accelerator_for_machine
from infra.catalogue.cpu_machines import CPU_MACHINES

GIB = 1024**3
# Requests of GKE's own DaemonSets on every node (see above), and the FUSE CSI node driver.
SYSTEM_DAEMONSETS_CPU = 0.384 + 0.015
SYSTEM_DAEMONSETS_MEMORY_GIB = (626 + 20) / 1024

TAINT_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "PREFER_NO_SCHEDULE": "PreferNoSchedule", "NO_EXECUTE": "NoExecute"}


def allocatable_memory_gib(memory_gib: float) -> float:
    """GKE's allocatable memory of a node: capacity less the reservation bands and the eviction threshold."""
    reserved, left = 0.0, memory_gib
    for size, share in ((4, 0.25), (4, 0.20), (8, 0.10), (112, 0.06), (math.inf, 0.02)):
        part = min(left, size)
        reserved += part * share
        left -= part
        if left <= 0:
            break
    return memory_gib - reserved - 0.1


def allocatable_cpu(vcpus: float) -> float:
    """GKE's allocatable CPU of a node: 6% of the first core, 1% of the next, 0.5% of the next 2, 0.25% above 4."""
    reserved, left = 0.0, vcpus
    for size, share in ((1, 0.06), (1, 0.01), (2, 0.005), (math.inf, 0.0025)):
        part = min(left, size)
        reserved += part * share
        left -= part
        if left <= 0:
            break
    return vcpus - reserved


@dataclass(frozen=True)
class Node:
    """One node of a pool as the scheduler sees it."""

    pool: str
    machine_type: str
    labels: dict[str, str]
    taints: tuple[tuple[str, str, str], ...]  # (key, value, effect)
    # Allocatable after GKE's reservations and its own DaemonSets: cpu (cores), memory (GiB), extended resources.
    allocatable: dict[str, float] = field(default_factory=dict)
    zones: tuple[str, ...] = ()


def _capacity(machine_type: str) -> tuple[float, float, dict[str, float]] | None:
    """(vCPUs, memory GiB, extended resources) of a machine type, from the catalogue."""
    found = accelerator_for_machine(machine_type)
    if found is not None:
        accelerator, shape = found
        resource = "google.com/tpu" if accelerator.kind == "tpu" else "nvidia.com/gpu"
        if not shape.vcpus:
            return None
        return shape.vcpus, shape.memory_gb, {resource: float(shape.chips)}
    cpu = CPU_MACHINES.get(machine_type)
    return (cpu.vcpus, cpu.memory_gib, {}) if cpu else None


def machine_allocatable(machine_type: str) -> dict[str, float] | None:
    """What pods can request on one node of `machine_type`: cpu (cores), memory (GiB), its accelerators."""
    capacity = _capacity(machine_type)
    if capacity is None:
        return None
    vcpus, memory, extended = capacity
    return {
        "cpu": allocatable_cpu(vcpus) - SYSTEM_DAEMONSETS_CPU,
        "memory": allocatable_memory_gib(memory) - SYSTEM_DAEMONSETS_MEMORY_GIB,
        **extended,
    }


def node_of(pool: dict[str, Any], region: str) -> Node | None:
    """The node a synthesized `google_container_node_pool` makes, or None when its machine is not catalogued."""
    config = pool.get("node_config") or {}
    machine = config.get("machine_type", "")
    capacity = _capacity(machine)
    if capacity is None:
        return None
    zones = tuple(pool.get("node_locations") or ())
    labels = {
        "cloud.google.com/gke-nodepool": pool["name"],
        "node.kubernetes.io/instance-type": machine,
        "cloud.google.com/machine-family": machine.split("-")[0],
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "topology.kubernetes.io/region": region,
        **(config.get("labels") or {}),
    }
    if len(zones) == 1:
        labels["topology.kubernetes.io/zone"] = zones[0]
    taints = [
        (t["key"], t.get("value", ""), TAINT_EFFECTS.get(t["effect"], t["effect"])) for t in config.get("taint") or []
    ]
    if config.get("spot"):
        labels["cloud.google.com/gke-spot"] = "true"
        labels["cloud.google.com/gke-provisioning"] = "spot"
    elif config.get("flex_start"):
        labels["cloud.google.com/gke-flex-start"] = "true"
        labels["cloud.google.com/gke-provisioning"] = "flex-start"
    else:
        labels["cloud.google.com/gke-provisioning"] = "standard"
    if (pool.get("queued_provisioning") or {}).get("enabled"):
        taints.append(("cloud.google.com/gke-queued", "true", "NoSchedule"))
    found = accelerator_for_machine(machine)
    if found is not None and found[0].kind == "tpu":
        accelerator, shape = found
        topology = (pool.get("placement_policy") or {}).get("tpu_topology") or next(iter(shape.topologies), "")
        labels["cloud.google.com/gke-tpu-accelerator"] = accelerator.node_label
        labels["cloud.google.com/gke-tpu-topology"] = topology
        taints.append(("google.com/tpu", "present", "NoSchedule"))
    for gpu in config.get("guest_accelerator") or []:
        labels["cloud.google.com/gke-accelerator"] = gpu["type"]
        labels["cloud.google.com/gke-gpu"] = "true"
        taints.append(("nvidia.com/gpu", "present", "NoSchedule"))
    return Node(pool["name"], machine, labels, tuple(taints), machine_allocatable(machine) or {}, zones)
