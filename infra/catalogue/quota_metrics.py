"""Which quota a node of the platform draws on: the CPU family, GPU and TPU quotas `make preflight` reads per region
and compares with what the environment's pools ask for at their max nodes.

Checked 2026-11-26. Sources:
- Compute Engine's regional quotas are read with `regions.get` (`Region.quotas[]`: metric, limit, usage:
  https://cloud.google.com/compute/docs/reference/rest/v1/regions/get). Metric names: the `Quota.Metric` enum of
  google-cloud-compute 1.57.0 (`compute_v1.Quota.Metric`), which lists CPUS, N2_CPUS, C3_CPUS, E2_CPUS,
  PREEMPTIBLE_CPUS, PREEMPTIBLE_NVIDIA_H100_GPUS, TPU_LITE_PODSLICE_V5 and PREEMPTIBLE_TPU_LITE_PODSLICE_V5;
  the enum lags the API (the API answers a string): C4_CPUS, NVIDIA_H100_GPUS, NVIDIA_H100_MEGA_GPUS and
  PREEMPTIBLE_NVIDIA_H100_MEGA_GPUS are the names the Compute Engine quota pages and `gcloud compute regions
  describe` use (https://cloud.google.com/compute/resource-usage, "CPU quota" and "GPU quota").
- E2 and N1 draw on CPUS; every other general-purpose or memory-optimized series on its own <SERIES>_CPUS
  (https://cloud.google.com/compute/resource-usage#cpu_quota). Accelerator-optimized A3 VMs and TPU VMs draw on
  their GPU or TPU quota only (same page, "GPU quota"; TPU slices: https://cloud.google.com/kubernetes-engine/docs/troubleshooting/tpus,
  "Check quota limits and current usage": GKE's TPU node pools use the Compute Engine API's quota, not the Cloud TPU
  API's).
- Spot VMs draw on the PREEMPTIBLE_ quotas (https://cloud.google.com/compute/docs/instances/spot#quotas), and so do
  flex-start VMs and GKE's queued provisioning, falling back to the standard quota when no preemptible quota is
  granted (https://cloud.google.com/compute/docs/instances/provisioning-models: "When you create a Flex-start VM,
  preemptible quota is consumed. If your project lacks preemptible quota, then standard quota is consumed.").
- A node pool that consumes a specific reservation needs no quota for what the reservation holds (the GKE TPU
  troubleshooting page above: "creating TPU slice node pools that use TPU reservations doesn't require TPU quota").
- TPU v6e, v5p and TPU7x chips have no `regions.get` metric; their quotas are Cloud Quotas quota ids of
  compute.googleapis.com, read with `quotaInfos.get`
  (https://cloud.google.com/docs/quotas/reference/rest/v1/projects.locations.services.quotaInfos/get): the value
  per dimension (region, and the TPU family where the id is shared), no usage. The ids below are the ones the
  Google Cloud console's Quotas page filters on; they were NOT checked against a real project from here (no
  network to Google Cloud): a quota id Cloud Quotas does not know is reported as "not found", naming this file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

CHECKED = "2026-11-26"


@dataclass(frozen=True)
class QuotaMetric:
    """One quota a node draws on, in `unit`s: a Compute Engine regional metric (`regions.get`) or a Cloud Quotas
    quota id of compute.googleapis.com with the dimensions it is split by besides the region."""

    name: str
    unit: str
    api: Literal["compute", "cloudquotas"] = "compute"
    dimensions: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        extra = "".join(f",{k}={v}" for k, v in sorted(self.dimensions.items()))
        return f"{self.name}{extra}"


# Machine series (the machine type's first word) -> its CPU quota metric.
CPU_SERIES_METRICS: dict[str, str] = {
    "e2": "CPUS",
    "n1": "CPUS",
    "n2": "N2_CPUS",
    "n2d": "N2D_CPUS",
    "c2": "C2_CPUS",
    "c2d": "C2D_CPUS",
    "c3": "C3_CPUS",
    "c3d": "C3D_CPUS",
    "c4": "C4_CPUS",
    "m1": "M1_CPUS",
    "m2": "M2_CPUS",
    "m3": "M3_CPUS",
    "t2d": "T2D_CPUS",
    "a2": "A2_CPUS",
}
PREEMPTIBLE_CPUS = "PREEMPTIBLE_CPUS"

# Series whose VMs draw on their accelerator's quota only.
ACCELERATOR_SERIES = ("a3", "ct5lp", "ct5p", "ct6e", "tpu7x")

# GKE's accelerator type (node_config.guest_accelerator.type) -> (on-demand, preemptible) GPU metric.
GPU_METRICS: dict[str, tuple[str, str]] = {
    "nvidia-h100-80gb": ("NVIDIA_H100_GPUS", "PREEMPTIBLE_NVIDIA_H100_GPUS"),
    "nvidia-h100-mega-80gb": ("NVIDIA_H100_MEGA_GPUS", "PREEMPTIBLE_NVIDIA_H100_MEGA_GPUS"),
}

_TPU_FAMILY_ID = "TPUS-PER-TPU-FAMILY-per-project-region"

# The accelerator catalogue's TPU generation -> (on-demand, preemptible) quota, in chips.
TPU_METRICS: dict[str, tuple[QuotaMetric, QuotaMetric]] = {
    "v5e": (
        QuotaMetric("TPU_LITE_PODSLICE_V5", "TPU chips"),
        QuotaMetric("PREEMPTIBLE_TPU_LITE_PODSLICE_V5", "TPU chips"),
    ),
    "v6e": (
        QuotaMetric(_TPU_FAMILY_ID, "TPU chips", "cloudquotas", {"tpu_family": "CT6E"}),
        QuotaMetric("PREEMPTIBLE-TPU-V6E-per-project-region", "TPU chips", "cloudquotas"),
    ),
    "v5p": (
        QuotaMetric("TPU-V5P-per-project-region", "TPU chips", "cloudquotas"),
        QuotaMetric("PREEMPTIBLE-TPU-V5P-per-project-region", "TPU chips", "cloudquotas"),
    ),
    "tpu7x": (
        QuotaMetric(_TPU_FAMILY_ID, "TPU chips", "cloudquotas", {"tpu_family": "TPU7X"}),
        QuotaMetric("PREEMPTIBLE-TPU-TPU7X-per-project-region", "TPU chips", "cloudquotas"),
    ),
}


class UnknownQuota(KeyError):
    """A machine series, GPU or TPU generation whose quota this table does not know."""

    def __str__(self) -> str:
        return f"{self.args[0]}: no quota metric known for it; add it to infra/catalogue/quota_metrics.py"


def series(machine_type: str) -> str:
    return machine_type.split("-", 1)[0]


def cpu_metric(machine_type: str, *, preemptible: bool) -> QuotaMetric | None:
    """The CPU quota a VM of `machine_type` draws on, or None where it draws on its accelerator's quota only."""
    name = series(machine_type)
    if name in ACCELERATOR_SERIES:
        return None
    if name not in CPU_SERIES_METRICS:
        raise UnknownQuota(f"machine series {name} ({machine_type})")
    return QuotaMetric(PREEMPTIBLE_CPUS if preemptible else CPU_SERIES_METRICS[name], "vCPUs")


def gpu_metric(accelerator_type: str, *, preemptible: bool) -> QuotaMetric:
    if accelerator_type not in GPU_METRICS:
        raise UnknownQuota(f"GPU {accelerator_type}")
    return QuotaMetric(GPU_METRICS[accelerator_type][1 if preemptible else 0], "GPUs")


def tpu_metric(generation: str, *, preemptible: bool) -> QuotaMetric:
    if generation not in TPU_METRICS:
        raise UnknownQuota(f"TPU {generation}")
    return TPU_METRICS[generation][1 if preemptible else 0]
