"""A read-only call per Google Cloud API that answers only once the API is usable in the project.

Service Usage is eventually consistent: an API it lists as enabled can still refuse calls for minutes ("...API
has not been used in project ... before or it is disabled. If you enabled this API recently, wait a few minutes
for the action to propagate to our systems and retry", reason SERVICE_DISABLED). The Google provider
(hashicorp/terraform-provider-google v7.45.0) waits only where it enables: google_project_service polls Service
Usage until the API is listed (resource_google_project.go waitForServiceUsageEnabledServices) and retries
"Another activation or deactivation is in progress" (transport/error_retry_predicates.go
ServiceUsageServiceBeingActivated); the Service Usage operation waiter retries "has not been used in project"
three times (services/serviceusage/service_usage_operation.go). No other resource retries that 403: the default
retry predicates (transport/error_retry_predicates.go defaultErrorRetryPredicates) cover network errors, 429/5xx,
409 operation-in-progress, unready networks and subnets and GCE's per-minute quota 403, not SERVICE_DISABLED.
So the first apply in a new project can fail on the first resource of a just-enabled API: `make deploy`
enables the APIs first and calls each of these until it answers (scripts/apis.py).

gcloud arguments after `gcloud`, with {project} and {region}; an API with no cheap read of its own (the IAM
Service Account Credentials API has only token-minting methods) is probed through Service Usage's listing.
"""

from __future__ import annotations

PROBES: dict[str, tuple[str, ...]] = {
    "aiplatform.googleapis.com": ("ai", "custom-jobs", "list", "--region={region}", "--limit=1"),
    "artifactregistry.googleapis.com": ("artifacts", "repositories", "list", "--location={region}", "--limit=1"),
    "binaryauthorization.googleapis.com": ("container", "binauthz", "policy", "export"),
    "cloudresourcemanager.googleapis.com": ("projects", "describe", "{project}"),
    "compute.googleapis.com": ("compute", "networks", "list", "--limit=1"),
    "container.googleapis.com": ("container", "clusters", "list", "--location={region}", "--limit=1"),
    "iam.googleapis.com": ("iam", "service-accounts", "list", "--limit=1"),
    "logging.googleapis.com": ("logging", "buckets", "list", "--location=global", "--limit=1"),
    "monitoring.googleapis.com": ("monitoring", "dashboards", "list", "--limit=1"),
    "networkservices.googleapis.com": ("network-services", "gateways", "list", "--location={region}", "--limit=1"),
    "storage.googleapis.com": ("storage", "buckets", "list", "--limit=1"),
}

# What an API that is enabled but not yet usable answers (any other answer, even a refusal, means it is up).
NOT_YET = ("SERVICE_DISABLED", "has not been used in project", "it is disabled")


def probe(api: str, project: str, region: str) -> list[str]:
    """The gcloud arguments that call `api` in `project` (always with --project)."""
    args = PROBES.get(api)
    if args is None:
        args = ("services", "list", "--enabled", f"--filter=config.name={api}", "--format=value(config.name)")
    return [a.format(project=project, region=region) for a in args] + [f"--project={project}"]
