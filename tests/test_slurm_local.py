"""The generated trainer job on a real Slurm: Debian's slurm-wlm, one node on this machine, started and stopped
here. Two submissions of the job `make plan` writes for dev's partition, on CPU, as the person who submits them (a
non-root user, `make slurm-local` makes the account): both tasks form one JAX process group from Slurm's
environment, train, checkpoint into the bucket's mount as the nodes have it, and the second submission resumes from
the first's step."""

from __future__ import annotations

import dataclasses
import json
import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.config import Environment
from infra.shell.slurm import gcsfuse_mount
from infra.slurm.blueprint import blueprint
from infra.slurm.jobs import BatchJob, render, trainer_command, training_job
from tests.helpers import REPO, losses
from tests.slurm_local import JOB_USER, local_slurm, missing

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


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[Path]:
    """What a person's job reaches on the nodes: a folder outside root's own temporary ones (pytest's are 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="platform-slurm-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _as_user(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    user = pwd.getpwnam(JOB_USER)
    os.chown(path, user.pw_uid, user.pw_gid)
    return path


@needs_slurm
@pytest.mark.slow
def test_the_generated_trainer_job_trains_and_resumes_on_a_real_slurm_as_the_submitting_user(
    envs: dict[str, Environment], shared: Path
) -> None:
    """The job runs as the person who submitted it (not root), and writes its checkpoints into the bucket as the
    nodes mount it: owned by root (Slurm-GCP mounts it at boot) with the blueprint's gcsfuse modes."""
    real = training_job(envs["dev"])
    assert real is not None and real.command == trainer_command(200, "/gcs/checkpoints/slurm/dev-train")
    mount_path, owner, mode = gcsfuse_mount(_bucket_settings(envs["dev"]))
    mount = shared / mount_path.lstrip("/")
    mount.mkdir(parents=True)
    os.chown(mount, owner, owner)
    mount.chmod(mode)
    checkpoint = mount / "slurm" / "dev-train"
    home = _as_user(shared / "home")
    # The person's Python: Debian's python3.11 (root's own interpreter is under /root, 0700) with this checkout's
    # trainer and the test environment's packages.
    bin_dir = shared / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to("/usr/bin/python3")
    site = REPO / ".venv" / "lib" / "python3.11" / "site-packages"
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "PYTHONPATH": f"{REPO}:{site}",
        "HOME": str(home),
        "LANG": "C.UTF-8",
    }
    with local_slurm(shared / "slurm") as slurm:
        runs = []
        for steps in (2, 4):
            script = home / f"train-{steps}.sbatch"
            script.write_text(render(local_job(envs["dev"], steps, checkpoint)))
            done = slurm.sbatch(script, env=env, user=JOB_USER)
            output = home / f"dev-train-{done.stdout.strip()}.out"
            assert done.returncode == 0, (done.stderr, output.read_text()[-3000:] if output.exists() else "")
            runs.append(_results(output))
    first, second = runs
    for results in runs:
        assert sorted(r["process_id"] for r in results) == [0, 1]
        assert {(r["processes"], r["devices"], r["orchestrator"]) for r in results} == {(2, 4, "slurm")}
        assert len({r["loss_last"] for r in results}) == 1, "one process group: every task saw the same loss"
    assert {(r["start_step"], r["end_step"]) for r in first} == {(0, 2)}
    assert {(r["start_step"], r["end_step"]) for r in second} == {(2, 4)}, "the second submission resumed"
    steps = [step for step, _ in losses(checkpoint)]
    assert steps == [1, 2, 3, 4]
    assert checkpoint.stat().st_uid == pwd.getpwnam(JOB_USER).pw_uid, "written by the person, not root"


def _bucket_settings(env: Environment) -> dict[str, Any]:
    (bucket,) = [m for g in blueprint(env)["deployment_groups"] for m in g["modules"] if m["id"] == "bucket"]
    settings: dict[str, Any] = bucket["settings"]
    return settings


@needs_slurm
def test_a_failing_task_fails_the_job(tmp_path: Path) -> None:
    """A task that fails fails the job, and `sbatch --wait` says so: a failed run is never taken for a success."""
    job = BatchJob(name="refused", nodes=1, tasks_per_node=1, command=["false"])
    with local_slurm(tmp_path / "slurm") as slurm:
        script = tmp_path / "refused.sbatch"
        script.write_text(render(job))
        done = slurm.sbatch(script, env=dict(os.environ))
    assert done.returncode != 0
