"""make training-pause / training-resume against a kubectl stand-in that answers as the API server does: the
training cluster's Workload (the one a RayCluster owns) is the one patched, a second call changes nothing, a dry run
patches nothing, and what cannot be done is said with its exit code. The real Kueue's answer to the pause (the team
borrows, the training queue reclaims) is tests/test_localcluster.py's."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from scripts.cli import main as platform_main
from tests.helpers import REPO
from tests.in_process import run_main

KUBECTL = """
import json, sys
from pathlib import Path
state = Path(sys.argv[0]).with_name("workloads.json")
log = Path(sys.argv[0]).with_name("calls.log")
args = sys.argv[1:]
with log.open("a") as f:
    f.write(" ".join(args) + "\\n")
items = json.loads(state.read_text())
if args[0] == "get":
    print(json.dumps({"items": items}))
elif args[0] == "patch":
    name, patch = args[2], json.loads(args[args.index("-p") + 1])
    for w in items:
        if w["metadata"]["name"] == name:
            w["spec"].update(patch["spec"])
    state.write_text(json.dumps(items))
"""


def _workload(name: str, owner: str, active: bool = True) -> dict[str, object]:
    return {"metadata": {"name": name, "ownerReferences": [{"kind": owner, "name": "x"}]}, "spec": {"active": active}}


@pytest.fixture
def stand_in(tmp_path: Path) -> Path:
    (tmp_path / "kubectl.py").write_text(KUBECTL)
    (tmp_path / "kubeconfig").write_text("apiVersion: v1\nkind: Config\n")
    items = [_workload("raycluster-ray-training-abc", "RayCluster"), _workload("job-other-1", "Job")]
    (tmp_path / "workloads.json").write_text(json.dumps(items))
    return tmp_path


def _run(stand_in: Path, *argv: str) -> tuple[int, str, str]:
    env = {
        **os.environ,
        "PLATFORM_KUBECONFIG": str(stand_in / "kubeconfig"),
        "PLATFORM_KUBECTL": f"{sys.executable} {stand_in / 'kubectl.py'}",
    }
    done = run_main(platform_main, list(argv), env=env, cwd=REPO)
    return done.returncode, done.stdout, done.stderr


def _active(stand_in: Path) -> dict[str, bool]:
    return {w["metadata"]["name"]: w["spec"]["active"] for w in json.loads((stand_in / "workloads.json").read_text())}


def test_pause_and_resume_set_only_the_training_clusters_workload(stand_in: Path) -> None:
    code, out, err = _run(stand_in, "training-pause", "--dry-run", "dev")
    assert code == 0 and "dry run: ml-training/raycluster-ray-training-abc: would set spec.active to false" in out
    assert _active(stand_in) == {"raycluster-ray-training-abc": True, "job-other-1": True}
    code, out, err = _run(stand_in, "training-pause", "dev")
    assert code == 0, err
    assert "ml-training/raycluster-ray-training-abc: paused: Kueue evicts the training cluster" in out
    assert _active(stand_in) == {"raycluster-ray-training-abc": False, "job-other-1": True}
    code, out, _ = _run(stand_in, "training-pause", "dev")
    assert code == 0 and "already paused; nothing to change" in out
    code, out, _ = _run(stand_in, "training-resume", "dev")
    assert code == 0 and "active: the training queue reclaims its slices (Kueue preempts the borrowers)" in out
    assert _active(stand_in) == {"raycluster-ray-training-abc": True, "job-other-1": True}
    calls = (stand_in / "calls.log").read_text().splitlines()
    assert [c.split()[:3] for c in calls if c.startswith("patch")] == [
        ["patch", "workloads.kueue.x-k8s.io", "raycluster-ray-training-abc"]
    ] * 2


def test_what_cannot_be_paused_is_said_with_its_exit_code(stand_in: Path) -> None:
    (stand_in / "workloads.json").write_text(json.dumps([_workload("job-other-1", "Job")]))
    code, _, err = _run(stand_in, "training-pause", "dev")
    assert code == 1 and "no Kueue Workload of a RayCluster in namespace ml-training" in err
    (stand_in / "kubeconfig").unlink()
    code, _, err = _run(stand_in, "training-pause", "dev")
    assert code == 1 and f"PLATFORM_KUBECONFIG='{stand_in / 'kubeconfig'}': no such file; nothing was changed" in err
    code, _, err = _run(stand_in, "training-pause", "dve")
    assert code == 2 and "ENV='dve'" in err
