"""The Google Cloud APIs the platform stack uses: one table, read by the stack (which enables them) and by
the rule `gcp.apis-enabled` (which holds every synthesized stack to it).

Terraform calls each resource type's API; a project where that API is off refuses the apply
("... API has not been used in project ... before or it is disabled"). Features of a resource can
need an API of their own: Binary Authorization enforcement on the cluster calls
binaryauthorization.googleapis.com, Workload Identity by impersonation calls the IAM Service
Account Credentials API from the GKE metadata server.

Two APIs must be on before Terraform can enable anything (the provider calls them to enable the
rest): serviceusage.googleapis.com and cloudresourcemanager.googleapis.com. They are listed as
`BOOTSTRAP_APIS`; `docs/deploy.md` has the one `gcloud services enable` for them.
"""

from __future__ import annotations

# The Cloud Billing Budget API: enabled where the environment has a budget (monitoring.budget); the budget's calls
# are billed to the environment's project (the provider's user_project_override, infra/constructs/providers.py).
BUDGET_API = "billingbudgets.googleapis.com"
# The Cloud Billing API: the bootstrap grants the budget's roles on the billing account through it.
BILLING_API = "cloudbilling.googleapis.com"
# Resource type prefix -> the API Terraform calls to manage it (each resource's provider docs, "API
# documentation" link: https://registry.terraform.io/providers/hashicorp/google/6.50.0/docs).
RESOURCE_APIS: dict[str, str] = {
    "google_compute_": "compute.googleapis.com",
    "google_container_": "container.googleapis.com",
    "google_storage_": "storage.googleapis.com",
    "google_artifact_registry_": "artifactregistry.googleapis.com",
    "google_service_account": "iam.googleapis.com",
    "google_project_iam_": "cloudresourcemanager.googleapis.com",
    "google_binary_authorization_": "binaryauthorization.googleapis.com",
    "google_monitoring_": "monitoring.googleapis.com",
    "google_billing_budget": BUDGET_API,
    "google_billing_account_": BILLING_API,
}

# Fields of google_container_cluster -> the API the feature needs, with its source. GKE calls them
# while it creates the cluster, so the cluster waits for them.
FEATURE_APIS: dict[str, tuple[str, str]] = {
    "binary_authorization": (
        "binaryauthorization.googleapis.com",
        "https://cloud.google.com/binary-authorization/docs/setting-up (Enable the Binary Authorization API)",
    ),
    "logging_config": ("logging.googleapis.com", "https://cloud.google.com/kubernetes-engine/docs/how-to/logging"),
    "monitoring_config": (
        "monitoring.googleapis.com",
        "https://cloud.google.com/kubernetes-engine/docs/how-to/configure-metrics",
    ),
}

# Workload Identity by impersonation (a KSA bound to a Google service account with
# roles/iam.workloadIdentityUser): the GKE metadata server mints the account's tokens through this API.
IMPERSONATION_API = (
    "iamcredentials.googleapis.com",
    "https://cloud.google.com/kubernetes-engine/docs/how-to/workload-identity (Enable the IAM Service "
    "Account Credentials API)",
)

BOOTSTRAP_APIS = ("serviceusage.googleapis.com", "cloudresourcemanager.googleapis.com")

# What the environment's images need: `make image` builds on Cloud Build as the stack's
# builder account, and Artifact Registry scans each pushed image for vulnerabilities once the Container Scanning
# API is on (off by default; each scanned image is billed).
IMAGE_APIS: dict[str, str] = {
    "cloudbuild.googleapis.com": (
        "https://cloud.google.com/build/docs/build-push-docker-image (Enable the Cloud Build API)"
    ),
    "containerscanning.googleapis.com": (
        "https://cloud.google.com/artifact-analysis/docs/enable-automatic-scanning (Enable the Container Scanning API: "
        "images pushed to Artifact Registry are scanned automatically)"
    ),
}

# What every platform stack enables (google_project_service, never disabled on destroy: other
# projects' resources and the state bucket may still use them).
PLATFORM_APIS: tuple[str, ...] = tuple(
    sorted(
        (set(RESOURCE_APIS.values()) - {BUDGET_API, BILLING_API})  # an environment's budget only; the bootstrap's
        | {api for api, _ in FEATURE_APIS.values()}
        | {IMPERSONATION_API[0]}
        | set(IMAGE_APIS)
    )
)

# Vertex AI: no Terraform resource calls it (the provider has no custom job), but `make vertex-submit` does, and
# its service agents are created with it; an environment with Vertex AI jobs enables it.
VERTEX_API = "aiplatform.googleapis.com"


# The GKE Inference Gateway: its endpoint picker is called by the load balancer as a Service Extensions
# callout, which lives in the Network Services API ("Enable the Compute Engine API, the Network Services API,
# and the Model Armor API if needed": https://cloud.google.com/kubernetes-engine/docs/how-to/deploy-gke-inference-gateway;
# "Enable these APIs: Compute Engine API and Network Services API":
# https://cloud.google.com/service-extensions/docs/configure-callout). Model Armor is not used here.
INFERENCE_GATEWAY_API = (
    "networkservices.googleapis.com",
    "https://cloud.google.com/kubernetes-engine/docs/how-to/deploy-gke-inference-gateway (Enable the Network "
    "Services API)",
)


def platform_apis(*, vertex: bool, inference_gateway: bool, budget: bool = False) -> tuple[str, ...]:
    """What one environment's stack enables: every platform API, Vertex AI's where it has jobs, the Network
    Services API where a deployment serves through the Inference Gateway, and the Budget API where it has a
    budget."""
    extra = [*([VERTEX_API] if vertex else []), *([INFERENCE_GATEWAY_API[0]] if inference_gateway else [])]
    extra += [BUDGET_API] if budget else []
    return tuple(sorted({*PLATFORM_APIS, *extra}))


def api_of(resource_type: str) -> str | None:
    """The API a Terraform resource type is managed through, or None for non-Google resources."""
    if not resource_type.startswith("google_") or resource_type == "google_project_service":
        return None
    for prefix, api in RESOURCE_APIS.items():
        if resource_type.startswith(prefix):
            return api
    raise KeyError(f"{resource_type}: no API known for it; add its prefix to infra/catalogue/gcp_apis.py RESOURCE_APIS")


def apis_needed(resource_type: str, body: dict) -> set[str]:
    """Every API one synthesized resource needs enabled before it is applied."""
    api = api_of(resource_type)
    needed = {api} if api else set()
    if resource_type == "google_container_cluster":
        needed |= {feature_api for field, (feature_api, _) in FEATURE_APIS.items() if body.get(field)}
    return needed
