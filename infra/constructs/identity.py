"""Service accounts: the least-privilege node identity and Workload Identity for pods."""

from __future__ import annotations

from constructs import Construct

from infra.catalogue.pod_security import namespace_labels
from infra.cdk.bindings import google, kubernetes
from infra.config import gsa_account_id
from infra.constructs.storage import prefix_condition

NODE_ROLES = ("roles/container.defaultNodeServiceAccount",)


class NodeServiceAccount(Construct):
    """A dedicated node service account holding only GKE's default node role.

    Replaces the Compute Engine default account (project Editor). Image pulls
    are granted on the platform's repository alone, by the registry construct.
    """

    def __init__(self, scope: Construct, id_: str, *, project: str, account_id: str) -> None:
        super().__init__(scope, id_)
        self.account = google("service_account").ServiceAccount(
            self,
            "account",
            project=project,
            account_id=account_id,
            display_name="GKE nodes of the ML platform",
        )
        iam = google("project_iam_member")
        for role in NODE_ROLES:
            iam.ProjectIamMember(
                self,
                role.rsplit(".", 1)[-1],
                project=project,
                role=role,
                member=f"serviceAccount:{self.account.email}",
            )

    def grant_buckets(self, roles: dict[str, tuple[str, str]]) -> None:
        """Bucket roles for pods that act as the nodes' account (pools with the GCE metadata server)."""
        iam = google("storage_bucket_iam_member")
        for key, (bucket, role) in sorted(roles.items()):
            iam.StorageBucketIamMember(self, key, bucket=bucket, role=role, member=self.member)

    @property
    def email(self) -> str:
        return str(self.account.email)

    @property
    def member(self) -> str:
        return f"serviceAccount:{self.account.email}"


class Namespaces(Construct):
    """The Kubernetes namespaces workloads run in."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        names: list[str],
        labels: dict[str, str],
        pod_security: bool = False,
        teams: dict[str, str] | None = None,
    ) -> None:
        """`pod_security`: label each namespace with its Pod Security admission level
        (infra/catalogue/pod_security.py: `baseline` unless named there with the upstream reason). `teams`: the team
        whose namespace it is, by name (label `team`: what a cost report by namespace label groups by)."""
        super().__init__(scope, id_)
        ns = kubernetes("namespace_v1")
        self.by_name = {
            name: ns.NamespaceV1(
                self,
                name,
                metadata={
                    "name": name,
                    "labels": {
                        **labels,
                        **({"team": (teams or {})[name]} if name in (teams or {}) else {}),
                        **(namespace_labels(name) if pod_security else {}),
                    },
                },
            )
            for name in names
        }


def kubernetes_principal(project_number: str, workload_pool: str, namespace: str, service_account: str) -> str:
    """A Kubernetes service account's own IAM principal (Workload Identity Federation for GKE, no Google account)."""
    return (
        f"principal://iam.googleapis.com/projects/{project_number}/locations/global/"
        f"workloadIdentityPools/{workload_pool}/subject/ns/{namespace}/sa/{service_account}"
    )


