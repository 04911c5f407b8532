"""The stack's network: the VPC and its subnet, the region's proxy-only subnet for the Inference Gateway, one VPC
per GPUDirect NIC, and the firewall rules of the hosts other orchestrators keep there.

Each part of the stack (this one, compute, data, identity, orchestrators, releases) takes its own sections of the
environment and adds its constructs to the stack itself, not under a construct of its own: a resource's address
is its construct path, so grouping them would move every resource of every deployed stack.
"""

from __future__ import annotations

from infra.catalogue import upstream
from infra.cdk import TerraformStack
from infra.config import Environment
from infra.constructs.network import GpuDirectNetworks, HostGroupFirewall, Network, ProxyOnlySubnet
from infra.serving import vllm_args as vllm
from infra.slurm.blueprint import node_tag as slurm_node_tag


class Networking:
    """The VPC, the proxy-only subnet (`inference_gateway`), the GPUDirect networks (`gpudirect_networks`)."""

    def __init__(self, stack: TerraformStack, env: Environment, *, gke_nodes: list[str]) -> None:
        """`gke_nodes`: the GKE nodes' service accounts, which the firewall rules for GKE's pods target."""
        self.env = env
        self.network = Network(
            stack,
            "network",
            project=env.project,
            region=env.region,
            name=env.network.name,
            subnet_name=env.network.subnet_name(env.region),
            subnet_cidr=env.network.subnet_cidr,
            pods_cidr=env.network.pods_cidr,
            services_cidr=env.network.services_cidr,
        )
        if env.inference_gateway:
            assert env.network.proxy_only_cidr is not None
            ProxyOnlySubnet(
                stack,
                "proxy-only",
                project=env.project,
                region=env.region,
                network=self.network.vpc.id,
                name=env.network.name,
                cidr=env.network.proxy_only_cidr,
                # The model servers' port (the InferencePool's targetPorts) and the endpoint picker's.
                ports=[vllm.PORT, upstream.GAIE_EPP_PORT],
                targets=gke_nodes,
            )
        # (network, subnetwork) of each GPUDirect NIC, as references, so pools follow the networks.
        self.gpu_nics: list[tuple[str, str]] = []
        self.gpudirect: GpuDirectNetworks | None = None
        if env.gpudirect_networks:
            self.gpudirect = GpuDirectNetworks(
                stack,
                "gpudirect",
                project=env.project,
                region=env.region,
                names=env.network.gpudirect_names(env.region, env.gpudirect_networks),
                subnets=env.network.gpudirect_subnets(env.gpudirect_networks),
            )
            self.gpu_nics = [
                (n.name, s.name) for n, s in zip(self.gpudirect.networks, self.gpudirect.subnets, strict=True)
            ]

    def host_firewall(self, stack: TerraformStack, id_: str, tag: str) -> HostGroupFirewall:
        """The firewall rules of a group of hosts another orchestrator keeps on the subnet (by their network tag)."""
        return HostGroupFirewall(
            stack, id_, project=self.env.project, network=self.network.vpc.id, name=self.env.network.name, tag=tag
        )

    def slurm_firewall(self, stack: TerraformStack) -> None:
        """The Slurm cluster's hosts (`gcluster deploy` of the blueprint `make plan` writes tags every host alike)."""
        if self.env.slurm is not None:
            self.host_firewall(stack, "slurm-firewall", slurm_node_tag(self.env))
