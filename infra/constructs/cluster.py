"""The GKE Standard cluster: private nodes, Dataplane V2, Workload Identity, Ray and FUSE add-ons."""

from __future__ import annotations

from typing import Any

from constructs import Construct

from infra.cdk import TerraformResourceLifecycle
from infra.cdk.bindings import google
from infra.config.maintenance import Maintenance


class GkeCluster(Construct):
    """A regional GKE Standard cluster with its default node pool removed.

    Node pools are separate constructs so that changing one never replaces the
    cluster. `deletion_protection` sets both GKE's own guard and Terraform's
    `prevent_destroy`, so a plan that would destroy or replace the cluster
    fails before anything is touched.
    """

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        project: str,
        region: str,
        name: str,
        network: str,
        subnetwork: str,
        pods_range: str,
        services_range: str,
        master_cidr: str,
        authorized_networks: dict[str, str],
        release_channel: str,
        min_master_version: str,
        deletion_protection: bool,
        workload_pool: str,
        labels: dict[str, str],
        multi_networking: bool = False,
        gateway_api: bool = False,
        maintenance: Maintenance | None = None,
        gpu_metrics: bool = False,
        multi_tier_checkpointing: bool = False,
    ) -> None:
        super().__init__(scope, id_)
        cc = google("container_cluster")
        self.cluster = cc.ContainerCluster(
            self,
            "cluster",
            project=project,
            location=region,
            name=name,
            network=network,
            subnetwork=subnetwork,
            networking_mode="VPC_NATIVE",
            # Dataplane V2; GPUDirect's extra node networks also need multi-networking.
            datapath_provider="ADVANCED_DATAPATH",
            enable_multi_networking=multi_networking or None,
            # The Gateway API's standard channel: GKE's Gateway controller and the GA Gateway API and
            # InferencePool CRDs (installed by GKE itself from 1.34.0-gke.1626000), for the Inference Gateway.
            gateway_api_config={"channel": "CHANNEL_STANDARD"} if gateway_api else None,
            ip_allocation_policy={
                "cluster_secondary_range_name": pods_range,
                "services_secondary_range_name": services_range,
            },
            **_endpoints(cc, authorized_networks, master_cidr),
            master_auth={"client_certificate_config": {"issue_client_certificate": False}},
            release_channel={"channel": release_channel},
            min_master_version=min_master_version,
            maintenance_policy=_maintenance_policy(maintenance),
            workload_identity_config={"workload_pool": workload_pool},
            addons_config=_addons(cc, multi_tier_checkpointing),
            enable_shielded_nodes=True,
            enable_intranode_visibility=True,
            remove_default_node_pool=True,
            initial_node_count=1,
            node_config={
                "workload_metadata_config": {"mode": "GKE_METADATA"},
                "shielded_instance_config": {"enable_secure_boot": True, "enable_integrity_monitoring": True},
            },
            logging_config={"enable_components": ["SYSTEM_COMPONENTS", "WORKLOADS"]},
            monitoring_config={
                # The list is the whole set: a component it leaves out is off. DCGM: GKE runs NVIDIA's DCGM exporter
                # on the GPU nodes (with GKE's managed drivers, which the GPU pools install) and collects it through
                # Managed Prometheus (https://cloud.google.com/kubernetes-engine/docs/how-to/dcgm-metrics; Cluster
                # Toolkit's gke-cluster module adds it by default: enable_dcgm_monitoring @ v1.95.0).
                "enable_components": ["SYSTEM_COMPONENTS", *(["DCGM"] if gpu_metrics else [])],
                "managed_prometheus": {"enabled": True},
            },
            binary_authorization={"evaluation_mode": "PROJECT_SINGLETON_POLICY_ENFORCE"},
            # GKE cost allocation: the billing export breaks the cluster's cost down by namespace and by the pods'
            # labels (https://cloud.google.com/kubernetes-engine/docs/how-to/cost-allocations), what a cost by team
            # reads; updated in place (hashicorp/google 7.45.0 resource_container_cluster.go: not ForceNew).
            cost_management_config={"enabled": True},
            # Also applied by the provider's default_labels; set here so policy scans see them.
            resource_labels=labels,
            deletion_protection=deletion_protection,
            lifecycle=TerraformResourceLifecycle(
                prevent_destroy=deletion_protection,
                # The removed default pool's settings are only read at creation.
                ignore_changes=["node_config", "initial_node_count"],
            ),
        )


