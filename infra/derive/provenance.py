"""Which field of an environment file made a resource of its stack or a release of it: a refusal found only in the
synthesized stack or in a rendered release names the field to change, not only what the synth made of it.

Read from the names the constructs give (a node pool is named after its slice or CPU pool, a serving release
after its deployment: infra/derive/names.py); a resource made of several fields, or of none (the APIs, the
network policies, the identities' grants), has no one field, and the refusal names the resource alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infra.derive.names import SYSTEM_POOL, serving_release

if TYPE_CHECKING:
    from infra.config import Environment

# Releases the stack makes of one section of the environment, by release name.
_SECTION_RELEASES = {
    "ray-training": "training",
    "gpu-training": "batch.training",
    "nccl-test": "batch.nccl_test",
    "kueue-queues": "batch.slices",
    "metrics-adapter": "serving",  # the deployments that autoscale on a server's metrics
    "gpu-networking": "network.gpudirect_cidr",  # the GKE Networks of the GPU slices' GPUDirect VPCs
}


def release_field(env: Environment | None, release: str) -> str | None:
    """The field of `env` whose release is named `release`; None when no one field makes it (or no environment)."""
    if env is None:
        return None
    for key in env.serving:
        if serving_release(key) == release:
            return f"serving.{key}"
    if release in env.release.controllers:
        return f"release.controllers.{release}"
    if release == "compute-classes":  # a ComputeClass per slice whose capacity is a list
        lists = [key for key, spec in env.slices.items() if spec.falls_back]
        return f"slices.{lists[0]}.capacity" if len(lists) == 1 else "slices"
    return _SECTION_RELEASES.get(release)


def resource_field(env: Environment | None, address: str) -> str | None:
    """The field of `env` that made the resource at `address` (`<type>.<name>[.<attribute>...]`, as the Terraform
    rules name what they refuse); None when no one field makes it (or no environment)."""
    if env is None:
        return None
    rtype, _, rest = address.partition(".")
    name = rest.split(".", 1)[0]
    if rtype == "google_container_node_pool":
        if name == SYSTEM_POOL:
            return "cluster.system_pool"
        if name in env.cpu_pools:
            return f"cpu_pools.{name}"
        if name in env.slices:
            return f"slices.{name}"
        for key, spec in env.slices.items():
            if spec.falls_back:
                tier = next((i for i, (pool, _) in enumerate(spec.tier_pools(key)) if pool == name), None)
                if tier is not None:
                    return f"slices.{key}.capacity[{tier}]"
            elif name in spec.pools(key):
                return f"slices.{key}.count"
    if rtype == "google_container_cluster":
        return "cluster"
    if rtype == "google_storage_bucket":
        if name == env.build_staging_bucket:  # named after the project, for `make image`'s sources
            return "project"
        return next((f"buckets.{key}" for key in env.buckets if env.bucket_name(key) == name), None)
    if rtype == "helm_release":
        return release_field(env, name)
    if rtype in ("google_compute_network", "google_compute_subnetwork"):
        if name.startswith(f"{env.network.name}-gpu-"):
            return "network.gpudirect_cidr"
        return "network"
    return None
