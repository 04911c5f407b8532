"""What Vertex AI custom jobs need of the project: their identity, the registry for Vertex AI's own agent, and
(for private access) a network attachment on a subnet of its own."""

from __future__ import annotations

from typing import Any

from constructs import Construct

from infra.cdk.bindings import google
from infra.constructs.network import SUBNET_FLOW_LOGS
from infra.constructs.storage import prefix_condition

# Roles of the jobs' own account: it writes its logs; buckets are granted one by one.
JOB_ROLES = ("roles/logging.logWriter",)


def custom_code_agent(project_number: str) -> str:
    """Vertex AI's Custom Code Service Agent, which pulls a custom job's images (a job's own service account never
    does: https://cloud.google.com/vertex-ai/docs/general/custom-service-account)."""
    return f"serviceAccount:service-{project_number}@gcp-sa-aiplatform-cc.iam.gserviceaccount.com"


class VertexJobs(Construct):
    """The `vertex-jobs` service account the jobs run as (logs, and objectUser on the buckets it writes) and,
    with `attachment`, the network attachment the jobs join the VPC through: a dedicated subnet, connections
    accepted from this project's jobs (https://cloud.google.com/vertex-ai/docs/general/vpc-psc-i-setup)."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        project: str,
        account_id: str,
        buckets: dict[str, str],
        prefixes: dict[str, str],
        region: str,
        network: str,
        attachment: tuple[str, str, str] | None,
    ) -> None:
        super().__init__(scope, id_)
        self.account = google("service_account").ServiceAccount(
            self, "account", project=project, account_id=account_id, display_name="Vertex AI custom jobs"
        )
        member = f"serviceAccount:{self.account.email}"
        for role in JOB_ROLES:
            google("project_iam_member").ProjectIamMember(
                self, role.rsplit(".", 1)[-1], project=project, role=role, member=member
            )
        for key, bucket in buckets.items():
            prefix = prefixes[key]
            google("storage_bucket_iam_member").StorageBucketIamMember(
                self,
                f"bucket-{key}",
                bucket=bucket,
                role="roles/storage.objectUser",
                member=member,
                condition={
                    "title": "vertex-jobs-own-prefix",
                    "description": f"Objects under {prefix}/ only (issue 25, finding 7)",
                    "expression": prefix_condition(bucket, prefix),
                },
            )
        if attachment is not None:
            name, subnet_name, cidr = attachment
            self.subnet = google("compute_subnetwork").ComputeSubnetwork(
                self,
                "attachment-subnet",
                project=project,
                region=region,
                name=subnet_name,
                network=network,
                ip_cidr_range=cidr,
                private_ip_google_access=True,
                log_config=SUBNET_FLOW_LOGS,
            )
            google("compute_network_attachment").ComputeNetworkAttachment(
                self,
                "attachment",
                project=project,
                region=region,
                name=name,
                subnetworks=[self.subnet.id],
                connection_preference="ACCEPT_AUTOMATIC",
                description="Vertex AI custom jobs of this project (Private Service Connect interface)",
            )

    def grant_image_pulls(self, repository: Any, *, agent: str, after: list[Any]) -> None:
        """Let Vertex AI's Custom Code Service Agent read the registry (it pulls the jobs' images)."""
        google("artifact_registry_repository_iam_member").ArtifactRegistryRepositoryIamMember(
            self,
            "agent-reads-registry",
            project=repository.project,
            location=repository.location,
            repository=repository.name,
            role="roles/artifactregistry.reader",
            member=agent,
            depends_on=after,
        )
