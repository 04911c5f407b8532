"""The bootstrap stack of one environment, `bootstrap-<env>`: the state bucket the
platform stack keeps its state in, the planner and deployer identities and the GitHub federation
(infra/constructs/bootstrap.py).

Applied by a person with the project's owner rights, once and when it changes, never by the workflows; the
deployer's projectIamAdmin is held to the project roles the platform stacks grant (infra/constructs/bootstrap.py).
Its state lives in the bucket it creates, under `bootstrap/<env>`; the first
apply runs on local state and then moves it there, as Google's example foundation does for its 0-bootstrap stage
(docs/delivery.md, "Deploying for real").
"""

from __future__ import annotations

from constructs import Construct

from infra.catalogue.deployer_roles import BILLING_DEPLOYER_ROLE, BILLING_PLANNER_ROLE
from infra.catalogue.gcp_apis import BILLING_API
from infra.cdk import GcsBackend, TerraformOutput, TerraformStack
from infra.cdk.bindings import google
from infra.config import Environment
from infra.constructs.bootstrap import Bootstrap


def bootstrap_stack_name(env: Environment) -> str:
    return f"bootstrap-{env.name}"


class BootstrapStack(TerraformStack):
    def __init__(self, scope: Construct, env: Environment, source: Environment | None = None) -> None:
        """`source`: the environment `env.delivery.promotes_from` names, whose registry the deployer may read."""
        super().__init__(scope, bootstrap_stack_name(env))
        assert env.delivery is not None, "only an environment with a delivery section has a bootstrap stack"
        self.env = env
        GcsBackend(self, bucket=env.state.bucket, prefix=f"bootstrap/{env.name}")
        google("provider").GoogleProvider(self, "google", project=env.project, region=env.region)
        boot = Bootstrap(
            self,
            "bootstrap",
            env_name=env.name,
            project=env.project,
            identities=env.delivery_identities,
            region=env.region,
            state_bucket=env.state.bucket,
            repository=env.delivery.github.repository,
            repository_owner_id=env.delivery.github.repository_owner_id,
            plans_from_main_only=env.delivery.pull_request_plans == "offline",
            quota_consumer=env.names_its_quota_project,
        )
        if source is not None:
            # A promotion copies the source's images into this environment's registry as this deployer
            # (promote.yml): it reads them there (artifactregistry.repositories.downloadArtifacts). Granted here,
            # by the person who applies the bootstrap with rights in both projects, not by the source's deployer.
            google("artifact_registry_repository_iam_member").ArtifactRegistryRepositoryIamMember(
                self,
                "promotion-source-reader",
                project=source.project,
                location=source.region,
                repository=source.registry.repository,
                role="roles/artifactregistry.reader",
                member=f"serviceAccount:{boot.deployer.email}",
            )
        if env.monitoring.budget is not None:
            # The project's budget lives on the billing account, outside the project: the deployer manages it
            # (roles/billing.costsManager: billing.budgets.*) and the planner reads it (roles/billing.viewer), each
            # on that account only. Granted by whoever applies the bootstrap, who must administer the account
            # (billing.accounts.setIamPolicy: roles/billing.admin).
            account = env.monitoring.budget.billing_account
            billing_api = google("project_service").ProjectService(
                self, "api-cloudbilling", project=env.project, service=BILLING_API, disable_on_destroy=False
            )
            for who, role, member in (
                ("deployer", BILLING_DEPLOYER_ROLE, boot.deployer.email),
                ("planner", BILLING_PLANNER_ROLE, boot.planner.email),
            ):
                google("billing_account_iam_member").BillingAccountIamMember(
                    self,
                    f"billing-{who}",
                    billing_account_id=account,
                    role=role,
                    member=f"serviceAccount:{member}",
                    depends_on=[billing_api],
                )
        # What the GitHub environments' variables are set to (docs/delivery.md).
        TerraformOutput(self, "workload_identity_provider", value=boot.provider.name)
        TerraformOutput(self, "planner_service_account", value=boot.planner.email)
        TerraformOutput(self, "deployer_service_account", value=boot.deployer.email)
        TerraformOutput(self, "state_bucket", value=boot.state.name)
