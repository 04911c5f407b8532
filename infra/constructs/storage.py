"""Cloud Storage buckets for checkpoints and data."""

from __future__ import annotations

from constructs import Construct

from infra.bindings import google
from infra.cdk import TerraformResourceLifecycle

DAY = 86_400


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
            force_destroy=not protect,
            lifecycle=TerraformResourceLifecycle(prevent_destroy=protect),
        )
