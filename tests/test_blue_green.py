"""`make blue-green`: a GKE slice replaced beside the old one, in two validated writes of the environment file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from infra.config import ENVIRONMENTS_DIR
from infra.synth.load import load_environment
from scripts.cli import main as platform
from tests.helpers import REPO
from tests.in_process import run_main


@pytest.fixture
def environments(tmp_path: Path) -> Path:
    folder = tmp_path / "environments"
    shutil.copytree(ENVIRONMENTS_DIR, folder)
    return folder


def _run(environments: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return run_main(platform, list(argv), env={**os.environ, "PLATFORM_ENVIRONMENTS_DIR": str(environments)}, cwd=REPO)


def test_a_slice_is_replaced_beside_the_old_one_then_the_workloads_move(environments: Path) -> None:
    dev = environments / "dev.yaml"
    before = dev.read_text()
    dry = _run(environments, "blue-green", "--dry-run", "--capacity", "spot", "--", "dev", "train")
    assert dry.returncode == 0 and dev.read_text() == before, dry.stderr
    started = _run(environments, "blue-green", "--capacity", "spot", "--", "dev", "train")
    assert started.returncode == 0, started.stderr
    env = load_environment(dev)
    assert env.slices["train-green"].capacity.type == "spot" and env.slices["train"].capacity.type == "on-demand"
    assert env.training is not None and env.training.slice == "train", "step 1 moves nothing"
    # The comment lines that introduced the next slice still do (they stay above the a3mega slice).
    assert "  # for them with a ProvisioningRequest; see `batch`).\n  a3mega:\n" in dev.read_text()
    assert "make blue-green ENV=dev SLICE=train FINISH=1" in started.stdout
    finished = _run(environments, "blue-green", "--finish", "--", "dev", "train")
    assert finished.returncode == 0, finished.stderr
    assert "blue-green: training.slice: train -> train-green" in finished.stdout
    env = load_environment(dev)
    assert "train" not in env.slices and env.training is not None and env.training.slice == "train-green"
    data = yaml.safe_load(dev.read_text())
    assert data["slices"]["train-green"]["topology"] == "4x4"
    # The trainer follows the training slice to its new name: no default of its own, no environment file in its
    # image (a new user's `make train ENV=dev DRY_RUN=1` failed here: "environment 'dev' has no slice 'train'").
    train = subprocess.run(
        ["make", "--no-print-directory", "train", "ENV=dev", "DRY_RUN=1"],
        cwd=REPO, capture_output=True, text=True, env={**os.environ, "PLATFORM_ENVIRONMENTS_DIR": str(environments)},
    )  # fmt: skip
    assert train.returncode == 0, train.stderr
    plan = json.loads(train.stdout.strip().splitlines()[-1])
    assert plan["environment"] == "dev" and plan["shape"]["topology"] == "4x4" and plan["slices"] == 1
    # A second replacement goes back to the blue name.
    again = _run(environments, "blue-green", "--dry-run", "--capacity", "on-demand", "--", "dev", "train-green")
    assert again.returncode == 0 and "slices.train-blue: a copy of slices.train-green" in again.stdout


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--topology", "4x8", "--", "dev", "a3mega-slurm"], "SLICE='a3mega-slurm': held by slurm, not GKE"),
        (["--", "dev", "train"], "give what changes: TOPOLOGY=, CAPACITY= or RESERVATION="),
        (["--finish", "--", "dev", "train"], "SLICE='train': no 'train-green' beside it: start the replacement first"),
        (["--capacity", "spot", "--", "dev", "trian"], "SLICE='trian': not a slice of dev.yaml"),
        (["--capacity", "spot", "--", "dev", "tarin"], "vllm, vllm-multihost; did you mean 'train'?"),
    ],
)
def test_a_replacement_that_cannot_be_made_is_refused_and_nothing_is_written(
    environments: Path, argv: list[str], said: str
) -> None:
    before = (environments / "dev.yaml").read_text()
    done = _run(environments, "blue-green", *argv)
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert "nothing was written" in done.stderr
    assert (environments / "dev.yaml").read_text() == before


def test_moving_a_workload_onto_a_shape_it_cannot_run_on_is_refused_at_the_finish(environments: Path) -> None:
    """A new 4x8 slice beside the old one is fine; moving the training job onto it is refused: its recipe is tuned
    for 4x4 (the rules the plan runs, run on the file before it is written)."""
    assert _run(environments, "blue-green", "--topology", "4x8", "--", "dev", "train").returncode == 0
    before = (environments / "dev.yaml").read_text()
    done = _run(environments, "blue-green", "--finish", "--", "dev", "train")
    assert done.returncode == 2
    assert "training.recipe: 'llama3-8b': does not run on training.slice 'train-green'" in done.stderr
    assert (environments / "dev.yaml").read_text() == before


def test_a_slice_of_capacity_tiers_is_replaced_by_one_capacity_or_new_tiers(environments: Path) -> None:
    """dev's vLLM slice falls back through a list of capacities (a traceback before, review round 4)."""
    one = _run(environments, "blue-green", "--dry-run", "--capacity", "on-demand", "--", "dev", "vllm")
    assert one.returncode == 0 and "slices.vllm-green: a copy of slices.vllm with capacity on-demand" in one.stdout
    tiers = _run(environments, "blue-green", "--capacity", "spot,on-demand", "--", "dev", "vllm")
    assert tiers.returncode == 0, tiers.stderr
    env = load_environment(environments / "dev.yaml")
    assert [t.type for t in env.slices["vllm-green"].tiers] == ["spot", "on-demand"]
    reserved = _run(environments, "blue-green", "--dry-run", "--reservation", "r1", "--", "dev", "vllm-green")
    assert reserved.returncode == 2 and "its capacity is a list of tiers; RESERVATION= names" in reserved.stderr


def test_a_counted_slice_is_replaced_whole(environments: Path) -> None:
    """dev's multi-host vLLM slice at count 2: its copy is counted like it until the servers move."""
    started = _run(environments, "blue-green", "--capacity", "on-demand", "--", "dev", "vllm-multihost")
    assert started.returncode == 0, started.stderr
    assert load_environment(environments / "dev.yaml").slices["vllm-multihost-green"].count == 2
    finished = _run(environments, "blue-green", "--finish", "--", "dev", "vllm-multihost")
    assert finished.returncode == 0, finished.stderr
    env = load_environment(environments / "dev.yaml")
    assert "vllm-multihost" not in env.slices and env.serving["llama70b-vllm-mh"].slice == "vllm-multihost-green"


def test_the_gpu_batch_slice_takes_its_jobs_and_the_teams_quotas_with_it(environments: Path) -> None:
    """The A3 Mega batch slice: the NCCL test, the GPU training and each team's quota and borrowing limit of it
    move to the new slice (they stayed on the old key before, and the finish was refused)."""
    assert _run(environments, "blue-green", "--capacity", "spot", "--", "dev", "a3mega").returncode == 0
    finished = _run(environments, "blue-green", "--finish", "--", "dev", "a3mega")
    assert finished.returncode == 0, finished.stderr
    env = load_environment(environments / "dev.yaml")
    assert env.batch is not None and env.batch.slices == ["a3mega-green"]
    assert env.batch.nccl_test is not None and env.batch.nccl_test.slice == "a3mega-green"
    assert env.batch.training is not None and env.batch.training.slice == "a3mega-green"
    assert all("a3mega" not in t.quota and "a3mega-green" in t.quota for t in env.teams.values())
    assert "teams.research.quota: a3mega -> a3mega-green" in finished.stdout
