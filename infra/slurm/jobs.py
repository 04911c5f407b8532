"""The Slurm cluster's batch jobs, generated from the environment: the NCCL all-gather gate and the trainer.

Both are `sbatch` scripts. On the cluster they run in containers through Pyxis/enroot (`srun
--container-image`), with the GPUDirect-TCPXO environment of the Slurm node image (its NIC names and the
plugin's directory, `infra.catalogue.accelerators.nccl_env` for an Ubuntu host), after the receive-data-path manager
that the partition's prolog starts (`infra.slurm.blueprint`). The trainer finds its coordinator, process count
and rank in Slurm's own environment (`python -m workloads.trainer slurm`). Tests run the same renderer's script
on a one-node Slurm on this machine (tests/test_slurm_local.py).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from infra.catalogue import upstream
from infra.catalogue.accelerators import Slice
from infra.catalogue.gpudirect import GPU_HOSTS, nccl_env
from infra.config import Environment

CHECK_BANDWIDTH = (
    Path(__file__).resolve().parents[2] / "workloads" / "charts" / "gpu-jobset" / "files" / "check-bandwidth.sh"
)
# Where the controller's startup writes the jobs: Slurm-GCP exports /opt/apps to every node over NFS.
PLATFORM_DIR = "/opt/apps/platform"
JOBS_DIR = f"{PLATFORM_DIR}/jobs"
# nccl-tests is built by the job, as the person who submits it (an OS Login user, not root), so into that person's
# home: Slurm-GCP exports /home to every node over NFS too (Cluster Toolkit v1.95.0 schedmd-slurm-gcp-v6-controller
# `enable_default_mounts`: /home, /opt/apps), while /opt/apps/platform is root's, 755 (the controller's startup
# writes it). Cluster Toolkit's own A3 Mega example builds into the submitter's folder too (examples/machine-learning/
# a3-megagpu-8g/nccl-tests/build-nccl-tests.sh: `--container-mounts="$PWD:/nccl"`).
NCCL_TESTS_DIR = f"${{HOME}}/.cache/platform/nccl-tests-{upstream.NCCL_TESTS_TAG}"
# Where the nodes mount the cluster's bucket (gcsfuse, Slurm-GCP's network storage).
GCS_MOUNT = "/gcs"
# The Slurm node image is an Ubuntu accelerator image: its NIC names and the TCPXO plugin's directory.
HOST = GPU_HOSTS["ubuntu"]


@dataclass(frozen=True)
class BatchJob:
    """What an sbatch script asks Slurm for, and the one command srun starts in every task."""

    name: str
    nodes: int
    tasks_per_node: int
    command: list[str]
    partition: str | None = None
    gpus_per_node: int = 0
    exclusive: bool = False
    container_image: str | None = None
    container_mounts: tuple[str, ...] = ()
    srun_options: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    # A profile sourced before `env` (the TCPXO plugin's nccl-env-profile.sh), with what it needs set before it is
    # sourced (`source_env`), shell run before srun, and after.
    source: str | None = None
    source_env: dict[str, str] = field(default_factory=dict)
    before: tuple[str, ...] = ()
    log: str | None = None
    after: tuple[str, ...] = ()
    output: str = "%x-%j.out"


def enroot_image(image: str) -> str:
    """An image reference as Pyxis/enroot reads it: `<registry>#<path>` (enroot's registry separator)."""
    registry, _, path = image.partition("/")
    return f"{registry}#{path}"


def _word(value: str) -> str:
    # A value that names a variable (`${LD_LIBRARY_PATH:-}`, `${HOME}`) is expanded; every other is taken literally.
    return f'"{value}"' if "${" in value else shlex.quote(value)


def _export(name: str, value: str) -> str:
    return f"export {name}={_word(value)}"


def render(job: BatchJob) -> str:
    """The sbatch script of `job`. It stops at the first failing command (`set -euo pipefail`), so the job's
    state is its command's exit code, or the gate's that reads its log."""
    lines = ["#!/bin/bash", f"#SBATCH --job-name={job.name}"]
    if job.partition:
        lines.append(f"#SBATCH --partition={job.partition}")
    lines += [f"#SBATCH --nodes={job.nodes}", f"#SBATCH --ntasks-per-node={job.tasks_per_node}"]
    if job.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={job.gpus_per_node}")
    if job.exclusive:
        lines.append("#SBATCH --exclusive")
    lines += [f"#SBATCH --output={job.output}", "set -euo pipefail"]
    if job.source:
        lines += [_export(name, value) for name, value in job.source_env.items()]
        lines.append(f"source {shlex.quote(job.source)}")
    lines += [_export(name, value) for name, value in job.env.items()]
    lines += list(job.before)
    srun = ["srun", "--kill-on-bad-exit=1", *job.srun_options]
    if job.container_image:
        srun.append(f"--container-image={enroot_image(job.container_image)}")
        if job.container_mounts:
            srun.append(f"--container-mounts={','.join(job.container_mounts)}")
        if job.env:
            # Pyxis gives the container only the variables it is told to (Cluster Toolkit's run-nccl-tests.sh).
            srun.append(f"--container-env={','.join(job.env)}")
    line = " ".join(_word(part) for part in [*srun, *job.command])
    lines.append(f'{line} 2>&1 | tee "{job.log}"' if job.log else line)
    lines += list(job.after)
    return "\n".join(lines) + "\n"


# What TCPXO's nccl-env-profile.sh needs before it is sourced under `set -u` (google/nccl-plugin-gpudirect-tcpxo
# tcpxo_scripts/nccl-env-profile.sh @ v1.0.15, pinned in infra/shell/pinned-files.yaml): NCCL_LIB_DIR, which it
# requires (`: "${NCCL_LIB_DIR:?Must set NCCL_LIB_DIR}"`), and LD_LIBRARY_PATH, which it expands without a default
# (`export LD_LIBRARY_PATH="${NCCL_LIB_DIR}:${LD_LIBRARY_PATH}"`); a batch script's environment has none on Ubuntu.
PROFILE_ENV = {"NCCL_LIB_DIR": HOST.plugin_dir, "LD_LIBRARY_PATH": "${LD_LIBRARY_PATH:-}"}


def _tcpxo(slice_: Slice) -> tuple[str | None, dict[str, str], tuple[str, ...]]:
    """(profile to source, NCCL environment, container mounts) of a GPUDirect job on the Slurm node image."""
    direct = slice_.gpudirect
    if direct is None:
        return None, {}, ()
    env = {**nccl_env(direct, HOST), "LD_LIBRARY_PATH": f"{HOST.plugin_dir}:${{LD_LIBRARY_PATH:-}}"}
    mounts = (f"{HOST.plugin_dir}:{HOST.plugin_dir}", "/dev/aperture_devices:/dev/aperture_devices")
    return f"{HOST.plugin_dir}/nccl-env-profile.sh", env, mounts


def _partition_slice(env: Environment, partition: str) -> Slice:
    assert env.slurm is not None
    return env.slices[env.slurm.partitions[partition].slice].slice


# The submitter's home in the containers: where nccl-tests is built and run from.
HOME_MOUNT = "${HOME}:${HOME}"


def _build_nccl_tests() -> tuple[str, ...]:
    """Shell that builds nccl-tests (with MPI) once per person into their home, at the pinned commit. The build runs
    in the container (`bash -c`, single-quoted), which reads NCCL_TESTS_DIR from the job's environment."""
    tmp = '"$NCCL_TESTS_DIR.tmp"'
    build = " && ".join(
        [
            f"rm -rf {tmp}",
            'mkdir -p "$(dirname "$NCCL_TESTS_DIR")"',
            f"git clone --quiet --branch {upstream.NCCL_TESTS_TAG} {upstream.NCCL_TESTS_REPOSITORY} {tmp}",
            f'test "$(git -C {tmp} rev-parse HEAD)" = {upstream.NCCL_TESTS_COMMIT}',
            f"make -C {tmp} -j MPI=1 CC=mpicc CXX=mpicxx",
            f'mv {tmp} "$NCCL_TESTS_DIR"',
        ]
    )
    srun = [
        "srun",
        "--nodes=1",
        "--ntasks=1",
        f"--container-image={enroot_image(upstream.NCCL_TESTS_IMAGE)}",
        f"--container-mounts={HOME_MOUNT}",
        # Pyxis gives the container only the variables it is told to (as render() does for the test itself).
        "--container-env=NCCL_TESTS_DIR",
        "bash",
        "-c",
        build,
    ]
    return (
        'if [ ! -x "${NCCL_TESTS_DIR}/build/all_gather_perf" ]; then',
        "  " + " ".join(map(_word, srun)),
        "fi",
    )


# Cluster Toolkit's A3 Mega test (run-nccl-tests.sh @ v1.95.0): 8 MB to 8 GB, doubling, 200 iterations.
ALL_GATHER_ARGS = ("-b", "8M", "-e", "8G", "-f", "2", "-g", "1", "-w", "5", "--iters", "200")


def nccl_test_job(env: Environment) -> BatchJob | None:
    """The all-gather test over the partition's nodes, one task per GPU, gated by check-bandwidth.sh."""
    slurm = env.slurm
    if slurm is None or slurm.nccl_test is None:
        return None
    test = slurm.nccl_test
    slice_ = _partition_slice(env, test.partition)
    source, nccl, mounts = _tcpxo(slice_)
    return BatchJob(
        name=f"{env.name}-nccl-test",
        partition=test.partition,
        nodes=test.nodes or slice_.hosts,
        tasks_per_node=slice_.chips_per_host,
        gpus_per_node=slice_.chips_per_host,
        exclusive=True,
        container_image=upstream.NCCL_TESTS_IMAGE,
        container_mounts=(*mounts, HOME_MOUNT),
        srun_options=("--mpi=pmi2",),
        env={"NCCL_TESTS_DIR": NCCL_TESTS_DIR, **nccl},
        source=source,
        source_env=PROFILE_ENV if source else {},
        before=_build_nccl_tests(),
        command=["${NCCL_TESTS_DIR}/build/all_gather_perf", *ALL_GATHER_ARGS],
        log="nccl-${SLURM_JOB_ID}.log",
        after=(f'sh {JOBS_DIR}/check-bandwidth.sh "nccl-${{SLURM_JOB_ID}}.log" {test.min_bus_bandwidth_gbps:g}',),
    )


# The prefix of the cluster's bucket its hosts may write (their grant carries an IAM condition on it,
# infra.constructs.identity.SlurmServiceAccounts): the rest is GKE's and Vertex AI's.
BUCKET_PREFIX = "slurm"


def checkpoint_dir(env: Environment) -> str:
    """Where the trainer's checkpoints go: the cluster's bucket, mounted on every node, under its prefix."""
    assert env.slurm is not None
    return f"{GCS_MOUNT}/{env.slurm.bucket}/{BUCKET_PREFIX}/{env.name}-train"


def trainer_command(steps: int, checkpoint: str) -> list[str]:
    """What every task of the training job runs: the trainer, which reads its rank from Slurm's environment."""
    return ["python", "-m", "workloads.trainer", "slurm", "--steps", str(steps), "--checkpoint-dir", checkpoint]


def training_job(env: Environment) -> BatchJob | None:
    """The trainer over the partition's nodes: one process per node with all its GPUs (JAX on CUDA)."""
    slurm = env.slurm
    if slurm is None or slurm.training is None:
        return None
    training = slurm.training
    slice_ = _partition_slice(env, training.partition)
    source, nccl, mounts = _tcpxo(slice_)
    return BatchJob(
        name=f"{env.name}-train",
        partition=training.partition,
        nodes=slice_.hosts,
        tasks_per_node=1,
        gpus_per_node=slice_.chips_per_host,
        exclusive=True,
        container_image=env.release.images[training.image],
        container_mounts=(*mounts, f"{GCS_MOUNT}:{GCS_MOUNT}"),
        env={**nccl, "JAX_PLATFORMS": "cuda"},
        source=source,
        source_env=PROFILE_ENV if source else {},
        command=trainer_command(training.steps, checkpoint_dir(env)),
    )


def jobs(env: Environment) -> dict[str, str]:
    """File name -> content of every batch job of the environment's Slurm cluster, and the gate they use."""
    out: dict[str, str] = {}
    test = nccl_test_job(env)
    if test is not None:
        out["nccl-test.sbatch"] = render(test)
        out["check-bandwidth.sh"] = CHECK_BANDWIDTH.read_text()
    train = training_job(env)
    if train is not None:
        out["train.sbatch"] = render(train)
    return out
