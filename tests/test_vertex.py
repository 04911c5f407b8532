"""Vertex AI custom jobs: each request `make plan` writes is held to the Vertex AI client library's real types
and to the service's sourced rules; the NCCL gate's scripts run as they would in the job's replicas, and the
trainer trains as two replicas of a simulated job."""

from __future__ import annotations

import copy
import json
import os
import re
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.cloud import aiplatform_v1

from infra.catalogue.gpudirect import GPU_HOSTS, TCPXO, nccl_env, nic_names
from infra.config import ConfigError, Environment
from infra.derive.gpu_group import profile
from infra.rules import check_request
from infra.rules.request_subject import RequestContext
from infra.shell import generated_scripts
from infra.synth.load import load_environment
from infra.vertex.job import custom_job, job_names
from scripts.vertex import main, submit, write
from tests.helpers import REPO, assert_request_refused, losses
from tests.refused import VERTEX_REFUSED
from workloads.trainer.discovery import from_vertex

DEV = (REPO / "infra" / "environments" / "dev.yaml").read_text()
NCCL = REPO / "workloads" / "nccl"


def _ctx(env: Environment) -> RequestContext:
    return RequestContext("aiplatform.v1.CustomJob", env, "vertex.nccl_test")


def _edit(tmp_path: Path, old: str, new: str, text: str = DEV) -> Path:
    assert old in text, old
    path = tmp_path / "dev.yaml"
    path.write_text(text.replace(old, new))
    return path


# --- The requests ------------------------------------------------------------------------------------------


def test_dev_jobs_are_custom_jobs_the_client_library_parses_as_written(
    envs: dict[str, Environment], tmp_path: Path
) -> None:
    written, lines = write(envs["dev"], tmp_path)
    assert lines == []
    assert sorted(p.name for p in written) == ["nccl-test.json", "train.json"]
    for path in written:
        request = json.loads(path.read_text())
        job = aiplatform_v1.CustomJob.from_json(path.read_text())
        # What the library reads back is what was written: no field dropped or renamed on the way.
        again = aiplatform_v1.CustomJob.to_json(
            job, use_integers_for_enums=False, always_print_fields_with_no_presence=False
        )
        assert json.loads(again) == request


def test_pool_zero_holds_the_primary_and_pool_one_the_rest_of_the_slice(envs: dict[str, Environment]) -> None:
    env = envs["dev"]
    slice_ = env.slices["a3mega-vertex"].slice
    job = aiplatform_v1.CustomJob.from_json(json.dumps(custom_job(env, "nccl-test")))
    pools = job.job_spec.worker_pool_specs
    assert [p.replica_count for p in pools] == [1, slice_.hosts - 1]
    for pool in pools:
        assert pool.machine_spec.machine_type == "a3-megagpu-8g"
        assert pool.machine_spec.accelerator_type == aiplatform_v1.AcceleratorType.NVIDIA_H100_MEGA_80GB
        assert pool.machine_spec.accelerator_count == slice_.chips_per_host
    assert pools[0].container_spec.image_uri == TCPXO.installer_image
    assert job.job_spec.psc_interface_config.network_attachment == (
        "projects/acme-ml-platform-dev/regions/us-east5/networkAttachments/ml-platform-vertex"
    )
    assert not job.job_spec.network, "A3 Mega jobs never peer"
    assert job.job_spec.service_account == "vertex-jobs@acme-ml-platform-dev.iam.gserviceaccount.com"


def test_the_training_job_runs_the_release_image_and_writes_to_its_bucket(envs: dict[str, Environment]) -> None:
    env = envs["dev"]
    request = custom_job(env, "train")
    spec = request["jobSpec"]
    image = spec["workerPoolSpecs"][0]["containerSpec"]["imageUri"]
    assert image == env.release.images["trainer-gpu"] and "@sha256:" in image
    assert spec["baseOutputDirectory"]["outputUriPrefix"] == "gs://acme-ml-platform-dev-checkpoints/vertex/dev-train"
    script = spec["workerPoolSpecs"][0]["containerSpec"]["args"][0]
    # The trainer writes where Vertex AI mounts that same prefix.
    assert "--checkpoint-dir /gcs/acme-ml-platform-dev-checkpoints/vertex/dev-train" in script
    assert spec["scheduling"] == {
        "strategy": "FLEX_START",
        "restartJobOnWorkerRestart": True,
        "timeout": f"{24 * 3600}s",
        "maxWaitDuration": f"{24 * 3600}s",
    }
    env_vars = {e["name"]: e["value"] for e in spec["workerPoolSpecs"][0]["containerSpec"]["env"]}
    # The NCCL environment as Vertex AI's containers name their NICs (eth0..eth8), with no profile to source.
    assert env_vars.items() >= nccl_env(TCPXO, GPU_HOSTS["vertex"]).items()
    assert env_vars["NCCL_FASTRAK_IFNAME"] == ",".join(f"eth{n}" for n in range(1, 9))


