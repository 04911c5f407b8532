"""The Cloud Storage FUSE CSI driver: annotations, sidecar resources, mount options, the file cache."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from infra.rules import Finding, rule
from infra.rules.manifest_subject import (
    FUSE_DISALLOWED,
    FUSE_SIDECAR_LIMITS,
    ReleaseContext,
    _accelerators,
    _fuse_volumes,
    _mount_options,
    _pods,
    _selected_pools,
)
from infra.rules.sources import DOCS, FUSE_PERF_DOC, FUSE_SIDECAR_DOC, GCSFUSE_CSI, RAY_TUTORIAL


@rule(
    id="gcsfuse.parallel-downloads-need-file-cache",
    system="Cloud Storage FUSE CSI driver",
    layer="mount",
    summary="file-cache:enable-parallel-downloads needs the file cache enabled (fileCacheCapacity, not 0).",
    source=(
        f"{FUSE_PERF_DOC}#parallel-download; since GKE 1.32.0-gke.1795000 the mount fails with "
        "'file cache should be enabled for parallel download support'"
    ),
    subject="manifest",
)
def _parallel_downloads(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for at, _meta, spec in _pods(objects):
        for i, volume in _fuse_volumes(spec):
            if "file-cache:enable-parallel-downloads:true" not in _mount_options(volume):
                continue
            attributes = volume["csi"].get("volumeAttributes") or {}
            capacity = str(attributes.get("fileCacheCapacity", "0"))
            if capacity in ("0", "0Gi", ""):
                yield Finding(
                    f"{at}.spec.volumes[{i}].csi.volumeAttributes.fileCacheCapacity",
                    attributes.get("fileCacheCapacity"),
                    "parallel downloads need a file cache: set fileCacheCapacity (e.g. '-1') or drop the option",
                )


@rule(
    id="gcsfuse.pod-annotation",
    system="Cloud Storage FUSE CSI driver",
    layer="mount",
    summary='A pod with a Cloud Storage FUSE CSI volume carries gke-gcsfuse/volumes: "true" (sidecar injection).',
    source=f"{DOCS}/how-to/cloud-storage-fuse-csi-driver-ephemeral#consume-ephemeral-volume",
    subject="manifest",
)
def _fuse_annotation(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for at, meta, spec in _pods(objects):
        if any(True for _ in _fuse_volumes(spec)):
            value = (meta.get("annotations") or {}).get("gke-gcsfuse/volumes")
            if value != "true":
                yield Finding(f"{at}.metadata.annotations.gke-gcsfuse/volumes", value, 'must be "true"')


@rule(
    id="gcsfuse.sidecar-limits",
    system="Cloud Storage FUSE CSI driver",
    layer="pod-start",
    summary=(
        "FUSE pods on accelerator hosts, and batch Jobs reading whole checkpoints, set the sidecar's cpu, memory and "
        "ephemeral-storage limits (the tutorial: 0, unlimited)."
    ),
    source=f"{FUSE_SIDECAR_DOC}#configure-sidecar-resources (defaults throttle large reads); {RAY_TUTORIAL}",
    subject="manifest",
)
def _fuse_limits(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for at, meta, spec in _pods(objects):
        heavy = at.startswith("Job/") or _accelerators(spec)
        if not heavy or not any(True for _ in _fuse_volumes(spec)):
            continue
        annotations = meta.get("annotations") or {}
        missing = [a for a in FUSE_SIDECAR_LIMITS if a not in annotations]
        if missing:
            yield Finding(f"{at}.metadata.annotations", sorted(annotations), f"set {', '.join(missing)}")


@rule(
    id="gcsfuse.needs-gke-metadata-node",
    system="Cloud Storage FUSE CSI driver",
    layer="mount",
    summary="A pod mounting a FUSE volume runs on a pool with the GKE metadata server (Workload Identity).",
    source=(
        "GoogleCloudPlatform/gcs-fuse-csi-driver pkg/csi_driver/node.go checkWINodeLabel: 'Workload Identity "
        "Federation is not enabled on node'"
    ),
    subject="manifest",
)
def _fuse_node(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    gce = ctx.gce_metadata_pools()
    for at, _meta, spec in _pods(objects):
        pools = _selected_pools(spec)
        if any(True for _ in _fuse_volumes(spec)) and pools and pools & gce:
            yield Finding(
                f"{at}.spec.nodeSelector", sorted(pools), f"pools {', '.join(sorted(pools & gce))} use GCE_METADATA"
            )


@rule(
    id="gcsfuse.allowed-mount-options-and-attributes",
    system="Cloud Storage FUSE CSI driver",
    layer="mount",
    summary="An ephemeral FUSE volume names its bucket and passes none of the flags the driver sets itself.",
    source=(
        f"{GCSFUSE_CSI} pkg/sidecar_mounter/sidecar_mounter_config.go (DisallowedFlags), pkg/csi_driver/utils.go: "
        "'VolumeContext \"bucketName\" must be provided for ephemeral storage'; "
        f"{FUSE_PERF_DOC} (flags that are not allowed)"
    ),
    subject="manifest",
)
def _fuse_options(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for at, _meta, spec in _pods(objects):
        for i, volume in _fuse_volumes(spec):
            attributes = volume["csi"].get("volumeAttributes") or {}
            if not attributes.get("bucketName"):
                yield Finding(
                    f"{at}.spec.volumes[{i}].csi.volumeAttributes.bucketName", None, "required for ephemeral volumes"
                )
            for option in _mount_options(volume):
                flag = re.split(r"[=:]", option, maxsplit=1)[0]
                if flag in FUSE_DISALLOWED:
                    yield Finding(
                        f"{at}.spec.volumes[{i}].csi.volumeAttributes.mountOptions", option, "set by the driver"
                    )
