"""Kubernetes itself: names and label values, extended resources, native sidecars, the TPU taint."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from infra.catalogue.accelerators import TPU_ACCELERATOR_LABEL, TPU_RESOURCE
from infra.rules import Finding, containers, pod_templates, rule, where
from infra.rules.manifest_subject import ReleaseContext, _pods, _tpu_chips
from infra.rules.sources import TPU_DOC

if TYPE_CHECKING:
    from infra.config import Environment


@rule(
    id="k8s.extended-resources-requests-equal-limits",
    system="Kubernetes",
    layer="admission",
    summary="Extended resources (google.com/tpu, nvidia.com/gpu) are whole numbers with requests equal to limits.",
    source="https://kubernetes.io/docs/tasks/configure-pod-container/extended-resource/ (cannot be overcommitted)",
    subject="manifest",
)
def _extended(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for at, _meta, spec in _pods(objects):
        for path, c in containers(spec):
            resources = c.get("resources") or {}
            requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
            for name in set(requests) | set(limits):
                if "/" not in name or name.startswith(("kubernetes.io/", "hugepages-")):
                    continue
                if name in requests and str(requests[name]) != str(limits.get(name)):
                    yield Finding(
                        f"{at}.spec.{path}.resources.requests.{name}",
                        requests[name],
                        f"must equal the limit {limits.get(name)!r}",
                    )
                if not str(limits.get(name, requests.get(name))).isdigit():
                    yield Finding(
                        f"{at}.spec.{path}.resources.limits.{name}", limits.get(name), "must be a whole number"
                    )


@rule(
    id="k8s.tpu-taint-needs-request-or-toleration",
    system="GKE / Kubernetes",
    layer="pod-start",
    summary="A pod selecting TPU nodes requests google.com/tpu or tolerates the google.com/tpu taint.",
    source=f"{TPU_DOC} (TPU nodes are tainted google.com/tpu=present:NoSchedule)",
    subject="manifest",
)
def _tpu_taint(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for at, _meta, spec in _pods(objects):
        if TPU_ACCELERATOR_LABEL not in (spec.get("nodeSelector") or {}) or _tpu_chips(spec):
            continue
        if not any(t.get("key") == TPU_RESOURCE for t in spec.get("tolerations") or []):
            yield Finding(
                f"{at}.spec.tolerations", spec.get("tolerations"), "add a google.com/tpu toleration or request chips"
            )


@rule(
    id="k8s.native-sidecars-need-1.29",
    system="Kubernetes",
    layer="admission",
    summary="Init containers with restartPolicy: Always (native sidecars) need Kubernetes 1.29 or later.",
    source="https://kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/ (beta, on by default, in 1.29)",
    subject="manifest",
)
def _sidecars(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    version = ctx.min_master_version()
    numbers = tuple(int(n) for n in re.findall(r"[0-9]+", version or "")[:2])
    if not version or numbers >= (1, 29):
        return
    for at, _meta, spec in _pods(objects):
        for i, c in enumerate(spec.get("initContainers") or []):
            if c.get("restartPolicy") == "Always":
                yield Finding(
                    f"{at}.spec.initContainers[{i}].restartPolicy", "Always", f"the cluster may run {version}"
                )


# The API server validates these kinds' names as path segments, not DNS names.
RBAC_KINDS = ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")


@rule(
    id="k8s.names-and-label-values",
    system="Kubernetes API server",
    layer="admission",
    summary=(
        "Object names are DNS-1123 subdomains (253), RBAC objects' path segment names (no '/' or '%', not '.' or "
        "'..': `system:auth-delegator` is one); label values are at most 63 characters of [-A-Za-z0-9_.]."
    ),
    source=(
        "https://kubernetes.io/docs/concepts/overview/working-with-objects/names/ and "
        "https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set; "
        "kubernetes pkg/apis/rbac/validation/validation.go (ValidateRBACName = path.IsValidPathSegmentName)"
    ),
    subject="manifest",
)
def _names(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for obj in objects:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        if obj.get("kind") in RBAC_KINDS:
            if not name or name in (".", "..") or "/" in name or "%" in name:
                yield Finding(
                    f"{where(obj)}: metadata.name", name, "a path segment name: no '/' or '%', not '.' or '..'"
                )
        elif len(name) > 253 or not re.match(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", name):
            yield Finding(f"{where(obj)}: metadata.name", name, "a DNS-1123 subdomain of at most 253 characters")
        labelled = [("metadata.labels", meta.get("labels") or {})]
        labelled += [
            (f"{p}.metadata.labels", (t.get("metadata") or {}).get("labels") or {}) for p, t in pod_templates(obj)
        ]
        for path, labels in labelled:
            for key, value in labels.items():
                if len(str(value)) > 63 or not re.match(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$", str(value)):
                    yield Finding(f"{where(obj)}: {path}.{key}", value, "at most 63 characters of [-A-Za-z0-9_.]")


@rule(
    id="k8s.service-account-in-the-pods-namespace",
    system="Kubernetes (ServiceAccount admission)",
    layer="admission",
    summary=(
        "A pod runs as a Kubernetes service account of its own namespace: a checkpoint conversion Job runs in its "
        "deployment's namespace, so its identity's service account is in that namespace, or its pods are refused "
        "at admission (service account not found)."
    ),
    source=(
        "https://kubernetes.io/docs/concepts/security/service-accounts/ (a ServiceAccount is a namespaced object; "
        "a Pod uses one of its own namespace); https://kubernetes.io/docs/reference/access-authn-authz/"
        "admission-controllers/#serviceaccount"
    ),
    subject="environment",
)
def _conversion_namespace(env: Environment) -> Iterator[Finding]:
    for key, d in env.serving.items():
        conversion = getattr(d, "conversion", None)
        if conversion is None:
            continue
        identity, served = env.identities.get(conversion.identity), env.identities.get(d.identity)
        if identity is not None and served is not None and identity.namespace != served.namespace:
            yield Finding(
                ("serving", key, "conversion", "identity"),
                conversion.identity,
                f"its namespace {identity.namespace!r} is not the deployment's ({served.namespace!r}, identity "
                f"{d.identity!r}): the Job runs in the release's namespace, as a service account of that namespace",
            )
