"""The VPC: its subnet, secondary ranges, control plane range and GPUDirect networks."""

from __future__ import annotations

import ipaddress

from pydantic import Field, field_validator, model_validator

from infra.catalogue import address_ranges as ranges
from infra.config.base import Cidr, Model, Name, Problem, _CrossReferenceError
from infra.config.findings import Finding

AUTHORIZED_NETWORKS = (
    "https://cloud.google.com/kubernetes-engine/docs/how-to/authorized-networks (authorized networks restrict the "
    "IP addresses that can reach the control plane's external endpoint)"
)


class AuthorizedNetwork(Model):
    name: Name
    cidr: Cidr


class Network(Model):
    """The VPC, its one subnet with secondary ranges for pods and services, and the control plane range."""

    name: Name
    """The VPC's name."""
    subnet_cidr: Cidr
    """The subnet's primary range: the nodes' addresses."""
    pods_cidr: Cidr
    """The pods' secondary range."""
    services_cidr: Cidr
    """The Services' secondary range."""
    master_cidr: Cidr
    """The control plane's private range (a /28)."""
    authorized_networks: list[AuthorizedNetwork] = Field(default_factory=list, max_length=50)
    """Networks whose clients may reach the control plane's public IP endpoint. None (the default): the IP endpoint
    is private (enable_private_endpoint: reached from the VPC alone), and every tool uses the DNS-based endpoint,
    authorized by IAM (infra/constructs/cluster.py)."""
    gpudirect_cidr: Cidr | None = None
    """GPUDirect (A3 High / A3 Mega): each extra NIC gets its own VPC network, with subnet n taking the n-th /24 of
    this range. Needed once a GPU slice whose machine has extra NICs exists."""
    network_attachment_cidr: Cidr | None = None
    """A subnet of its own for the network attachment Vertex AI jobs join the VPC through (Private Service Connect
    interface), which Google recommends dedicating to it
    (https://cloud.google.com/vertex-ai/docs/general/psc-interfaces); unset, the jobs do not reach the VPC."""
    proxy_only_cidr: Cidr | None = None
    """The region's proxy-only subnet (purpose REGIONAL_MANAGED_PROXY), which a regional internal Application Load
    Balancer's proxies send from: the Inference Gateway needs one
    (https://cloud.google.com/kubernetes-engine/docs/how-to/deploy-gke-inference-gateway). A /23 is typical."""

    def subnet_name(self, region: str) -> str:
        """The name of the VPC's one subnet (GKE's nodes, the Slurm cluster, the VMs)."""
        return f"{self.name}-{region}"

    def gpudirect_names(self, region: str, count: int) -> list[tuple[str, str]]:
        """(network, subnetwork) names of the GPUDirect NICs 1..count: `<vpc>-gpu-<n>`, `<vpc>-gpu-<n>-<region>`.
        GKE's node pools, the Slurm nodes and the VMs attach NIC n to the same network."""
        return [(f"{self.name}-gpu-{n}", f"{self.name}-gpu-{n}-{region}") for n in range(1, count + 1)]

    def gpudirect_subnets(self, count: int) -> list[str]:
        """The /24 ranges of the first `count` GPUDirect networks (1-based: the n-th /24 is network n)."""
        assert self.gpudirect_cidr is not None
        subnets = list(ipaddress.ip_network(self.gpudirect_cidr).subnets(new_prefix=24))
        return [str(net) for net in subnets[1 : count + 1]]

    @field_validator("master_cidr")
    @classmethod
    def _master_is_slash_28(cls, value: str) -> str:
        if ipaddress.ip_network(value).prefixlen != 28:
            raise ValueError("the control plane range of a private cluster must be a /28")
        return value

    @model_validator(mode="after")
    def _private_ranges_of_their_size(self) -> Network:
        """Every range the platform creates is private, and the proxy-only subnet is large enough."""
        problems: list[Problem] = []
        for field in (
            "subnet_cidr",
            "pods_cidr",
            "services_cidr",
            "master_cidr",
            "gpudirect_cidr",
            "network_attachment_cidr",
            "proxy_only_cidr",
        ):
            value = getattr(self, field)
            if value is not None and not ranges.is_private(ipaddress.ip_network(value)):
                source = ranges.CONTROL_PLANE_SOURCE if field == "master_cidr" else ranges.VALID_RANGES_SOURCE
                problems.append(
                    Finding(
                        ("network", field),
                        value,
                        "a public range: the platform's subnets, secondary ranges and control plane take private "
                        f"ranges only (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10, ...) "
                        f"[source: {source}]",
                    )
                )
        if self.proxy_only_cidr is not None:
            prefix = ipaddress.ip_network(self.proxy_only_cidr).prefixlen
            if prefix > ranges.PROXY_ONLY_MAX_PREFIX:
                problems.append(
                    Finding(
                        ("network", "proxy_only_cidr"),
                        self.proxy_only_cidr,
                        f"a /{prefix}: a proxy-only subnet is a /{ranges.PROXY_ONLY_MAX_PREFIX} or larger "
                        f"(/{ranges.PROXY_ONLY_RECOMMENDED_PREFIX} recommended) [source: {ranges.PROXY_ONLY_SOURCE}]",
                    )
                )
        if problems:
            raise _CrossReferenceError(problems)
        return self

    @model_validator(mode="after")
    def _authorized_networks_exist(self) -> Network:
        """A documentation range (RFC 5737's TEST-NET-1/2/3) is never routed on the Internet: as an authorized network
        of the public endpoint it authorizes nobody and reads as if someone were."""
        problems: list[Problem] = []
        for i, net in enumerate(self.authorized_networks):
            network = ipaddress.ip_network(net.cidr)
            # A range that covers a large part of the Internet opens the endpoint to nearly anyone (before:
            # 0.0.0.0/1 passed, and 0.0.0.0/0 was called a documentation range because it overlaps one).
            if not network.is_private and network.num_addresses > 2**24:
                problems.append(
                    Finding(
                        ("network", "authorized_networks", i, "cidr"),
                        net.cidr,
                        f"{network.num_addresses:,} addresses of the Internet (wider than a /8): the control plane's "
                        "public endpoint would be open to nearly anyone; name the networks that reach it, or none "
                        f"(tools use the DNS-based endpoint, authorized by IAM) [source: {AUTHORIZED_NETWORKS}]",
                    )
                )
                continue
            for name, doc in ranges.DOCUMENTATION_RANGES.items():
                if network.version == doc.version and network.subnet_of(doc):  # type: ignore[arg-type]
                    problems.append(
                        Finding(
                            ("network", "authorized_networks", i, "cidr"),
                            net.cidr,
                            f"a documentation range ({name}, {doc}), which no client on the Internet comes from: "
                            "name the networks that reach the control plane's public endpoint, or none (the endpoint "
                            "is then private; tools use the DNS-based endpoint) "
                            f"[source: {ranges.DOCUMENTATION_SOURCE}]",
                        )
                    )
        if problems:
            raise _CrossReferenceError(problems)
        return self

    @model_validator(mode="after")
    def _ranges_do_not_overlap(self) -> Network:
        ranges = {
            "subnet_cidr": self.subnet_cidr,
            "pods_cidr": self.pods_cidr,
            "services_cidr": self.services_cidr,
            "master_cidr": self.master_cidr,
        }
        if self.network_attachment_cidr is not None:
            ranges["network_attachment_cidr"] = self.network_attachment_cidr
        if self.proxy_only_cidr is not None:
            ranges["proxy_only_cidr"] = self.proxy_only_cidr
        if self.gpudirect_cidr is not None:
            ranges["gpudirect_cidr"] = self.gpudirect_cidr
            if ipaddress.ip_network(self.gpudirect_cidr).prefixlen > 20:
                raise ValueError(
                    f"gpudirect_cidr {self.gpudirect_cidr} is too small: it holds one /24 per GPUDirect "
                    "network (up to 8, numbered from 1), so it must be a /20 or larger"
                )
        names = list(ranges)
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                if ipaddress.ip_network(ranges[a]).overlaps(ipaddress.ip_network(ranges[b])):
                    raise ValueError(f"{a} {ranges[a]} overlaps {b} {ranges[b]}; the ranges must be disjoint")
        return self
