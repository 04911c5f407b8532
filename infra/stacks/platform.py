"""The platform stack: one instance per environment, `platform-<env>`.

It composes the stack's parts, each taking its own sections of the environment: network (infra/stacks/network.py),
identity (identity.py), compute (compute.py), data and images (data.py), the other orchestrators
(orchestrators.py), the Helm releases (releases.py), and what it watches.
"""

from __future__ import annotations

from constructs import Construct

from infra.catalogue.checkpointing import MTC_BUCKET_ROLE, MTC_NAMESPACE, MTC_SERVICE_ACCOUNT
from infra.catalogue.gcp_apis import VERTEX_API, platform_apis
from infra.cdk import GcsBackend, TerraformOutput, TerraformStack
from infra.config import Environment
from infra.config.delivery import APPLIED_CONFIRMATIONS
from infra.constructs.apis import ProjectApis
from infra.constructs.identity import RoleOfKubernetesAccount
from infra.constructs.monitoring import Observability, ProjectBudget
from infra.constructs.providers import Providers
from infra.constructs.vertex import custom_code_agent
from infra.derive import observability
from infra.stacks.compute import Compute
from infra.stacks.data import Data
from infra.stacks.identity import NodeIdentities, WorkloadIdentities
from infra.stacks.network import Networking
from infra.stacks.orchestrators import Orchestrators
from infra.stacks.releases import Releases


def stack_name(env: Environment) -> str:
    return f"platform-{env.name}"


class PlatformStack(TerraformStack):
    """Composes the parts for one environment; every difference is a field of `env`."""

    def __init__(self, scope: Construct, env: Environment, *, omit_unbuilt: bool = False) -> None:
        super().__init__(scope, stack_name(env))
        self.env = env
        GcsBackend(self, bucket=env.state.bucket, prefix=env.state_prefix)
        providers = Providers(
            self,
            "providers",
            project=env.project,
            region=env.region,
            labels=env.labels,
            quota_from_project=env.delivery_identities.seeded,
        )
        apis = ProjectApis(
            self,
            "apis",
            project=env.project,
            apis=platform_apis(
                vertex=env.vertex is not None,
                inference_gateway=env.inference_gateway,
                budget=env.monitoring.budget is not None,
            ),
        )
        nodes = NodeIdentities(self, env)
        net = Networking(self, env, gke_nodes=nodes.gke_nodes)
        compute = Compute(self, env, net, nodes)
        providers.connect(compute.cluster)
        data = Data(self, env)
        others = Orchestrators(self, env, net, data.buckets)
        registry = data.images(self, readers=nodes.members + others.registry_readers)
        if others.vertex is not None:
            # Vertex AI's agent exists once its API is on: the grant waits for the API.
            others.vertex.grant_image_pulls(
                registry.repository, agent=custom_code_agent(env.project_number), after=[apis.services[VERTEX_API]]
            )
        nodes.grant_pathways_buckets(data.buckets)
        identities = WorkloadIdentities(self, env, data.buckets, compute.cluster)
        tier = env.training.resilience.local_tier if env.training is not None else None
        if tier is not None:
            # GKE's multi-tier checkpointing backs the RAM disks up as its node agent's own principal.
            RoleOfKubernetesAccount(
                self,
                "multi-tier-checkpointing-backups",
                bucket=data.buckets[tier.bucket].bucket.name,
                project_number=env.project_number,
                workload_pool=env.workload_pool,
                namespace=MTC_NAMESPACE,
                service_account=MTC_SERVICE_ACCOUNT,
                role=MTC_BUCKET_ROLE,
                cluster=compute.cluster,
            )
        releases = Releases(
            self,
            env,
            net=net,
            compute=compute,
            identities=identities,
            gke_nodes=nodes.gke_nodes,
            omit_unbuilt=omit_unbuilt,
        )
        # The releases left out until their images are built (`make deploy-infra`'s first deploy).
        self.left_out = releases.left_out
        # What the environment watches: its dashboard and alert policies, derived from what it runs.
        watch = Observability(
            self,
            "observability",
            project=env.project,
            dashboard=observability.dashboard(env),
            policies=observability.alert_policies(env),
            emails=env.monitoring.notify,
        )
        if env.monitoring.budget is not None:
            ProjectBudget(
                self,
                "budget",
                provider=providers.billing(),
                project=env.project,
                project_number=env.project_number,
                environment=env.name,
                budget=env.monitoring.budget,
                channels=[c.name for c in watch.channels],
            )

        # Last: every Google resource above waits for its API to be enabled.
        apis.depend_all(self)

        TerraformOutput(self, "cluster_name", value=compute.cluster.name)
        # The confirm: entries this apply carries out, kept in the state: the next plan reads them there and holds
        # each spent (infra/delivery/confirmations.py spent). Which they are depends on the synthesized bodies: the
        # synthesis fills it in (infra/synth/app.py, infra.config.delivery.record_carried_out).
        TerraformOutput(self, APPLIED_CONFIRMATIONS, value=[])
        TerraformOutput(self, "cluster_location", value=compute.cluster.location)
        TerraformOutput(self, "registry_url", value=env.registry_url)
        TerraformOutput(self, "registry_id", value=registry.repository.id)
        for key, bucket in data.buckets.items():
            TerraformOutput(self, f"bucket_{key}", value=bucket.bucket.url)
