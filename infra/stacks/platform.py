"""The platform stack: one instance per environment, `platform-<env>`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from constructs import Construct

from infra.catalogue import upstream
from infra.catalogue.controllers import CONTROLLERS, controllers_of_chart
from infra.catalogue.gcp_apis import VERTEX_API, platform_apis
from infra.catalogue.serving_metrics import ADAPTER_NAMESPACE, ADAPTER_ROLE, ADAPTER_SERVICE_ACCOUNT
from infra.cdk import GcsBackend, TerraformOutput, TerraformStack
from infra.config import PLACEHOLDER_DIGEST, Environment, SaxmlServing
from infra.config.environment import BUILD_ACCOUNT_ID
from infra.config.training import GOODPUT_ROLES
from infra.constructs.apis import ProjectApis
from infra.constructs.binary_authorization import BinaryAuthorizationPolicy
from infra.constructs.builds import ImageBuilds
from infra.constructs.cluster import GkeCluster
from infra.constructs.identity import (
    Namespaces,
    NodeServiceAccount,
    ProjectRoleOfKubernetesAccount,
    SlurmServiceAccounts,
    WorkloadIdentity,
)
from infra.constructs.monitoring import Observability
from infra.constructs.network import (
    HEALTH_CHECK_RANGES,
    PODS_RANGE,
    SERVICES_RANGE,
    ControlPlaneWebhooks,
    GpuDirectNetworks,
    HostGroupFirewall,
    Network,
    ProxyOnlySubnet,
)
from infra.constructs.network_policy import NamespacePolicies
from infra.constructs.node_pools import CpuNodePool, SliceNodePool
from infra.constructs.providers import Providers
from infra.constructs.registry import DockerRepository
from infra.constructs.releases import (
    ChartRelease,
    ControllerRelease,
    gpu_networking_values,
    gpu_training_values,
    kueue_values,
    nccl_test_values,
    ray_training_values,
)
from infra.constructs.serving import metrics_adapter_values, release_name, serving_values
from infra.constructs.storage import Bucket
from infra.constructs.vertex import VertexJobs, custom_code_agent
from infra.constructs.vms import VmGroup
from infra.derive import observability
from infra.derive.names import SYSTEM_POOL
from infra.slurm import jobs as slurm_jobs
from infra.slurm.blueprint import node_tag as slurm_node_tag
from infra.vertex import job as vertex_job
from infra.vms import instance as vms
from workloads.serving import vllm_args as vllm


def stack_name(env: Environment) -> str:
    return f"platform-{env.name}"


def _conversion_grants(
    roles: Mapping[str, str], paths: dict[str, dict[str, list[str]]]
) -> dict[str, list[tuple[str, list[str]]]]:
    """The bucket grants of a checkpoint conversion's identity, held to the paths its conversions touch
    (Environment.conversion_paths): its role on a bucket it writes, under the outputs; and where it also reads there,
    objectViewer under the sources; its role on a bucket it only reads, under the sources."""
    grants: dict[str, list[tuple[str, list[str]]]] = {}
    for bucket, touched in paths.items():
        if bucket not in roles:
            continue
        if touched["write"]:
            grants[bucket] = [(roles[bucket], sorted(set(touched["write"])))]
            if touched["read"]:
                grants[bucket].append(("roles/storage.objectViewer", sorted(set(touched["read"]))))
        else:
            grants[bucket] = [(roles[bucket], sorted(set(touched["read"])))]
    return grants


class PlatformStack(TerraformStack):
    """Composes the constructs for one environment; every difference is a field of `env`."""

    def __init__(self, scope: Construct, env: Environment, *, omit_unbuilt: bool = False) -> None:
        super().__init__(scope, stack_name(env))
        self.env = env
        # First deploy of a fresh environment: the releases that run images not built yet (still at the
        # placeholder digest) are left out, named in `left_out`; the registry they will be pushed to is not.
        self.omit_unbuilt = omit_unbuilt
        self.left_out: list[str] = []
        # Every chart release's namespace, by release name (the network policies open each release to itself).
        self.release_namespaces: dict[str, str] = {}
        GcsBackend(self, bucket=env.state.bucket, prefix=env.state_prefix)
        providers = Providers(self, "providers", project=env.project, region=env.region, labels=env.labels)
        apis = ProjectApis(
            self,
            "apis",
            project=env.project,
            apis=platform_apis(vertex=env.vertex is not None, inference_gateway=env.inference_gateway),
        )

        network = Network(
            self,
            "network",
            project=env.project,
            region=env.region,
            name=env.network.name,
            subnet_name=env.network.subnet_name(env.region),
            subnet_cidr=env.network.subnet_cidr,
            pods_cidr=env.network.pods_cidr,
            services_cidr=env.network.services_cidr,
        )
        nodes = NodeServiceAccount(self, "node-identity", project=env.project, account_id=f"{env.cluster.name}-nodes")
        # Pathways pools use the GCE metadata server: their pods act as this account (see
        # Environment.pathways_slices), which holds only what those deployments need.
        pathways_nodes = (
            NodeServiceAccount(
                self, "pathways-node-identity", project=env.project, account_id=f"{env.cluster.name}-pathways"
            )
            if env.pathways_slices
            else None
        )
        # The GKE nodes' accounts: the firewall rules that open ports for GKE's pods target them alone.
        gke_nodes = [nodes.email] + ([pathways_nodes.email] if pathways_nodes else [])
        if env.inference_gateway:
            assert env.network.proxy_only_cidr is not None
            ProxyOnlySubnet(
                self,
                "proxy-only",
                project=env.project,
                region=env.region,
                network=network.vpc.id,
                name=env.network.name,
                cidr=env.network.proxy_only_cidr,
                # The model servers' port (the InferencePool's targetPorts) and the endpoint picker's.
                ports=[vllm.PORT, upstream.GAIE_EPP_PORT],
                targets=gke_nodes,
            )
        # (network, subnetwork) of each GPUDirect NIC, as references, so pools follow the networks.
        gpu_nics: list[tuple[str, str]] = []
        gpudirect = None
        if env.gpudirect_networks:
            gpudirect = GpuDirectNetworks(
                self,
                "gpudirect",
                project=env.project,
                region=env.region,
                names=env.network.gpudirect_names(env.region, env.gpudirect_networks),
                subnets=env.network.gpudirect_subnets(env.gpudirect_networks),
            )
            gpu_nics = [(n.name, s.name) for n, s in zip(gpudirect.networks, gpudirect.subnets, strict=True)]
        gke = GkeCluster(
            self,
            "gke",
            project=env.project,
            region=env.region,
            name=env.cluster.name,
            network=network.vpc.id,
            subnetwork=network.subnet.id,
            pods_range=PODS_RANGE,
            services_range=SERVICES_RANGE,
            master_cidr=env.network.master_cidr,
            authorized_networks={n.name: n.cidr for n in env.network.authorized_networks},
            release_channel=env.cluster.release_channel,
            min_master_version=env.cluster.min_master_version,
            deletion_protection=env.cluster.deletion_protection,
            workload_pool=env.workload_pool,
            labels=env.labels,
            multi_networking=bool(env.gke_gpudirect_networks),
            gateway_api=env.inference_gateway,
            maintenance=env.cluster.maintenance,
        )
        cluster = gke.cluster
        providers.connect(cluster)

        system = env.cluster.system_pool
        system_pool = CpuNodePool(
            self,
            "system-pool",
            project=env.project,
            cluster=cluster.id,
            location=env.region,
            name=SYSTEM_POOL,
            machine_type=system.machine_type,
            min_nodes=system.min_nodes,
            max_nodes=system.max_nodes,
            disk_size_gb=system.disk_size_gb,
            disk_type=system.disk_type,
            service_account=nodes.email,
            dedicated=False,
        )
        # Each slice's node pools (one per slice of its count), by slice key.
        self.slice_pools = {
            key: [
                SliceNodePool(
                    self,
                    f"slice-{pool}",
                    project=env.project,
                    cluster=cluster.id,
                    location=env.region,
                    zone=env.zone_of(key),
                    name=pool,
                    slice_=spec.slice,
                    capacity_type=spec.capacity.type,
                    reservation=spec.capacity.reservation,
                    max_run_hours=spec.capacity.max_run_hours,
                    node_range=env.slice_node_range(key),
                    auto_repair=spec.repairs,
                    auto_upgrade=spec.auto_upgrade,
                    service_account=(pathways_nodes or nodes).email if key in env.pathways_slices else nodes.email,
                    metadata="GCE_METADATA" if key in env.pathways_slices else "GKE_METADATA",
                    extra_networks=gpu_nics[: spec.slice.gpudirect.extra_nics] if spec.slice.gpudirect else [],
                    copies=env.slice_copies(key),
                )
                for pool in spec.pools(key)
            ]
            for key, spec in env.gke_slices.items()
        }
        for key, cpu in env.cpu_pools.items():
            CpuNodePool(
                self,
                f"cpu-{key}",
                project=env.project,
                cluster=cluster.id,
                location=env.region,
                name=key,
                machine_type=cpu.machine_type,
                min_nodes=0,
                max_nodes=cpu.max_nodes,
                disk_size_gb=200,
                disk_type=cpu.shape.disk_type,
                service_account=nodes.email,
                dedicated=True,
                zones=env.zones,
            )

        buckets = {
            key: Bucket(
                self,
                f"bucket-{key}",
                project=env.project,
                name=env.bucket_name(key),
                location=(spec.location or env.region).upper(),
                protect=spec.protect,
                versioning=spec.versioning,
                soft_delete_days=spec.soft_delete_days,
                delete_noncurrent_after_days=spec.lifecycle.delete_noncurrent_after_days,
                nearline_after_days=spec.lifecycle.nearline_after_days,
            )
            for key, spec in env.buckets.items()
        }
        # The Slurm cluster's accounts and firewall rules (its VMs come from `gcluster deploy` of the blueprint
        # `make plan` writes, infra/slurm/blueprint.py, which tags every host with the same tag).
        if env.slurm is not None:
            HostGroupFirewall(
                self,
                "slurm-firewall",
                project=env.project,
                network=network.vpc.id,
                name=env.network.name,
                tag=slurm_node_tag(env),
            )
        slurm = (
            SlurmServiceAccounts(
                self,
                "slurm-identity",
                project=env.project,
                name=env.slurm.name,
                bucket=(buckets[env.slurm.bucket].bucket.name, "roles/storage.objectUser"),
                prefix=slurm_jobs.BUCKET_PREFIX,
            )
            if env.slurm is not None
            else None
        )
        vertex = self._vertex(env, buckets, network)
        vm_groups = self._vm_groups(env, network, gpudirect)
        # Binary Authorization's project policy: this registry and upstream images by digest.
        BinaryAuthorizationPolicy(
            self,
            "binary-authorization",
            project=env.project,
            registry_url=env.registry_url,
            pinned_images=list(upstream.BY_DIGEST),
            waiting=sorted(upstream.AWAITING_DIGEST),
        )
        registry = DockerRepository(
            self,
            "registry",
            project=env.project,
            location=env.region,
            repository_id=env.registry.repository,
            delete_untagged_after_days=env.registry.cleanup.delete_untagged_after_days,
            keep_recent_versions=env.registry.cleanup.keep_recent_versions,
            readers=[nodes.member]
            + ([pathways_nodes.member] if pathways_nodes else [])
            + ([slurm.node_member] if slurm else [])
            + [group.member for group in vm_groups],
            protect=env.registry.protect,
        )
        # `make image`'s Cloud Build account and its sources' bucket.
        ImageBuilds(
            self,
            "image-builds",
            project=env.project,
            location=env.region.upper(),
            account_id=BUILD_ACCOUNT_ID,
            staging_bucket=env.build_staging_bucket,
            repository=registry.repository,
        )
        if vertex is not None:
            # Vertex AI's agent exists once its API is on: the grant waits for the API.
            vertex.grant_image_pulls(
                registry.repository, agent=custom_code_agent(env.project_number), after=[apis.services[VERTEX_API]]
            )

        if pathways_nodes is not None:
            pathways_nodes.grant_buckets(
                {
                    f"{b}-{role.rsplit('.', 1)[-1]}": (buckets[b].bucket.name, role)
                    for d in env.serving.values()
                    if d.engine == "jetstream"
                    for b, role in env.identities[d.identity].bucket_roles.items()
                }
            )

        namespaces = Namespaces(
            self,
            "namespaces",
            names=sorted({ident.namespace for ident in env.identities.values()}),
            labels={"app.kubernetes.io/managed-by": "cdktf"},
            pod_security=True,
        )
        identities = {}
        conversions = env.conversion_paths()
        for key, ident in env.identities.items():
            identities[key] = WorkloadIdentity(
                self,
                key,
                project=env.project,
                project_number=env.project_number,
                workload_pool=env.workload_pool,
                namespace=ident.namespace,
                service_account=ident.service_account,
                mode=ident.mode,
                bucket_roles={b: (buckets[b].bucket.name, role) for b, role in ident.bucket_roles.items()},
                depends_on=[namespaces.by_name[ident.namespace]],
                cluster=cluster,
                # A conversion's identity writes its outputs and reads its sources only.
                prefix_grants=_conversion_grants(ident.bucket_roles, conversions.get(key, {})),
            )

        if env.training is not None:
            identity = identities[env.training.identity]
            if env.training.goodput:
                identity.grant_project_roles(GOODPUT_ROLES)
            self._chart_release(
                "ray-training",
                chart="ray-training",
                namespace=env.identities[env.training.identity].namespace,
                values=ray_training_values(env),
                depends_on=[identity.service_account, *(p.pool for p in self.slice_pools[env.training.slice])],
            )

        # The controllers run on the system pool and answer the API server through the webhook firewall rule: they
        # wait for those, not for the accelerator pools (one slice short of capacity would otherwise hold every
        # controller, and every release after them, out of the apply).
        controller_needs: list[Any] = [system_pool.pool]
        if env.release.controllers:
            webhooks = ControlPlaneWebhooks(
                self,
                "webhooks",
                project=env.project,
                network=network.vpc.id,
                name=env.network.name,
                master_cidr=env.network.master_cidr,
                ports=[CONTROLLERS[name].webhook_port for name in env.release.controllers],
                targets=gke_nodes,
            )
            controller_needs.append(webhooks.firewall)
        self.controllers = {
            name: ControllerRelease(self, name, version=version, depends_on=controller_needs)
            for name, version in sorted(env.release.controllers.items())
        }
        gpu_pools = [p.pool for key, ps in self.slice_pools.items() if env.slices[key].slice.kind == "gpu" for p in ps]
        self._gpu_releases(env, identities, gpu_pools)
        self._serving_releases(env, identities, cluster, system_pool.pool)
        self._network_policies(env, namespaces)
        # What the environment watches: its dashboard and alert policies, derived from what it runs.
        Observability(
            self,
            "observability",
            project=env.project,
            dashboard=observability.dashboard(env),
            policies=observability.alert_policies(env),
            emails=env.monitoring.notify,
        )

        # Last: every Google resource above waits for its API to be enabled.
        apis.depend_all(self)

        TerraformOutput(self, "cluster_name", value=cluster.name)
        TerraformOutput(self, "cluster_location", value=cluster.location)
        TerraformOutput(self, "registry_url", value=env.registry_url)
        TerraformOutput(self, "registry_id", value=registry.repository.id)
        for key, bucket in buckets.items():
            TerraformOutput(self, f"bucket_{key}", value=bucket.bucket.url)

    def _vertex(self, env: Environment, buckets: dict[str, Bucket], network: Network) -> VertexJobs | None:
        """What the Vertex AI jobs need (infra/vertex writes the jobs themselves): their account, with objectUser
        on the training bucket, and the network attachment where the environment asks for private access."""
        if env.vertex is None:
            return None
        written = {env.vertex.training.bucket} if env.vertex.training is not None else set()
        cidr = env.network.network_attachment_cidr
        return VertexJobs(
            self,
            "vertex",
            project=env.project,
            account_id=vertex_job.SERVICE_ACCOUNT_ID,
            buckets={key: buckets[key].bucket.name for key in sorted(written)},
            # Each bucket's grant is held to the jobs' base output directory.
            prefixes=(
                {env.vertex.training.bucket: vertex_job.output_dir(env, env.vertex.training).split("/", 3)[3]}
                if env.vertex.training is not None
                else {}
            ),
            region=env.region,
            network=network.vpc.id,
            attachment=(
                (vertex_job.network_attachment_name(env), vertex_job.attachment_subnet_name(env), cidr)
                if cidr is not None
                else None
            ),
        )

    def _vm_groups(self, env: Environment, network: Network, gpudirect: GpuDirectNetworks | None) -> list[VmGroup]:
        """Each VM group, empty, on the platform's subnet and GPU networks, with its firewall (infra/vms)."""
        groups = []
        for key, group in env.vm_groups.items():
            spec = env.slices[group.slice]
            HostGroupFirewall(
                self,
                f"vms-{key}-firewall",
                project=env.project,
                network=network.vpc.id,
                name=env.network.name,
                tag=vms.network_tag(env, key),
            )
            groups.append(
                VmGroup(
                    self,
                    f"vms-{key}",
                    project=env.project,
                    region=env.region,
                    zone=env.zone_of(group.slice),
                    name=vms.group_name(env, key),
                    account_id=vms.service_account_id(key),
                    properties=vms.instance_properties(env, key),
                    placement=(
                        (vms.placement_policy_name(env, key), spec.slice.hosts) if vms.compact(env, key) else None
                    ),
                    depends_on=[network.subnet, *(gpudirect.subnets if gpudirect else [])],
                )
            )
        return groups

    def _chart_release(self, id_: str, *, skip_unbuilt: bool = True, **kwargs: Any) -> ChartRelease | None:
        """A ChartRelease, ordered after the controller release of every kind its chart writes (derived from the
        chart's templates; rule helm.release-after-its-kinds holds the rendered objects to it); None (recorded in
        `left_out`) when it would run an image not built yet."""
        if skip_unbuilt and self.omit_unbuilt and PLACEHOLDER_DIGEST in json.dumps(kwargs["values"]):
            self.left_out.append(id_)
            return None
        self.release_namespaces[id_] = kwargs["namespace"]  # network_policy: each release's own allows
        owners = [self.controllers[name].release for name in controllers_of_chart(kwargs["chart"])]
        kwargs["depends_on"] = [*kwargs["depends_on"], *(o for o in owners if o not in kwargs["depends_on"])]
        return ChartRelease(self, id_, **kwargs)

    def _network_policies(self, env: Environment, namespaces: Namespaces) -> None:
        """Default-deny ingress in every workload namespace, each release's pods open to each other, the load
        balancers' sources to the servers (infra/constructs/network_policy.py)."""
        vpc_ports = {}
        for key, deployment in env.serving.items():
            if isinstance(deployment, SaxmlServing):
                source = env.network.subnet_cidr if deployment.load_balancer == "internal" else "0.0.0.0/0"
                vpc_ports[release_name(key)] = ("sax-http", upstream.SAXML_HTTP_PORT, source)
        lb_namespaces = sorted({serving_values(env, key)[1] for key in env.serving}) if env.inference_gateway else []
        NamespacePolicies(
            self,
            "network-policies",
            namespaces=namespaces.by_name,
            releases=self.release_namespaces,
            load_balancer_sources=(
                [env.network.proxy_only_cidr, *HEALTH_CHECK_RANGES] if env.network.proxy_only_cidr else []
            ),
            load_balancer_ports=[vllm.PORT, upstream.GAIE_EPP_PORT],
            load_balanced_namespaces=lb_namespaces,
            vpc_ports=vpc_ports,
        )

    def _serving_releases(self, env: Environment, identities: dict, cluster: Any, system_pool: Any) -> None:
        """One release per serving deployment; model servers load for minutes, so the deploy does not wait. Where one
        autoscales, the metrics adapter its autoscaler reads through, with its Cloud Monitoring role."""
        if env.autoscales:
            ProjectRoleOfKubernetesAccount(
                self,
                "metrics-adapter-monitoring-viewer",
                project=env.project,
                project_number=env.project_number,
                workload_pool=env.workload_pool,
                namespace=ADAPTER_NAMESPACE,
                service_account=ADAPTER_SERVICE_ACCOUNT,
                role=ADAPTER_ROLE,
                cluster=cluster,
            )
            self._chart_release(
                "metrics-adapter",
                skip_unbuilt=False,
                chart="metrics-adapter",
                namespace=ADAPTER_NAMESPACE,
                create_namespace=True,
                values=metrics_adapter_values(),
                depends_on=[system_pool],
            )
        for key, deployment in env.serving.items():
            chart, namespace, values = serving_values(env, key)
            # Every account its pods run as (rule helm.release-after-its-service-accounts): the servers', and the
            # checkpoint conversion Job's.
            conversion = getattr(deployment, "conversion", None)
            accounts = [deployment.identity, *([conversion.identity] if conversion else [])]
            depends = [identities[a].service_account for a in accounts]
            depends += [p.pool for _, k in deployment.slice_fields() for p in self.slice_pools[k]]
            self._chart_release(
                release_name(key),
                chart=chart,
                namespace=namespace,
                values=values,
                depends_on=depends,
                wait=False,
            )

    def _gpu_releases(self, env: Environment, identities: dict, pools: list) -> None:
        """GPUDirect networking (once the GPU pools exist: its DaemonSets run there), Kueue's queues and the GPU
        JobSets."""
        if env.gke_gpudirect_networks:
            self._chart_release(
                "gpu-networking",
                skip_unbuilt=False,
                chart="gpu-networking",
                namespace="kube-system",
                values=gpu_networking_values(env),
                depends_on=pools,
            )
        batch = env.batch
        if batch is None:
            return
        queues = self._chart_release(
            "kueue-queues",
            skip_unbuilt=False,
            chart="kueue-queues",
            namespace=CONTROLLERS["kueue"].namespace,
            values=kueue_values(env),
            depends_on=[identities[batch.identity].service_account],
        )
        assert queues is not None
        namespace = env.identities[batch.identity].namespace
        # JobSets wait in Kueue for capacity, so the deploy does not wait for them.
        jobs = {"nccl-test": (batch.nccl_test, nccl_test_values), "gpu-training": (batch.training, gpu_training_values)}
        for name, (section, values) in jobs.items():
            if section is not None:
                self._chart_release(
                    name,
                    chart="gpu-jobset",
                    namespace=namespace,
                    values=values(env),
                    depends_on=[queues.release],
                    wait=False,
                )
