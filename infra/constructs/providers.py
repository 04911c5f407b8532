"""Providers: Google, and Kubernetes and Helm configured from the cluster in the same stack."""

from __future__ import annotations

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
        """Configure Kubernetes and Helm against `cluster` (a ContainerCluster), through its DNS endpoint.

        The DNS-based endpoint serves a publicly trusted certificate and authorizes every call with IAM,
        so a deploy works from wherever the caller's Google credentials do (a CI runner outside the
        control plane's authorized networks included); no cluster CA is needed.
        """
        dns = cluster.control_plane_endpoints_config.dns_endpoint_config.endpoint  # type: ignore[attr-defined]
        endpoint = f"https://{dns}"
        token = self._client.access_token
        kubernetes("provider").KubernetesProvider(self, "kubernetes", host=endpoint, token=token)
        helm("provider").HelmProvider(self, "helm", kubernetes={"host": endpoint, "token": token})
