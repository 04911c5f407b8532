"""Compute Engine: regions and zones that exist, and machine types only where a zone offers them.

A node pool whose machine type its zone does not offer fails to create ("The resource ... was not found"
/ "Machine type ... does not exist in zone"); a regional pool without `node_locations` spans every zone
the cluster uses. The catalogue is dated data in infra/zones.yaml.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from infra import zones as catalogue
from infra.rules import Finding, rule
from infra.rules.terraform_subject import _NAME_RULES, _node_pools, _ref, resources

if TYPE_CHECKING:
    from infra.config import Environment

SOURCE = (
    "https://cloud.google.com/compute/docs/regions-zones; https://cloud.google.com/compute/docs/gpus/"
    "gpu-regions-zones; https://cloud.google.com/tpu/docs/regions-zones; zones per machine type as "
    "`gcloud compute machine-types list` lists them (infra/zones.yaml, checked "
    f"{catalogue.ZONES_CHECKED.isoformat()})"
)


def _offered(machine_type: str, zones: list[str] | tuple[str, ...], field: str, why: str) -> Iterator[Finding]:
    offering = catalogue.zones_offering(machine_type)
    if offering is None:
        known = ", ".join(sorted(catalogue.FAMILY_ZONES))
        yield Finding(field, machine_type, f"not in the zone catalogue (infra/zones.yaml); known families: {known}")
        return
    missing = [z for z in zones if z not in offering]
    if missing:
        near = sorted(z for z in offering if any(z.startswith(catalogue.region_of(m) or m) for m in missing))
        yield Finding(
            field,
            machine_type,
            f"not offered in {', '.join(missing)} ({why}); offered in this region: {', '.join(near) or 'none'}",
        )


@rule(
    id="gce.machine-type-offered-in-zone",
    system="Compute Engine",
    layer="apply",
    summary=(
        "The region and zones exist, and every node pool's machine type is offered in each zone its nodes "
        "go to (a slice's zone; a dedicated CPU pool's zones; every zone of the region for the system pool)."
    ),
    source=SOURCE,
    subject="environment",
)
def _machine_zones(env: Environment) -> Iterator[Finding]:
    if env.region not in catalogue.REGIONS:
        yield Finding(
            "region", env.region, f"not a Compute Engine region; regions: {', '.join(sorted(catalogue.REGIONS))}"
        )
        return
    for i, zone in enumerate(env.zones):
        if not catalogue.zone_exists(zone):
            yield Finding(
                f"zones[{i}]", zone, f"no such zone; {env.region} has {', '.join(catalogue.REGIONS[env.region])}"
            )
    system = env.cluster.system_pool.machine_type
    yield from _offered(
        system, catalogue.REGIONS[env.region], "cluster.system_pool.machine_type", "the system pool spans the region"
    )
    for key, cpu in env.cpu_pools.items():
        yield from _offered(cpu.machine_type, env.zones, f"cpu_pools.{key}.machine_type", "the pool's zones")
    for key, spec in env.slices.items():
        field = f"slices.{key}.zone" if spec.zone else f"slices.{key}"
        why = "its zone" if spec.zone else f"no `zone`: it goes to the first of `zones`, {env.zone_of(key)}"
        yield from _offered(spec.slice.machine_type, [env.zone_of(key)], field, why)


@rule(
    id="gce.multinic.one-vpc-per-nic",
    system="Compute Engine",
    layer="apply",
    summary="Each network interface of a VM is in a different VPC network, none of them the node's primary VPC.",
    source="https://cloud.google.com/vpc/docs/multiple-interfaces-concepts (each interface in a different VPC)",
    subject="terraform",
)
def _one_vpc_per_nic(stack: dict[str, Any]) -> Iterator[Finding]:
    for where, pool, _nc in _node_pools(stack):
        extra = (pool.get("network_config") or {}).get("additional_node_network_configs") or []
        networks = [e.get("network") for e in extra]
        cluster = _ref("google_container_cluster", stack, str(pool.get("cluster", ""))) or {}
        primary = str(cluster.get("network", "")).replace(".id}", "").replace(".name}", "")
        for i, net in enumerate(networks):
            base = str(net).replace(".id}", "").replace(".name}", "")
            if networks.count(net) > 1 or (primary and base == primary):
                yield Finding(
                    f"{where}.network_config.additional_node_network_configs[{i}].network", net, "a VPC used twice"
                )


@rule(
    id="gcp.resource-names",
    system="GKE / Compute Engine",
    layer="apply",
    summary=(
        "Cluster and node pool names are at most 40 characters; networks, subnets and firewalls at most 63 (RFC 1035)."
    ),
    source=(
        "https://cloud.google.com/kubernetes-engine/docs/reference/rest/v1/projects.locations.clusters#Cluster "
        "(name: up to 40 characters); https://cloud.google.com/compute/docs/naming-resources"
    ),
    subject="terraform",
)
def _names(stack: dict[str, Any]) -> Iterator[Finding]:
    for rtype, (pattern, allowed) in _NAME_RULES.items():
        for where, body in resources(stack, rtype):
            name = body.get("name")
            if isinstance(name, str) and "${" not in name and not re.match(pattern, name):
                yield Finding(f"{where}.name", name, f"allowed: {allowed}")
