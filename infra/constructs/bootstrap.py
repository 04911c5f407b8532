"""What an environment's deploys stand on: its own Terraform state bucket, a read-only
planner and a deployer service account, and the Workload Identity Federation that lets GitHub's workflows act as
them, each only from the workflow jobs meant to.

Learnt from Google's terraform-example-foundation, stage 0-bootstrap (GoogleCloudPlatform/terraform-example-
foundation, 0-bootstrap/README.md, 0-bootstrap/main.tf, 0-bootstrap/sa.tf, 0-bootstrap/github.tf: a state bucket
made by the bootstrap stage, one service account per stage granted only that stage's roles, GitHub's OIDC tokens
federated through a pool whose provider has an attribute condition). Those paths are cited from the repository's
published layout; this session could not fetch the repository (the fetch tool had no snapshot of it), so no commit
is named and nothing was copied. Past it: an environment per project (a state bucket each, so dev's deployer
cannot read or write prod's state), and a planner beside each deployer, for pull requests.

The federation, per environment (one pool, where the environment's accounts are: its project, or its seed project,
`delivery.seed`, infra/config/delivery.py Seed):
  provider `github`   issuer https://token.actions.githubusercontent.com; admits a token only when its
                      claims say this repository (by name and owner id) and either the `<env>-plan` GitHub
                      environment, or the `<env>` environment on refs/heads/main (ATTRIBUTE_CONDITION).
  planner             roles/iam.workloadIdentityUser for principalSet .../attribute.environment/<env>-plan
  deployer            roles/iam.workloadIdentityUser for principalSet .../attribute.environment/<env>
The GitHub OIDC token carries `repository`, `repository_owner_id`, `ref` and, for a job that names one,
`environment` (https://docs.github.com/en/actions/reference/security/oidc#oidc-token-claims). A token without
`environment` (a pull request's test job) fails the condition. The principalSet form and attribute conditions:
https://cloud.google.com/iam/docs/workload-identity-federation-with-deployment-pipelines and
https://cloud.google.com/iam/docs/principal-identifiers. google-github-actions/auth exchanges the token and
impersonates `service_account` (https://github.com/google-github-actions/auth#readme, "Workload Identity
Federation through a Service Account").

GitHub's side holds the rest: the `<env>` environment's required reviewers (prod) and its deployment branch
policy (main only), set in the repository's settings. Only a real repository and project show that a token of each
kind is admitted or refused as written here; the tests hold the condition's text and evaluate its logic on
claims.
"""

from __future__ import annotations

from typing import Any

from constructs import Construct

from infra.catalogue.deployer_roles import BILLING_ACCOUNT_ROLES, BILLING_DEPLOYER_ROLE, grant_limit_condition
from infra.cdk import TerraformResourceLifecycle
from infra.cdk.bindings import google
from infra.config.delivery import DeliveryIdentities

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
PROVIDER_ID = "github"

# The APIs the bootstrap itself calls (IAM, Security Token Service and IAM Credentials for the federation).
BOOTSTRAP_APIS = (
    "iam.googleapis.com",
    "iamcredentials.googleapis.com",
    "sts.googleapis.com",
    "storage.googleapis.com",
    "cloudresourcemanager.googleapis.com",
)
# What a seed project needs besides (Seed, infra/config/delivery.py): the accounts and the pool live there, so the
# token exchange (STS) and the impersonation (IAM Credentials) are its APIs; and a call of theirs that names no quota
# project (gcloud's in make deploy, Cluster Toolkit's validators) is charged to it, Service Usage's included, so
# Service Usage is enabled there too, as the example foundation's seed does (terraform-google-modules/bootstrap).
SEED_APIS = (
    "serviceusage.googleapis.com",
    "iam.googleapis.com",
    "iamcredentials.googleapis.com",
    "sts.googleapis.com",
    "cloudresourcemanager.googleapis.com",
)