@pytest.mark.parametrize(
    ("capacity", "strategy"),
    [
        ("{type: on-demand}", "STANDARD"),
        ("{type: spot}", "SPOT"),
        ("{type: flex-start, max_run_hours: 48}", "FLEX_START"),
        ("{type: reservation, reservation: ml-a3mega-vertex}", "STANDARD"),
    ],
)
def test_each_capacity_type_becomes_its_scheduling_strategy(capacity: str, strategy: str, tmp_path: Path) -> None:
    old = "    zone: us-east5-a\n    capacity: {type: flex-start, max_run_hours: 24}\n  # And two plain VMs"
    env = load_environment(
        _edit(tmp_path, old, f"    zone: us-east5-a\n    capacity: {capacity}\n  # And two plain VMs")
    )
    request = custom_job(env, "train")
    assert check_request(request, _ctx(env)) == []
    job = aiplatform_v1.CustomJob.from_json(json.dumps(request))
    assert job.job_spec.scheduling.strategy.name == strategy
    affinity = job.job_spec.worker_pool_specs[0].machine_spec.reservation_affinity
    if "reservation" in capacity:
        assert affinity.reservation_affinity_type.name == "SPECIFIC_RESERVATION"
        assert list(affinity.values) == ["projects/acme-ml-platform-dev/zones/us-east5-a/reservations/ml-a3mega-vertex"]
    else:
        assert affinity.reservation_affinity_type.name == "TYPE_UNSPECIFIED"
    assert bool(job.job_spec.scheduling.max_wait_duration) == (strategy == "FLEX_START")


# --- What the types and the rules refuse ---------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(VERTEX_REFUSED))
def test_a_bad_request_is_refused_with_file_field_value_and_source(
    case: str, envs: dict[str, Environment], tmp_path: Path
) -> None:
    mutate, field, rule_id, source = VERTEX_REFUSED[case]
    request = copy.deepcopy(custom_job(envs["dev"], "nccl-test"))
    mutate(request)
    assert_request_refused(request, _ctx(envs["dev"]), tmp_path / "nccl-test.json", field, rule_id, source)


def test_queued_capacity_for_a_vertex_job_is_refused_at_load_with_its_source(tmp_path: Path) -> None:
    old = "    zone: us-east5-a\n    capacity: {type: flex-start, max_run_hours: 24}\n  # And two plain VMs"
    path = _edit(tmp_path, old, "    zone: us-east5-a\n    capacity: {type: queued}\n  # And two plain VMs")
    with pytest.raises(ConfigError) as err:
        load_environment(path)
    text = str(err.value)
    assert str(path) in text and "slices.a3mega-vertex.capacity.type: 'queued'" in text
    assert "rule vertex.capacity" in text and "schedule-jobs-dws" in text


def test_a_vertex_job_cannot_share_a_slice_with_gke(tmp_path: Path) -> None:
    path = _edit(tmp_path, "training: {slice: a3mega-vertex,", "training: {slice: a3mega,")
    with pytest.raises(ConfigError, match=r"vertex\.training\.slice: 'a3mega': also used on GKE by batch\.slices"):
        load_environment(path)


def test_vertex_brings_its_own_gpu_networks(envs: dict[str, Environment]) -> None:
    """A slice only Vertex AI uses needs none of the platform's GPUDirect networks."""
    env = envs["dev"]
    alone = env.model_copy(
        update={
            "slices": {k: s for k, s in env.slices.items() if k == "a3mega-vertex" or s.slice.kind == "tpu"},
            "batch": None,
            "slurm": None,
            "vm_groups": {},
        }
    )
    assert alone.slice_holder("a3mega-vertex") == "vertex"
    assert alone.gpudirect_networks == 0 and env.gpudirect_networks == 8


# --- Submitting ------------------------------------------------------------------------------------------


