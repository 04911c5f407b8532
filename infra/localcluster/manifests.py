"""The stack's Kubernetes half as the API server receives it: the order Terraform applies it in, each
`kubernetes_*` resource as the object the kubernetes provider sends, and the Terraform references a value holds.

Only what the stacks use is translated; a field this module does not know is refused by name (a resource is never
applied with part of it dropped). Sources: the kubernetes provider's resource schemas at the pinned version
(hashicorp/terraform-provider-kubernetes v2.38.0 kubernetes/resource_kubernetes_namespace_v1.go,
resource_kubernetes_service_account_v1.go, resource_kubernetes_network_policy_v1.go, structures_network_policy.go).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from infra.catalogue import terraform_google

KUBERNETES_TYPES = ("kubernetes_namespace_v1", "kubernetes_service_account_v1", "kubernetes_network_policy_v1")
_REFERENCE = re.compile(r"\$\{([a-z0-9_]+)\.([A-Za-z0-9_-]+)\.([a-z0-9_]+)\}")


class UnsupportedResource(ValueError):
    """A resource or field deploy-local cannot send as the provider would: named, with what is known."""


def kubernetes_half(stack: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(address, body) of every helm_release and kubernetes_* resource, in an order Terraform could apply them:
    each after everything it depends on (depends_on and references among them; the Google half is not here)."""
    resources = stack.get("resource") or {}
    unknown = sorted(t for t in resources if t.startswith("kubernetes_") and t not in KUBERNETES_TYPES)
    if unknown:
        raise UnsupportedResource(f"resource types deploy-local does not translate: {', '.join(unknown)}")
    bodies = {
        f"{rtype}.{key}": body
        for rtype, items in resources.items()
        if rtype == "helm_release" or rtype in KUBERNETES_TYPES
        for key, body in items.items()
    }

    ordered: list[str] = []
    done: set[str] = set()

    def visit(address: str, path: tuple[str, ...]) -> None:
        if address in done:
            return
        if address in path:
            raise UnsupportedResource(f"a dependency cycle: {' -> '.join((*path, address))}")
        for other in sorted(_needs(bodies[address], set(bodies))):
            visit(other, (*path, address))
        done.add(address)
        ordered.append(address)

    for address in sorted(bodies):
        visit(address, ())
    return [(a, bodies[a]) for a in ordered]


def destroy_order(stack: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(address, body) of the Kubernetes half in the order a destroy takes it: each resource before everything it
    depends on, as Terraform destroys. Terraform destroys resources that do not depend on each other in any order
    (in parallel); of those orders this takes the harshest: a controller's release (one from a chart repository) as
    soon as nothing that depends on it is left, then the other releases, the namespaces last. An object whose
    finalizer only its controller removes, left in a namespace the destroy still has to delete, then strands that
    namespace here on every run, not only on the runs the cloud's timing happens to order that way."""
    ordered = kubernetes_half(stack)
    bodies = dict(ordered)
    dependents: dict[str, set[str]] = {address: set() for address in bodies}
    for address, body in ordered:
        for other in _needs(body, set(bodies)):
            dependents[other].add(address)

    def harshness(address: str) -> tuple[int, str]:
        rtype = address.split(".", 1)[0]
        if rtype == "helm_release":
            return (0 if bodies[address].get("repository") else 1, address)
        return (3 if rtype == "kubernetes_namespace_v1" else 2, address)

    out: list[tuple[str, dict[str, Any]]] = []
    gone: set[str] = set()
    while len(gone) < len(bodies):
        ready = [a for a in bodies if a not in gone and dependents[a] <= gone]
        address = min(ready, key=harshness)
        gone.add(address)
        out.append((address, bodies[address]))
    return out


def _needs(body: dict[str, Any], known: set[str]) -> set[str]:
    """The addresses among `known` that `body` depends on: its depends_on and the resources it references."""
    wanted = set(body.get("depends_on") or []) | {f"{t}.{n}" for t, n, _ in _REFERENCE.findall(str(body))}
    return wanted & known


def resolve(value: Any, stack: dict[str, Any]) -> Any:
    """`value` with each Terraform reference replaced by what it would be after the Google half's apply: a service
    account's email is `<account_id>@<project>.iam.gserviceaccount.com`. Any other reference is refused by name."""
    if isinstance(value, dict):
        return {k: resolve(v, stack) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, stack) for v in value]
    if not isinstance(value, str) or "${" not in value:
        return value

    def one(match: re.Match[str]) -> str:
        rtype, name, attribute = match.groups()
        body = (stack.get("resource") or {}).get(rtype, {}).get(name)
        if rtype == "google_service_account" and attribute == "email" and body is not None:
            return f"{body['account_id']}@{body['project']}.iam.gserviceaccount.com"
        raise UnsupportedResource(f"the reference ${{{rtype}.{name}.{attribute}}} is not known offline")

    return _REFERENCE.sub(one, value)


