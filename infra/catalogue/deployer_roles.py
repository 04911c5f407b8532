"""What the deployer needs to apply a platform stack: for each resource type the stack declares, the predefined role
that grants it and the IAM permissions `make preflight` tests on the project (Resource Manager
`projects.testIamPermissions`) before anything is applied.

Checked 2026-11-26 against the IAM reference (https://cloud.google.com/iam/docs/roles-permissions, each role's page
lists its permissions, e.g. https://cloud.google.com/iam/docs/roles-permissions/compute#compute.networkAdmin) and
each resource's provider documentation (hashicorp/google 6.50.0, the API each resource calls). Not checked against a
real project from here (no network to Google Cloud): a permission a role lacks would show as "missing" on a project
where the role is granted, and `make preflight` names both, so the table is corrected from the first real run.

A Kubernetes object (helm_release, kubernetes_*) is applied through the cluster's API server with the deployer's
Google credentials; GKE maps IAM permissions `container.<kind>.<verb>` to Kubernetes requests
(https://cloud.google.com/kubernetes-engine/docs/how-to/iam#predefined), so the project-level test covers them too.
Creating a resource that runs as a service account (a node pool, an instance template) needs
`iam.serviceAccounts.actAs` on that account (roles/iam.serviceAccountUser).
"""

from __future__ import annotations

from dataclasses import dataclass

CHECKED = "2026-11-26"
SOURCE = "https://cloud.google.com/iam/docs/roles-permissions"


@dataclass(frozen=True)
class RoleNeed:
    """The predefined role that lets the deployer manage one resource type, and the permissions tested for it."""

    role: str
    permissions: tuple[str, ...]


_ACT_AS = RoleNeed("roles/iam.serviceAccountUser", ("iam.serviceAccounts.actAs",))
_KUBERNETES = RoleNeed(
    "roles/container.admin",
    (
        "container.clusters.get",
        # the providers reach the cluster through its DNS-based endpoint, authorized by IAM (docs/delivery.md)
        "container.clusters.connect",
        "container.namespaces.create",
        "container.namespaces.get",
        "container.serviceAccounts.create",
        "container.networkPolicies.create",
        "container.customResourceDefinitions.create",
        "container.clusterRoles.create",
        "container.clusterRoleBindings.create",
        "container.deployments.create",
        "container.secrets.create",
    ),
)

