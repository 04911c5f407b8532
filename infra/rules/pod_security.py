"""Kubernetes Pod Security admission and NetworkPolicy: every workload namespace
enforces a Pod Security level and isolates its pods for ingress; privileged containers only where a reason is
written down.

The levels and reasons: infra/catalogue/pod_security.py. The policies: infra/constructs/network_policy.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from infra.catalogue.pod_security import (
    PRIVILEGED_CONTAINERS,
    PRIVILEGED_NAMESPACES,
    PSA_DOC,
    PSS_DOC,
    namespace_level,
)
from infra.rules import Finding, containers, rule
from infra.rules.manifest_subject import ReleaseContext, _pods
from infra.rules.terraform_subject import resources

NETPOL_DOC = "https://kubernetes.io/docs/concepts/services-networking/network-policies/"
ENFORCE = "pod-security.kubernetes.io/enforce"
# Pod Security Standards, baseline: the capabilities a container may add (PSS_DOC, "Capabilities").
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP",
    "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip


def _namespaces(stack: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The stack's namespaces by name."""
    return {body["metadata"]["name"]: body for _, body in resources(stack, "kubernetes_namespace_v1")}


def enforced_level(stack: dict[str, Any], namespace: str) -> str | None:
    """The Pod Security level the stack's namespace enforces; None when the stack does not create it."""
    body = _namespaces(stack).get(namespace)
    if body is None:
        return None
    return (body["metadata"].get("labels") or {}).get(ENFORCE, "privileged")  # unlabelled: nothing is enforced


@rule(
    id="k8s.namespace-enforces-pod-security",
    system="Kubernetes Pod Security admission",
    layer="admission",
    summary=(
        "Every workload namespace enforces a Pod Security level: baseline or restricted, privileged only where "
        "infra/catalogue/pod_security.py gives the upstream reason (an unlabelled namespace enforces nothing)."
    ),
    source=f"{PSA_DOC} (the enforce label; without it the namespace is privileged); {PSS_DOC}",
    subject="terraform",
)
def _namespace_levels(stack: dict[str, Any]) -> Iterator[Finding]:
    for name, body in sorted(_namespaces(stack).items()):
        level = (body["metadata"].get("labels") or {}).get(ENFORCE)
        at = f"kubernetes_namespace_v1.{name}: metadata.labels.{ENFORCE}"
        if level not in ("privileged", "baseline", "restricted"):
            yield Finding(at, level, "enforce baseline or restricted (a namespace without it admits privileged pods)")
        elif level == "privileged" and name not in PRIVILEGED_NAMESPACES:
            yield Finding(
                at, level, "privileged is kept only where infra/catalogue/pod_security.py names the upstream reason"
            )


@rule(
    id="k8s.namespace-default-deny-ingress",
    system="Kubernetes NetworkPolicy (GKE Dataplane V2)",
    layer="admission",
    summary=(
        "Every workload namespace has a NetworkPolicy that selects all its pods for ingress and allows nothing: "
        "a pod no policy selects accepts every connection."
    ),
    source=f"{NETPOL_DOC} (the two sorts of pod isolation; 'Default deny all ingress traffic')",
    subject="terraform",
)
def _default_deny(stack: dict[str, Any]) -> Iterator[Finding]:
    denied: set[str] = set()
    for _, body in resources(stack, "kubernetes_network_policy_v1"):
        spec = body.get("spec") or {}
        selector = spec.get("pod_selector") or {}
        if (
            not selector.get("match_labels")
            and not selector.get("match_expressions")
            and "Ingress" in (spec.get("policy_types") or [])
            and not spec.get("ingress")
        ):
            denied.add(body["metadata"]["namespace"])
    for name in sorted(set(_namespaces(stack)) - denied):
        yield Finding(
            f"kubernetes_namespace_v1.{name}",
            name,
            "no default-deny ingress NetworkPolicy (empty podSelector, policyTypes [Ingress], no rules) in it",
        )


@rule(
    id="k8s.privileged-only-where-reasoned",
    system="Kubernetes Pod Security Standards",
    layer="admission",
    summary=(
        "A container runs privileged only when infra/catalogue/pod_security.py names it (release, container) "
        "with the upstream reason."
    ),
    source=f"{PSS_DOC} (baseline: Privileged Containers); the reasons' sources in infra/catalogue/pod_security.py",
    subject="manifest",
)
def _privileged(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for at, _meta, spec in _pods(objects):
        for path, c in containers(spec):
            if (c.get("securityContext") or {}).get("privileged") and (ctx.name, c.get("name")) not in (
                PRIVILEGED_CONTAINERS
            ):
                yield Finding(
                    f"{at}.spec.{path}.securityContext.privileged",
                    True,
                    f"({ctx.name!r}, {c.get('name')!r}) has no reason to run privileged in "
                    "infra/catalogue/pod_security.py PRIVILEGED_CONTAINERS",
                )


@rule(
    id="k8s.pods-meet-their-namespaces-pod-security-level",
    system="Kubernetes Pod Security admission",
    layer="admission",
    summary=(
        "Pods in a namespace enforcing baseline use no host namespaces, hostPath, host ports, privileged "
        "containers or capabilities beyond baseline's list: admission refuses them."
    ),
    source=f"{PSS_DOC} (Baseline: Host Namespaces, Privileged Containers, Capabilities, HostPath Volumes, Host Ports)",
    subject="manifest",
)
def _baseline(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    level = enforced_level(ctx.stack, ctx.namespace) or namespace_level(ctx.namespace)
    if ctx.namespace not in _namespaces(ctx.stack) or level == "privileged":
        return  # a namespace the stack does not create (kube-system, the controllers'), or one kept privileged
    for at, _meta, spec in _pods(objects):
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            if spec.get(key):
                yield Finding(f"{at}.spec.{key}", True, f"{ctx.namespace} enforces {level}")
        for i, volume in enumerate(spec.get("volumes") or []):
            if "hostPath" in volume:
                yield Finding(
                    f"{at}.spec.volumes[{i}].hostPath", volume["hostPath"], f"{ctx.namespace} enforces {level}"
                )
        for path, c in containers(spec):
            sc = c.get("securityContext") or {}
            if sc.get("privileged"):
                yield Finding(f"{at}.spec.{path}.securityContext.privileged", True, f"{ctx.namespace} enforces {level}")
            extra = sorted(set((sc.get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES)
            if extra:
                yield Finding(
                    f"{at}.spec.{path}.securityContext.capabilities.add", extra, f"{ctx.namespace} enforces {level}"
                )
            for j, port in enumerate(c.get("ports") or []):
                if port.get("hostPort"):
                    yield Finding(
                        f"{at}.spec.{path}.ports[{j}].hostPort", port["hostPort"], f"{ctx.namespace} enforces {level}"
                    )