class RoleOfKubernetesAccount(Construct):
    """One role held by a Kubernetes service account's own principal: on the project (`project`: the metrics
    adapter's roles/monitoring.viewer, it reads Cloud Monitoring for the autoscalers) or on a bucket (`bucket`: GKE's
    multi-tier checkpointing agent's roles/storage.objectUser, it backs the RAM-disk saves up there)."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        project_number: str,
        workload_pool: str,
        namespace: str,
        service_account: str,
        role: str,
        cluster: object,
        project: str | None = None,
        bucket: object | None = None,
    ) -> None:
        super().__init__(scope, id_)
        if (project is None) == (bucket is None):
            raise ValueError("RoleOfKubernetesAccount: give the project or the bucket the role is on, one of them")
        member = kubernetes_principal(project_number, workload_pool, namespace, service_account)
        # The workload pool exists once the cluster does ("Identity Pool does not exist" before).
        if bucket is not None:
            self.member = google("storage_bucket_iam_member").StorageBucketIamMember(
                self, "member", bucket=bucket, role=role, member=member, depends_on=[cluster]
            )
        else:
            self.member = google("project_iam_member").ProjectIamMember(
                self, "member", project=project, role=role, member=member, depends_on=[cluster]
            )


class WorkloadIdentity(Construct):
    """A Kubernetes service account and its bucket roles, in one of the two shapes the seeds use.

    - ``direct``: each role is granted on the bucket to the Kubernetes service
      account's own principal (`principal://.../subject/ns/<ns>/sa/<ksa>`).
    - ``impersonation``: a Google service account holds the roles; the
      Kubernetes service account may impersonate it
      (`roles/iam.workloadIdentityUser`) and is annotated
      `iam.gke.io/gcp-service-account`.
    """

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        project: str,
        project_number: str,
        workload_pool: str,
        namespace: str,
        service_account: str,
        mode: str,
        bucket_roles: dict[str, tuple[str, str]],
        depends_on: list,
        cluster: object,
        prefix_grants: dict[str, list[tuple[str, list[str]]]] | None = None,
    ) -> None:
        """`prefix_grants`: bucket key -> [(role, prefixes)], granted in place of that bucket's `bucket_roles` entry,
        each under an IAM condition that holds it to the objects under those prefixes (prefix_condition)."""
        super().__init__(scope, id_)
        # `<project>.svc.id.goog` exists once a cluster with Workload Identity does: every
        # binding naming it waits for the cluster, or a first apply in a fresh project fails
        # with "Identity Pool does not exist".
        after_cluster = [cluster]
        annotations: dict[str, str] = {}
        if mode == "direct":
            member = kubernetes_principal(project_number, workload_pool, namespace, service_account)
        else:
            gsa = google("service_account").ServiceAccount(
                self,
                "gsa",
                project=project,
                account_id=gsa_account_id(id_),
                display_name=f"Workload identity of {namespace}/{service_account}",
            )
            google("service_account_iam_member").ServiceAccountIamMember(
                self,
                "workload-identity-user",
                service_account_id=gsa.name,
                role="roles/iam.workloadIdentityUser",
                member=f"serviceAccount:{workload_pool}[{namespace}/{service_account}]",
                depends_on=after_cluster,
            )
            member = f"serviceAccount:{gsa.email}"
            annotations["iam.gke.io/gcp-service-account"] = gsa.email
        self.member = member
        self._project, self._after = project, after_cluster if mode == "direct" else None
        self.service_account = kubernetes("service_account_v1").ServiceAccountV1(
            self,
            "ksa",
            metadata={"name": service_account, "namespace": namespace, "annotations": annotations},
            automount_service_account_token=True,
            depends_on=depends_on,
        )
        iam = google("storage_bucket_iam_member")
        for key, (bucket, role) in bucket_roles.items():
            grants = (prefix_grants or {}).get(key) or [(role, [])]
            for granted, prefixes in grants:
                under = ", ".join(f"{p}/" for p in prefixes)
                condition = (
                    {
                        "title": f"{id_}-own-prefixes",
                        # The description is part of the condition, which the binding cannot change in place: its
                        # text stays as first applied.
                        "description": f"Objects under {under} only (issue 25, finding 7)",
                        "expression": prefix_condition(bucket, prefixes),
                    }
                    if prefixes
                    else None
                )
                iam.StorageBucketIamMember(
                    self,
                    f"{key}-{granted.rsplit('.', 1)[-1]}",
                    bucket=bucket,
                    role=granted,
                    member=member,
                    condition=condition,
                    depends_on=after_cluster if mode == "direct" else None,
                )

    def grant_project_roles(self, roles: tuple[str, ...]) -> None:
        """Project roles of this identity (what MaxText's goodput recording writes and reads)."""
        for role in roles:
            google("project_iam_member").ProjectIamMember(
                self,
                f"project-{role.rsplit('/', 1)[-1].replace('.', '-')}",
                project=self._project,
                role=role,
                member=self.member,
                depends_on=self._after,
            )


# What each Slurm-GCP account needs (SchedMD/slurm-gcp terraform/modules/slurm_sa_iam/main.tf, the v5
# roles less Pub/Sub, which Slurm-GCP 6 no longer uses, and BigQuery, for job accounting the cluster
# does not export): the controller creates and deletes the nodes; every host writes logs and metrics.
SLURM_HOST_ROLES = ("roles/logging.logWriter", "roles/monitoring.metricWriter")
SLURM_CONTROLLER_ROLES = ("roles/compute.instanceAdmin.v1",)


# The named Compute Engine resources roles/compute.instanceAdmin.v1 manages, each with the collection its resource
# name holds the name under (projects/<p>/zones/<z>/instances/<name>, .../global/instanceTemplates/<name>, ...).
INSTANCE_ADMIN_NAMED = (
    ("compute.googleapis.com/Instance", "instances"),
    ("compute.googleapis.com/Disk", "disks"),
    ("compute.googleapis.com/InstanceTemplate", "instanceTemplates"),
    ("compute.googleapis.com/InstanceGroupManager", "instanceGroupManagers"),
    ("compute.googleapis.com/InstanceGroup", "instanceGroups"),
    ("compute.googleapis.com/ResourcePolicy", "resourcePolicies"),
)


def own_instances_condition(name_prefix: str) -> str:
    """An IAM condition (CEL) that holds a Compute Engine role to what its holder names `name_prefix`...: every
    named resource type the role manages (instances, their disks, templates, instance groups and their managers,
    resource policies: GKE's slice MIGs and templates are of those types) by its name, `extract` taking the name
    from the resource name; the rest (machine types, subnetworks to use, operations, the zone-level lists) left to
    the role (https://cloud.google.com/iam/docs/conditions-attribute-reference, "Resource name attribute",
    extract(); https://cloud.google.com/iam/docs/configuring-resource-based-access, "Grant access to a group of
    resources based on resource name prefixes")."""
    return " && ".join(
        f'(resource.type != "{kind}" || resource.name.extract("/{collection}/{{name}}").startsWith("{name_prefix}"))'
        for kind, collection in INSTANCE_ADMIN_NAMED
    )


class SlurmServiceAccounts(Construct):
    """The Slurm cluster's two accounts: `slurm-<name>-ctl` for the controller, `slurm-<name>` for login and
    compute nodes.

    The node account may write under `prefix`/ of the cluster's bucket (mounted whole on every node) and read the
    registry (granted by the registry construct); the controller may create instances that run as the node account
    (iam.serviceAccountUser on that account only) and manage the cluster's own instances: Slurm-GCP names every
    host `<slurm_cluster_name>-...` (the blueprint sets slurm_cluster_name to the cluster's name; Cluster Toolkit's
    schedmd-slurm-gcp-v6-controller controller.tf @ v1.95.0: "${local.slurm_cluster_name}-controller"), so
    roles/compute.instanceAdmin.v1 is held to those names. Cluster Toolkit's controller module
    grants no project role itself (its slurm_files.tf grants only its own bucket's viewers): the grant is ours.
    """

    def __init__(
        self, scope: Construct, id_: str, *, project: str, name: str, bucket: tuple[str, str], prefix: str
    ) -> None:
        super().__init__(scope, id_)
        account = google("service_account")
        self.controller = account.ServiceAccount(
            self, "controller", project=project, account_id=f"slurm-{name}-ctl", display_name=f"Slurm {name} controller"
        )
        self.nodes = account.ServiceAccount(
            self, "nodes", project=project, account_id=f"slurm-{name}", display_name=f"Slurm {name} login and compute"
        )
        iam = google("project_iam_member")
        for who, sa, roles in (
            ("controller", self.controller, SLURM_HOST_ROLES + SLURM_CONTROLLER_ROLES),
            ("nodes", self.nodes, SLURM_HOST_ROLES),
        ):
            for role in roles:
                condition = (
                    {
                        "title": "slurm-own-instances",
                        "description": f"Instances named {name}-* only (issue 25, finding 7)",
                        "expression": own_instances_condition(f"{name}-"),
                    }
                    if role in SLURM_CONTROLLER_ROLES
                    else None
                )
                iam.ProjectIamMember(
                    self,
                    f"{who}-{role.rsplit('/', 1)[-1]}",
                    project=project,
                    role=role,
                    member=f"serviceAccount:{sa.email}",
                    condition=condition,
                )
        google("service_account_iam_member").ServiceAccountIamMember(
            self,
            "controller-acts-as-nodes",
            service_account_id=self.nodes.name,
            role="roles/iam.serviceAccountUser",
            member=f"serviceAccount:{self.controller.email}",
        )
        bucket_name, role = bucket
        google("storage_bucket_iam_member").StorageBucketIamMember(
            self,
            "bucket",
            bucket=bucket_name,
            role=role,
            member=f"serviceAccount:{self.nodes.email}",
            condition={
                "title": "slurm-own-prefix",
                "description": f"Objects under {prefix}/ only (issue 25, finding 7)",
                "expression": prefix_condition(bucket_name, prefix),
            },
        )

    @property
    def node_member(self) -> str:
        return f"serviceAccount:{self.nodes.email}"
