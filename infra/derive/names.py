"""Names several layers must agree on: the constructs create them, the dashboards and rules find objects by them."""

from __future__ import annotations

# The CPU pool of system pods, controllers, Ray heads and the chipless Pathways leaders: `cluster.system_pool`.
SYSTEM_POOL = "system"


def serving_release(key: str) -> str:
    """The Helm release (and the PodMonitoring, and Managed Prometheus's `job`) of serving deployment `key`."""
    return f"serve-{key}"


# GKE's label and taint of a compute class's nodes, and the Pods' selector of one
# (https://cloud.google.com/kubernetes-engine/docs/concepts/about-custom-compute-classes).
COMPUTE_CLASS_LABEL = "cloud.google.com/compute-class"


def endpoint_picker(release: str) -> str:
    """The endpoint picker's name in vllm-tpu (`vllm.epp`: the release name cut to 40, then `-epp`): its Deployment,
    Service, pods' `inferencepool` label and PodMonitoring (whose name is its scraped series' `job`)."""
    return f"{release[:40].rstrip('-')}-epp"


def compute_class(key: str) -> str:
    """The custom ComputeClass that falls back through slice `key`'s capacity tiers (a cluster-wide name: GKE's own
    classes are capitalised words or `autopilot*`, which a `slice-` prefix cannot be)."""
    return f"slice-{key}"
