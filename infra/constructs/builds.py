"""What `make image` builds with on Cloud Build: an account of its own with only what a build
needs, and the bucket its sources are staged in.

Without a service account named in the build, Cloud Build runs it as the project's default build account, which in
new projects is the Compute Engine default account (project Editor) and elsewhere the legacy Cloud Build account
with access to every bucket of the project (https://cloud.google.com/build/docs/cloud-build-service-account-updates;
https://cloud.google.com/build/docs/securing-builds/configure-user-specified-service-accounts). The builder here:
- writes images to the environment's repository alone (roles/artifactregistry.writer on it);
- writes its logs to Cloud Logging (roles/logging.logWriter: a build with a user-specified account keeps its logs in
  Cloud Logging or a bucket of the user's, never the default logs bucket, same page, "Set up build logs");
- reads the sources `gcloud builds submit` uploads (roles/storage.objectViewer on this bucket: the build fetches the
  source tarball as its own account, which otherwise has no storage.objects.get there).
"""

from __future__ import annotations

from typing import Any

from constructs import Construct

from infra.cdk.bindings import google

DAY = 86_400


class ImageBuilds(Construct):
    """The Cloud Build account `account_id` and the staging bucket `staging_bucket` (sources deleted after a week)."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        project: str,
        location: str,
        account_id: str,
        staging_bucket: str,
        repository: Any,
    ) -> None:
        super().__init__(scope, id_)
        self.account = google("service_account").ServiceAccount(
            self, "account", project=project, account_id=account_id, display_name="Cloud Build of the platform's images"
        )
        member = f"serviceAccount:{self.account.email}"
        google("project_iam_member").ProjectIamMember(
            self, "logWriter", project=project, role="roles/logging.logWriter", member=member
        )
        google("artifact_registry_repository_iam_member").ArtifactRegistryRepositoryIamMember(
            self,
            "writes-registry",
            project=repository.project,
            location=repository.location,
            repository=repository.name,
            role="roles/artifactregistry.writer",
            member=member,
        )
        sb = google("storage_bucket")
        self.staging = sb.StorageBucket(
            self,
            "staging",
            project=project,
            name=staging_bucket,
            location=location,
            storage_class="STANDARD",
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            versioning={"enabled": True},
            soft_delete_policy={"retention_duration_seconds": 7 * DAY},
            lifecycle_rule=[
                # A source tarball is read once, by its build.
                sb.StorageBucketLifecycleRule(action={"type": "Delete"}, condition={"age": 7, "with_state": "LIVE"}),
                sb.StorageBucketLifecycleRule(
                    action={"type": "Delete"}, condition={"days_since_noncurrent_time": 1, "with_state": "ARCHIVED"}
                ),
            ],
            force_destroy=True,
        )
        google("storage_bucket_iam_member").StorageBucketIamMember(
            self, "reads-sources", bucket=self.staging.name, role="roles/storage.objectViewer", member=member
        )
