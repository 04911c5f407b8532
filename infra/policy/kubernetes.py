"""Checkov's Kubernetes checks on every rendered chart release (issue 25): what the Helm provider will send to the
API server, each object in its release's namespace, beside the stack's own NetworkPolicies (which the Kubernetes
provider applies), so Checkov's graph check of pods without a policy sees them.

Skips live in infra/policy/checkov-skips.yaml under `kubernetes_skips`, each with its reason and, where the
check holds everywhere else, the resources it is skipped for (`Kind.namespace.name` patterns, Checkov's resource
id): a skip that no rendered object fails any more is reported as stale.
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from infra.policy import SKIPS_FILE, Finding, PolicyResult, checkov_reports

# Kinds with no namespace (Checkov counts an object without one as in `default`).
CLUSTER_SCOPED = {"ClusterQueue", "ResourceFlavor", "Namespace", "ClusterRole", "ClusterRoleBinding"}


@dataclass(frozen=True)
class KubernetesSkip:
    check_id: str
    reason: str
    resources: tuple[str, ...]  # `Kind.namespace.name` patterns (fnmatch); empty: every resource

    def covers(self, check_id: str, resource: str) -> bool:
        return check_id == self.check_id and (
            not self.resources or any(fnmatch.fnmatchcase(resource, r) for r in self.resources)
        )


def load_kubernetes_skips(path: Path = SKIPS_FILE) -> list[KubernetesSkip]:
    data = yaml.safe_load(path.read_text()) or {}
    skips = []
    for i, entry in enumerate(data.get("kubernetes_skips") or []):
        check_id = str(entry.get("id", "")).strip()
        reason = str(entry.get("reason") or "").strip()
        if not check_id or not reason:
            raise ValueError(f"{path}: kubernetes_skips[{i}]: every skip needs an `id` and a written `reason`")
        skips.append(KubernetesSkip(check_id, reason, tuple(entry.get("resources") or ())))
    return skips


def _network_policy(body: dict[str, Any]) -> dict[str, Any]:
    """A kubernetes_network_policy_v1 resource as the NetworkPolicy object the provider creates."""
    spec = body["spec"]

    def peer(p: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if "pod_selector" in p:
            out["podSelector"] = {"matchLabels": p["pod_selector"].get("match_labels") or {}}
        if "ip_block" in p:
            out["ipBlock"] = {"cidr": p["ip_block"]["cidr"]}
        return out

    ingress = [
        {
            "from": [peer(p) for p in rule.get("from") or []],
            "ports": [{"port": int(p["port"]), "protocol": p["protocol"]} for p in rule.get("ports") or []],
        }
        for rule in spec.get("ingress") or []
    ]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": body["metadata"]["name"], "namespace": body["metadata"]["namespace"]},
        "spec": {
            "podSelector": {"matchLabels": (spec.get("pod_selector") or {}).get("match_labels") or {}},
            "policyTypes": spec.get("policy_types") or [],
            "ingress": ingress,
        },
    }


def write_manifests(stacks_dir: Path, out: Path) -> int:
    """Write `<out>/<stack>/<release>.yaml` for every local chart release, and the stack's NetworkPolicies;
    return how many releases were written."""
    from infra.rules.run import stack_releases

    count = 0
    for path in sorted(stacks_dir.glob("*/cdk.tf.json")):
        stack = json.loads(path.read_text())
        folder = out / path.parent.name
        folder.mkdir(parents=True, exist_ok=True)
        for name, (release, objects) in stack_releases(stack).items():
            for obj in objects:
                if obj.get("kind") not in CLUSTER_SCOPED:
                    obj.setdefault("metadata", {}).setdefault("namespace", release["namespace"])
            (folder / f"{name}.yaml").write_text(yaml.safe_dump_all(objects, sort_keys=False))
            count += 1
        policies = (stack.get("resource", {}).get("kubernetes_network_policy_v1") or {}).values()
        if policies:
            (folder / "network-policies.yaml").write_text(
                yaml.safe_dump_all([_network_policy(p) for p in policies], sort_keys=False)
            )
    return count


def run_checkov_kubernetes(manifests: Path, skips: list[KubernetesSkip]) -> PolicyResult:
    reports = checkov_reports(manifests, "kubernetes")
    failed: list[Finding] = []
    used: set[KubernetesSkip] = set()
    passed = 0
    for report in reports:
        results = report.get("results", {})
        passed += len(results.get("passed_checks", []))
        for check in results.get("failed_checks", []):
            skip = next((s for s in skips if s.covers(check["check_id"], check["resource"])), None)
            if skip is not None:
                used.add(skip)
                continue
            stack = Path(check["file_path"]).parent.name
            failed.append(Finding(check["check_id"], check["check_name"], stack, check["resource"]))
    if passed == 0 and not failed:
        raise RuntimeError(f"checkov scanned no Kubernetes object under {manifests}")
    stale = sorted(f"{s.check_id} ({', '.join(s.resources) or 'every resource'})" for s in skips if s not in used)
    return PolicyResult(
        failed=sorted(failed, key=str), skipped_ids={s.check_id for s in used}, stale_skips=stale, passed=passed
    )
