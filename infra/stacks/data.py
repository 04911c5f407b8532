"""The stack's data and images: the buckets (`buckets`), the Artifact Registry repository and who pulls from it
(`registry`), `make image`'s Cloud Build account and the Binary Authorization policy."""

from __future__ import annotations

from infra.catalogue import upstream
from infra.cdk import TerraformStack
from infra.config import Environment
from infra.config.environment import BUILD_ACCOUNT_ID
from infra.constructs.binary_authorization import BinaryAuthorizationPolicy
from infra.constructs.builds import ImageBuilds
from infra.constructs.registry import DockerRepository
from infra.constructs.storage import Bucket


class Data:
    """The buckets; `images` adds the registry once its readers are known."""

    def __init__(self, stack: TerraformStack, env: Environment) -> None:
        self.env = env
        self.buckets = {
            key: Bucket(
                stack,
                f"bucket-{key}",
                project=env.project,
                name=env.bucket_name(key),
                location=(spec.location or env.region).upper(),
                protect=spec.protect,
                versioning=spec.versioning,
                soft_delete_days=spec.soft_delete_days,
                delete_noncurrent_after_days=spec.lifecycle.delete_noncurrent_after_days,
                nearline_after_days=spec.lifecycle.nearline_after_days,
                hierarchical_namespace=spec.hierarchical_namespace,
            )
            for key, spec in env.buckets.items()
        }

    def images(self, stack: TerraformStack, readers: list[str]) -> DockerRepository:
        """Binary Authorization's project policy (this registry and upstream images by digest), the registry that
        `readers` pull from, and `make image`'s Cloud Build account with its sources' bucket."""
        env = self.env
        BinaryAuthorizationPolicy(
            stack,
            "binary-authorization",
            project=env.project,
            registry_url=env.registry_url,
            pinned_images=list(upstream.BY_DIGEST),
            waiting=sorted(upstream.AWAITING_DIGEST),
        )
        registry = DockerRepository(
            stack,
            "registry",
            project=env.project,
            location=env.region,
            repository_id=env.registry.repository,
            delete_untagged_after_days=env.registry.cleanup.delete_untagged_after_days,
            keep_recent_versions=env.registry.cleanup.keep_recent_versions,
            readers=readers,
            protect=env.registry.protect,
        )
        ImageBuilds(
            stack,
            "image-builds",
            project=env.project,
            location=env.region.upper(),
            account_id=BUILD_ACCOUNT_ID,
            staging_bucket=env.build_staging_bucket,
            repository=registry.repository,
        )
        return registry