# Resource type -> what managing it needs. Every resource type of every synthesized stack must be here
# (tests/test_preflight.py holds every environment's stack to it).
RESOURCE_ROLES: dict[str, tuple[RoleNeed, ...]] = {
    "google_project_service": (
        RoleNeed(
            "roles/serviceusage.serviceUsageAdmin",
            ("serviceusage.services.enable", "serviceusage.services.get", "serviceusage.services.list"),
        ),
    ),
    "google_compute_network": (
        RoleNeed(
            "roles/compute.networkAdmin", ("compute.networks.create", "compute.networks.get", "compute.networks.delete")
        ),
    ),
    "google_compute_subnetwork": (
        RoleNeed(
            "roles/compute.networkAdmin",
            ("compute.subnetworks.create", "compute.subnetworks.get", "compute.subnetworks.delete"),
        ),
    ),
    "google_compute_router": (
        RoleNeed(
            "roles/compute.networkAdmin",
            ("compute.routers.create", "compute.routers.get", "compute.routers.update", "compute.routers.delete"),
        ),
    ),
    "google_compute_router_nat": (RoleNeed("roles/compute.networkAdmin", ("compute.routers.update",)),),
    "google_compute_network_attachment": (
        RoleNeed(
            "roles/compute.networkAdmin",
            (
                "compute.networkAttachments.create",
                "compute.networkAttachments.get",
                "compute.networkAttachments.delete",
            ),
        ),
    ),
    "google_compute_firewall": (
        RoleNeed(
            "roles/compute.securityAdmin",
            (
                "compute.firewalls.create",
                "compute.firewalls.get",
                "compute.firewalls.delete",
                "compute.networks.updatePolicy",
            ),
        ),
    ),
    "google_compute_resource_policy": (
        RoleNeed(
            "roles/compute.instanceAdmin.v1",
            ("compute.resourcePolicies.create", "compute.resourcePolicies.get", "compute.resourcePolicies.delete"),
        ),
    ),
    "google_compute_instance_template": (
        RoleNeed(
            "roles/compute.instanceAdmin.v1",
            ("compute.instanceTemplates.create", "compute.instanceTemplates.get", "compute.instanceTemplates.delete"),
        ),
        _ACT_AS,
    ),
    "google_compute_instance_group_manager": (
        RoleNeed(
            "roles/compute.instanceAdmin.v1",
            (
                "compute.instanceGroupManagers.create",
                "compute.instanceGroupManagers.get",
                "compute.instanceGroupManagers.delete",
            ),
        ),
    ),
    "google_container_cluster": (
        RoleNeed(
            "roles/container.admin",
            (
                "container.clusters.create",
                "container.clusters.get",
                "container.clusters.update",
                "container.clusters.delete",
                "container.operations.get",
            ),
        ),
        _ACT_AS,
    ),
    "google_container_node_pool": (
        RoleNeed("roles/container.admin", ("container.clusters.update", "container.operations.get")),
        _ACT_AS,
    ),
    "google_storage_bucket": (
        RoleNeed(
            "roles/storage.admin",
            ("storage.buckets.create", "storage.buckets.get", "storage.buckets.update", "storage.buckets.delete"),
        ),
    ),
    "google_storage_bucket_iam_member": (
        RoleNeed("roles/storage.admin", ("storage.buckets.getIamPolicy", "storage.buckets.setIamPolicy")),
    ),
    "google_artifact_registry_repository": (
        RoleNeed(
            "roles/artifactregistry.admin",
            (
                "artifactregistry.repositories.create",
                "artifactregistry.repositories.get",
                "artifactregistry.repositories.update",
                "artifactregistry.repositories.delete",
            ),
        ),
    ),
    "google_artifact_registry_repository_iam_member": (
        RoleNeed(
            "roles/artifactregistry.admin",
            ("artifactregistry.repositories.getIamPolicy", "artifactregistry.repositories.setIamPolicy"),
        ),
    ),
    "google_service_account": (
        RoleNeed(
            "roles/iam.serviceAccountAdmin",
            ("iam.serviceAccounts.create", "iam.serviceAccounts.get", "iam.serviceAccounts.delete"),
        ),
    ),
    "google_service_account_iam_member": (
        RoleNeed(
            "roles/iam.serviceAccountAdmin", ("iam.serviceAccounts.getIamPolicy", "iam.serviceAccounts.setIamPolicy")
        ),
    ),
    "google_project_iam_member": (
        RoleNeed(
            "roles/resourcemanager.projectIamAdmin",
            ("resourcemanager.projects.getIamPolicy", "resourcemanager.projects.setIamPolicy"),
        ),
    ),
    "google_binary_authorization_policy": (
        RoleNeed(
            "roles/binaryauthorization.policyEditor",
            ("binaryauthorization.policy.get", "binaryauthorization.policy.update"),
        ),
    ),
    # roles/monitoring.editor: read and write every Cloud Monitoring configuration (dashboards, alert policies,
    # notification channels); https://cloud.google.com/iam/docs/roles-permissions/monitoring#monitoring.editor
    "google_monitoring_dashboard": (
        RoleNeed(
            "roles/monitoring.editor",
            (
                "monitoring.dashboards.create",
                "monitoring.dashboards.get",
                "monitoring.dashboards.update",
                "monitoring.dashboards.delete",
            ),
        ),
    ),
    "google_monitoring_alert_policy": (
        RoleNeed(
            "roles/monitoring.editor",
            (
                "monitoring.alertPolicies.create",
                "monitoring.alertPolicies.get",
                "monitoring.alertPolicies.update",
                "monitoring.alertPolicies.delete",
            ),
        ),
    ),
    "google_monitoring_notification_channel": (
        RoleNeed(
            "roles/monitoring.editor",
            (
                "monitoring.notificationChannels.create",
                "monitoring.notificationChannels.get",
                "monitoring.notificationChannels.update",
                "monitoring.notificationChannels.delete",
            ),
        ),
    ),
    "helm_release": (_KUBERNETES,),
    "kubernetes_namespace_v1": (_KUBERNETES,),
    "kubernetes_network_policy_v1": (_KUBERNETES,),
    "kubernetes_service_account_v1": (_KUBERNETES,),
}

