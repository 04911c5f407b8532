"""The security posture of a synthesized stack, as the plan review shows it: what runs privileged and
why, at which Pod Security level each namespace is held, what each namespace's pods take connections from, who may
do what (every identity's grants, with the conditions that hold them to a prefix or to names), what Binary
Authorization admits and which base images are still by tag. Read from the stack (what Terraform applies) and the
catalogue's reasons."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from infra.catalogue.pod_security import PRIVILEGED_CONTAINERS, PRIVILEGED_NAMESPACES
from infra.catalogue.upstream import AWAITING_DIGEST, BASE_AWAITING_DIGEST

# The grants the identities section lists: (resource type, what the grant is on).
GRANT_TYPES = (
    "google_project_iam_member",
    "google_storage_bucket_iam_member",
    "google_artifact_registry_repository_iam_member",
    "google_service_account_iam_member",
)


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


def _resolve(stack: Mapping[str, Any], text: str) -> str:
    """A grant's reference to another resource of the stack, as a person names it: a service account by its id, a
    bucket by its name, the registry by its id."""
    resources = stack.get("resource", {})

    def name(m: re.Match[str]) -> str:
        rtype, logical = m.group(1), m.group(2)
        body = (resources.get(rtype) or {}).get(logical) or {}
        return str(body.get("account_id") or body.get("repository_id") or body.get("name") or logical)

    return re.sub(r"\$\{(google_[a-z_]+)\.([^.}]+)\.[a-z_]+\}", name, text)


def _who(stack: Mapping[str, Any], member: str) -> str:
    """A grant's member as a person names it: a Kubernetes service account (Workload Identity, either shape), one of
    the stack's service accounts by its id, anything else (a Google service agent) as written."""
    m = re.search(r"/subject/ns/([^/]+)/sa/([^/]+)$", member) or re.search(
        r"\.svc\.id\.goog\[([^/]+)/([^\]]+)\]$", member
    )
    if m:
        return f"KSA {m.group(1)}/{m.group(2)}"
    return _resolve(stack, member.split(":", 1)[-1])


def identities(stack: Mapping[str, Any]) -> list[str]:
    """Markdown table rows: every grant of the stack, by who holds it, with what it is held to."""
    rows = []
    for rtype in GRANT_TYPES:
        for grant in _of(stack, rtype):
            who = _who(stack, str(grant.get("member", "")))
            if rtype == "google_project_iam_member":
                on = "the project"
            elif rtype == "google_storage_bucket_iam_member":
                on = f"bucket {_resolve(stack, str(grant.get('bucket')))}"
            elif rtype == "google_artifact_registry_repository_iam_member":
                on = f"registry {_resolve(stack, str(grant.get('repository')))}"
            else:
                on = f"service account {_resolve(stack, str(grant.get('service_account_id')))}"
            held = (grant.get("condition") or {}).get("description") or "all of it"
            rows.append((who, str(grant.get("role", "")).removeprefix("roles/"), on, held))
    lines = ["| who | role | on | held to |", "|---|---|---|---|"]
    lines += [f"| {who} | {role} | {on} | {held} |" for who, role, on, held in sorted(rows)]
    return lines


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
    lines += ["", "Who may do what (every IAM grant of the stack; a condition holds it to a prefix or to names):", ""]
    lines += identities(stack)
    for policy in _of(stack, "google_binary_authorization_policy"):
        rule = policy.get("default_admission_rule") or {}
        patterns = policy.get("admission_whitelist_patterns") or []
        lines += [
            "",
            f"Binary Authorization: default {rule.get('evaluation_mode')} ({rule.get('enforcement_mode')}); "
            f"{len(patterns)} allowlist entries (the environment's registry, upstream images by digest); "
            f"{len(AWAITING_DIGEST)} upstream images still by tag (infra/catalogue/upstream.py AWAITING_DIGEST).",
        ]
    if BASE_AWAITING_DIGEST:
        lines += ["", "Base images still by tag (infra/catalogue/upstream.py BASE_AWAITING_DIGEST), with why:", ""]
        lines += [f"- `{image}`: {why}" for image, why in sorted(BASE_AWAITING_DIGEST.items())]
    return lines
