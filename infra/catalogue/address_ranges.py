"""IPv4 address ranges as Google Cloud uses them: which ranges a VPC subnet may take, what a subnet reserves,
how many addresses GKE takes per node from the pod range, and the sizes a proxy-only subnet and a private
control plane need.

Checked 2026-11-26 against:
- https://cloud.google.com/vpc/docs/subnets#valid-ranges (the private ranges a subnet takes: RFC 1918, RFC 6598,
  RFC 6890's 192.0.0.0/24, 192.0.2.0/24, 198.18.0.0/15, 198.51.100.0/24, 203.0.113.0/24, and 240.0.0.0/4; IPv4
  only for the ranges this platform writes) and #unusable-ip-addresses-in-every-subnet (four addresses of every
  primary range: network, gateway, second-to-last, broadcast);
- https://cloud.google.com/kubernetes-engine/docs/how-to/flexible-pod-cidr (each node gets a pod range of twice
  its maximum pods rounded up to a power of two: 110 pods, GKE's default for Standard clusters, is a /24);
- https://cloud.google.com/kubernetes-engine/docs/concepts/alias-ips#cluster_sizing_secondary_range_svcs (the
  Services range gives one address per ClusterIP Service);
- https://cloud.google.com/kubernetes-engine/docs/concepts/node-pool-upgrade-strategies (surge upgrades add
  maxSurge nodes per pool, 1 by default, while they run);
- https://cloud.google.com/load-balancing/docs/proxy-only-subnets#proxy_only_subnet_size (a /26 at least; /23
  recommended);
- https://cloud.google.com/kubernetes-engine/docs/concepts/private-cluster-concept (the control plane's range
  of a private cluster is a /28 of private addresses);
- https://cloud.google.com/load-balancing/docs/forwarding-rule-concepts#internal-forwarding-rules (an internal
  forwarding rule's address comes from a subnet of the VPC: the passthrough Network Load Balancer of a Service
  annotated `networking.gke.io/load-balancer-type: Internal` and the regional internal Application Load Balancer
  of a `gke-l7-rilb` Gateway each take one from the cluster's node subnet unless told another
  (https://cloud.google.com/kubernetes-engine/docs/concepts/service-load-balancer-parameters#subnet); the
  Application Load Balancer's proxies take theirs from the proxy-only subnet instead).
"""

from __future__ import annotations

import ipaddress

CHECKED = "2026-11-26"
VALID_RANGES_SOURCE = "https://cloud.google.com/vpc/docs/subnets#valid-ranges"
# The private IPv4 ranges a VPC subnet's primary and secondary ranges may take.
PRIVATE_RANGES = tuple(
    ipaddress.ip_network(r)
    for r in (
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "100.64.0.0/10",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "240.0.0.0/4",
    )
)
# RFC 5737's documentation ranges: "SHOULD NOT appear on the public Internet" (section 3), so a client never comes
# from one (a VPC may still number a subnet from them: VALID_RANGES_SOURCE).
DOCUMENTATION_RANGES = {
    "TEST-NET-1": ipaddress.ip_network("192.0.2.0/24"),
    "TEST-NET-2": ipaddress.ip_network("198.51.100.0/24"),
    "TEST-NET-3": ipaddress.ip_network("203.0.113.0/24"),
}
DOCUMENTATION_SOURCE = "https://www.rfc-editor.org/rfc/rfc5737"
# Addresses of every subnet's primary range that no VM can take.
SUBNET_RESERVED = 4
SUBNET_RESERVED_SOURCE = "https://cloud.google.com/vpc/docs/subnets#unusable-ip-addresses-in-every-subnet"
# GKE Standard's default maximum pods per node, and the pod range each node takes for it.
DEFAULT_MAX_PODS_PER_NODE = 110
POD_RANGE_PER_NODE_PREFIX = 24
POD_RANGE_SOURCE = "https://cloud.google.com/kubernetes-engine/docs/how-to/flexible-pod-cidr"
SERVICES_RANGE_SOURCE = (
    "https://cloud.google.com/kubernetes-engine/docs/concepts/alias-ips#cluster_sizing_secondary_range_svcs"
)
# Extra nodes a surge upgrade adds per node pool by default.
DEFAULT_MAX_SURGE = 1
SURGE_SOURCE = "https://cloud.google.com/kubernetes-engine/docs/concepts/node-pool-upgrade-strategies"
# A proxy-only subnet's smallest prefix length, and the recommended one.
PROXY_ONLY_MAX_PREFIX = 26
PROXY_ONLY_RECOMMENDED_PREFIX = 23
PROXY_ONLY_SOURCE = "https://cloud.google.com/load-balancing/docs/proxy-only-subnets#proxy_only_subnet_size"
# Addresses of the node subnet each internal load balancer's forwarding rule takes.
ADDRESSES_PER_INTERNAL_LOAD_BALANCER = 1
INTERNAL_LOAD_BALANCER_SOURCE = (
    "https://cloud.google.com/load-balancing/docs/forwarding-rule-concepts#internal-forwarding-rules"
)
CONTROL_PLANE_SOURCE = "https://cloud.google.com/kubernetes-engine/docs/concepts/private-cluster-concept"


def is_private(network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    """Whether `network` lies inside one of the private ranges a subnet may take."""
    return any(network.version == r.version and network.subnet_of(r) for r in PRIVATE_RANGES)  # type: ignore[arg-type]


def usable_subnet_addresses(prefix: int) -> int:
    """Addresses of a subnet primary range of this prefix length that VMs can take."""
    return max(0, 2 ** (32 - prefix) - SUBNET_RESERVED)


def nodes_for_pod_range(prefix: int, node_prefix: int = POD_RANGE_PER_NODE_PREFIX) -> int:
    """How many nodes a pod range of this prefix length holds, each taking a /`node_prefix`."""
    return 2 ** (node_prefix - prefix) if prefix <= node_prefix else 0