# Resource types managed on the Cloud Billing account rather than the project (a budget): their roles are granted on
# that account (by the bootstrap, infra/stacks/bootstrap.py) and `make preflight` tests them there (Cloud Billing
# `billingAccounts.testIamPermissions`). roles/billing.costsManager: "Manage budgets and view and export cost
# information of billing accounts" (https://cloud.google.com/iam/docs/roles-permissions/billing#billing.costsManager);
# roles/billing.viewer reads them (the planner's refresh).
BILLING_DEPLOYER_ROLE = "roles/billing.costsManager"
BILLING_PLANNER_ROLE = "roles/billing.viewer"
BILLING_ACCOUNT_ROLES: dict[str, tuple[RoleNeed, ...]] = {
    "google_billing_budget": (
        RoleNeed(
            BILLING_DEPLOYER_ROLE,
            ("billing.budgets.create", "billing.budgets.get", "billing.budgets.update", "billing.budgets.delete"),
        ),
    ),
}

# What `make preflight` itself reads (and `make deploy` before the apply): the enabled APIs, the regions' quotas,
# the TPU quotas of Cloud Quotas, and the permissions. roles/serviceusage.serviceUsageViewer,
# roles/compute.viewer and roles/cloudquotas.viewer grant them; testIamPermissions needs no permission.
PREFLIGHT_ROLES: tuple[RoleNeed, ...] = (
    RoleNeed("roles/serviceusage.serviceUsageViewer", ("serviceusage.services.list",)),
    # The environment's project is the quota project of user credentials' calls.
    RoleNeed("roles/serviceusage.serviceUsageConsumer", ("serviceusage.services.use",)),
    RoleNeed("roles/compute.viewer", ("compute.regions.get",)),
    RoleNeed("roles/cloudquotas.viewer", ("cloudquotas.quotas.get",)),
)


class UnknownResourceType(KeyError):
    """A resource type the stack declares and the table does not know."""

    def __str__(self) -> str:
        return (
            f"{self.args[0]}: no role known for it; add it to infra/catalogue/deployer_roles.py RESOURCE_ROLES "
            f"(the role and permissions that manage it: {SOURCE})"
        )


def roles_for(resource_types: set[str]) -> dict[str, tuple[str, ...]]:
    """Role -> the permissions tested for it, for a stack of these resource types and the preflight's own reads."""
    needs: dict[str, set[str]] = {}
    for rtype in sorted(resource_types - BILLING_ACCOUNT_ROLES.keys()):
        if rtype not in RESOURCE_ROLES:
            raise UnknownResourceType(rtype)
        for need in RESOURCE_ROLES[rtype]:
            needs.setdefault(need.role, set()).update(need.permissions)
    for need in PREFLIGHT_ROLES:
        needs.setdefault(need.role, set()).update(need.permissions)
    return {role: tuple(sorted(perms)) for role, perms in sorted(needs.items())}


def billing_roles_for(resource_types: set[str]) -> dict[str, tuple[str, ...]]:
    """Role -> the permissions tested for it on the billing account, for a stack of these resource types."""
    needs: dict[str, set[str]] = {}
    for rtype in sorted(resource_types & BILLING_ACCOUNT_ROLES.keys()):
        for need in BILLING_ACCOUNT_ROLES[rtype]:
            needs.setdefault(need.role, set()).update(need.permissions)
    return {role: tuple(sorted(perms)) for role, perms in sorted(needs.items())}


# The project roles a platform stack grants (google_project_iam_member): the deployer's projectIamAdmin is held to
# them by an IAM condition (infra/constructs/bootstrap.py), so it can grant these and nothing else, itself included
# (https://cloud.google.com/iam/docs/setting-limits-on-granting-roles: iam.googleapis.com/modifiedGrantsByRole).
# Rule iam.project-grants-the-deployer-may-make holds every synthesized stack to the list; a role added here reaches
# a real project when a person applies the bootstrap again.
GRANTABLE_PROJECT_ROLES = (
    "roles/compute.instanceAdmin.v1",  # the Slurm controller, held to its instances by its own condition
    "roles/container.defaultNodeServiceAccount",  # the GKE nodes' accounts
    "roles/logging.logWriter",  # image builds, Slurm and VM hosts, Vertex AI jobs, the trainer's goodput
    "roles/logging.viewer",  # the trainer's goodput monitor reads its own entries
    "roles/monitoring.metricWriter",  # Slurm and VM hosts, the trainer's goodput
    "roles/monitoring.viewer",  # the metrics adapter the serving autoscalers read through
)


def grant_limit_condition(roles: tuple[str, ...] = GRANTABLE_PROJECT_ROLES) -> str:
    """The CEL condition that lets a projectIamAdmin grant or revoke `roles` only."""
    listed = ", ".join(f"'{r}'" for r in roles)
    return f"api.getAttribute('iam.googleapis.com/modifiedGrantsByRole', []).hasOnly([{listed}])"
