"""Workload identities: Kubernetes service accounts and their bucket roles."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from infra.config.base import BucketRole, KubernetesName, Model


def gsa_account_id(identity: str) -> str:
    """Account id of the Google service account an `impersonation` identity uses."""
    return f"wi-{identity}"


class Identity(Model):
    """A workload identity: a Kubernetes service account and what it may read or write.

    `direct` grants the bucket roles to the Kubernetes service account's
    `principal://` identifier; `impersonation` creates a Google service account
    holding the roles, lets the Kubernetes service account impersonate it and
    annotates it with `iam.gke.io/gcp-service-account`.
    """

    namespace: KubernetesName

    @field_validator("namespace")
    @classmethod
    def _not_a_system_namespace(cls, value: str) -> str:
        if value.startswith("kube-"):
            raise ValueError(
                "the kube- prefix is reserved for Kubernetes system namespaces (kube-system, kube-public, "
                "kube-node-lease): give the workload its own namespace "
                "[source: https://kubernetes.io/docs/concepts/overview/working-with-objects/namespaces/]"
            )
        return value

    service_account: KubernetesName
    mode: Literal["direct", "impersonation"]
    bucket_roles: dict[str, BucketRole]