# The planner reads: the project's resources and their IAM policies, the cluster's objects (not its Secrets: Helm's
# release records, which a plan's refresh reads, are ConfigMaps for that reason, infra/constructs/providers.py).
PLANNER_ROLES = ("roles/viewer", "roles/iam.securityReviewer", "roles/container.viewer")
QUOTA_CONSUMER_ROLE = "roles/serviceusage.serviceUsageConsumer"
# What the gate at the apply reads through the cluster's DNS endpoint as the planner (scripts/apply.py
# cluster_holds: gcloud container clusters get-credentials --dns-endpoint, then the release records and the CRDs),
# granted by name in a role of the platform's own: whether roles/container.viewer carries container.clusters.connect
# cannot be told offline (review 10, C5), and without it every release update of a prod plan is held.
PLANNER_CLUSTER_ROLE_ID = "platformPlannerClusterReader"
PLANNER_CLUSTER_PERMISSIONS = (
    "container.clusters.connect",
    "container.clusters.get",
    "container.configMaps.get",
    "container.configMaps.list",
    "container.customResourceDefinitions.get",
    "container.customResourceDefinitions.list",
)

# The deployer's project roles, by the resource types of the platform stack they create (tests/test_bootstrap.py
# holds every type of both environments' stacks covered). helm_release and kubernetes_* go through the cluster's
# DNS endpoint, authorized by IAM: roles/container.admin. Node pools and VM templates run as the stack's service
# accounts: roles/iam.serviceAccountUser. Only a real apply shows the list is enough.
DEPLOYER_ROLES: dict[str, str] = {
    "google_artifact_registry_": "roles/artifactregistry.admin",
    "google_binary_authorization_": "roles/binaryauthorization.policyEditor",
    "google_compute_": "roles/compute.admin",
    "google_container_": "roles/container.admin",
    "helm_release": "roles/container.admin",
    "kubernetes_": "roles/container.admin",
    "google_monitoring_": "roles/monitoring.editor",
    "google_project_iam_": "roles/resourcemanager.projectIamAdmin",  # held to GRANTABLE_PROJECT_ROLES
    "google_project_service": "roles/serviceusage.serviceUsageAdmin",
    "google_service_account": "roles/iam.serviceAccountAdmin",
    "google_storage_bucket": "roles/storage.admin",
}
# make deploy's preflight reads the TPU quotas through Cloud Quotas (scripts/preflight.py; the rest of what it reads
# the roles above give).
DEPLOYER_EXTRA_ROLES = ("roles/iam.serviceAccountUser", "roles/cloudquotas.viewer")


PROJECT_IAM_ADMIN = "roles/resourcemanager.projectIamAdmin"
STORAGE_ADMIN = "roles/storage.admin"


def planner_roles(*, quota_consumer: bool) -> tuple[str, ...]:
    """The planner's predefined project roles: PLANNER_ROLES, and where a provider of the platform stack names the
    environment's project as its calls' quota project (Environment.names_its_quota_project: user_project_override
    wherever the accounts are a seed's, and on the billing alias), the right to (serviceusage.services.use, which
    roles/viewer does not carry). The deployer has it in serviceUsageAdmin."""
    return (*PLANNER_ROLES, QUOTA_CONSUMER_ROLE) if quota_consumer else PLANNER_ROLES


def not_the_state_bucket(bucket: str) -> str:
    """The CEL that admits every Cloud Storage resource but the bucket `bucket` and its objects."""
    name = f"projects/_/buckets/{bucket}"
    return f"!(resource.name == '{name}' || resource.name.startsWith('{name}/'))"


def deployer_role(resource_type: str) -> str | None:
    """The deployer's role that manages `resource_type` (longest matching prefix; a billing account's own), or
    None."""
    if resource_type in BILLING_ACCOUNT_ROLES:
        return BILLING_DEPLOYER_ROLE
    matches = [prefix for prefix in DEPLOYER_ROLES if resource_type.startswith(prefix)]
    return DEPLOYER_ROLES[max(matches, key=len)] if matches else None


def attribute_condition(repository: str, owner_id: str, env: str, plans_from_main_only: bool = False) -> str:
    """The provider's CEL condition: this repository, and the `<env>-plan` environment (from main only where pull
    requests plan offline) or `<env>` on main."""
    on_main = "assertion.ref == 'refs/heads/main'"
    planner = f"assertion.environment == '{env}-plan'"
    if plans_from_main_only:
        planner = f"({planner} && {on_main})"
    return (
        f"assertion.repository == '{repository}' && assertion.repository_owner_id == '{owner_id}' && "
        f"({planner} || (assertion.environment == '{env}' && {on_main}))"
    )


