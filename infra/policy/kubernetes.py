"""Checkov's Kubernetes checks on every rendered chart release: what the Helm provider will send to the
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

from infra.cdk.layout import STACK_FILE
from infra.policy import SKIPS_FILE, Finding, PolicyResult, checkov_reports

# libyaml's dumper where PyYAML has it: hundreds of releases at 32 environments.
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

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


def _releases(stack: dict[str, Any], rendered: Path | None) -> dict[str, tuple[str, list[dict[str, Any]]]]:
    """(namespace, objects) of each local chart release of `stack`, by release name: rendered here, or read from
    `rendered` (`<outdir>/rendered/<stack>/`, written by the rules step of the same `make plan`)."""
    from infra.rules.run import local_releases, stack_releases

    if rendered is None:
        return {name: (release["namespace"], objs) for name, (release, objs) in stack_releases(stack).items()}
    out = {}
    for release in local_releases(stack):
        path = rendered / f"{release['name']}.json"
        if not path.exists():
            raise RuntimeError(f"{path}: release {release['name']} was not rendered (the rules step writes it)")
        out[release["name"]] = (release["namespace"], json.loads(path.read_text()))
    return out


def write_manifests(stacks_dir: Path, out: Path, rendered: Path | None = None) -> int:
    """Write `<out>/<stack>/<release>.yaml` for every local chart release, and the stack's NetworkPolicies;
    return how many releases were written. With `rendered` (`<outdir>/rendered`), the releases are the ones the
    rules step rendered, not rendered again."""
    count = 0
    for path in sorted(stacks_dir.glob(f"*/{STACK_FILE}")):
        stack = json.loads(path.read_text())
        folder = out / path.parent.name
        folder.mkdir(parents=True, exist_ok=True)
        releases = _releases(stack, rendered / path.parent.name if rendered is not None else None)
        for name, (namespace, objects) in releases.items():
            for obj in objects:
                if obj.get("kind") not in CLUSTER_SCOPED:
                    obj.setdefault("metadata", {}).setdefault("namespace", namespace)
            (folder / f"{name}.yaml").write_text(yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False))
            count += 1
        policies = (stack.get("resource", {}).get("kubernetes_network_policy_v1") or {}).values()
        if policies:
            (folder / "network-policies.yaml").write_text(
                yaml.dump_all([_network_policy(p) for p in policies], Dumper=_Dumper, sort_keys=False)
            )
    return count


# The kinds Checkov's Kubernetes checks read (a release of custom objects alone, a RayCluster say, gives it
# nothing to scan: before, an environment whose releases were all custom objects failed `make plan` here).
CHECKED_KINDS = frozenset(
    {"Pod", "Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "ReplicationController", "Job", "CronJob"}
)


def _workloads(manifests: Path) -> int:
    """How many objects of CHECKED_KINDS the manifests under `manifests` hold."""
    count = 0
    for path in manifests.rglob("*.yaml"):
        for obj in yaml.safe_load_all(path.read_text()):
            count += isinstance(obj, dict) and obj.get("kind") in CHECKED_KINDS
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
    if passed == 0 and not failed and _workloads(manifests):
        # Objects Checkov checks were written and none came back: the scan itself failed.
        raise RuntimeError(f"checkov scanned no Kubernetes object under {manifests}")
    stale = sorted(f"{s.check_id} ({', '.join(s.resources) or 'every resource'})" for s in skips if s not in used)
    return PolicyResult(
        failed=sorted(failed, key=str), skipped_ids={s.check_id for s in used}, stale_skips=stale, passed=passed
    )
