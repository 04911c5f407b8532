"""The Artifact Registry Docker repository."""

from __future__ import annotations

from constructs import Construct

from infra.cdk import TerraformResourceLifecycle
from infra.cdk.bindings import google

DAY = 86_400


class DockerRepository(Construct):
    """A Docker repository with immutable tags and a cleanup policy.

    Untagged images older than the configured age are deleted; the most recent
    versions are always kept.
    """

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        project: str,
        location: str,
        repository_id: str,
        delete_untagged_after_days: int,
        keep_recent_versions: int,
        readers: list[str],
        protect: bool,
    ) -> None:
        super().__init__(scope, id_)
        ar = google("artifact_registry_repository")
        self.repository = ar.ArtifactRegistryRepository(
            self,
            "repository",
            project=project,
            location=location,
            repository_id=repository_id,
            format="DOCKER",
            description="Platform container images, pinned by digest in each environment's release",
            docker_config={"immutable_tags": True},
            cleanup_policy_dry_run=False,
            lifecycle=TerraformResourceLifecycle(prevent_destroy=protect),
            cleanup_policies=[
                ar.ArtifactRegistryRepositoryCleanupPolicies(
                    id="delete-untagged",
                    action="DELETE",
                    condition={"tag_state": "UNTAGGED", "older_than": f"{delete_untagged_after_days * DAY}s"},
                ),
                ar.ArtifactRegistryRepositoryCleanupPolicies(
                    id="keep-recent",
                    action="KEEP",
                    most_recent_versions={"keep_count": keep_recent_versions},
                ),
            ],
        )
        iam = google("artifact_registry_repository_iam_member")
        for i, member in enumerate(readers):
            iam.ArtifactRegistryRepositoryIamMember(
                self,
                f"reader-{i}",
                project=project,
                location=location,
                repository=self.repository.name,
                role="roles/artifactregistry.reader",
                member=member,
            )
