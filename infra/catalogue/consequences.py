"""What a planned change does, by consequence: data lost, capacity or work lost, security weakened, a dependency
cut. The plan gate (infra/review/gate.py) stops every change that matches a row here until it is confirmed, and names
the consequence; the in-place updates that destroy nodes or make data deletable are the rows of
infra/catalogue/destructive_updates.py, each carrying its class too.

A row matches a change of its resource type and action; an update or create row also names an attribute path and
may test the values before and after at that path (infra/catalogue/change_tests.py; None: any change there). Sources:
the pinned providers at
hashicorp/terraform-provider-google v7.45.0, terraform-provider-kubernetes v3.2.1 and terraform-provider-helm v3.1.2
(../shared/vendor/terraform-providers), and the documentation each row names; read on 2026-12-02.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from infra.catalogue.change_tests import (
    admits_anything,
    allows,
    denies,
    enabled_off,
    every_port_opened,
    from_internet,
    keys_removed,
    not_enforced,
    power_granted,
    public_added,
    public_ranges,
    removed,
    retain_to_delete,
    rule_added,
    rule_removed,
    to_dry_run,
    turned_off,
    turned_on,
    types_dropped,
    value_at,
    weaker_level,
    widened,
)

DATA_LOST = "data lost"
CAPACITY_LOST = "capacity or work lost"
SECURITY_WEAKENED = "security weakened"
DEPENDENCY_CUT = "dependency cut"
KINDS = (DATA_LOST, CAPACITY_LOST, SECURITY_WEAKENED, DEPENDENCY_CUT)
# The kinds a pull request may not confirm by itself (an environment file's `confirm:` entry travels with the change
# that needs it): a person confirms them at the apply (CONFIRM_CHANGE), or an entry merged before the change.
PERSON_ONLY = (DATA_LOST, SECURITY_WEAKENED)

IAM_TYPES = (
    "google_project_iam_member",
    "google_storage_bucket_iam_member",
    "google_artifact_registry_repository_iam_member",
    "google_service_account_iam_member",
)

POOL = (
    "https://cloud.google.com/kubernetes-engine/docs/concepts/node-pools (deleting a node pool drains and deletes its "
    "nodes); hashicorp/terraform-provider-google v7.45.0 google/services/container/node_config.go "
    "nodePoolNodeConfigUpdate (machine_type, image_type, gvnic and the rest updated in place by recreating the "
    "nodes, surge by surge)"
)
CLUSTER = "hashicorp/terraform-provider-google v7.45.0 website/docs/r/container_cluster.html.markdown"
GCS_FUSE = (
    "https://cloud.google.com/kubernetes-engine/docs/how-to/persistent-volumes/cloud-storage-fuse-csi-driver-setup"
)
WORKLOAD_IDENTITY = "https://cloud.google.com/kubernetes-engine/docs/concepts/workload-identity"
SHIELDED = "https://cloud.google.com/kubernetes-engine/docs/how-to/shielded-gke-nodes"
PRIVATE = "https://cloud.google.com/kubernetes-engine/docs/how-to/latest/network-isolation"
BINAUTHZ = "https://cloud.google.com/binary-authorization/docs/overview"
PUBLIC_ACCESS = "https://cloud.google.com/storage/docs/public-access-prevention"
UBLA = "https://cloud.google.com/storage/docs/uniform-bucket-level-access"
IAM = "https://cloud.google.com/iam/docs/principals-overview (allUsers, allAuthenticatedUsers: anyone)"
SERVICE_ACCOUNT = (
    "https://cloud.google.com/iam/docs/service-accounts-delete-undelete (a service account created again with the "
    "same name gets a new unique ID; role bindings of the deleted one do not apply to it)"
)
NAT = "https://cloud.google.com/nat/docs/overview (private GKE nodes reach the internet only through Cloud NAT)"
FIREWALL = (
    "https://cloud.google.com/firewall/docs/firewalls (an ingress allow rule's source ranges say who may connect)"
)
NETWORK_POLICY = (
    "https://kubernetes.io/docs/concepts/services-networking/network-policies/ (policies are additive allow lists: "
    "a pod selected by none accepts everything)"
)
POD_SECURITY = "https://kubernetes.io/docs/concepts/security/pod-security-admission/"
HELM = (
    "hashicorp/terraform-provider-helm v3.1.2 helm/resource_helm_release.go (chart, repository and force_update "
    "update in place: Helm's upgrade deletes what the old chart rendered and the new does not; --force replaces "
    "objects by delete and create); https://helm.sh/docs/helm/helm_upgrade/"
)
KUBERNETES_OBJECTS = (
    "hashicorp/terraform-provider-kubernetes v3.2.1 kubernetes/schema_persistent_volume_claim.go (spec fields "
    "ForceNew), resource_kubernetes_storage_class_v1.go (reclaim_policy), resource_kubernetes_secret_v1.go, "
    "resource_kubernetes_config_map_v1.go; https://kubernetes.io/docs/concepts/storage/persistent-volumes/#reclaiming"
)
PROJECT_SERVICE = "hashicorp/terraform-provider-google v7.45.0 website/docs/r/google_project_service.html.markdown"
BINAUTHZ_POLICY = (
    "https://cloud.google.com/binary-authorization/docs/key-concepts (the default rule's evaluation mode: "
    "ALWAYS_ALLOW admits every image; enforcement mode DRYRUN_AUDIT_LOG_ONLY only logs)"
)
VM_GROUP = (
    "https://cloud.google.com/compute/docs/instance-groups (deleting a managed instance group deletes its VMs); "
    "hashicorp/terraform-provider-google v7.45.0 google/services/compute/resource_compute_instance_group_manager.go"
)
AUTHORIZED_NETWORKS = "https://cloud.google.com/kubernetes-engine/docs/how-to/authorized-networks"


@dataclass(frozen=True)
class Consequence:
    kind: str
    rtypes: tuple[str, ...]
    actions: tuple[str, ...]
    what: str
    source: str
    path: str = ""
    # Whether the values at `path` before and after are the harmful direction; None: any change there.
    when: Callable[[Any, Any], bool] | None = None
    # Whether the row is about this resource at all (its body before the change, else after): a deny rule's source
    # widened is no weakening.
    only_if: Callable[[Any], bool] | None = None


CONSEQUENCES: tuple[Consequence, ...] = (
    # -- capacity or work lost -----------------------------------------------------------------------------------
    Consequence(
        CAPACITY_LOST,
        ("google_container_node_pool",),
        ("delete", "replace"),
        "every node of the pool goes: its pods are evicted (the system pool runs every controller, webhook and "
        "router: while it is gone, nothing new is admitted)",
        POOL,
    ),
    Consequence(
        CAPACITY_LOST,
        ("helm_release",),
        ("update",),
        "the release's chart is swapped under the same name: Helm deletes every object the old chart made that the "
        "new one does not",
        HELM,
        path="chart",
    ),
    Consequence(
        CAPACITY_LOST,
        ("helm_release",),
        ("update",),
        "the release's chart comes from another repository",
        HELM,
        path="repository",
    ),
    Consequence(
        CAPACITY_LOST,
        ("helm_release",),
        ("update",),
        "every later upgrade of the release replaces its objects (delete and create): its pods restart at once, "
        "not rolling",
        HELM,
        path="force_update",
        when=turned_on,
    ),
    # -- data lost -------------------------------------------------------------------------------------------------
    Consequence(
        DATA_LOST,
        ("kubernetes_persistent_volume_claim_v1", "kubernetes_persistent_volume_claim"),
        ("delete", "replace"),
        "the claim is deleted: under a Delete reclaim policy its volume and every byte on it go with it",
        KUBERNETES_OBJECTS,
    ),
    Consequence(
        DATA_LOST,
        ("kubernetes_storage_class_v1", "kubernetes_storage_class"),
        ("update", "replace"),
        "volumes provisioned from now on are deleted with their claims (Retain kept them)",
        KUBERNETES_OBJECTS,
        path="reclaim_policy",
        when=retain_to_delete,
    ),
    Consequence(
        DATA_LOST,
        ("kubernetes_secret_v1", "kubernetes_secret"),
        ("delete", "replace"),
        "the Secret is deleted: its keys are gone, and a pod that reads it does not start",
        KUBERNETES_OBJECTS,
    ),
    Consequence(
        DATA_LOST,
        ("kubernetes_secret_v1", "kubernetes_secret"),
        ("update",),
        "keys of the Secret are removed: a pod that reads them does not start",
        KUBERNETES_OBJECTS,
        path="data",
        when=keys_removed,
    ),
    # -- security weakened -----------------------------------------------------------------------------------------
    Consequence(
        SECURITY_WEAKENED,
        ("google_container_cluster",),
        ("update",),
        "the cluster's deletion protection is turned off: a destroy deletes it, and every workload with it",
        CLUSTER,
        path="deletion_protection",
        when=turned_off,
    ),
    Consequence(
        SECURITY_WEAKENED,
        ("google_container_cluster",),
        ("update",),
        "shielded nodes are turned off: nodes no longer prove their identity to the control plane (and every node "
        "is recreated)",
        SHIELDED,
        path="enable_shielded_nodes",
        when=turned_off,
    ),
    Consequence(
        SECURITY_WEAKENED,
        ("google_container_cluster",),
        ("update",),
        "the control plane is reachable from more addresses",
        PRIVATE,
        path="master_authorized_networks_config.cidr_blocks",
        when=widened,
    ),
    Consequence(
        SECURITY_WEAKENED,
        ("google_container_cluster",),
        ("update",),
        "the control plane's private endpoint is turned off: it gets a public one",
        PRIVATE,
        path="private_cluster_config.enable_private_endpoint",
        when=turned_off,
    ),
    Consequence(
        SECURITY_WEAKENED,
        ("google_container_cluster",),
        ("update",),
        "Binary Authorization no longer enforces which images run",
        BINAUTHZ,
        path="binary_authorization.evaluation_mode",
        when=lambda b, a: "ENFORCE" in str(b or "") and "ENFORCE" not in str(a or ""),
    ),
    Consequence(
        SECURITY_WEAKENED,
        ("google_storage_bucket",),
        ("update",),
        "public access prevention is no longer enforced: an object can be made public",
        PUBLIC_ACCESS,
        path="public_access_prevention",
        when=not_enforced,
    ),
    Consequence(
        SECURITY_WEAKENED,
        ("google_storage_bucket",),
        ("update",),
        "uniform bucket-level access is turned off: each object's own ACL grants access again",
        UBLA,
        path="uniform_bucket_level_access",
        when=turned_off,
    ),
    Consequence(
        SECURITY_WEAKENED,
        IAM_TYPES,
        ("create", "update", "replace"),
        "a role is granted to anyone on the internet (allUsers or allAuthenticatedUsers)",
        IAM,
        path="member",
        when=public_added,
    ),
    Consequence(
        SECURITY_WEAKENED,
        ("google_compute_firewall",),
        ("update", "replace"),
        "the firewall rule admits connections from more addresses",
        FIREWALL,
        path="source_ranges",
        when=widened,
        only_if=allows,
    ),
    Consequence(
        SECURITY_WEAKENED,
        ("google_compute_firewall",),
        ("create",),
        "a new firewall rule admits connections from the internet",
        FIREWALL,
        path="source_ranges",
        when=public_ranges,
        only_if=allows,
    ),
    Consequence(
        SECURITY_WEAKENED,
        ("google_compute_firewall",),
        ("create", "update", "replace"),
        "a firewall rule open to the internet admits every port (a protocol without ports, or protocol all)",
        FIREWALL,
        path="allow",
        when=every_port_opened,
        only_if=from_internet,
    ),
    Consequence(
        SECURITY_WEAKENED,
        ("google_compute_firewall",),
        ("delete",),
        "a deny rule is deleted: what it refused reaches the network",
        FIREWALL,
        only_if=denies,
    ),
    Consequence(
        SECURITY_WEAKENED,
        ("google_compute_firewall",),
        ("update",),
        "a deny rule is disabled: what it refused reaches the network",
        FIREWALL,
        path="disabled",
        when=turned_on,
        only_if=denies,
    ),
    Consequence(
        SECURITY_WEAKENED,
        ("google_container_cluster",),
        ("update",),
        "the control plane's authorized networks are removed: any address that reaches it may connect",
        AUTHORIZED_NETWORKS,
        path="master_authorized_networks_config",
        when=lambda b, a: bool(b) and not a,
    ),
    Consequence(
        SECURITY_WEAKENED,
        ("google_binary_authorization_policy",),
        ("delete",),
        "the Binary Authorization policy is deleted: the project's default (every image allowed) applies",
        BINAUTHZ_POLICY,
    ),
    Consequence(
        SECURITY_WEAKENED,
        ("google_binary_authorization_policy",),
        ("update",),
        "Binary Authorization's default rule admits every image",
        BINAUTHZ_POLICY,
        path="default_admission_rule.evaluation_mode",
        when=admits_anything,
    ),
    Consequence(
        SECURITY_WEAKENED,
        ("google_binary_authorization_policy",),
        ("update",),
        "Binary Authorization's default rule no longer blocks: it only logs",
        BINAUTHZ_POLICY,
        path="default_admission_rule.enforcement_mode",
        when=to_dry_run,
    ),
    Consequence(
        SECURITY_WEAKENED,
        IAM_TYPES,
        ("create", "update", "replace"),
        "a person or group is granted a role that owns the project or acts as any service account "
        "(owner, editor, an IAM or token-creator role)",
        IAM,
        when=power_granted,
    ),
    Consequence(
        SECURITY_WEAKENED,
        ("kubernetes_network_policy_v1", "kubernetes_network_policy"),
        ("delete", "replace"),
        "the NetworkPolicy is deleted: the pods it selected accept what it refused",
        NETWORK_POLICY,
    ),
    Consequence(
        SECURITY_WEAKENED,
        ("kubernetes_network_policy_v1", "kubernetes_network_policy"),
        ("update",),
        "the NetworkPolicy allows more (a rule added)",
        NETWORK_POLICY,
        path="spec.ingress",
        when=rule_added,
    ),
    Consequence(
        SECURITY_WEAKENED,
        ("kubernetes_network_policy_v1", "kubernetes_network_policy"),
        ("update",),
        "the NetworkPolicy allows more (a rule added)",
        NETWORK_POLICY,
        path="spec.egress",
        when=rule_added,
    ),
    Consequence(
        SECURITY_WEAKENED,
        ("kubernetes_network_policy_v1", "kubernetes_network_policy"),
        ("update",),
        "the NetworkPolicy no longer restricts a direction (a policy type dropped)",
        NETWORK_POLICY,
        path="spec.policy_types",
        when=types_dropped,
    ),
    Consequence(
        SECURITY_WEAKENED,
        ("kubernetes_namespace_v1", "kubernetes_namespace"),
        ("update",),
        "the namespace's enforced Pod Security level is weakened: pods it refused are admitted",
        POD_SECURITY,
        path="metadata.labels.pod-security.kubernetes.io/enforce",
        when=weaker_level,
    ),
    Consequence(
        SECURITY_WEAKENED,
        ("kubernetes_service_account_v1", "kubernetes_service_account"),
        ("update",),
        "the Kubernetes service account is bound to a Google service account, or another one (its "
        "iam.gke.io/gcp-service-account annotation): every pod that runs as it acts as that account, with its roles "
        "(the platform grants its accounts' roles to the Kubernetes principals directly and sets no annotation)",
        WORKLOAD_IDENTITY,
        path="metadata.annotations.iam.gke.io/gcp-service-account",
        when=lambda old, new: bool(new) and old != new,
    ),
    # -- a dependency cut ------------------------------------------------------------------------------------------
    Consequence(
        DEPENDENCY_CUT,
        ("google_container_cluster",),
        ("update",),
        "a cluster add-on is turned off: every pod that uses it fails (the GCS FUSE driver mounts the checkpoint "
        "and model buckets)",
        GCS_FUSE,
        path="addons_config",
        when=enabled_off,
    ),
    Consequence(
        DEPENDENCY_CUT,
        ("google_container_cluster",),
        ("update",),
        "Workload Identity is removed: pods lose their Google service accounts (every bucket, registry and API call "
        "fails, or falls back to the node's identity)",
        WORKLOAD_IDENTITY,
        path="workload_identity_config.workload_pool",
        when=removed,
    ),
    Consequence(
        DEPENDENCY_CUT,
        ("google_service_account",),
        ("delete", "replace"),
        "the service account is deleted: what runs as it loses every grant (one created again with the same name "
        "gets a new unique ID, which the old bindings do not name)",
        SERVICE_ACCOUNT,
    ),
    Consequence(
        DEPENDENCY_CUT,
        ("kubernetes_service_account_v1", "kubernetes_service_account"),
        ("delete", "replace"),
        "the Kubernetes service account is deleted (a rename is a delete): pods that name it are not created",
        WORKLOAD_IDENTITY,
    ),
    Consequence(
        DEPENDENCY_CUT,
        ("kubernetes_service_account_v1", "kubernetes_service_account"),
        ("update",),
        "the Kubernetes service account loses its Google service account (its iam.gke.io/gcp-service-account "
        "annotation removed): its pods call Google APIs as no one, and every such call is refused",
        WORKLOAD_IDENTITY,
        path="metadata.annotations.iam.gke.io/gcp-service-account",
        when=lambda old, new: bool(old) and not new,
    ),
    Consequence(
        DEPENDENCY_CUT,
        IAM_TYPES,
        ("delete", "replace"),
        "the grant is removed (a grant whose role, member or resource changes is another grant): its member loses "
        "the role (a node that cannot read the registry cannot pull)",
        IAM,
    ),
    Consequence(
        CAPACITY_LOST,
        ("google_compute_instance_group_manager",),
        ("delete", "replace"),
        "the VM group is deleted with its VMs: the GPUs they hold are released, and a running job stops",
        VM_GROUP,
    ),
    Consequence(
        DEPENDENCY_CUT,
        ("google_compute_router_nat", "google_compute_router"),
        ("delete", "replace"),
        "Cloud NAT goes: private nodes cannot reach anything outside Google (image pulls from other registries fail)",
        NAT,
    ),
    Consequence(
        DEPENDENCY_CUT,
        ("google_compute_firewall",),
        ("delete",),
        "the firewall rule is deleted: what it let through is refused (the control plane's calls to webhooks and "
        "served APIs, the GPUs' own networks)",
        FIREWALL,
        only_if=allows,
    ),
    Consequence(
        DEPENDENCY_CUT,
        ("google_compute_network", "google_compute_subnetwork"),
        ("delete", "replace"),
        "a network or subnetwork goes, with every address in it",
        FIREWALL,
    ),
    Consequence(
        DEPENDENCY_CUT,
        ("kubernetes_network_policy_v1", "kubernetes_network_policy"),
        ("update",),
        "the NetworkPolicy allows less (a rule removed): what it let through is refused",
        NETWORK_POLICY,
        path="spec.ingress",
        when=rule_removed,
    ),
    Consequence(
        DEPENDENCY_CUT,
        ("kubernetes_config_map_v1", "kubernetes_config_map"),
        ("delete", "replace"),
        "the ConfigMap is deleted: a pod that reads it does not start",
        KUBERNETES_OBJECTS,
    ),
    Consequence(
        DEPENDENCY_CUT,
        ("kubernetes_config_map_v1", "kubernetes_config_map"),
        ("update",),
        "keys of the ConfigMap are removed: a pod that reads them does not start",
        KUBERNETES_OBJECTS,
        path="data",
        when=keys_removed,
    ),
    Consequence(
        DEPENDENCY_CUT,
        ("google_project_service",),
        ("delete", "replace"),
        "the API is disabled when the resource goes (disable_on_destroy), and every resource that uses it fails",
        PROJECT_SERVICE,
        when=lambda b, a: (b or {}).get("disable_on_destroy", True) is not False,
    ),
)


def under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + ".")


def consequences(rtype: str, action: str, paths: list[str], before: Any, after: Any) -> list[Consequence]:
    """The rows a change of `rtype` matches: by action, and for a row with a path, a changed value at or under it
    (or, for a create, the value after) in the harmful direction."""
    found = []
    for row in CONSEQUENCES:
        if rtype not in row.rtypes or action not in row.actions:
            continue
        if row.only_if is not None and not row.only_if(before if before is not None else after):
            continue
        if row.path and action == "update" and not any(under(p, row.path) or under(row.path, p) for p in paths):
            continue
        if row.path:
            old = None if action == "create" else value_at(before, row.path)
            new = value_at(after, row.path)
            if row.when is not None and not row.when(old, new):
                continue
            if row.when is None and old == new:
                continue
        elif row.when is not None and not row.when(before, after):
            continue
        found.append(row)
    return found
