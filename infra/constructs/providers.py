"""Providers: Google, and Kubernetes and Helm configured from the cluster in the same stack."""

from __future__ import annotations

from cdktf import Fn
from constructs import Construct

from infra.bindings import google, helm, kubernetes


class Providers(Construct):
    """The Google provider, plus Kubernetes and Helm providers that talk to `cluster`.

    The Kubernetes and Helm providers authenticate with the caller's Google
    access token, read at plan time; nothing is read at synth time.
    """

    def __init__(self, scope: Construct, id_: str, *, project: str, region: str, labels: dict[str, str]) -> None:
        super().__init__(scope, id_)
        google("provider").GoogleProvider(self, "google", project=project, region=region, default_labels=labels)
        self._client = google("data_google_client_config").DataGoogleClientConfig(self, "client")

    def connect(self, cluster: object) -> None:
        """Configure Kubernetes and Helm against `cluster` (a ContainerCluster)."""
        endpoint = f"https://{cluster.endpoint}"  # type: ignore[attr-defined]
        ca = Fn.base64decode(cluster.master_auth.cluster_ca_certificate)  # type: ignore[attr-defined]
        token = self._client.access_token
        kubernetes("provider").KubernetesProvider(
            self, "kubernetes", host=endpoint, token=token, cluster_ca_certificate=ca
        )
        helm("provider").HelmProvider(
            self, "helm", kubernetes={"host": endpoint, "token": token, "cluster_ca_certificate": ca}
        )
