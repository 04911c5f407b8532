"""Which attributes of the Google provider's resources force Terraform to replace the resource.

Read from hashicorp/terraform-provider-google at tag v7.45.0 (the provider the stacks pin; first read at v6.50.0 on
2026-11-26, then the ForceNew changes between the two tags applied on 2026-11-28): every
schema field marked `ForceNew: true`, as a dotted path of nested blocks (list indices dropped), keeping only the
outermost such field of a block. Files: google/services/container/resource_container_node_pool.go and
node_config.go (schemaNodeConfig), google/services/container/resource_container_cluster.go,
google/services/storage/resource_storage_bucket.go,
google/services/artifactregistry/resource_artifact_registry_repository.go, and for every other resource type the
stacks declare the file named beside its entry. A block-level ForceNew (node_config
itself) applies to adding or removing the block, not to a change inside it (the SDK's list diff), so it is not
listed for the node pool: node_config.machine_type, disk_size_gb, labels and taints update in place. (The other
types' block-level entries are listed, with the few children that update in place in UPDATED_IN_PLACE.)

A change under one of these paths is a replacement: destroy, then create (the default order; these resources
keep fixed names, so Terraform cannot create the new one first).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

PROVIDER = "hashicorp/terraform-provider-google v7.45.0"

# Terraform's meta-arguments (and cdktf's "//" metadata): arguments of the language, never sent to an API; Terraform
# plans no change to a resource when only these differ (https://developer.hashicorp.com/terraform/language/meta-arguments).
META_ARGUMENTS = frozenset({"depends_on", "lifecycle", "provider", "count", "for_each", "//"})

FORCE_NEW: dict[str, tuple[str, ...]] = {
    "google_container_node_pool": (
        "cluster",
        "initial_node_count",
        "location",
        "max_pods_per_node",
        "name",
        "name_prefix",
        "network_config.additional_node_network_configs",
        "network_config.accelerator_network_profile",
        "network_config.additional_pod_network_configs",
        "network_config.create_pod_range",
        "network_config.pod_cidr_overprovision_config",
        "network_config.pod_ipv4_cidr_block",
        "network_config.pod_range",
        "network_config.subnetwork",
        "placement_policy",
        "project",
        "queued_provisioning",
        "node_config.advanced_machine_features",
        "node_config.boot_disk_kms_key",
        "node_config.confidential_nodes.confidential_instance_type",
        "node_config.enable_confidential_storage",
        "node_config.ephemeral_storage_local_ssd_config",
        "node_config.flex_start",
        "node_config.guest_accelerator",
        "node_config.host_maintenance_policy",
        "node_config.local_nvme_ssd_block_config",
        "node_config.local_ssd_count",
        "node_config.local_ssd_encryption_mode",
        "node_config.max_run_duration",
        "node_config.metadata",
        "node_config.min_cpu_platform",
        "node_config.node_group",
        "node_config.oauth_scopes",
        "node_config.preemptible",
        "node_config.reservation_affinity",
        "node_config.sandbox_config",
        "node_config.secondary_boot_disks",
        "node_config.service_account",
        "node_config.shielded_instance_config",
        "node_config.sole_tenant_config",
        "node_config.spot",
    ),
    "google_container_cluster": (
        "cluster_autoscaling.auto_provisioning_defaults.boot_disk_kms_key",
        "cluster_ipv4_cidr",
        "confidential_nodes",
        "datapath_provider",
        "dataplane_optimization_mode",
        "default_max_pods_per_node",
        "description",
        "enable_autopilot",
        "enable_kubernetes_alpha",
        "enable_tpu",
        "initial_node_count",
        "ip_allocation_policy",
        "location",
        "master_auth.client_certificate_config",
        "name",
        "network",
        "networking_mode",
        "node_pool",
        "private_cluster_config.master_ipv4_cidr_block",
        "private_cluster_config.private_endpoint_subnetwork",
        "project",
        "subnetwork",
    ),
    "google_storage_bucket": (
        "custom_placement_config.data_locations",
        "enable_object_retention",
        "hierarchical_namespace",
        "location",
        "name",
        "project",
    ),
    "google_artifact_registry_repository": (
        "format",
        "kms_key_name",
        "location",
        "maven_config.allow_snapshot_overwrites",
        "maven_config.version_policy",
        "mode",
        "project",
        "remote_repository_config",
        "repository_id",
    ),
    # The other resources the stacks declare, read at the same tag on 2026-12-02 (the IAM members: their parent's
    # schema merged with google/tpgiamresource/resource_iam_member.go IamMemberBaseSchema; none updates in place).
    # google/services/artifactregistry/iam_artifact_registry_repository.go
    "google_artifact_registry_repository_iam_member": (
        "condition",
        "location",
        "member",
        "project",
        "repository",
        "role",
    ),
    # google/services/billingbudgets/resource_billing_budget.go
    "google_billing_budget": ("billing_account",),
    # google/services/binaryauthorization/resource_binary_authorization_policy.go
    "google_binary_authorization_policy": ("project",),
    # google/services/compute/resource_compute_firewall.go
    "google_compute_firewall": (
        "direction",
        "name",
        "params",
        "project",
    ),
    # google/services/compute/resource_compute_instance_group_manager.go
    "google_compute_instance_group_manager": (
        "base_instance_name",
        "name",
        "project",
        "target_size_policy.mode",
        "zone",
    ),
    # google/services/compute/resource_compute_instance_template.go
    "google_compute_instance_template": (
        "advanced_machine_features",
        "can_ip_forward",
        "confidential_instance_config",
        "creation_timestamp",
        "description",
        "disk",
        "effective_labels",
        "guest_accelerator",
        "instance_description",
        "key_revocation_action_type",
        "machine_type",
        "metadata",
        "metadata_fingerprint",
        "metadata_startup_script",
        "min_cpu_platform",
        "name",
        "name_prefix",
        "network_interface",
        "network_performance_config",
        "numeric_id",
        "project",
        "region",
        "reservation_affinity",
        "resource_manager_tags",
        "resource_policies",
        "scheduling",
        "self_link",
        "self_link_unique",
        "service_account",
        "shielded_instance_config",
        "tags",
        "tags_fingerprint",
        "workload_identity_config",
    ),
    # google/services/compute/resource_compute_network.go
    "google_compute_network": (
        "auto_create_subnetworks",
        "description",
        "internal_ipv6_range",
        "name",
        "network_profile",
        "params",
        "project",
    ),
    # google/services/compute/resource_compute_network_attachment.go
    "google_compute_network_attachment": (
        "connection_preference",
        "name",
        "project",
        "region",
    ),
    # google/services/compute/resource_compute_resource_policy.go
    "google_compute_resource_policy": (
        "disk_consistency_group_policy.enabled",
        "group_placement_policy.gpu_topology",
        "project",
        "region",
        "workload_policy.accelerator_topology",
        "workload_policy.max_topology_distance",
        "workload_policy.type",
    ),
    # google/services/compute/resource_compute_router.go
    "google_compute_router": (
        "encrypted_interconnect_router",
        "name",
        "ncc_gateway",
        "network",
        "params",
        "project",
        "region",
    ),
    # google/services/compute/resource_compute_router_nat.go
    "google_compute_router_nat": (
        "endpoint_types",
        "initial_nat_ips",
        "name",
        "project",
        "region",
        "router",
        "type",
    ),
    # google/services/compute/resource_compute_subnetwork.go
    "google_compute_subnetwork": (
        "description",
        "external_ipv6_prefix",
        "internal_ipv6_prefix",
        "name",
        "network",
        "params",
        "project",
        "region",
        "reserved_internal_range",
        "resolve_subnet_mask",
    ),
    # google/services/monitoring/resource_monitoring_alert_policy.go
    "google_monitoring_alert_policy": ("project",),
    # google/services/monitoring/resource_monitoring_dashboard.go
    "google_monitoring_dashboard": ("project",),
    # google/services/monitoring/resource_monitoring_notification_channel.go
    "google_monitoring_notification_channel": ("project",),
    # google/services/resourcemanager/iam_project.go
    "google_project_iam_member": (
        "condition",
        "member",
        "project",
        "role",
    ),
    # google/services/resourcemanager/resource_google_project_service.go
    "google_project_service": (
        "project",
        "service",
    ),
    # google/services/resourcemanager/resource_google_service_account.go
    "google_service_account": (
        "account_id",
        "project",
    ),
    # google/services/resourcemanager/iam_service_account.go
    "google_service_account_iam_member": (
        "condition",
        "member",
        "role",
        "service_account_id",
    ),
    # google/services/storage/iam_storage_bucket.go
    "google_storage_bucket_iam_member": (
        "bucket",
        "condition",
        "member",
        "role",
    ),
}
# A block-level ForceNew (a list of nested blocks) replaces when the block is added or removed; a change inside it
# replaces only where the child is ForceNew too. Under the blocks listed above every child is, except these, which
# update in place (the Plugin SDK's schemaMap.diffList).
UPDATED_IN_PLACE: dict[str, tuple[str, ...]] = {
    "google_compute_firewall": ("params.resource_manager_tags",),
    "google_compute_router": ("params.resource_manager_tags",),
    "google_compute_instance_template": (
        "advanced_machine_features.turbo_mode", "network_interface.igmp_query", "scheduling.node_affinities.key",
        "scheduling.node_affinities.operator", "scheduling.node_affinities.values",
    ),
}  # fmt: skip


# The Kubernetes and Helm providers' replacing fields, read at hashicorp/terraform-provider-kubernetes v3.2.1
# (kubernetes/schema_metadata.go: metadata.name and, for namespaced objects, metadata.namespace ForceNew;
# schema_persistent_volume_claim.go; resource_kubernetes_storage_class_v1.go; resource_kubernetes_secret_v1.go: type)
# and hashicorp/terraform-provider-helm v3.1.2 (helm/resource_helm_release.go: name and namespace carry
# stringplanmodifier.RequiresReplace) on 2026-12-02. A rename of a namespace or a release is a delete and a create.
_METADATA = ("metadata.name", "metadata.generate_name", "metadata.namespace")
FORCE_NEW_KUBERNETES: dict[str, tuple[str, ...]] = {
    "helm_release": ("name", "namespace"),
    "kubernetes_namespace_v1": _METADATA,
    "kubernetes_service_account_v1": _METADATA,
    "kubernetes_network_policy_v1": _METADATA,
    "kubernetes_config_map_v1": _METADATA,
    "kubernetes_secret_v1": (*_METADATA, "type"),
    "kubernetes_storage_class_v1": (
        *_METADATA, "parameters", "storage_provisioner", "volume_binding_mode", "mount_options", "allowed_topologies",
    ),
    "kubernetes_persistent_volume_claim_v1": (
        *_METADATA, "spec.access_modes", "spec.resources.limits", "spec.selector", "spec.volume_name",
        "spec.storage_class_name", "spec.volume_mode",
    ),
}  # fmt: skip


def forces_replacement(resource_type: str, path: str) -> bool:
    """Whether a change at dotted `path` (list indices dropped) of a `resource_type` replaces it."""
    paths = FORCE_NEW.get(resource_type) or FORCE_NEW_KUBERNETES.get(resource_type, ())
    if any(path == p or path.startswith(p + ".") for p in UPDATED_IN_PLACE.get(resource_type, ())):
        return False
    return any(path == p or path.startswith(p + ".") for p in paths)


def _range_kept(before: Any, after: Any) -> bool:
    """Whether the CIDR range `after` holds all of `before` (an expansion, or no change); a value that is no range
    (unknown until the apply) forces nothing, as in the provider."""
    try:
        return ipaddress.ip_network(str(before)).subnet_of(ipaddress.ip_network(str(after)))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return True


# Replacements a CustomizeDiff function decides from the values, by (type, path): google_compute_subnetwork's
# ip_cidr_range may only grow in place; a range that no longer holds the old one replaces the subnetwork
# (google/services/compute/resource_compute_subnetwork.go, IsShrinkageIpCidr).
_REPLACES_UNLESS: dict[tuple[str, str], Callable[[Any, Any], bool]] = {
    ("google_compute_subnetwork", "ip_cidr_range"): _range_kept,
}


def replaces(resource_type: str, path: str, before: Any = None, after: Any = None) -> bool:
    """Whether changing `path` of a `resource_type` from `before` to `after` replaces it: a ForceNew path, or a
    value a CustomizeDiff function refuses to update in place."""
    kept = _REPLACES_UNLESS.get((resource_type, path))
    if kept is not None:
        return not kept(before, after)
    return forces_replacement(resource_type, path)