def _endpoints(cc: Any, authorized_networks: dict[str, str], master_cidr: str) -> dict[str, Any]:
    """The control plane's endpoints: private nodes, the IP endpoint limited to `authorized_networks` (private when
    there are none) and the DNS endpoint."""
    return {
        "private_cluster_config": {
            "enable_private_nodes": True,
            # With no authorized network, the IP endpoint answers on its private address alone (from the VPC);
            # master authorized networks stay enabled with no block, as Cluster Toolkit's gke-cluster module
            # does by default (modules/scheduler/gke-cluster main.tf and variables.tf @ v1.95.0:
            # enable_private_endpoint true, master_authorized_networks []): a public endpoint with a placeholder
            # range as its only authorized network would still answer the internet's TLS handshakes.
            "enable_private_endpoint": not authorized_networks,
            "master_ipv4_cidr_block": master_cidr,
            "master_global_access_config": {"enabled": False},
        },
        # The DNS-based control plane endpoint: reachable from anywhere, every call authorized by IAM
        # (container.clusters.connect), so CI runners outside the authorized networks can deploy
        # through it. The IP endpoint stays limited to `authorized_networks` (private when there are none).
        # https://cloud.google.com/kubernetes-engine/docs/concepts/network-isolation#dns-based_endpoint
        "control_plane_endpoints_config": {"dns_endpoint_config": {"allow_external_traffic": True}},
        "master_authorized_networks_config": {
            "cidr_blocks": [
                cc.ContainerClusterMasterAuthorizedNetworksConfigCidrBlocks(display_name=display, cidr_block=cidr)
                for display, cidr in authorized_networks.items()
            ],
        },
    }


def _addons(cc: Any, multi_tier_checkpointing: bool) -> dict[str, Any]:
    """The GKE add-ons the platform's workloads use: the Ray operator (logs and metrics of every RayCluster), Cloud
    Storage FUSE (the buckets in pods), the persistent disk CSI driver; and where a training run keeps a local tier,
    multi-tier checkpointing (gcloud's HighScaleCheckpointing, which needs the FUSE driver and Workload Identity)."""
    mtc = {"high_scale_checkpointing_config": {"enabled": True}} if multi_tier_checkpointing else {}
    return {
        **mtc,
        "ray_operator_config": [
            cc.ContainerClusterAddonsConfigRayOperatorConfig(
                enabled=True,
                ray_cluster_logging_config={"enabled": True},
                ray_cluster_monitoring_config={"enabled": True},
            )
        ],
        "gcs_fuse_csi_driver_config": {"enabled": True},
        "gce_persistent_disk_csi_driver_config": {"enabled": True},
    }


def _maintenance_policy(maintenance: Maintenance | None) -> dict[str, Any] | None:
    """The cluster's maintenance_policy block: the recurring window and each exclusion with its scope."""
    if maintenance is None:
        return None
    window = maintenance.window
    # A list of blocks must be the binding's struct objects: jsii converts a dict to a struct where one is
    # expected, but not a list of dicts (anything else stops the synth with a deserialization error).
    cluster = google("container_cluster")
    return {
        "recurring_window": {"start_time": window.start, "end_time": window.end, "recurrence": window.recurrence},
        "maintenance_exclusion": [
            cluster.ContainerClusterMaintenancePolicyMaintenanceExclusion(
                exclusion_name=e.name,
                start_time=e.start,
                end_time=e.end,
                exclusion_options=cluster.ContainerClusterMaintenancePolicyMaintenanceExclusionExclusionOptions(
                    scope=e.scope
                ),
            )
            for e in maintenance.exclusions
        ]
        or None,
    }
