"""GKE's calendar: when each minor leaves support, which minors each release channel offers, and the
minimum version of each feature the platform uses.

Dated data, re-checked by hand: `TABLE_CHECKED` is when; a test fails once it is more than 120 days old,
so someone reads the sources again (the release schedule page first) and updates the table.

Sources:
- https://cloud.google.com/kubernetes-engine/docs/release-schedule (Regular availability, end of standard
  and extended support); copies of its table at endoflife.date (products/google-kubernetes-engine.md,
  2026-08-22) and the GKE release notes' "Current versions" table and channel feeds (to 2026-09-23).
- https://cloud.google.com/kubernetes-engine/versioning: "up to a total of 24 months of support for a minor
  version after [...] available [...] in the Regular channel [...] around 14 months of standard support
  and approximately an additional 10 months of extended support [...] with the Extended channel".
Where two copies disagreed (1.32, 1.33 end of standard support) the earlier date is kept. End of extended
support is the 24-month policy's date where the schedule could not be read (marked `estimated`).
Not checkable offline: what a real project is offered today (`gcloud container get-server-config`).
Features with no minimum of their own: the DNS-based control-plane endpoint ("available today on every
cluster, regardless of version", Google Cloud blog, 2024-11-11). The Gateway API and InferencePool CRDs
GKE installs itself from 1.34.0-gke.1626000 are listed for when the stack uses them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

from infra import settings

TABLE_CHECKED = date(2026, 11, 23)
SCHEDULE = "https://cloud.google.com/kubernetes-engine/docs/release-schedule"
WARN_DAYS = 60


@dataclass(frozen=True)
class Minor:
    """One GKE minor: the first day it is out of standard support, and out of extended support."""

    end_of_standard: date
    end_of_extended: date
    estimated: bool = False  # end_of_extended from the 24-month policy, not read from the schedule


MINORS: dict[str, Minor] = {
    "1.31": Minor(date(2026, 1, 16), date(2026, 10, 23)),
    "1.32": Minor(date(2026, 4, 11), date(2027, 2, 12)),
    "1.33": Minor(date(2026, 8, 3), date(2027, 6, 13)),
    "1.34": Minor(date(2027, 1, 25), date(2027, 11, 26)),
    "1.35": Minor(date(2027, 4, 11), date(2028, 2, 12)),
    "1.36": Minor(date(2027, 8, 9), date(2028, 6, 9), estimated=True),
}

# The minors each channel offers for new clusters (GKE release notes, "Current versions", September 2026;
# 1.37 is in Rapid only, with no published end of support yet).
CHANNELS: dict[str, tuple[str, ...]] = {
    "RAPID": ("1.34", "1.35", "1.36", "1.37"),
    "REGULAR": ("1.34", "1.35", "1.36"),
    "STABLE": ("1.34", "1.35"),
    "EXTENDED": ("1.32", "1.33", "1.34", "1.35", "1.36"),
}


@dataclass(frozen=True)
class Feature:
    minimum: str
    source: str


FEATURES: dict[str, Feature] = {
    "tpu-v6e": Feature(
        "1.31.2-gke.1115000",
        "https://docs.ray.io/en/latest/cluster/kubernetes/user-guides/gcp-gke-tpu-cluster.html ('TPU v6e is "
        "supported in GKE versions 1.31.2-gke.1115000 or later'); GKE's own table: "
        "https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus",
    ),
    "tpu7x": Feature(
        "1.34.0-gke.2201000",
        "https://cloud.google.com/kubernetes-engine/docs/concepts/tpu-ironwood ('available in GKE Standard "
        "clusters that run version 1.34.0-gke.2201000 and later')",
    ),
    "flex-start": Feature(
        "1.33.0-gke.1712000",
        "https://cloud.google.com/kubernetes-engine/docs/how-to/dws-flex-start-training ('running version "
        "1.33.0-gke.1712000 or later')",
    ),
    "compute-class": Feature(
        "1.30.3-gke.1451000",
        "https://cloud.google.com/kubernetes-engine/docs/concepts/about-custom-compute-classes (custom "
        "ComputeClasses 'in GKE version 1.30.3-gke.1451000 and later')",
    ),
    "queued-provisioning": Feature(
        "1.28.3-gke.1098000",
        "https://cloud.google.com/kubernetes-engine/docs/concepts/cluster-autoscaler (ProvisioningRequest "
        "queued-provisioning.gke.io: 'from GKE version 1.28.3-gke.1098000 in Standard clusters')",
    ),
    "hpa-scale-to-zero": Feature(
        "1.37",
        "https://kubernetes.io/blog/2026/09/02/kubernetes-v1-37-hpa-scale-to-zero-beta/ (minReplicas 0: beta, on)",
    ),
    "multi-tier-checkpointing": Feature(
        "1.32.4-gke.1415000",
        "https://cloud.google.com/kubernetes-engine/docs/how-to/machine-learning/training/multi-tier-checkpointing "
        "('requires GKE cluster version 1.32.4-gke.1415000 or later')",
    ),
    "native-sidecars": Feature(
        "1.29", "https://kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/ (on by default in 1.29)"
    ),
    "ray-operator": Feature(
        "1.30.0-gke.1747000",
        "https://cloud.google.com/kubernetes-engine/docs/add-on/ray-on-gke/how-to/enable-ray-on-gke",
    ),
    "gateway-inference-crds": Feature(
        "1.34.0-gke.1626000",
        "https://cloud.google.com/kubernetes-engine/docs/how-to/deploy-gke-inference-gateway (GKE installs the "
        "Gateway API and Inference Extension CRDs from 1.34.0-gke.1626000)",
    ),
    "a3-mega-tcpxo": Feature(
        "1.28.9-gke.1250000",
        "https://cloud.google.com/kubernetes-engine/docs/how-to/gpu-bandwidth-gpudirect-tcpx#requirements; "
        "GoogleCloudPlatform/cluster-toolkit modules/compute/gke-node-pool/gpu_direct.tf (per-minor floors)",
    ),
}


def minor_of(version: str) -> str:
    """`1.35` of `1.35`, `1.35.7` or `1.35.7-gke.1222000`."""
    m = re.match(r"^(1\.[0-9]+)", version)
    if not m:
        raise ValueError(f"{version!r} is not a GKE version")
    return m.group(1)


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"[0-9]+", version))


def meets(pinned: str, minimum: str) -> bool:
    """Whether every version `min_master_version: pinned` admits is at or above `minimum`.

    A pin of a bare minor above the minimum's minor always is; a bare minor equal to it is taken as
    meeting it: GKE resolves the minor to a patch the channel offers now, and the channels' current
    patches (September 2026) are far above every feature minimum in `FEATURES` of 1.34 and older.
    """
    if minor_of(pinned) != minor_of(minimum):
        return version_key(minor_of(pinned)) > version_key(minor_of(minimum))
    return pinned.count(".") == 1 or version_key(pinned) >= version_key(minimum)


def today() -> date:
    """Today, or `PLATFORM_TODAY` (YYYY-MM-DD, read at call time) to ask the calendar about another day."""
    forced = settings.TODAY.raw()
    return date.fromisoformat(forced) if forced else date.today()