ATTRIBUTE_MAPPING = {
    "google.subject": "assertion.sub",
    "attribute.repository": "assertion.repository",
    "attribute.repository_owner_id": "assertion.repository_owner_id",
    "attribute.ref": "assertion.ref",
    "attribute.environment": "assertion.environment",
}


def principal_set(project_number: str, pool_id: str, attribute: str, value: str) -> str:
    return (
        f"principalSet://iam.googleapis.com/projects/{project_number}/locations/global/"
        f"workloadIdentityPools/{pool_id}/attribute.{attribute}/{value}"
    )


class Bootstrap(Construct):
    """The state bucket, the planner and the deployer, and the federation for one environment."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        env_name: str,
        project: str,
        identities: DeliveryIdentities,
        region: str,
        state_bucket: str,
        repository: str,
        repository_owner_id: str,
        plans_from_main_only: bool = False,
        quota_consumer: bool = False,
    ) -> None:
        """`quota_consumer`: the platform stack names the environment's project as a quota project (planner_roles)."""
        super().__init__(scope, id_)
        service = google("project_service").ProjectService
        apis = [
            service(self, f"api-{api.split('.')[0]}", project=project, service=api, disable_on_destroy=False)
            for api in BOOTSTRAP_APIS
        ]
        # The accounts and the pool: in the environment's project, or in a seed project of their own.
        home_apis = apis
        if identities.seeded:
            home_apis = [
                service(
                    self,
                    f"seed-api-{api.split('.')[0]}",
                    project=identities.project,
                    service=api,
                    disable_on_destroy=False,
                )
                for api in SEED_APIS
            ]

        self.state_bucket_name = state_bucket
        self.state = self._state_bucket(project, state_bucket, region, apis)
        sa = google("service_account")
        self.planner = sa.ServiceAccount(
            self,
            "planner",
            project=identities.project,
            account_id=identities.planner_id,
            display_name=f"Terraform planner of {env_name} (read-only; pull requests)",
            depends_on=home_apis,
        )
        self.deployer = sa.ServiceAccount(
            self,
            "deployer",
            project=identities.project,
            account_id=identities.deployer_id,
            display_name=f"Terraform deployer of {env_name} (approved jobs on main)",
            depends_on=home_apis,
        )
        self._grants(project, quota_consumer=quota_consumer)
        self._federation(env_name, identities, repository, repository_owner_id, plans_from_main_only, home_apis)

    def _state_bucket(self, project: str, name: str, region: str, apis: list[Any]) -> Any:
        """The state bucket: versioned (a bad write can be rolled back), uniform access, never public, kept on
        destroy; only this environment's planner (read) and deployer (read, write, lock) are granted on it."""
        sb = google("storage_bucket")
        return sb.StorageBucket(
            self,
            "state",
            project=project,
            name=name,
            location=region.upper(),
            storage_class="STANDARD",
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            versioning={"enabled": True},
            force_destroy=False,
            lifecycle_rule=[
                sb.StorageBucketLifecycleRule(
                    action={"type": "Delete"},
                    condition={"num_newer_versions": 20, "with_state": "ARCHIVED"},
                )
            ],
            lifecycle=TerraformResourceLifecycle(prevent_destroy=True),
            depends_on=apis,
        )

    def _grants(self, project: str, *, quota_consumer: bool) -> None:
        """The planner's and the deployer's rights: the state bucket's objects, and their project roles."""
        bucket_member = google("storage_bucket_iam_member").StorageBucketIamMember
        bucket_member(
            self,
            "state-planner",
            bucket=self.state.name,
            role="roles/storage.objectViewer",
            member=f"serviceAccount:{self.planner.email}",
        )
        bucket_member(
            self,
            "state-deployer",
            bucket=self.state.name,
            role="roles/storage.objectAdmin",
            member=f"serviceAccount:{self.deployer.email}",
        )
        project_member = google("project_iam_member").ProjectIamMember
        for role in planner_roles(quota_consumer=quota_consumer):
            project_member(
                self,
                f"planner-{role.split('/')[1].replace('.', '-')}",
                project=project,
                role=role,
                member=f"serviceAccount:{self.planner.email}",
            )
        cluster_reader = google("project_iam_custom_role").ProjectIamCustomRole(
            self,
            "planner-cluster-reader-role",
            project=project,
            role_id=PLANNER_CLUSTER_ROLE_ID,
            title="Platform planner: the cluster's release records and CRDs",
            description="What the gate at the apply reads through the cluster's DNS endpoint, and nothing else",
            permissions=list(PLANNER_CLUSTER_PERMISSIONS),
        )
        project_member(
            self,
            "planner-cluster-reader",
            project=project,
            role=cluster_reader.name,
            member=f"serviceAccount:{self.planner.email}",
        )
        for role in sorted({*DEPLOYER_ROLES.values(), *DEPLOYER_EXTRA_ROLES}):
            project_member(
                self,
                f"deployer-{role.split('/')[1].replace('.', '-')}",
                project=project,
                role=role,
                member=f"serviceAccount:{self.deployer.email}",
                condition=self._deployer_condition(role),
            )

    def _deployer_condition(self, role: str) -> dict[str, str] | None:
        """What holds a deployer role to the platform's own resources, where IAM can hold it:
        - granting project roles: only those the platform stacks grant, never one to widen its own rights;
        - Cloud Storage: every bucket but the state bucket, whose objects the deployer writes through its own grant
          (state-deployer) but whose IAM policy, versioning, retention and public access prevention it cannot
          change (review 10, C6). Cloud Storage recognizes resource.name in a condition, a bucket as
          `projects/_/buckets/<name>` and its objects below it (https://cloud.google.com/iam/docs/
          conditions-resource-attributes#resource-name).
        The service accounts' admin role cannot be held so: the IAM API is not among the services that recognize
        resource attributes, and the modifiedGrantsByRole attribute limits project, folder and organization
        policies only (docs/delivery.md, step 0, says what is left)."""
        if role == PROJECT_IAM_ADMIN:
            return {
                "title": "platform-grants-only",
                "description": "Grants and revokes only the project roles the platform stack grants",
                "expression": grant_limit_condition(),
            }
        if role == STORAGE_ADMIN:
            return {
                "title": "not-the-state-bucket",
                "description": "Every bucket but the Terraform state's (its objects come through state-deployer)",
                "expression": not_the_state_bucket(self.state_bucket_name),
            }
        return None

    def _federation(
        self,
        env_name: str,
        identities: DeliveryIdentities,
        repository: str,
        repository_owner_id: str,
        plans_from_main_only: bool,
        apis: list[Any],
    ) -> None:
        """GitHub's OIDC tokens, through a workload identity pool, become the planner (the environment's plan jobs)
        and the deployer (its deploy jobs)."""
        self.pool = google("iam_workload_identity_pool").IamWorkloadIdentityPool(
            self,
            "pool",
            project=identities.project,
            workload_identity_pool_id=identities.pool_id,
            display_name="GitHub Actions",
            depends_on=apis,
        )
        self.provider = google("iam_workload_identity_pool_provider").IamWorkloadIdentityPoolProvider(
            self,
            "provider",
            project=identities.project,
            workload_identity_pool_id=self.pool.workload_identity_pool_id,
            workload_identity_pool_provider_id=PROVIDER_ID,
            display_name=f"{repository} ({env_name})",
            attribute_mapping=ATTRIBUTE_MAPPING,
            attribute_condition=attribute_condition(repository, repository_owner_id, env_name, plans_from_main_only),
            oidc={"issuer_uri": GITHUB_ISSUER},
        )
        sa_member = google("service_account_iam_member").ServiceAccountIamMember
        sa_member(
            self,
            "planner-federation",
            service_account_id=self.planner.name,
            role="roles/iam.workloadIdentityUser",
            member=principal_set(identities.project_number, identities.pool_id, "environment", f"{env_name}-plan"),
            depends_on=[self.provider],
        )
        sa_member(
            self,
            "deployer-federation",
            service_account_id=self.deployer.name,
            role="roles/iam.workloadIdentityUser",
            member=principal_set(identities.project_number, identities.pool_id, "environment", env_name),
            depends_on=[self.provider],
        )
