"""Each Vertex AI job's CustomJob request, derived from the environment and the catalogue.

The request is the REST body of `projects.locations.customJobs.create`
(https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.customJobs), in its JSON field
names:

- worker pool 0 holds the one primary replica, pool 1 the rest of the slice's nodes
  (https://cloud.google.com/vertex-ai/docs/training/distributed-training);
- each pool's machine, accelerator type and count come from the slice's catalogue entry;
- the scheduling strategy from the slice's capacity: on-demand is STANDARD (ON_DEMAND and LOW_COST are
  deprecated in the API's Scheduling.Strategy), spot SPOT, flex-start FLEX_START with the slice's run limit as
  the job's timeout (https://cloud.google.com/vertex-ai/docs/training/schedule-jobs-dws); a reservation is a
  SPECIFIC_RESERVATION affinity of each pool's machine (https://cloud.google.com/vertex-ai/docs/training/
  use-reservations); queued provisioning has no Vertex AI equivalent (rule vertex.capacity refuses it);
- the trainer's image by digest (the release's); the NCCL test runs in the catalogue's TCPXO plugin image;
- the training bucket as the base output directory, which Vertex AI also mounts at /gcs/<bucket>
  (https://cloud.google.com/vertex-ai/docs/training/cloud-storage-file-system);
- private access through the network attachment (Private Service Connect interface) when the environment has
  one: VPC peering (`network`) is not offered with A3 Mega (rule vertex.private-network).
"""

from __future__ import annotations

from typing import Any

from infra.catalogue.accelerators import Slice
from infra.catalogue.gpudirect import GPU_HOSTS, nccl_env
from infra.config import Environment
from infra.config.vertex import VertexNcclTest, VertexTraining
from infra.derive.gpu_group import WORKDIR, all_gather_files, bundle, nccl_test_env, profile, script

STRATEGY = {"on-demand": "STANDARD", "spot": "SPOT", "flex-start": "FLEX_START", "reservation": "STANDARD"}
HOST = GPU_HOSTS["vertex"]
# The job's identity (the stack creates it): it may write the training bucket and the job's logs.
SERVICE_ACCOUNT_ID = "vertex-jobs"
# The NCCL test is a verdict: it must not hold machines for long.
NCCL_TEST_TIMEOUT_S = 3600
# Where Vertex AI mounts the project's buckets (Cloud Storage FUSE) in every replica.
GCS_MOUNT = "/gcs"


def service_account(env: Environment) -> str:
    return f"{SERVICE_ACCOUNT_ID}@{env.project}.iam.gserviceaccount.com"


def network_attachment_name(env: Environment) -> str:
    return f"{env.network.name}-vertex"


def attachment_subnet_name(env: Environment) -> str:
    return f"{env.network.name}-vertex-{env.region}"


def network_attachment(env: Environment) -> str | None:
    """The attachment's resource name as a request names it, or None without private access."""
    if env.network.network_attachment_cidr is None:
        return None
    return f"projects/{env.project}/regions/{env.region}/networkAttachments/{network_attachment_name(env)}"


def endpoint(env: Environment) -> str:
    """The regional endpoint a job is created through (the global one refuses regional resources)."""
    return f"{env.region}-aiplatform.googleapis.com"


def parent(env: Environment) -> str:
    return f"projects/{env.project}/locations/{env.region}"


def output_dir(env: Environment, training: VertexTraining) -> str:
    return f"gs://{env.bucket_name(training.bucket)}/vertex/{env.name}-train"


def _machine(env: Environment, slice_key: str) -> dict[str, Any]:
    spec = env.slices[slice_key]
    slice_ = spec.slice
    machine: dict[str, Any] = {
        "machineType": slice_.machine_type,
        "acceleratorType": slice_.shape.vertex_accelerator,
        "acceleratorCount": slice_.chips_per_host,
    }
    if spec.primary.type == "reservation":
        # The reservation's full resource name, in the slice's zone (ReservationAffinity.values).
        machine["reservationAffinity"] = {
            "reservationAffinityType": "SPECIFIC_RESERVATION",
            "key": "compute.googleapis.com/reservation-name",
            "values": [spec.primary.reservation_path(env.project, env.zone_of(slice_key))],
        }
    return machine


def _env(values: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in values.items()]


