"""The generated trainer job on a real Slurm: Debian's slurm-wlm, one node on this machine, started and stopped
here. Two submissions of the job `make plan` writes for dev's partition, on CPU: both tasks form one JAX process
group from Slurm's environment, train, checkpoint, and the second submission resumes from the first's step."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from infra.config import Environment
from infra.slurm.jobs import BatchJob, render, trainer_command, training_job
from tests.conftest import REPO
from tests.slurm_local import local_slurm, missing

IN_CI = os.environ.get("CI") == "true"
needs_slurm = pytest.mark.skipif(
    not IN_CI and bool(missing()), reason=f"Slurm is not installed ({', '.join(missing())}): run `make slurm-local`"
)

# What the local machine stands in for: one node, two tasks with two CPU devices each, no container, no GPUs.
LOCAL = {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}


def local_job(env: Environment, steps: int, checkpoint: Path) -> BatchJob:
    """dev's training job as `make plan` writes it, with only its shape and placement made local."""
    job = training_job(env)
    assert job is not None
    return dataclasses.replace(
        job,
        partition=None,
        nodes=1,
        tasks_per_node=2,
        gpus_per_node=0,
        exclusive=False,
        container_image=None,
        container_mounts=(),
        source=None,
        env=LOCAL,
        command=trainer_command(steps, str(checkpoint)),
    )


def _results(output: Path) -> list[dict[str, Any]]:
    """The result line each task prints last: the trainer's summary with its place in the group."""
    return [
        json.loads(line)
        for line in output.read_text().splitlines()
        if line.startswith("{") and '"orchestrator"' in line and '"severity"' not in line
    ]


@needs_slurm
@pytest.mark.slow
def test_the_generated_trainer_job_trains_and_resumes_on_a_real_slurm(
    envs: dict[str, Environment], tmp_path: Path
) -> None:
    real = training_job(envs["dev"])
    assert real is not None and real.command == trainer_command(200, "/gcs/checkpoints/slurm/dev-train")
    checkpoint = tmp_path / "checkpoints"
    # The tasks run this checkout's trainer with the interpreter of the test (the job inherits the environment).
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "PYTHONPATH": str(REPO)}
    with local_slurm(tmp_path / "slurm") as slurm:
        runs = []
        for steps in (2, 4):
            script = tmp_path / f"train-{steps}.sbatch"
            script.write_text(render(local_job(envs["dev"], steps, checkpoint)))
            done = slurm.sbatch(script, env=env)
            output = tmp_path / f"dev-train-{done.stdout.strip()}.out"
            assert done.returncode == 0, (done.stderr, output.read_text()[-3000:] if output.exists() else "")
            runs.append(_results(output))
    first, second = runs
    for results in runs:
        assert sorted(r["process_id"] for r in results) == [0, 1]
        assert {(r["processes"], r["devices"], r["orchestrator"]) for r in results} == {(2, 4, "slurm")}
        assert len({r["loss_last"] for r in results}) == 1, "one process group: every task saw the same loss"
    assert {(r["start_step"], r["end_step"]) for r in first} == {(0, 2)}
    assert {(r["start_step"], r["end_step"]) for r in second} == {(2, 4)}, "the second submission resumed"
    steps = [json.loads(line)["step"] for line in (checkpoint / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]


@needs_slurm
def test_a_failing_task_fails_the_job(tmp_path: Path) -> None:
    """A task that fails fails the job, and `sbatch --wait` says so: a failed run is never taken for a success."""
    job = BatchJob(name="refused", nodes=1, tasks_per_node=1, command=["false"])
    with local_slurm(tmp_path / "slurm") as slurm:
        script = tmp_path / "refused.sbatch"
        script.write_text(render(job))
        done = slurm.sbatch(script, env=dict(os.environ))
    assert done.returncode != 0
