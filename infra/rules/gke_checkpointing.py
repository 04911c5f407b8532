"""GKE's multi-tier checkpointing: the CheckpointConfiguration a training release renders, held to its CRD's fields
where the pinned CRD is not available (infra/charts/crds.yaml: optional)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from infra.rules import Finding, rule, where

CRD = (
    "GoogleCloudPlatform/high-scale-checkpointing-controller @ e750704a crd/checkpointconfiguration.yaml (spec "
    "properties); pkg/multitier-controller/utils.go (an empty cloudStorageBucketName is refused)"
)
SPEC_FIELDS = {
    "cloudStorageBucketName": str,
    "enableExternalJaxProcessIds": bool,
    "nodeSelector": dict,
    "tolerations": list,
    "inMemoryVolumeSize": str,
    "csiEphemeralLimit": str,
    "gcsFuseMountOptions": list,
}


@rule(
    id="gke.checkpoint-configuration-fields",
    system="GKE",
    layer="admission",
    summary=(
        "A CheckpointConfiguration names only its CRD's spec fields, each of its type, with a bucket and a RAM-disk "
        "size: the API server drops an unknown field without a word (xpk's `mountOptions` is one), and the add-on "
        "refuses an empty bucket."
    ),
    source=CRD,
    subject="manifest",
    kinds=("CheckpointConfiguration",),
)
def _checkpoint_configuration(objects: list[dict[str, Any]], ctx: Any) -> Iterator[Finding]:
    for obj in objects:
        spec = obj.get("spec") or {}
        for key, value in sorted(spec.items()):
            kind = SPEC_FIELDS.get(key)
            if kind is None:
                yield Finding(f"{where(obj)}: spec.{key}", value, f"not a field of the CRD: {', '.join(SPEC_FIELDS)}")
            elif not isinstance(value, kind):
                yield Finding(f"{where(obj)}: spec.{key}", value, f"must be a {kind.__name__}")
        for key in ("cloudStorageBucketName", "inMemoryVolumeSize"):
            if not spec.get(key):
                yield Finding(f"{where(obj)}: spec.{key}", spec.get(key), "required: the add-on has no default")