def _nccl_test_container(env: Environment, test: VertexNcclTest, slice_: Slice) -> dict[str, Any]:
    direct = slice_.gpudirect
    assert direct is not None
    values = nccl_test_env(direct, HOST, slice_.chips_per_host, test.min_bus_bandwidth_gbps)
    files = {
        **all_gather_files(),
        "vertex-group.sh": script("vertex-group.sh"),
        "nccl-env-profile.sh": profile(nccl_env(direct, HOST), HOST.plugin_dir),
    }
    run = [
        # Vertex AI mounts the plugin without the installer's profile, which the image's MPI entry sources on
        # every rank: give it one next to links to the plugin's files.
        'if [ ! -f "$NCCL_LIB_DIR/nccl-env-profile.sh" ]; then',
        f"  mkdir -p {WORKDIR}/nccl-lib",
        f'  find "$NCCL_LIB_DIR" -mindepth 1 -maxdepth 1 -exec ln -sf {{}} {WORKDIR}/nccl-lib/ \\;',
        # Two commands, not `cp && export`: under `set -e` a failed copy then stops the replica instead of
        # running the test on the plugin without its profile.
        f"  cp {WORKDIR}/nccl-env-profile.sh {WORKDIR}/nccl-lib/",
        f"  export NCCL_LIB_DIR={WORKDIR}/nccl-lib",
        "fi",
        f"exec bash {WORKDIR}/vertex-group.sh bash {WORKDIR}/all-gather-mpi.sh",
    ]
    return {
        "imageUri": direct.installer_image,
        "command": ["bash", "-c"],
        "args": [bundle(files, run)],
        "env": _env({**values, "LD_LIBRARY_PATH": HOST.plugin_dir}),
    }


def checkpoint_dir(env: Environment, training: VertexTraining) -> str:
    """The trainer's checkpoints: the base output directory, through Vertex AI's mount of the bucket."""
    return output_dir(env, training).replace("gs://", f"{GCS_MOUNT}/", 1)


def _training_container(env: Environment, training: VertexTraining, slice_: Slice) -> dict[str, Any]:
    values = {"JAX_PLATFORMS": "cuda"}
    if slice_.gpudirect is not None:
        values = {**nccl_env(slice_.gpudirect, HOST), **values}
    trainer = [
        "python", "-m", "workloads.trainer", "vertex",
        "--steps", str(training.steps), "--checkpoint-dir", checkpoint_dir(env, training),
    ]  # fmt: skip
    run = [f'export LD_LIBRARY_PATH="{HOST.plugin_dir}:${{LD_LIBRARY_PATH:-}}"', "exec " + " ".join(trainer)]
    return {
        "imageUri": env.release.images[training.image],
        "command": ["bash", "-c"],
        "args": ["set -euo pipefail\n" + "\n".join(run) + "\n"],
        "env": _env(values),
    }


def job_names(env: Environment) -> list[str]:
    return list(env.vertex.jobs()) if env.vertex is not None else []


def custom_job(env: Environment, name: str) -> dict[str, Any]:
    """The CustomJob request of job `name` (`nccl-test`, `train`) of the environment's Vertex AI section."""
    assert env.vertex is not None
    job = env.vertex.jobs()[name]
    spec = env.slices[job.slice]
    slice_ = spec.slice
    if isinstance(job, VertexNcclTest):
        nodes = job.nodes or slice_.hosts
        container = _nccl_test_container(env, job, slice_)
    else:
        nodes = slice_.hosts
        container = _training_container(env, job, slice_)
    machine = _machine(env, job.slice)
    pools: list[dict[str, Any]] = [{"machineSpec": machine, "replicaCount": "1", "containerSpec": container}]
    if nodes > 1:
        pools.append({"machineSpec": machine, "replicaCount": str(nodes - 1), "containerSpec": container})
    capacity = spec.primary
    scheduling: dict[str, Any] = {"strategy": STRATEGY.get(capacity.type, capacity.type.upper())}
    if isinstance(job, VertexNcclTest):
        # A verdict, not a retry loop (as the GKE and Slurm NCCL tests).
        scheduling.update(timeout=f"{NCCL_TEST_TIMEOUT_S}s", disableRetries=True)
    else:
        # One JAX process group: a restarted replica restarts every replica, which resume from the last checkpoint.
        scheduling["restartJobOnWorkerRestart"] = True
        if capacity.max_run_hours is not None:
            scheduling["timeout"] = f"{capacity.max_run_hours * 3600}s"
    if capacity.type == "flex-start":
        scheduling["maxWaitDuration"] = f"{env.vertex.max_wait_hours * 3600}s"
    job_spec: dict[str, Any] = {
        "workerPoolSpecs": pools,
        "scheduling": scheduling,
        "serviceAccount": service_account(env),
    }
    if isinstance(job, VertexTraining):
        job_spec["baseOutputDirectory"] = {"outputUriPrefix": output_dir(env, job)}
    attachment = network_attachment(env)
    if attachment is not None:
        job_spec["pscInterfaceConfig"] = {"networkAttachment": attachment}
    return {
        "displayName": f"{env.name}-{name}-run{job.run}",
        "labels": {**env.labels, "platform_job": name},
        "jobSpec": job_spec,
    }