class FakeJobService:
    """Stands in for aiplatform_v1.JobServiceClient: records the typed request it is given."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, aiplatform_v1.CustomJob]] = []

    def create_custom_job(self, *, parent: str, custom_job: aiplatform_v1.CustomJob) -> aiplatform_v1.CustomJob:
        self.calls.append((parent, custom_job))
        return aiplatform_v1.CustomJob(name=f"{parent}/customJobs/42", state=aiplatform_v1.JobState.JOB_STATE_QUEUED)


def test_submit_creates_the_typed_job_through_the_regional_endpoint(envs: dict[str, Environment]) -> None:
    dev = envs["dev"]
    built = dev.release.images["trainer-gpu"].replace("sha256:0", "sha256:1", 1)
    release = dev.release.model_copy(update={"images": {**dev.release.images, "trainer-gpu": built}})
    env = dev.model_copy(update={"release": release})
    client = FakeJobService()
    out = submit(env, "train", dry_run=False, client=client)
    assert out == {
        "name": "projects/acme-ml-platform-dev/locations/us-east5/customJobs/42",
        "state": "JOB_STATE_QUEUED",
        "endpoint": "us-east5-aiplatform.googleapis.com",
    }
    ((parent, job),) = client.calls
    assert parent == "projects/acme-ml-platform-dev/locations/us-east5"
    assert job.job_spec.worker_pool_specs[1].replica_count == 1


def test_submit_refuses_an_image_that_was_never_built(envs: dict[str, Environment]) -> None:
    client = FakeJobService()
    with pytest.raises(
        ValueError, match="trainer-gpu is still at the placeholder digest: `make image IMAGE=trainer-gpu"
    ):
        submit(envs["dev"], "train", dry_run=False, client=client)
    assert client.calls == []
    # The NCCL test runs the catalogue's plugin image: nothing to build.
    assert submit(envs["dev"], "nccl-test", dry_run=False, client=client)["state"] == "JOB_STATE_QUEUED"


def test_make_vertex_submit_dry_run_prints_the_request(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["submit", "--env", "dev", "--job", "nccl-test", "--dry-run"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["endpoint"] == "us-east5-aiplatform.googleapis.com"
    assert printed["customJob"]["displayName"] == "dev-nccl-test-run1"
    assert main(["submit", "--env", "dev", "--job", "evaluate", "--dry-run"]) == 2


def test_a_dry_run_refuses_the_placeholder_image_as_the_real_submit_does(capsys: pytest.CaptureFixture[str]) -> None:
    """dev's trainer-gpu is not built: `make vertex-submit JOB=train DRY_RUN=1` printed the request anyway."""
    assert main(["submit", "--env", "dev", "--job", "train", "--dry-run"]) == 2
    captured = capsys.readouterr()
    assert "trainer-gpu is still at the placeholder digest: `make image IMAGE=trainer-gpu ENV=dev` first" in (
        captured.err
    )
    assert captured.out == ""


# --- The NCCL gate's scripts, as the job's replicas run them ------------------------------------------------


def _cluster_spec(task: str, index: int, workers: int) -> str:
    return json.dumps(
        {
            "cluster": {
                "workerpool0": ["cmle-training-workerpool0-ab12-0:2222"],
                "workerpool1": [f"cmle-training-workerpool1-ab12-{i}:2222" for i in range(workers)],
            },
            "environment": "cloud",
            "task": {"type": task, "index": index, "trial": ""},
            "job": json.dumps({"worker_pool_specs": [{"replica_count": 1}]}),
        },
        indent=1 if index else None,
    )


@pytest.mark.parametrize(
    ("task", "index", "workers"), [("workerpool0", 0, 1), ("workerpool1", 0, 1), ("workerpool1", 2, 3)]
)
def test_the_shell_reads_cluster_spec_as_the_trainer_does(task: str, index: int, workers: int) -> None:
    spec = _cluster_spec(task, index, workers)
    done = subprocess.run(
        ["bash", str(NCCL / "vertex-group.sh"), "bash", "-c", 'echo "$PLATFORM_HOSTS $PLATFORM_RANK"'],
        env={"PATH": os.environ["PATH"], "CLUSTER_SPEC": spec},
        capture_output=True,
        text=True,
        check=True,
    )
    hosts, rank = done.stdout.split()
    group = from_vertex({"CLUSTER_SPEC": spec})
    assert int(rank) == group.process_id
    assert hosts.split(",")[0] == group.coordinator.rsplit(":", 1)[0] and len(hosts.split(",")) == group.processes


