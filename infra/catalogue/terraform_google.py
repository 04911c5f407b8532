"""Which attributes of the Google provider's resources force Terraform to replace the resource.

Read from hashicorp/terraform-provider-google at tag v7.45.0 (the provider the stacks pin; first read at v6.50.0 on
2026-11-26, then the ForceNew changes between the two tags applied on 2026-11-28): every
schema field marked `ForceNew: true`, as a dotted path of nested blocks (list indices dropped), keeping only the
outermost such field of a block. Files: google/services/container/resource_container_node_pool.go and
node_config.go (schemaNodeConfig), google/services/container/resource_container_cluster.go,
google/services/storage/resource_storage_bucket.go,
google/services/artifactregistry/resource_artifact_registry_repository.go. A block-level ForceNew (node_config
itself) applies to adding or removing the block, not to a change inside it (the SDK's list diff), so it is not
listed: node_config.machine_type, disk_size_gb, labels and taints update in place.

A change under one of these paths is a replacement: destroy, then create (the default order; these resources
keep fixed names, so Terraform cannot create the new one first).
"""

from __future__ import annotations

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
}


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
    return any(path == p or path.startswith(p + ".") for p in paths)
