"""The policy gate: Checkov passes on the shipped stacks, fails on a real violation, and every skip is justified."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from infra.policy import SKIPS_FILE, load_skips, run_checkov


def test_every_skip_has_a_written_reason() -> None:
    skips = load_skips()
    assert skips
    assert all(len(reason.split()) >= 8 for reason in skips.values())


def test_a_skip_without_reason_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "skips.yaml"
    path.write_text("skips:\n  - id: CKV_GCP_12\n")
    with pytest.raises(ValueError, match=r"skips\[0\].*written `reason`"):
        load_skips(path)


@pytest.mark.slow
def test_shipped_stacks_pass_the_policy_gate_with_no_stale_skip(synth_dir: Path) -> None:
    result = run_checkov(synth_dir / "stacks", load_skips())
    assert result.failed == [], "\n".join(map(str, result.failed))
    assert result.stale_skips == [], f"remove from {SKIPS_FILE}: {result.stale_skips}"
    assert result.passed > 50


@pytest.mark.slow
def test_a_public_bucket_fails_the_gate(synth_dir: Path, tmp_path: Path) -> None:
    stacks = tmp_path / "stacks"
    shutil.copytree(synth_dir / "stacks" / "platform-dev", stacks / "platform-dev")
    path = stacks / "platform-dev" / "cdk.tf.json"
    stack = json.loads(path.read_text())
    for bucket in stack["resource"]["google_storage_bucket"].values():
        bucket["uniform_bucket_level_access"] = False
        bucket["public_access_prevention"] = "inherited"
    path.write_text(json.dumps(stack))
    result = run_checkov(stacks, load_skips())
    assert not result.ok
    assert {"CKV_GCP_29", "CKV_GCP_114"} <= {f.check_id for f in result.failed}


# --- Checkov's Kubernetes checks on the rendered charts ------------------------------------------------


def test_every_kubernetes_skip_has_a_written_reason(tmp_path: Path) -> None:
    from infra.policy.kubernetes import load_kubernetes_skips

    skips = load_kubernetes_skips()
    assert skips and all(len(s.reason.split()) >= 8 for s in skips)
    path = tmp_path / "skips.yaml"
    path.write_text("kubernetes_skips:\n  - id: CKV_K8S_16\n")
    with pytest.raises(ValueError, match=r"kubernetes_skips\[0\].*written `reason`"):
        load_kubernetes_skips(path)


@pytest.mark.slow
def test_rendered_charts_pass_the_kubernetes_checks_with_no_stale_skip(synth_dir: Path, tmp_path: Path) -> None:
    from infra.policy.kubernetes import load_kubernetes_skips, run_checkov_kubernetes, write_manifests

    assert write_manifests(synth_dir / "stacks", tmp_path) >= 16
    result = run_checkov_kubernetes(tmp_path, load_kubernetes_skips())
    assert result.failed == [], "\n".join(map(str, result.failed))
    assert result.stale_skips == [], f"remove from {SKIPS_FILE}: {result.stale_skips}"
    assert result.passed > 500


@pytest.mark.slow
def test_a_privileged_container_outside_kube_system_fails_the_kubernetes_checks(
    synth_dir: Path, tmp_path: Path
) -> None:
    """The skips of CKV_K8S_16 name the two kube-system DaemonSets; a privileged canary is refused."""
    import yaml

    from infra.policy.kubernetes import load_kubernetes_skips, run_checkov_kubernetes, write_manifests

    write_manifests(synth_dir / "stacks", tmp_path)
    path = tmp_path / "platform-dev" / "serve-canary.yaml"
    objects = list(yaml.safe_load_all(path.read_text()))
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privileged"] = True
    path.write_text(yaml.safe_dump_all(objects))
    result = run_checkov_kubernetes(tmp_path, load_kubernetes_skips())
    assert [(f.check_id, f.resource) for f in result.failed if f.check_id == "CKV_K8S_16"] == [
        ("CKV_K8S_16", "Deployment.ml-serving.serve-canary")
    ]


def test_a_network_policy_of_one_stack_does_not_cover_the_pods_of_another(tmp_path: Path) -> None:
    """Each stack is a cluster of its own: Checkov scans each stack's folder on its own. Scanned as one folder (as
    `checkov -d` did), the NetworkPolicy of cluster-a satisfied CKV2_K8S_6 for a Pod of cluster-b."""
    from infra.policy.kubernetes import run_checkov_kubernetes

    (tmp_path / "cluster-a").mkdir()
    (tmp_path / "cluster-a" / "policy.yaml").write_text(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: allow-web, namespace: web}\n"
        "spec:\n  podSelector: {matchLabels: {app: web}}\n  policyTypes: [Ingress]\n"
    )
    (tmp_path / "cluster-b").mkdir()
    (tmp_path / "cluster-b" / "pod.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: web, labels: {app: web}}\n"
        "spec:\n  containers: [{name: web, image: 'nginx@sha256:" + "0" * 64 + "'}]\n"
    )
    result = run_checkov_kubernetes(tmp_path, [])
    assert ("CKV2_K8S_6", "cluster-b", "Pod.web.web") in {(f.check_id, f.stack, f.resource) for f in result.failed}


def test_many_stacks_are_split_among_checkov_processes_with_every_stack_scanned_once(tmp_path: Path) -> None:
    """Past STACKS_PER_PROCESS stacks the scan is split among processes; every stack's findings come back once."""
    from infra import policy

    for i in range(policy.STACKS_PER_PROCESS + 1):
        (tmp_path / f"cluster-{i:02}").mkdir()
        (tmp_path / f"cluster-{i:02}" / "pod.yaml").write_text(
            f"apiVersion: v1\nkind: Pod\nmetadata: {{name: web-{i}, namespace: web}}\n"
            "spec:\n  containers: [{name: web, image: 'nginx@sha256:" + "0" * 64 + "'}]\n"
        )
    reports = policy.checkov_reports(tmp_path, "kubernetes")
    assert len(reports) == min(2, os.cpu_count() or 1)
    failed = [c for r in reports for c in r["results"]["failed_checks"] if c["check_id"] == "CKV2_K8S_6"]
    assert sorted(Path(c["file_path"]).parent.name for c in failed) == [
        f"cluster-{i:02}" for i in range(policy.STACKS_PER_PROCESS + 1)
    ]


def test_a_stack_whose_releases_are_all_custom_objects_passes_the_kubernetes_gate(tmp_path: Path) -> None:
    """an environment whose only release is a RayCluster (the Ironwood training environment) stopped
    `make plan` in the policy step with a traceback: Checkov scans no custom object, and no result was taken for
    a failed scan."""
    from infra.policy.kubernetes import run_checkov_kubernetes

    (tmp_path / "platform-iw").mkdir()
    (tmp_path / "platform-iw" / "ray-training.yaml").write_text(
        "apiVersion: ray.io/v1\nkind: RayCluster\nmetadata: {name: ray, namespace: ml-training}\n"
        "spec: {headGroupSpec: {template: {spec: {containers: []}}}}\n"
    )
    result = run_checkov_kubernetes(tmp_path, [])
    assert (result.passed, result.failed) == (0, [])
