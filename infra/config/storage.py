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
    location: str | None = None
    protect: bool
    versioning: bool = True
    soft_delete_days: int = Field(ge=7, le=90)
    lifecycle: Lifecycle


class RegistryCleanup(Model):
    delete_untagged_after_days: int = Field(ge=1)
    keep_recent_versions: int = Field(ge=1)


class Registry(Model):
    """The Artifact Registry Docker repository images are pushed to."""

    repository: Name
    cleanup: RegistryCleanup
    # Terraform refuses to destroy or replace a protected repository (and the images in it).
    protect: bool = False

    def host(self, region: str) -> str:
        return f"{region}-docker.pkg.dev"


class StateBackend(Model):
    """Where Terraform keeps this environment's state (prefix `platform/<env>`)."""

    bucket: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_.-]{1,61}[a-z0-9]$")]
