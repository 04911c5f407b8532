"""Names several layers must agree on: the constructs create them, the dashboards and rules find objects by them."""

from __future__ import annotations

# The CPU pool of system pods, controllers, Ray heads and the chipless Pathways leaders: `cluster.system_pool`.
SYSTEM_POOL = "system"


def serving_release(key: str) -> str:
    """The Helm release (and the PodMonitoring, and Managed Prometheus's `job`) of serving deployment `key`."""
    return f"serve-{key}"
