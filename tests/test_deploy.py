"""Deploying a fresh environment and tearing one down, offline: the steps, the guards and the exact CLI calls.

A stand-in for the cdktf CLI records how it was called and synthesizes the app the way `cdktf deploy` does
(CDKTF_OUTDIR set), so the test sees exactly the stack a real deploy would apply.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from infra.catalogue.cluster_toolkit import PACKER_VERSION, TERRAFORM_VERSION
from infra.config import ENVIRONMENTS_DIR, PLACEHOLDER_DIGEST
from tests.conftest import REPO

STAND_IN = """
import json, os, subprocess, sys
out = os.environ["STAND_IN_DIR"]
record = {"argv": sys.argv[1:], "omit": os.environ.get("PLATFORM_OMIT_UNBUILT")}
record["envs"] = os.environ.get("PLATFORM_ENVS")
with open(os.path.join(out, "calls.jsonl"), "a") as f:
    f.write(json.dumps(record) + "\\n")
if sys.argv[1] in ("deploy", "destroy"):  # cdktf synthesizes the app first
    env = {**os.environ, "CDKTF_OUTDIR": os.path.join(out, "cdktf.out")}
    sys.exit(subprocess.run([sys.executable, "-m", "infra"], env=env).returncode)
"""

# gcluster's stand-in: records its arguments and the blueprint it was given (as `gcluster deploy` reads it).
GCLUSTER = """
import json, os, sys
out = os.environ["STAND_IN_DIR"]
record = {"gcluster": sys.argv[1:]}
if sys.argv[1] in ("deploy", "create"):
    record["blueprint_exists"] = os.path.exists(sys.argv[2])
with open(os.path.join(out, "gcluster.jsonl"), "a") as f:
    f.write(json.dumps(record) + "\\n")
sys.exit(int(os.environ.get("GCLUSTER_EXIT", "0")))
"""


# `python -m infra.vms`'s stand-in: records its arguments (`down --env <env> --group <group>`).
VMS = """
import json, os, sys
with open(os.path.join(os.environ["STAND_IN_DIR"], "vms.jsonl"), "a") as f:
    f.write(json.dumps({"vms": sys.argv[1:]}) + "\\n")
sys.exit(int(os.environ.get("VMS_EXIT", "0")))
"""


def _tools(tmp_path: Path, terraform: str = TERRAFORM_VERSION, packer: str = PACKER_VERSION) -> Path:
    """A PATH directory with terraform and packer that answer `version` as the real ones do."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool, line in (("terraform", f"Terraform v{terraform}"), ("packer", f"Packer v{packer}")):
        script = bin_dir / tool
        script.write_text(f"#!/bin/sh\necho '{line}'\n")
        script.chmod(0o755)
    return bin_dir


def _run(
    args: list[str], tmp_path: Path, envs_dir: Path = ENVIRONMENTS_DIR, **extra: str
) -> subprocess.CompletedProcess[str]:
    stand_in = tmp_path / "cdktf_stand_in.py"
    stand_in.write_text(STAND_IN)
    gcluster = tmp_path / "gcluster_stand_in.py"
    gcluster.write_text(GCLUSTER)
    vms = tmp_path / "vms_stand_in.py"
    vms.write_text(VMS)
    bin_dir = tmp_path / "bin" if (tmp_path / "bin").exists() else _tools(tmp_path)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PLATFORM_CDKTF": f"{sys.executable} {stand_in}",
        "PLATFORM_GCLUSTER": f"{sys.executable} {gcluster}",
        "PLATFORM_VMS": f"{sys.executable} {vms}",
        "STAND_IN_DIR": str(tmp_path),
        "PLATFORM_ENVIRONMENTS_DIR": str(envs_dir),
        **extra,
    }
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "scripts.deploy", *args],
        cwd=work,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
    )


def _calls(tmp_path: Path, tool: str = "calls") -> list[dict[str, Any]]:
    path = tmp_path / f"{tool}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _releases(tmp_path: Path, env: str) -> set[str]:
    stack = json.loads((tmp_path / "cdktf.out" / "stacks" / f"platform-{env}" / "cdk.tf.json").read_text())
    return {r["name"] for r in stack["resource"]["helm_release"].values()}


def _built(tmp_path: Path) -> Path:
    """The environments after `make image` pinned every image of dev (digests no longer zero)."""
    envs = tmp_path / "envs"
    envs.mkdir()
    for path in ENVIRONMENTS_DIR.glob("*.yaml"):
        (envs / path.name).write_text(path.read_text().replace(PLACEHOLDER_DIGEST, "sha256:" + "ab" * 32))
    return envs


