"""Providers: Google, and Kubernetes and Helm configured from the cluster in the same stack."""

from __future__ import annotations

from typing import Any

from constructs import Construct

from infra.catalogue.terraform_engine import HELM_PROVIDER_PIN
from infra.cdk import TerraformStack
from infra.cdk.bindings import google, helm, kubernetes

# How the Kubernetes and Helm providers get a token for the cluster: GKE's client-go credential plugin, run by the
# provider whenever it needs one (the Terraform Kubernetes provider's "Exec plugins", hashicorp/kubernetes 2.38.0
# docs; GKE: https://cloud.google.com/kubernetes-engine/docs/how-to/cluster-access-for-kubectl#install_plugin).
# With --use_application_default_credentials it answers with the same Application Default Credentials the Google
# provider uses (kubernetes/cloud-provider-gcp cmd/gke-gcloud-auth-plugin). Unlike a token read from
# google_client_config, nothing lands in Terraform's state, and the plugin hands out a fresh token when the last one
# expires (its ExecCredential carries the expiry), so an apply that outlasts one hour still reaches the cluster.
CREDENTIAL_PLUGIN: dict[str, Any] = {
    "api_version": "client.authentication.k8s.io/v1beta1",
    "command": "gke-gcloud-auth-plugin",
    "args": ["--use_application_default_credentials"],
}


# Where Helm keeps each release's record (its values and rendered manifest, one per revision): ConfigMaps in the
# release's namespace, not Secrets, Helm's default. Refreshing a helm_release reads the record, and the
# read-only planner of pull requests and of prod's approval (roles/container.viewer, infra/constructs/bootstrap.py)
# may read ConfigMaps but no Secret. Under the Secret driver the Helm provider 3.1.1 drops the refusal and plans the
# release as new (helm/resource_helm_release.go @ v3.1.1: resourceReleaseExists' error is discarded when the release
# is not found to exist, and the resource leaves the state; hashicorp/terraform-provider-helm#1716, "always created
# when provider can't list the secrets in GKE cluster"), so the planner's plan of prod never matched the deployer's.
# Granting the planner Secrets instead would hand pull-request code every Secret of those namespaces (the vLLM key,
# all of kube-system's). The records hold nothing secret: Terraform's state holds the same values, and rule
# helm.release-holds-no-secret-data refuses a chart that renders a Secret with data. The provider's helm_driver
# (configmap, secret, memory, sql; docs/index.md @ v3.1.1).
HELM_DRIVER = "configmap"


class Providers(Construct):
    """The Google provider, plus Kubernetes and Helm providers that talk to `cluster`.

    The Kubernetes and Helm providers authenticate through GKE's credential plugin (CREDENTIAL_PLUGIN) on the
    machine that runs Terraform; nothing is read at synth time and no token is stored in the state.
    """

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        project: str,
        region: str,
        labels: dict[str, str],
        quota_from_project: bool = False,
    ) -> None:
        """`quota_from_project`: the planner and deployer are service accounts of another project (delivery.seed),
        and a client-based API charges a service account's calls to the project it was made in ("Service account:
        ... the project associated with the service account is used as the quota project",
        https://cloud.google.com/docs/quotas/set-quota-project), where the environment's APIs are not enabled: every
        call then names the environment's project as its quota project (user_project_override, billing_project:
        the provider's guides/provider_reference.html.markdown @ v7.45.0; it needs serviceusage.services.use there,
        which both hold)."""
        super().__init__(scope, id_)
        self.project, self.region = project, region
        quota = {"billing_project": project, "user_project_override": True} if quota_from_project else {}
        google("provider").GoogleProvider(
            self, "google", project=project, region=region, default_labels=labels, **quota
        )
        self._billing: object | None = None

    def billing(self) -> object:
        """The Google provider for Cloud Billing Budgets (alias `billing`): its calls carry the environment's project
        as their quota project. The Budget API refuses user credentials' calls without one (403; the provider's
        google_billing_budget page: "you must specify a billing_project and set user_project_override to true"),
        and `make deploy` by hand runs on a person's application-default credentials."""
        if self._billing is None:
            self._billing = google("provider").GoogleProvider(
                self,
                "google-billing",
                alias="billing",
                project=self.project,
                region=self.region,
                billing_project=self.project,
                user_project_override=True,
            )
        return self._billing

    def connect(self, cluster: object) -> None:
        """Configure Kubernetes and Helm against `cluster` (a ContainerCluster), through its DNS endpoint.

        The DNS-based endpoint serves a publicly trusted certificate and authorizes every call with IAM,
        so a deploy works from wherever the caller's Google credentials do (a CI runner outside the
        control plane's authorized networks included); no cluster CA is needed.
        """
        dns = cluster.control_plane_endpoints_config.dns_endpoint_config.endpoint  # type: ignore[attr-defined]
        endpoint = f"https://{dns}"
        # The Kubernetes provider models exec as a block (a list of one); Helm 3.x as an attribute.
        plugin = kubernetes("provider").KubernetesProviderExec(**CREDENTIAL_PLUGIN)
        kubernetes("provider").KubernetesProvider(self, "kubernetes", host=endpoint, exec=[plugin])
        helm("provider").HelmProvider(
            self, "helm", kubernetes={"host": endpoint, "exec": CREDENTIAL_PLUGIN}, helm_driver=HELM_DRIVER
        )
        # The bindings are provider 3.2.0's; the stacks pin the helm provider the platform builds and applies
        # (infra/catalogue/terraform_engine.py says why), and `tofu validate` holds what the bindings write to it.
        TerraformStack.of(self).add_override("terraform.required_providers.helm.version", HELM_PROVIDER_PIN)
