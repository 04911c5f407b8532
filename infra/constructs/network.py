"""The VPC: one subnet with secondary ranges for pods and services, Cloud Router and NAT."""

from __future__ import annotations

from constructs import Construct

from infra.cdk.bindings import google

PODS_RANGE = "pods"
SERVICES_RANGE = "services"
# Flow logs of every subnet: sampled, aggregated, with metadata (what the policy gate expects).
SUBNET_FLOW_LOGS = {"aggregation_interval": "INTERVAL_10_MIN", "flow_sampling": 0.5, "metadata": "INCLUDE_ALL_METADATA"}


class Network(Construct):
    """A custom-mode VPC whose private nodes reach the internet only through Cloud NAT."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        project: str,
        region: str,
        name: str,
        subnet_name: str,
        subnet_cidr: str,
        pods_cidr: str,
        services_cidr: str,
    ) -> None:
        super().__init__(scope, id_)
        self.vpc = google("compute_network").ComputeNetwork(
            self,
            "vpc",
            project=project,
            name=name,
            auto_create_subnetworks=False,
            routing_mode="REGIONAL",
        )
        subnetwork = google("compute_subnetwork")
        self.subnet = subnetwork.ComputeSubnetwork(
            self,
            "subnet",
            project=project,
            region=region,
            name=subnet_name,
            network=self.vpc.id,
            ip_cidr_range=subnet_cidr,
            private_ip_google_access=True,
            secondary_ip_range=[
                subnetwork.ComputeSubnetworkSecondaryIpRange(range_name=PODS_RANGE, ip_cidr_range=pods_cidr),
                subnetwork.ComputeSubnetworkSecondaryIpRange(range_name=SERVICES_RANGE, ip_cidr_range=services_cidr),
            ],
            log_config=SUBNET_FLOW_LOGS,
        )
        # GKE adds its own narrower allow rules; everything else inbound is denied and logged.
        google("compute_firewall").ComputeFirewall(
            self,
            "deny-ingress",
            project=project,
            name=f"{name}-deny-all-ingress",
            network=self.vpc.id,
            direction="INGRESS",
            priority=65534,
            source_ranges=["0.0.0.0/0"],
            deny=[google("compute_firewall").ComputeFirewallDeny(protocol="all")],
            log_config={"metadata": "INCLUDE_ALL_METADATA"},
        )
        router = google("compute_router").ComputeRouter(
            self, "router", project=project, region=region, name=f"{name}-router", network=self.vpc.id
        )
        google("compute_router_nat").ComputeRouterNat(
            self,
            "nat",
            project=project,
            region=region,
            name=f"{name}-nat",
            router=router.name,
            nat_ip_allocate_option="AUTO_ONLY",
            source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES",
            log_config={"enable": True, "filter": "ERRORS_ONLY"},
        )


class GpuDirectNetworks(Construct):
    """The extra VPC networks of GPUDirect (TCPX: 4, TCPXO: 8), one subnet each.

    GPU NICs carry only GPU-to-GPU traffic between the slice's nodes: each
    network allows ingress from its own subnet and nothing else, and uses the
    jumbo MTU GPUDirect is tuned for.
    """

    MTU = 8244

    def __init__(
        self, scope: Construct, id_: str, *, project: str, region: str, names: list[tuple[str, str]], subnets: list[str]
    ) -> None:
        super().__init__(scope, id_)
        self.networks = []
        self.subnets = []
        for n, ((net_name, subnet_name), cidr) in enumerate(zip(names, subnets, strict=True), start=1):
            vpc = google("compute_network").ComputeNetwork(
                self,
                f"vpc-{n}",
                project=project,
                name=net_name,
                auto_create_subnetworks=False,
                routing_mode="REGIONAL",
                mtu=self.MTU,
            )
            subnet = google("compute_subnetwork").ComputeSubnetwork(
                self,
                f"subnet-{n}",
                project=project,
                region=region,
                name=subnet_name,
                network=vpc.id,
                ip_cidr_range=cidr,
                private_ip_google_access=True,
                log_config=SUBNET_FLOW_LOGS,
            )
            firewall = google("compute_firewall")
            firewall.ComputeFirewall(
                self,
                f"internal-{n}",
                project=project,
                name=f"{net_name}-internal",
                network=vpc.id,
                direction="INGRESS",
                source_ranges=[cidr],
                allow=[firewall.ComputeFirewallAllow(protocol=p) for p in ("tcp", "udp", "icmp")],
                log_config={"metadata": "INCLUDE_ALL_METADATA"},
            )
            self.networks.append(vpc)
            self.subnets.append(subnet)


class ControlPlaneWebhooks(Construct):
    """Lets a private cluster's control plane reach the nodes on the admission webhook ports in use.

    GKE's own firewall rule for private clusters opens only tcp:443 and
    tcp:10250 from the control plane range; a webhook served on any other
    port (9443 for JobSet, Kueue and LWS) would time out on every admission
    call. Source: https://cloud.google.com/kubernetes-engine/docs/concepts/firewall-rules
    The rule opens those ports on the GKE nodes only (`targets`: the node pools' service accounts), not on every
    instance of the VPC (the Slurm hosts, the VM groups): a rule without a target applies to all of them
    (https://cloud.google.com/firewall/docs/firewalls#rule_assignment).
    """

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        project: str,
        network: str,
        name: str,
        master_cidr: str,
        ports: list[int],
        targets: list[str],
    ) -> None:
        super().__init__(scope, id_)
        firewall = google("compute_firewall")
        self.firewall = firewall.ComputeFirewall(
            self,
            "firewall",
            project=project,
            name=f"{name}-control-plane-webhooks",
            network=network,
            direction="INGRESS",
            priority=1000,
            source_ranges=[master_cidr],
            target_service_accounts=targets,
            allow=[firewall.ComputeFirewallAllow(protocol="tcp", ports=[str(p) for p in sorted(set(ports))])],
            log_config={"metadata": "INCLUDE_ALL_METADATA"},
        )


# Identity-Aware Proxy's TCP forwarding range: `gcloud compute ssh --tunnel-through-iap` reaches hosts without
# public IPs from it (https://cloud.google.com/iap/docs/using-tcp-forwarding#create-firewall-rule).
IAP_RANGE = "35.235.240.0/20"


class HostGroupFirewall(Construct):
    """What a group of hosts outside GKE needs of the VPC, whose ingress is otherwise denied: each other on
    every port (a Slurm cluster's slurmctld, slurmd, srun's steps and NFS; a VM group's MPI, NCCL and JAX
    coordinator), and SSH through IAP for its users. The hosts carry the network tag `tag`."""

    def __init__(self, scope: Construct, id_: str, *, project: str, network: str, name: str, tag: str) -> None:
        super().__init__(scope, id_)
        firewall = google("compute_firewall")
        tcp_udp_icmp = [firewall.ComputeFirewallAllow(protocol=p) for p in ("tcp", "udp", "icmp")]
        ssh = [firewall.ComputeFirewallAllow(protocol="tcp", ports=["22"])]
        for rule, source, allow in (
            ("internal", {"source_tags": [tag]}, tcp_udp_icmp),
            ("iap-ssh", {"source_ranges": [IAP_RANGE]}, ssh),
        ):
            firewall.ComputeFirewall(
                self,
                rule,
                project=project,
                name=f"{name}-{tag}-{rule}",
                network=network,
                direction="INGRESS",
                priority=1000,
                target_tags=[tag],
                allow=allow,
                log_config={"metadata": "INCLUDE_ALL_METADATA"},
                **source,
            )


# Google's health checkers (https://cloud.google.com/load-balancing/docs/health-check-concepts#ip-ranges).
HEALTH_CHECK_RANGES = ("35.191.0.0/16", "130.211.0.0/22")


class ProxyOnlySubnet(Construct):
    """The region's proxy-only subnet, which a regional internal Application Load Balancer's proxies (the Inference
    Gateway's `gke-l7-rilb`) send from, and the firewall rule that lets them and Google's health checkers reach the
    servers' port: the VPC denies every other ingress, and Envoy-based load balancers need this allow
    (https://cloud.google.com/load-balancing/docs/firewall-rules). No flow logs: the provider refuses them on a
    REGIONAL_MANAGED_PROXY subnet (its compute_subnetwork docs, log_config, 7.45.0). The allow targets the GKE
    nodes' service accounts (`targets`), where the servers and the endpoint picker run, not every instance of the
    VPC."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        project: str,
        region: str,
        network: str,
        name: str,
        cidr: str,
        ports: list[int],
        targets: list[str],
    ) -> None:
        super().__init__(scope, id_)
        self.subnet = google("compute_subnetwork").ComputeSubnetwork(
            self,
            "subnet",
            project=project,
            region=region,
            name=f"{name}-proxy-only-{region}",
            network=network,
            ip_cidr_range=cidr,
            purpose="REGIONAL_MANAGED_PROXY",
            role="ACTIVE",
        )
        firewall = google("compute_firewall")
        firewall.ComputeFirewall(
            self,
            "to-servers",
            project=project,
            name=f"{name}-proxy-only-to-servers",
            network=network,
            direction="INGRESS",
            priority=1000,
            source_ranges=[cidr, *HEALTH_CHECK_RANGES],
            target_service_accounts=targets,
            allow=[firewall.ComputeFirewallAllow(protocol="tcp", ports=[str(p) for p in sorted(set(ports))])],
            log_config={"metadata": "INCLUDE_ALL_METADATA"},
        )
