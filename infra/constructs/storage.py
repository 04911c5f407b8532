"""Cloud Storage buckets for checkpoints and data."""

from __future__ import annotations

from collections.abc import Sequence

from constructs import Construct

from infra.cdk import TerraformResourceLifecycle
from infra.cdk.bindings import google

DAY = 86_400


def prefix_condition(bucket: str, prefixes: str | Sequence[str]) -> str:
    """An IAM condition (CEL) that holds a Cloud Storage role to the objects under each of `prefixes`/ of `bucket`.

    Object calls name the object (`projects/_/buckets/<bucket>/objects/<name>`); a list names the bucket, and its
    prefix is the `storage.googleapis.com/objectListPrefix` attribute
    (https://cloud.google.com/iam/docs/conditions-attribute-reference, "Object list prefix";
    https://cloud.google.com/storage/docs/access-control/iam#conditions). A workload that mounts the whole bucket
    with Cloud Storage FUSE (Vertex AI at /gcs/<bucket>, the Slurm nodes, a GKE pod's CSI volume) looks up and lists
    each directory on the way down to its own: those lookups (the parents' own names) and lists (the parents'
    prefixes, the root's empty one included, which shows names only) are allowed too, and so are lists inside the
    prefix (a readdir there, a checkpoint manager looking for its last step). Everything else in the bucket is
    refused."""
    objects = f"projects/_/buckets/{bucket}/objects/"
    listed = 'api.getAttribute("storage.googleapis.com/objectListPrefix", "-")'
    under, names, lists = [], set(), []
    for prefix in [prefixes] if isinstance(prefixes, str) else prefixes:
        prefix = prefix.strip("/")
        parts = prefix.split("/")
        parents = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        names |= {*parents, *(f"{p}/" for p in parents[:-1])}
        under.append(f'resource.name.startsWith("{objects}{prefix}/")')
        lists.append(f'"{prefix}/".startsWith({listed}) || {listed}.startsWith("{prefix}/")')
    exact = [f'resource.name == "{objects}{n}"' for n in sorted(names)]
    return (
        f'(resource.type == "storage.googleapis.com/Object" && ({" || ".join(under + exact)}))'
        f' || (resource.type == "storage.googleapis.com/Bucket" && ({" || ".join(lists)}))'
    )


class Bucket(Construct):
    """A private, versioned bucket with soft delete and lifecycle rules.

    `protect` turns on Terraform's `prevent_destroy` and turns off
    `force_destroy`, so neither a destroy nor a replacement plan can remove a
    bucket that holds checkpoints.
    """

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        project: str,
        name: str,
        location: str,
        protect: bool,
        versioning: bool,
        soft_delete_days: int,
        delete_noncurrent_after_days: int,
        nearline_after_days: int | None,
        hierarchical_namespace: bool = False,
    ) -> None:
        super().__init__(scope, id_)
        sb = google("storage_bucket")
        rules = [
            sb.StorageBucketLifecycleRule(
                action={"type": "Delete"},
                condition={"days_since_noncurrent_time": delete_noncurrent_after_days, "with_state": "ARCHIVED"},
            )
        ]
        if nearline_after_days is not None:
            rules.append(
                sb.StorageBucketLifecycleRule(
                    action={"type": "SetStorageClass", "storage_class": "NEARLINE"},
                    condition={"age": nearline_after_days, "with_state": "LIVE"},
                )
            )
        self.bucket = sb.StorageBucket(
            self,
            "bucket",
            project=project,
            name=name,
            location=location,
            storage_class="STANDARD",
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            versioning={"enabled": versioning},
            soft_delete_policy={"retention_duration_seconds": soft_delete_days * DAY},
            lifecycle_rule=rules,
            # Folders; only at creation (replaces the bucket otherwise) and with uniform access, as above.
            hierarchical_namespace={"enabled": True} if hierarchical_namespace else None,
            force_destroy=not protect,
            lifecycle=TerraformResourceLifecycle(prevent_destroy=protect),
        )
