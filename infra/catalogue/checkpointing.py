"""GKE's multi-tier checkpointing (the HighScaleCheckpointing add-on): what the platform grants and renders for it.

Sources: https://cloud.google.com/kubernetes-engine/docs/how-to/machine-learning/training/multi-tier-checkpointing;
the add-on's controller, GoogleCloudPlatform/high-scale-checkpointing-controller (crd/checkpointconfiguration.yaml,
deploy/multitier/README.md); xpk src/xpk/core/mtc.py @ v1.13.1 (the bucket grant).
"""

from __future__ import annotations

# The add-on's node agent backs each RAM-disk save up to the bucket as this Kubernetes service account's own
# principal, which needs roles/storage.objectUser on the bucket (xpk core/mtc.py; the controller's README).
MTC_NAMESPACE = "gke-managed-checkpointing"
MTC_SERVICE_ACCOUNT = "gke-checkpointing-multitier-node"
MTC_BUCKET_ROLE = "roles/storage.objectUser"

# The controller's recommended Cloud Storage FUSE options for the backup mount (its README; GKE >= 1.32.2-gke.1297001).
MTC_FUSE_OPTIONS = (
    "implicit-dirs",
    "metadata-cache:negative-ttl-secs:0",
    "metadata-cache:ttl-secs:-1",
    "metadata-cache:stat-cache-max-size-mb:-1",
    "metadata-cache:type-cache-max-size-mb:-1",
    "file-cache:max-size-mb:-1",
    "file-cache:cache-file-for-range-read:true",
    "file-system:kernel-list-cache-ttl-secs:0",
    "file-cache:enable-parallel-downloads:true",
    "read_ahead_kb=1024",
    "write:enable-streaming-writes:true",
)

# RAM-disk sizing (maxtext docs/guides/checkpointing_solutions/multi_tier_checkpointing.md): each host holds its own
# save and a peer's, with 10-15 % to spare.
SAVES_PER_RAM_DISK = 2
RAM_DISK_SPARE = 0.15
