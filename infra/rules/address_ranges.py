"""Address ranges: each range of the environment's network holds what the platform puts in it.

The subnet's primary range holds every node and VM of the stack's VPC (GKE's pools at their most nodes plus a
surge node each while they upgrade, the Slurm cluster's hosts and nodes, the VM groups' VMs) and the address of
each internal load balancer the releases make (a Saxml HTTP Service, a vLLM Gateway); the pod range holds
a /24 per GKE node (110 pods each, GKE's default); the Services range holds the Services the stack's releases
create. Too small a range is accepted at apply and fails later: a node the autoscaler cannot add, a pool that
cannot surge, a Service that gets no address. Facts and sources: infra/catalogue/address_ranges.py.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from typing import TYPE_CHECKING

from infra.catalogue import address_ranges as ranges
from infra.config.serving import SaxmlServing, VllmServing
from infra.rules import Finding, rule

if TYPE_CHECKING:
    from infra.config.environment import Environment

# Services of GKE itself in every cluster (kubernetes, kube-dns, metrics-server, default-http-backend, the
# managed components') and per release of the platform (a server's Service, a LeaderWorkerSet's headless
# Service, a controller's webhook and metrics Services): the platform's upper estimate of what its charts create.
GKE_SERVICES = 16
SERVICES_PER_RELEASE = 4


def gke_nodes(env: Environment) -> list[tuple[str, int]]:
    """(pool, most nodes) of every GKE node pool of the stack."""
    pools = [("the system pool", env.cluster.system_pool.max_nodes)]
    pools += [(f"cpu pool {k}", p.max_nodes) for k, p in env.cpu_pools.items()]
    for key, spec in env.slices.items():
        if env.slice_holder(key) == "gke":
            for pool, _, most in env.pool_sizes(key):
                name = f"slice {key}" if spec.count == 1 else f"slice {key} pool {pool}"
                pools.append((name, most))
    return pools


def internal_load_balancers(env: Environment) -> list[str]:
    """The serving deployments whose release makes an internal load balancer in the node subnet: Saxml's HTTP
    Service when `load_balancer: internal`, a vLLM deployment's Gateway (`gke-l7-rilb`)."""
    return [
        key
        for key, d in env.serving.items()
        if (isinstance(d, SaxmlServing) and d.load_balancer == "internal") or (isinstance(d, VllmServing) and d.gateway)
    ]


def subnet_hosts(env: Environment) -> int:
    """Addresses the subnet's primary range must hold: GKE nodes with a surge node per pool, Slurm, VM groups, the
    internal load balancers."""
    lbs = ranges.ADDRESSES_PER_INTERNAL_LOAD_BALANCER * len(internal_load_balancers(env))
    gke = sum(n + ranges.DEFAULT_MAX_SURGE for _, n in gke_nodes(env))
    slurm = 0
    if env.slurm is not None:
        slurm = 2 + sum(env.slices[p.slice].slice.hosts for p in env.slurm.partitions.values() if p.slice in env.slices)
    vms = sum(env.slices[g.slice].slice.hosts for g in env.vm_groups.values() if g.slice in env.slices)
    return gke + slurm + vms + lbs


def _load_balancers(env: Environment) -> str:
    keys = internal_load_balancers(env)
    if not keys:
        return "no internal load balancers"
    return f"{len(keys)} internal load balancer(s): serving.{', serving.'.join(keys)}"


def releases(env: Environment) -> int:
    """Helm releases of the stack: controllers, serving deployments, training, batch."""
    return len(env.release.controllers) + len(env.serving) + (env.training is not None) + (env.batch is not None)


@rule(
    id="vpc.subnet-holds-every-node",
    system="VPC subnets / GKE",
    layer="apply",
    summary=(
        "The node subnet's primary range holds every GKE node at its pool's most (plus a surge node per pool), the "
        "Slurm hosts and nodes, the VM groups' VMs and the internal load balancers' addresses, less the four "
        "addresses every subnet reserves."
    ),
    source=f"{ranges.SUBNET_RESERVED_SOURCE}; {ranges.SURGE_SOURCE}; {ranges.INTERNAL_LOAD_BALANCER_SOURCE}",
    subject="environment",
)
def _subnet(env: Environment) -> Iterator[Finding]:
    net = env.network
    subnet = ipaddress.ip_network(net.subnet_cidr)
    need = subnet_hosts(env)
    usable = ranges.usable_subnet_addresses(subnet.prefixlen)
    if need > usable:
        pools = ", ".join(f"{p} {n}" for p, n in gke_nodes(env))
        yield Finding(
            ("network", "subnet_cidr"),
            net.subnet_cidr,
            f"holds {usable} addresses ({2 ** (32 - subnet.prefixlen)} less {ranges.SUBNET_RESERVED} reserved); "
            f"the stack's nodes and VMs need up to {need} (GKE pools at most: {pools}, each +"
            f"{ranges.DEFAULT_MAX_SURGE} while it upgrades; the Slurm hosts and nodes; the VM groups; "
            f"{_load_balancers(env)})",
        )


@rule(
    id="gke.pod-range-holds-every-node",
    system="GKE VPC-native clusters",
    layer="apply",
    summary=(
        "The pod range holds a /24 for every GKE node at its pool's most, surge nodes included (110 pods per node, "
        "GKE's default, take a /24 each)."
    ),
    source=ranges.POD_RANGE_SOURCE,
    subject="environment",
)
def _pod_range(env: Environment) -> Iterator[Finding]:
    net = env.network
    pods = ipaddress.ip_network(net.pods_cidr)
    nodes = sum(n + ranges.DEFAULT_MAX_SURGE for _, n in gke_nodes(env))
    room = ranges.nodes_for_pod_range(pods.prefixlen)
    if nodes > room:
        yield Finding(
            ("network", "pods_cidr"),
            net.pods_cidr,
            f"holds {room} node(s) of a /{ranges.POD_RANGE_PER_NODE_PREFIX} each (GKE's pod range per node for "
            f"{ranges.DEFAULT_MAX_PODS_PER_NODE} pods); the GKE pools reach {nodes} nodes with their surge "
            f"nodes: a /{max(8, ranges.POD_RANGE_PER_NODE_PREFIX - (nodes - 1).bit_length())} or larger",
        )


@rule(
    id="gke.services-range-holds-every-service",
    system="GKE VPC-native clusters",
    layer="apply",
    summary=(
        "The Services range gives an address to GKE's own Services and to those of every release of the stack "
        "(the platform's estimate per release)."
    ),
    source=ranges.SERVICES_RANGE_SOURCE,
    subject="environment",
)
def _services_range(env: Environment) -> Iterator[Finding]:
    net = env.network
    services = ipaddress.ip_network(net.services_cidr)
    want = GKE_SERVICES + SERVICES_PER_RELEASE * releases(env)
    if services.num_addresses < want:
        yield Finding(
            ("network", "services_cidr"),
            net.services_cidr,
            f"holds {services.num_addresses} Service addresses; the stack's {releases(env)} releases and GKE's "
            f"own Services need about {want} (the platform's estimate: {GKE_SERVICES} + "
            f"{SERVICES_PER_RELEASE} per release)",
        )