def test_a_fresh_environment_is_deployed_in_three_steps(tmp_path: Path) -> None:
    # 0. A plain deploy with unbuilt images is refused, naming the sequence.
    refused = _run(["deploy", "dev"], tmp_path)
    assert refused.returncode == 2
    unbuilt = "checkpoint-converter, server, trainer, trainer-gpu, vllm-tpu"
    assert f"{unbuilt} still at the placeholder digest" in refused.stderr
    assert "1. make deploy-infra ENV=dev" in refused.stderr
    assert "2. make image IMAGE=trainer ENV=dev" in refused.stderr and "3. make deploy ENV=dev" in refused.stderr
    assert _calls(tmp_path) == []
    # 1. Infrastructure first: every release that runs an unbuilt image is left out, the registry is not.
    first = _run(["deploy", "dev", "--infra-only", "--auto-approve"], tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    left_out = (
        "gpu-training, ray-training, serve-canary, serve-llama405b, serve-llama70b-disagg, serve-llama70b-vllm, "
        "serve-llama70b-vllm-mh"
    )
    assert sorted(re.search(r"left out until their images are built: (.*)", first.stdout)[1].split(", ")) == (
        left_out.split(", ")
    )
    assert _calls(tmp_path)[-1] == {"argv": ["deploy", "platform-dev", "--auto-approve"], "omit": "1", "envs": "dev"}
    releases = _releases(tmp_path, "dev")
    assert "ray-training" not in releases and "serve-llama405b" not in releases
    assert {"jobset", "kueue", "lws", "kueue-queues", "nccl-test", "serve-saxml"} <= releases
    stack = json.loads((tmp_path / "cdktf.out" / "stacks" / "platform-dev" / "cdk.tf.json").read_text())
    assert stack["resource"]["google_artifact_registry_repository"], "the registry images are pushed to"
    # 2. `make image` pins the digests (here: written directly). 3. Deploy everything.
    done = _run(["deploy", "dev", "--auto-approve"], tmp_path, _built(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    assert _calls(tmp_path)[-1] == {"argv": ["deploy", "platform-dev", "--auto-approve"], "omit": None, "envs": "dev"}
    assert {"ray-training", "serve-llama405b", "serve-canary", "gpu-training"} <= _releases(tmp_path, "dev")


def test_dry_runs_change_nothing(tmp_path: Path) -> None:
    done = _run(["deploy", "dev", "--infra-only", "--dry-run"], tmp_path)
    assert done.returncode == 0
    assert "platform-dev: left out until their images are built: ray-training, " in done.stdout
    assert "dry run, would run: PLATFORM_ENVS=dev PLATFORM_OMIT_UNBUILT=1 " in done.stdout
    assert any(line.endswith("deploy platform-dev") for line in done.stdout.splitlines())
    assert _calls(tmp_path) == [] and _calls(tmp_path, "gcluster") == []
    assert not (tmp_path / "work" / "cdktf.out").exists(), "a dry run writes nothing"


def test_destroy_shows_what_goes_and_needs_the_stack_name_typed(tmp_path: Path) -> None:
    refused = _run(["destroy", "dev"], tmp_path)
    assert refused.returncode == 3
    assert re.search(r"platform-dev: destroy would remove \d+ resources:", refused.stdout)
    assert "stateful: google_container_cluster ml-platform-dev" in refused.stdout
    assert "stateful: google_storage_bucket acme-ml-platform-dev-checkpoints" in refused.stdout
    assert "not confirmed: pass CONFIRM=platform-dev" in refused.stderr
    assert "nothing was changed" in refused.stderr
    assert _calls(tmp_path) == []
    done = _run(["destroy", "dev", "--confirm", "platform-dev", "--auto-approve"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert _calls(tmp_path)[-1]["argv"] == ["destroy", "platform-dev", "--auto-approve"]


def test_destroy_refuses_prod_and_every_protected_resource(tmp_path: Path) -> None:
    refused = _run(["destroy", "prod", "--confirm", "platform-prod", "--dry-run"], tmp_path)
    assert refused.returncode == 3
    assert "protected: google_container_cluster ml-platform-prod (set cluster.deletion_protection: false" in (
        refused.stderr
    )
    assert "protected: google_storage_bucket acme-ml-platform-prod-checkpoints (set buckets.<key>.protect" in (
        refused.stderr
    )
    assert "protected: google_artifact_registry_repository" in refused.stderr
    assert _calls(tmp_path) == []


@pytest.mark.slow
def test_make_destroy_prod_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        ["make", "-s", "destroy", "ENV=prod", "DRY_RUN=1", "CONFIRM=platform-prod"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PLATFORM_CDKTF": "false"},
    )
    assert done.returncode != 0
    assert "platform-prod: destroy refused; nothing was changed" in done.stderr


def test_the_slurm_cluster_is_deployed_after_the_stack_with_the_pinned_tools(tmp_path: Path) -> None:
    done = _run(["deploy", "dev", "--auto-approve"], tmp_path, _built(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    assert _calls(tmp_path)[-1]["argv"] == ["deploy", "platform-dev", "--auto-approve"]
    (gcluster,) = _calls(tmp_path, "gcluster")
    folder = "cdktf.out/slurm/dev"
    assert gcluster == {
        "gcluster": [
            "deploy", f"{folder}/blueprint.yaml", "-d", f"{folder}/deployment.yaml", "-o", f"{folder}/gcluster", "-w",
            "--auto-approve",
        ],
        "blueprint_exists": True,
    }  # fmt: skip
    assert re.search(r"slurm: cdktf.out/slurm/dev/blueprint.yaml: 10 modules, .*: valid", done.stdout)


def test_a_slurm_deploy_is_refused_with_the_wrong_terraform_or_packer(tmp_path: Path) -> None:
    _tools(tmp_path, terraform="1.11.4", packer="1.15.0")
    done = _run(["deploy", "dev", "--auto-approve"], tmp_path, _built(tmp_path))
    assert done.returncode == 2
    assert "terraform 1.11.4: the platform pins terraform 1.12.2" in done.stderr
    assert "packer 1.15.0: the platform pins packer 1.15.3" in done.stderr
    assert _calls(tmp_path, "gcluster") == []


def test_a_dry_run_prints_the_slurm_commands_and_skips_the_image_when_asked(tmp_path: Path) -> None:
    done = _run(["deploy", "dev", "--skip-image", "--dry-run"], tmp_path, _built(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("dry run, would run:")]
    assert lines[0].endswith("deploy platform-dev")
    assert lines[1].endswith(
        "deploy cdktf.out/slurm/dev/blueprint.yaml -d cdktf.out/slurm/dev/deployment.yaml -o "
        "cdktf.out/slurm/dev/gcluster -w --skip image"
    )
    assert _calls(tmp_path) == [] and _calls(tmp_path, "gcluster") == []


def test_destroy_removes_the_slurm_cluster_first_and_stops_if_that_fails(tmp_path: Path) -> None:
    done = _run(["destroy", "dev", "--confirm", "platform-dev", "--auto-approve"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    create, destroy = (c["gcluster"] for c in _calls(tmp_path, "gcluster"))
    assert create[0] == "create" and destroy == ["destroy", "cdktf.out/slurm/dev/gcluster/mlp-dev", "--auto-approve"]
    assert _calls(tmp_path)[-1]["argv"] == ["destroy", "platform-dev", "--auto-approve"]
    failed = tmp_path / "failed"
    failed.mkdir()
    refused = _run(["destroy", "dev", "--confirm", "platform-dev", "--auto-approve"], failed, GCLUSTER_EXIT="1")
    assert refused.returncode == 1
    assert "slurm-dev: destroy failed; platform-dev was left as it is" in refused.stderr
    assert _calls(failed) == [], "the platform stack was not touched"


def test_destroy_deletes_each_vm_groups_vms_before_the_stack(tmp_path: Path) -> None:
    done = _run(["destroy", "dev", "--confirm", "platform-dev", "--auto-approve"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert _calls(tmp_path, "vms") == [{"vms": ["down", "--env", "dev", "--group", "a3mega"]}]
    assert done.stdout.index("vms_stand_in.py down") < done.stdout.index("destroy platform-dev")
    failed = tmp_path / "failed"
    failed.mkdir()
    refused = _run(["destroy", "dev", "--confirm", "platform-dev", "--auto-approve"], failed, VMS_EXIT="1")
    assert refused.returncode == 1
    assert "VM group a3mega: deleting its VMs failed; platform-dev was left as it is" in refused.stderr
    assert _calls(failed) == [], "the platform stack was not touched"