def test_the_shell_refuses_a_task_that_is_not_a_training_replica() -> None:
    done = subprocess.run(
        ["bash", str(NCCL / "vertex-group.sh"), "true"],
        env={"PATH": os.environ["PATH"], "CLUSTER_SPEC": _cluster_spec("workerpool2", 0, 1)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "workerpool2" in done.stderr


def _stub(path: Path, body: str) -> None:
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def _in(script: str, work: Path) -> str:
    """A replica's script with its container's /tmp files in `work`: each replica has a /tmp of its own, and tests
    running side by side must not share one (two of them once read each other's /tmp/nccl.log)."""
    return script.replace("/tmp/platform", str(work)).replace("/tmp/nccl.log", f"{work}-nccl.log")


def _image(tmp: Path, busbw: float) -> tuple[Path, Path]:
    """The TCPXO image's /scripts and tools, stood in for: the benchmark prints nccl-tests' table with `busbw`,
    mpirun runs the command it is given here (on "every host": these two processes share a file system)."""
    scripts, bin_ = tmp / "scripts", tmp / "bin"
    scripts.mkdir()
    bin_.mkdir()
    _stub(scripts / "init_ssh.sh", 'echo "$@" > "$STUB_LOG.ssh"\n')
    _stub(scripts / "gen_hostfiles.sh", 'mkdir -p "hostfiles$#" && printf "%s\\n" "$@" > "hostfiles$#/hostfile1"\n')
    _stub(
        scripts / "demo-run-nccl-test-tcpxo-via-mpi.sh",
        'echo "$BENCHMARK $NHOSTS $GPU_PER_NODE $LD_LIBRARY_PATH" > "$STUB_LOG.bench"\n'
        'echo "#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong"\n'
        f'echo "  8589934592 134217728 float none -1 45000 190.9 {busbw} 0 45000 190.9 {busbw} 0"\n',
    )
    _stub(bin_ / "service", "exit 0\n")
    _stub(bin_ / "mpirun", 'while [ "$1" != touch ]; do shift; done; "$@"\n')
    return scripts, bin_


@pytest.mark.parametrize(("busbw", "verdict"), [(188.5, 0), (120.0, 1)])
def test_two_replicas_run_the_gate_and_end_together(tmp_path: Path, busbw: float, verdict: int) -> None:
    """The bundle a replica's container runs (the request's args), as the primary and one worker of a simulated
    job: the primary runs the benchmark and the gate, the worker waits for it and ends when it ends."""
    from infra.vertex.job import custom_job as derive

    env = load_environment(REPO / "infra" / "environments" / "dev.yaml")
    container = derive(env, "nccl-test")["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]
    scripts, bin_ = _image(tmp_path, busbw)
    plugin = tmp_path / "nvidia-lib64"
    plugin.mkdir()
    (plugin / "libnccl-net.so").write_text("")
    # Each replica is its own container with its own /tmp: two working directories (sharing one, the two
    # replicas raced to create the same profile copy).
    work, worker_work = tmp_path / "platform", tmp_path / "worker-platform"
    script = container["args"][0]
    base = {e["name"]: e["value"] for e in container["env"]}
    base.update(
        NCCL_LIB_DIR=str(plugin),
        SCRIPTS=str(scripts),
        DONE=str(tmp_path / "done"),
        STUB_LOG=str(tmp_path / "log"),
        PATH=f"{bin_}:{os.environ['PATH']}",
    )
    worker = subprocess.Popen(
        ["bash", "-c", _in(script, worker_work)],
        env={
            **base,
            "CLUSTER_SPEC": _cluster_spec("workerpool1", 0, 1),
            "CHECK_BANDWIDTH": str(worker_work / "check-bandwidth.sh"),
        },
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    primary = subprocess.run(
        ["bash", "-c", _in(script, work)],
        env={
            **base,
            "CLUSTER_SPEC": _cluster_spec("workerpool0", 0, 1),
            "CHECK_BANDWIDTH": str(work / "check-bandwidth.sh"),
        },
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    worker_out, _ = worker.communicate(timeout=30)
    assert primary.returncode == verdict, primary.stdout + primary.stderr
    assert ("PASS" in primary.stdout) == (verdict == 0)
    assert worker.returncode == 0, worker_out
    hosts = "cmle-training-workerpool0-ab12-0 cmle-training-workerpool1-ab12-0"
    assert (tmp_path / "log.ssh").read_text().strip() == hosts
    benchmark, nhosts, gpus, libs = (tmp_path / "log.bench").read_text().split()
    # Vertex AI's plugin came without a profile: the bundle gave it one, beside links to the plugin's files.
    assert (benchmark, nhosts, gpus) == ("all_gather_perf", "2", "8")
    assert libs.startswith(f"{work}/nccl-lib:")
    profile = (work / "nccl-lib" / "nccl-env-profile.sh").read_text()
    assert "export NCCL_FASTRAK_IFNAME=eth1,eth2,eth3,eth4,eth5,eth6,eth7,eth8" in profile
    assert (work / "nccl-lib" / "libnccl-net.so").is_symlink()


def test_a_replica_that_cannot_give_the_plugin_its_profile_stops_before_the_test(tmp_path: Path) -> None:
    """Before: `cp ... && export` let a failed copy pass under `set -e`, and the test ran on the plugin without
    its profile."""
    from infra.vertex.job import custom_job as derive

    env = load_environment(REPO / "infra" / "environments" / "dev.yaml")
    container = derive(env, "nccl-test")["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]
    scripts, bin_ = _image(tmp_path, 188.5)
    plugin = tmp_path / "nvidia-lib64"
    plugin.mkdir()
    work = tmp_path / "platform"
    (work / "nccl-lib" / "nccl-env-profile.sh").mkdir(parents=True)  # cp cannot write the profile there
    done = subprocess.run(
        ["bash", "-c", _in(container["args"][0], work)],
        env={
            **{e["name"]: e["value"] for e in container["env"]},
            "NCCL_LIB_DIR": str(plugin),
            "CHECK_BANDWIDTH": str(work / "check-bandwidth.sh"),
            "SCRIPTS": str(scripts),
            "DONE": str(tmp_path / "done"),
            "STUB_LOG": str(tmp_path / "log"),
            "CLUSTER_SPEC": _cluster_spec("workerpool0", 0, 1),
            "PATH": f"{bin_}:{os.environ['PATH']}",
        },
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "nccl-env-profile.sh" in done.stderr, done.stdout + done.stderr
    assert not (tmp_path / "log.bench").exists(), "the benchmark ran on the plugin without its profile"


# --- The NCCL environment, held to the TCPXO plugin's own profile ------------------------------------------

# The record of the plugin's nccl-env-profile.sh at the pinned tag (what it requires, reads and exports), which
# infra/shell keeps and tests/test_shell.py holds to the real file where it is present.
PINNED = REPO / "infra" / "shell" / "pinned-files.yaml"
# What the platform sets beside the profile's exports: the plugin's directory (the profile reads it) and the aperture
# devices' directory (Slurm-GCP's A3 Mega prolog appends it to the installed profile:
# GoogleCloudPlatform/slurm-gcp 6.12.1 tools/prologs-epilogs/receive-data-path-manager-mega).
PLATFORM_ADDS = {"NCCL_LIB_DIR", "NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY"}


def _profile_exports(plugin_dir: str, ld_library_path: str = "") -> dict[str, str]:
    """The recorded profile's exports, sourced with NCCL_LIB_DIR=`plugin_dir` on a host whose NICs it names as
    Vertex AI's containers do (eth0, eth1..eth8: the profile's defaults, and what its discovery finds there)."""
    record = yaml.safe_load(PINNED.read_text())["files"]["tcpxo-nccl-env-profile"]["record"]
    ctrl, gpu = nic_names(TCPXO, GPU_HOSTS["vertex"])
    given = {
        "NCCL_LIB_DIR": plugin_dir,
        "LD_LIBRARY_PATH": ld_library_path,
        "host_nic": ctrl,
        "gpu_nics": ",".join(gpu),
    }
    return {k: re.sub(r"\$\{(\w+)\}", lambda m: given[m.group(1)], str(v)) for k, v in record["exports"].items()}


@pytest.mark.parametrize("job", ["nccl-test", "train"])
def test_each_vertex_containers_nccl_environment_is_the_plugins_profile(job: str, envs: dict[str, Environment]) -> None:
    """Vertex AI mounts the plugin without its profile, so the container's environment sets the profile's values
    itself, the current ones: the pre-v1.0.12 values (NCCL_PROTO=Simple, NCCL_ALGO, NCCL_NVLS_ENABLE=0, no
    NCCL_NVLSTREE_MAX_CHUNKSIZE) beside the default guest config make its checker abort a workload without
    NCCL_NVLSTREE_MAX_CHUNKSIZE=131072 (container-engine-accelerators gpudirect-tcpxo/README.md, Aug 21, 2025)."""
    container = custom_job(envs["dev"], job)["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]
    given = {e["name"]: e["value"] for e in container["env"]}
    expected = _profile_exports(GPU_HOSTS["vertex"].plugin_dir)
    del expected["LD_LIBRARY_PATH"]  # the container puts the plugin's directory first itself
    assert {k: given.get(k) for k in expected} == expected
    unexpected = {k for k in given if k.startswith("NCCL_")} - expected.keys() - PLATFORM_ADDS
    assert not unexpected, f"NCCL variables the plugin's profile does not set (its checker flags them): {unexpected}"


def test_the_profile_the_vertex_bundle_writes_exports_what_the_plugins_profile_does(tmp_path: Path) -> None:
    """The image's MPI entry sources $NCCL_LIB_DIR/nccl-env-profile.sh on every rank (ranks started over ssh do not
    inherit the container's environment): the profile the bundle writes, sourced under bash -euo pipefail,
    exports what the plugin's own profile exports."""
    host = GPU_HOSTS["vertex"]
    path = tmp_path / "nccl-env-profile.sh"
    path.write_text(profile(nccl_env(TCPXO, host), host.plugin_dir))

    def environment(source: str) -> dict[str, str]:
        out = subprocess.run(
            ["bash", "-c", f"set -euo pipefail; {source}env -0"],
            env={"PATH": os.environ["PATH"]},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return dict(line.split("=", 1) for line in out.split("\0") if line)

    bare = environment("")
    exported = {k: v for k, v in environment(f'source "{path}"; ').items() if bare.get(k) != v}
    expected = _profile_exports(host.plugin_dir)
    assert {k: exported.get(k) for k in expected} == expected
    assert exported.keys() - expected.keys() <= PLATFORM_ADDS


def test_each_jobs_entry_is_in_the_inventory_of_generated_scripts(envs: dict[str, Environment]) -> None:
    for env in envs.values():
        scripts = {s.name: s for s in generated_scripts(env) if s.name.startswith("vertex/")}
        assert sorted(scripts) == sorted(f"vertex/{name}/entry.sh" for name in job_names(env))
        for name in job_names(env):
            script = scripts[f"vertex/{name}/entry.sh"]
            container = custom_job(env, name)["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]
            assert script.text == container["args"][0]
            assert script.host == {"nccl-test": "vertex-tcpxo-image", "train": "vertex-trainer-image"}[name]
            runtime = dict(script.runtime_env)
            assert runtime.items() >= {e["name"]: e["value"] for e in container["env"]}.items()
            assert json.loads(runtime["CLUSTER_SPEC"])["task"] == {"type": "workerpool0", "index": 0}


# --- The trainer as two replicas of a simulated job ------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _replicas(checkpoints: Path, steps: int) -> list[dict[str, Any]]:
    port = _free_port()
    spec = {
        "cluster": {"workerpool0": [f"127.0.0.1:{port}"], "workerpool1": ["127.0.0.1:2222"]},
        "environment": "cloud",
    }
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "workloads.trainer",
                "vertex",
                "--steps",
                str(steps),
                "--checkpoint-dir",
                str(checkpoints),
            ],
            cwd=REPO,
            env={**env, "CLUSTER_SPEC": json.dumps({**spec, "task": {"type": task, "index": 0}})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for task in ("workerpool0", "workerpool1")
    ]
    outputs = [p.communicate(timeout=240) for p in procs]
    for proc, (_out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err[-2000:]
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]


@pytest.mark.slow
def test_two_replicas_form_one_process_group_train_and_resume(tmp_path: Path) -> None:
    first = _replicas(tmp_path, 2)
    assert [(s["orchestrator"], s["process_id"], s["processes"]) for s in first] == [("vertex", 0, 2), ("vertex", 1, 2)]
    assert all(s["devices"] == 4 and s["end_step"] == 2 for s in first)
    assert first[0]["loss_last"] == first[1]["loss_last"]
    # The job restarted (a replica failed, Vertex AI restarted them all): it resumes from the last checkpoint.
    again = _replicas(tmp_path, 4)
    assert all(s["start_step"] == 2 and s["end_step"] == 4 for s in again)
    metrics = [step for step, _ in losses(tmp_path)]
    assert metrics == [1, 2, 3, 4]
