"""The policy gate: Checkov passes on the shipped stacks, fails on a real violation, and every skip is justified."""

from __future__ import annotations

import json
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


# --- Checkov's Kubernetes checks on the rendered charts (issue 25) ------------------------------------------------


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
