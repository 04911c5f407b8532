"""The Cloud Storage FUSE CSI driver: annotations, sidecar resources, mount options, the file cache, who may write."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from infra.catalogue.images import image_name, image_users
from infra.rules import Finding, containers, rule
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
        pools = _selected_pools(spec, ctx.pools())
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


# What gcsfuse runs with when nothing is said: the sidecar mounter passes uid 0 and gid 0
# (pkg/sidecar_mounter/sidecar_mounter_config.go prepareMountArgs), gcsfuse's own modes are 644 and 755.
FUSE_DEFAULT_OWNER = {"uid": "0", "gid": "0", "file-mode": "644", "dir-mode": "755"}
# With a pod fsGroup the driver adds these before the volume's own mountOptions, which override them
# (pkg/csi_driver/utils.go parseRequestArguments, "Delegate fsGroup to CSI Driver"; joinMountOptions).
FUSE_FSGROUP_OPTIONS = {"file-mode": "664", "dir-mode": "775"}


def _registries(ctx: ReleaseContext) -> set[str]:
    """The stack's own Artifact Registry repositories, as image references name them."""
    repos = (ctx.stack.get("resource", {}).get("google_artifact_registry_repository") or {}).values()
    return {f"{r.get('location')}-docker.pkg.dev/{r.get('project')}/{r.get('repository_id')}" for r in repos}


def _container_user(pod: dict[str, Any], c: dict[str, Any], registries: set[str]) -> tuple[int | None, set[int], str]:
    """(uid or None if unknown, the groups known to be the process's, where the uid comes from)."""
    pod_sc, c_sc = pod.get("securityContext") or {}, c.get("securityContext") or {}
    name = image_name(str(c.get("image", "")), registries)
    image = image_users().get(name) if name else None
    uid, gid, said = None, None, f"image {c.get('image')!r}: its user is unknown (taken as not root)"
    if image:
        uid, gid, said = image.uid, image.gid, f"image {name} ({image.source})"
    for where, sc in (("container", c_sc), ("pod", pod_sc)):
        if "runAsUser" in sc:
            if int(sc["runAsUser"]) != uid:
                gid = None  # another user: its primary group is its entry in the image's /etc/passwd, unknown here
            uid, said = int(sc["runAsUser"]), f"{where} securityContext.runAsUser"
            break
    group = c_sc.get("runAsGroup", pod_sc.get("runAsGroup", gid))
    groups = {
        int(g) for g in (group, pod_sc.get("fsGroup"), *(pod_sc.get("supplementalGroups") or [])) if g is not None
    }
    return uid, groups, said


def _fuse_owner(pod: dict[str, Any], volume: dict[str, Any]) -> dict[str, str]:
    """uid, gid, file-mode and dir-mode the mount ends up with."""
    owner = dict(FUSE_DEFAULT_OWNER)
    fs_group = (pod.get("securityContext") or {}).get("fsGroup")
    if fs_group is not None:
        owner.update(gid=str(fs_group), **FUSE_FSGROUP_OPTIONS)
    for option in _mount_options(volume):
        key, _, value = option.partition("=")
        if key in owner and value:
            owner[key] = value
    return owner


def _can_write(uid: int | None, groups: set[int], owner: dict[str, str]) -> bool:
    """Whether the kernel's permission check (the driver mounts with default_permissions) lets the process
    create directories and write files: the owner's bits if it is the owner, else the group's if it is in the
    group, else the others'."""
    if uid == 0:
        return True
    shift = 6 if uid == int(owner["uid"]) else 3 if int(owner["gid"]) in groups else 0
    dirs, files = int(owner["dir-mode"], 8) >> shift, int(owner["file-mode"], 8) >> shift
    return bool(dirs & 0o2 and dirs & 0o1 and files & 0o2)


@rule(
    id="gcsfuse.writable-by-the-container-user",
    system="Cloud Storage FUSE CSI driver",
    layer="engine-start",
    summary=(
        "A container that mounts a FUSE volume read-write can write to it as the user it runs as (securityContext, "
        "else its image's USER): the mount is root's 0755/0644 unless uid/gid and file-mode/dir-mode mountOptions "
        "or the pod's fsGroup (gid, 664, 775) give it to that user or one of its groups."
    ),
    source=(
        f"{GCSFUSE_CSI} (v1.24.0) docs/authentication.md: 'if your container image uses a non-root user or group, "
        "you must set the uid and gid mount flags ... file-mode and dir-mode'; pkg/csi_driver/utils.go "
        "(fsGroup delegated: gid=<fsGroup>, file-mode=664, dir-mode=775); pkg/sidecar_mounter/"
        "sidecar_mounter_config.go (uid 0, gid 0); https://cloud.google.com/storage/docs/gcsfuse-cli "
        "(--file-mode 644, --dir-mode 755)"
    ),
    subject="manifest",
)
def _fuse_writable(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    # Of the volumes the charts mount, only FUSE needs this: an emptyDir is created 0777 (kubernetes
    # pkg/volume/emptydir/empty_dir.go defaultPerm), configMap, secret and projected volumes are read-only.
    registries = _registries(ctx)
    for at, _meta, spec in _pods(objects):
        volumes = {v["name"]: (i, v) for i, v in _fuse_volumes(spec) if not v["csi"].get("readOnly")}
        for path, c in containers(spec):
            for j, mount in enumerate(c.get("volumeMounts") or []):
                if mount.get("readOnly") or mount.get("name") not in volumes:
                    continue
                i, volume = volumes[mount["name"]]
                uid, groups, said = _container_user(spec, c, registries)
                owner = _fuse_owner(spec, volume)
                if _can_write(uid, groups, owner):
                    continue
                who = f"uid {uid}" if uid is not None else "a user that is not root"
                in_groups = f", groups {sorted(groups)}" if groups else ""
                gid = min(groups) if len(groups) == 1 else "<gid>"
                yield Finding(
                    f"{at}.spec.{path}.volumeMounts[{j}]",
                    mount["name"],
                    f"{who}{in_groups} ({said}) cannot write to FUSE volume {mount['name']!r} "
                    f"(spec.volumes[{i}]), mounted uid {owner['uid']}, gid {owner['gid']}, "
                    f"dir-mode {owner['dir-mode']}, file-mode {owner['file-mode']}: set the pod's "
                    "securityContext.fsGroup to a group of the user, or mountOptions "
                    f"uid={uid if uid is not None else '<uid>'},gid={gid},file-mode=664,dir-mode=775",
                )
