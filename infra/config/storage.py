"""Buckets, the image registry, and the Terraform state backend."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from infra.config.base import Model, Name


class Lifecycle(Model):
    """Object lifecycle of a bucket."""

    delete_noncurrent_after_days: int = Field(ge=1)
    nearline_after_days: int | None = Field(default=None, ge=1)


class BucketSpec(Model):
    """A Cloud Storage bucket. Its name is `<project>-<key>` unless given."""

    name: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]{1,61}[a-z0-9]$")] | None = None
    """The bucket's name, where `<project>-<key>` is not wanted (bucket names are global)."""
    location: str | None = None
    """A Cloud Storage location (infra/catalogue/storage_locations.py); default: the environment's region."""
    protect: bool
    """Terraform's prevent_destroy and no force_destroy: a plan that would delete or replace it fails."""
    versioning: bool = True
    """Keep noncurrent versions of overwritten and deleted objects."""
    soft_delete_days: int = Field(ge=7, le=90)
    """Deleted objects stay restorable this many days (Cloud Storage's soft delete, 7 to 90)."""
    lifecycle: Lifecycle
    """When objects move to Nearline and noncurrent versions are deleted."""
    hierarchical_namespace: bool = False
    """Folders (Cloud Storage's hierarchical namespace), as GKE's multi-tier checkpointing's backups need. Set only
    when the bucket is created: changing it replaces the bucket (https://cloud.google.com/storage/docs/create-hns-bucket)."""


class RegistryCleanup(Model):
    delete_untagged_after_days: int = Field(ge=1)
    keep_recent_versions: int = Field(ge=1)


class Registry(Model):
    """The Artifact Registry Docker repository images are pushed to."""

    repository: Name
    cleanup: RegistryCleanup
    protect: bool = False
    """Terraform refuses to destroy or replace a protected repository (and the images in it)."""

    def host(self, region: str) -> str:
        return f"{region}-docker.pkg.dev"


class StateBackend(Model):
    """Where Terraform keeps this environment's state (prefix `platform/<env>`)."""

    bucket: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_.-]{1,61}[a-z0-9]$")]