def _check(where: str, body: dict[str, Any], known: set[str]) -> None:
    extra = sorted(set(body) - known)
    if extra:
        raise UnsupportedResource(
            f"{where}: field(s) {', '.join(extra)} not translated (known: {', '.join(sorted(known))})"
        )


def _metadata(where: str, body: dict[str, Any]) -> dict[str, Any]:
    meta = body.get("metadata") or {}
    _check(f"{where}.metadata", meta, {"name", "namespace", "labels", "annotations"})
    return {k: v for k, v in meta.items() if v not in (None, {}, "")}


def _selector(where: str, selector: dict[str, Any] | None) -> dict[str, Any]:
    selector = selector or {}
    _check(where, selector, {"match_labels", "match_expressions"})
    out: dict[str, Any] = {}
    if selector.get("match_labels"):
        out["matchLabels"] = selector["match_labels"]
    if selector.get("match_expressions"):
        out["matchExpressions"] = [
            {"key": e["key"], "operator": e["operator"], **({"values": e["values"]} if e.get("values") else {})}
            for e in selector["match_expressions"]
        ]
    return out


def _peer(where: str, peer: dict[str, Any]) -> dict[str, Any]:
    _check(where, peer, {"pod_selector", "namespace_selector", "ip_block"})
    out: dict[str, Any] = {}
    if "pod_selector" in peer:
        out["podSelector"] = _selector(f"{where}.pod_selector", peer["pod_selector"])
    if "namespace_selector" in peer:
        out["namespaceSelector"] = _selector(f"{where}.namespace_selector", peer["namespace_selector"])
    if "ip_block" in peer:
        block = peer["ip_block"]
        _check(f"{where}.ip_block", block, {"cidr", "except"})
        out["ipBlock"] = {"cidr": block["cidr"], **({"except": block["except"]} if block.get("except") else {})}
    return out


def _ports(where: str, ports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for i, port in enumerate(ports or []):
        _check(f"{where}[{i}]", port, {"port", "protocol", "end_port"})
        value = port.get("port")
        entry: dict[str, Any] = {"protocol": port.get("protocol", "TCP")}
        if value not in (None, ""):
            entry["port"] = int(value) if str(value).isdigit() else value
        if port.get("end_port"):
            entry["endPort"] = int(port["end_port"])
        out.append(entry)
    return out


def _rules(where: str, rules: list[dict[str, Any]], peers: str) -> list[dict[str, Any]]:
    out = []
    for i, rule in enumerate(rules or []):
        _check(f"{where}[{i}]", rule, {peers, "ports"})
        entry: dict[str, Any] = {}
        if rule.get(peers):
            entry[peers] = [_peer(f"{where}[{i}].{peers}[{j}]", p) for j, p in enumerate(rule[peers])]
        if rule.get("ports"):
            entry["ports"] = _ports(f"{where}[{i}].ports", rule["ports"])
        out.append(entry)
    return out


def _namespace(where: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": _metadata(where, body)}


def _service_account(where: str, body: dict[str, Any]) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata(where, body)}
    if "automount_service_account_token" in body:
        obj["automountServiceAccountToken"] = bool(body["automount_service_account_token"])
    return obj


def _network_policy(where: str, body: dict[str, Any]) -> dict[str, Any]:
    spec = body.get("spec") or {}
    _check(f"{where}.spec", spec, {"pod_selector", "ingress", "egress", "policy_types"})
    out: dict[str, Any] = {"podSelector": _selector(f"{where}.spec.pod_selector", spec.get("pod_selector"))}
    if spec.get("policy_types"):
        out["policyTypes"] = spec["policy_types"]
    if "ingress" in spec:
        out["ingress"] = _rules(f"{where}.spec.ingress", spec["ingress"], "from")
    if "egress" in spec:
        out["egress"] = _rules(f"{where}.spec.egress", spec["egress"], "to")
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(where, body),
        "spec": out,
    }


_TRANSLATE: dict[str, tuple[Callable[[str, dict[str, Any]], dict[str, Any]], set[str]]] = {
    "kubernetes_namespace_v1": (_namespace, {"metadata"}),
    "kubernetes_service_account_v1": (_service_account, {"metadata", "automount_service_account_token"}),
    "kubernetes_network_policy_v1": (_network_policy, {"metadata", "spec"}),
}
# Terraform's own arguments of every resource, which are not sent to the API server.
META_ARGUMENTS = terraform_google.META_ARGUMENTS | {"timeouts"}


def manifest(address: str, body: dict[str, Any], stack: dict[str, Any]) -> dict[str, Any]:
    """The object the kubernetes provider sends for the resource at `address`."""
    rtype = address.split(".", 1)[0]
    translate, known = _TRANSLATE[rtype]
    _check(address, body, known | META_ARGUMENTS)
    translated: dict[str, Any] = resolve(translate(address, body), stack)
    return translated
