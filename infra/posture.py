"""The security posture of a synthesized stack, as the plan review shows it (issue 25): what runs privileged and
why, at which Pod Security level each namespace is held, what each namespace's pods take connections from, and
what Binary Authorization admits. Read from the stack (what Terraform applies) and the catalogue's reasons."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infra.catalogue.pod_security import PRIVILEGED_CONTAINERS, PRIVILEGED_NAMESPACES
from infra.catalogue.upstream import AWAITING_DIGEST


def _of(stack: Mapping[str, Any], rtype: str) -> list[dict[str, Any]]:
    return list((stack.get("resource", {}).get(rtype) or {}).values())


def _sources(rule: Mapping[str, Any]) -> str:
    peers = []
    for peer in rule.get("from") or []:
        if "ip_block" in peer:
            peers.append(peer["ip_block"]["cidr"])
        elif "pod_selector" in peer:
            labels = (peer["pod_selector"] or {}).get("match_labels") or {}
            peers.append("pods " + ", ".join(f"{k}={v}" for k, v in sorted(labels.items())))
    ports = ", ".join(f"{p['port']}/{p['protocol']}" for p in rule.get("ports") or []) or "every port"
    return f"{'; '.join(peers) or 'nothing'} on {ports}"


def security_posture(stack: Mapping[str, Any]) -> list[str]:
    """Markdown lines of the review's security posture section."""
    lines = ["| namespace | Pod Security (enforce) | why not baseline |", "|---|---|---|"]
    for ns in sorted(_of(stack, "kubernetes_namespace_v1"), key=lambda n: n["metadata"]["name"]):
        name = ns["metadata"]["name"]
        level = (ns["metadata"].get("labels") or {}).get("pod-security.kubernetes.io/enforce", "none (privileged)")
        reason = PRIVILEGED_NAMESPACES[name].why if name in PRIVILEGED_NAMESPACES else ""
        lines.append(f"| {name} | {level} | {reason} |")
    releases = {r.get("name") for r in _of(stack, "helm_release")}
    privileged = [(key, reason) for key, reason in sorted(PRIVILEGED_CONTAINERS.items()) if key[0] in releases]
    lines += ["", "Privileged containers (each refused unless listed, rule k8s.privileged-only-where-reasoned):", ""]
    lines += [f"- `{release}` / `{container}`: {r.why} ({r.source})" for (release, container), r in privileged]
    if not privileged:
        lines.append("- none")
    lines += ["", "Who reaches what (NetworkPolicies; every other connection into these namespaces is refused):", ""]
    policies = sorted(
        _of(stack, "kubernetes_network_policy_v1"), key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"])
    )
    for policy in policies:
        spec, meta = policy["spec"], policy["metadata"]
        selector = (spec.get("pod_selector") or {}).get("match_labels") or {}
        pods = ", ".join(f"{k}={v}" for k, v in sorted(selector.items())) or "every pod"
        rules = spec.get("ingress") or []
        allowed = " | ".join(_sources(r) for r in rules) if rules else "nothing (default deny)"
        lines.append(f"- `{meta['namespace']}/{meta['name']}`: {pods} \u2190 {allowed}")
    if not policies:
        lines.append("- no NetworkPolicy: every pod takes connections from anywhere in the cluster and the VPC")
    for policy in _of(stack, "google_binary_authorization_policy"):
        rule = policy.get("default_admission_rule") or {}
        patterns = policy.get("admission_whitelist_patterns") or []
        lines += [
            "",
            f"Binary Authorization: default {rule.get('evaluation_mode')} ({rule.get('enforcement_mode')}); "
            f"{len(patterns)} allowlist entries (the environment's registry, upstream images by digest); "
            f"{len(AWAITING_DIGEST)} upstream images still by tag (infra/catalogue/upstream.py AWAITING_DIGEST).",
        ]
    return lines
