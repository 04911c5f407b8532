"""The bad edits the request, script and upgrade rules refuse, one table per subject: (edit or text, the field or
host, the rule id, what the violation says). The tests of Vertex AI jobs, VM groups, generated scripts and upgrades
run them; the rule registry's test counts them as each rule's failing example."""

from __future__ import annotations

from typing import Any


def pool0(r: dict[str, Any]) -> dict[str, Any]:
    return r["jobSpec"]["workerPoolSpecs"][0]


def props(r: dict[str, Any]) -> dict[str, Any]:
    return r["instanceProperties"]


VERTEX_REFUSED = {
    "a bad accelerator name": (
        lambda r: pool0(r)["machineSpec"].update(acceleratorType="NVIDIA_H100_MEGA"),
        "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType",
        "vertex.custom-job-types",
        "google-cloud-aiplatform 2.7.0",
    ),
    "a bad scheduling strategy": (
        lambda r: r["jobSpec"]["scheduling"].update(strategy="DWS"),
        "jobSpec.scheduling.strategy",
        "vertex.custom-job-types",
        "Scheduling",
    ),
    "a deprecated strategy": (
        lambda r: r["jobSpec"]["scheduling"].update(strategy="ON_DEMAND"),
        "jobSpec.scheduling.strategy",
        "vertex.scheduling",
        "schedule-jobs-dws",
    ),
    "an enum by number (the parser takes it)": (
        lambda r: r["jobSpec"]["scheduling"].update(strategy=6),
        "jobSpec.scheduling.strategy",
        "vertex.custom-job-types",
        "aiplatform_v1",
    ),
    "a proto field name (the parser takes it)": (
        lambda r: pool0(r).update(replica_count=pool0(r).pop("replicaCount")),
        "jobSpec.workerPoolSpecs[0].replica_count",
        "vertex.custom-job-types",
        "aiplatform_v1",
    ),
    "an unknown field": (
        lambda r: r["jobSpec"].update(workerPoolSpec=[]),
        "jobSpec.workerPoolSpec",
        "vertex.custom-job-types",
        "aiplatform_v1",
    ),
    "a duration the parser refuses": (
        lambda r: r["jobSpec"]["scheduling"].update(timeout="1 day"),
        "jobSpec.scheduling.timeout",
        "vertex.custom-job-types",
        "aiplatform_v1",
    ),
    "three primary replicas": (
        lambda r: pool0(r).update(replicaCount="3"),
        "jobSpec.workerPoolSpecs[0].replicaCount",
        "vertex.worker-pools",
        "distributed-training",
    ),
    "half a machine's GPUs": (
        lambda r: pool0(r).update(machineSpec={**pool0(r)["machineSpec"], "acceleratorCount": 4}),
        "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorCount",
        "vertex.machine-accelerators",
        "a3mega",
    ),
    "VPC peering with A3 Mega": (
        lambda r: r["jobSpec"].update(network="projects/100000000001/global/networks/ml-platform"),
        "jobSpec.network",
        "vertex.private-network",
        "psc-i-egress",
    ),
    "a flex-start job longer than 7 days": (
        lambda r: r["jobSpec"]["scheduling"].update(timeout=f"{8 * 24 * 3600}s"),
        "jobSpec.scheduling.timeout",
        "vertex.scheduling",
        "schedule-jobs-dws",
    ),
    "a reservation in another region": (
        lambda r: pool0(r).update(
            machineSpec={
                **pool0(r)["machineSpec"],
                "reservationAffinity": {
                    "reservationAffinityType": "SPECIFIC_RESERVATION",
                    "key": "compute.googleapis.com/reservation-name",
                    "values": ["projects/p/zones/us-central1-a/reservations/r"],
                },
            }
        ),
        "jobSpec.workerPoolSpecs[0].machineSpec.reservationAffinity.values",
        "vertex.reservation-affinity",
        "use-reservations",
    ),
}


VM_REFUSED = {
    "a NIC type the API does not have (the type takes any string)": (
        lambda r: props(r)["networkInterfaces"][3].update(nicType="GVNICC"),
        "instanceProperties.networkInterfaces[3].nicType",
        "gce.bulk-insert-types",
        "google-cloud-compute 1.57.0",
    ),
    "a provisioning model the API does not have": (
        lambda r: props(r)["scheduling"].update(provisioningModel="DWS"),
        "instanceProperties.scheduling.provisioningModel",
        "gce.bulk-insert-types",
        "compute_v1",
    ),
    "a duration as a string (Compute Engine's is a message)": (
        lambda r: props(r)["scheduling"].update(maxRunDuration="3600s"),
        "instanceProperties.scheduling.maxRunDuration",
        "gce.bulk-insert-types",
        "compute_v1",
    ),
    "a proto field name": (
        lambda r: props(r).update(machine_type=props(r).pop("machineType")),
        "instanceProperties.machine_type",
        "gce.bulk-insert-types",
        "compute_v1",
    ),
    "fewer VMs than asked for": (
        lambda r: r.update(minCount="1"),
        "minCount",
        "gce.bulk-insert-all-or-nothing",
        "min_count",
    ),
    "live migration of a GPU VM": (
        lambda r: props(r)["scheduling"].update(onHostMaintenance="MIGRATE"),
        "instanceProperties.scheduling.onHostMaintenance",
        "gce.gpu-vm",
        "gpudirect",
    ),
    "a NIC short": (
        lambda r: props(r)["networkInterfaces"].pop(),
        "instanceProperties.networkInterfaces",
        "gce.gpu-vm",
        "gpudirect",
    ),
    "a flex-start VM that outlives 7 days": (
        lambda r: props(r)["scheduling"].update(maxRunDuration={"seconds": str(8 * 24 * 3600)}),
        "instanceProperties.scheduling.maxRunDuration",
        "gce.gpu-vm",
        "about-flex-start-vms",
    ),
}


# name -> (script text, host, rule id, what the violation says): each a bad edit the rules refuse.
SCRIPT_REFUSED: dict[str, tuple[str, str, str, str]] = {
    "gcloud-in-a-prolog": (
        "gcloud auth configure-docker --quiet us-docker.pkg.dev\n",
        "ubuntu-2404-slurm-prolog",
        "host.command-on-path",
        "gcloud is in /snap/bin, not on the PATH the script runs with there",
    ),
    "a-command-the-image-lacks": (
        "nvidia-ctk runtime configure --runtime=docker\n",
        "ubuntu-2404-slurm-startup",
        "host.command-on-path",
        "the image has no command 'nvidia-ctk'",
    ),
    "docker-gpus-without-the-toolkit": (
        "docker run --rm --gpus all busybox true\n",
        "ubuntu-2404-slurm-prolog",
        "host.docker-gpus-needs-toolkit",
        "the image has no nvidia-container-runtime-hook",
    ),
    "a-container-where-userns-is-restricted": (
        "srun --container-image=nvcr.io#nvidia/pytorch:24.04-py3 true\n",
        "ubuntu-2404-slurm-job",
        "host.containers-need-userns",
        "unprivileged user namespaces are restricted there",
    ),
    "a-plugin-on-a-noexec-mount": (
        "docker run --env=LD_LIBRARY_PATH=/var/lib/tcpxo/lib64 image\nexport LD_LIBRARY_PATH=/home/lib\n",
        "test-read-only",
        "host.noexec-path",
        "is mounted noexec there",
    ),
    "configure-docker-under-a-read-only-home": (
        "docker-credential-gcr configure-docker --registries=us-docker.pkg.dev\necho x > /etc/ro/file\n",
        "test-read-only",
        "host.read-only-path",
        "/root is read-only there: docker-credential-gcr cannot write /root/.docker/config.json",
    ),
}


def _kind(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind]
    return found


def _named(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["metadata"]["name"] == name]
    return found


def _first_job_pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return _kind(objects, "JobSet")["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]


# Upgrades the API server refuses: (release of dev, the edit of its rendered objects an upgrade would send, the
# kind and field of the object refused, the rule id, what the violation says). The edit is to the new objects; the
# old are dev's as rendered.
UPGRADE_REFUSED: dict[str, tuple[str, Any, tuple[str, str], str, str]] = {
    "a team's queue moved to another ClusterQueue": (
        "kueue-queues",
        lambda o: [q["spec"].update(clusterQueue="research") for q in o if q["kind"] == "LocalQueue"],
        ("LocalQueue", "spec.clusterQueue"),
        "k8s.crd-transition-rules",
        "field is immutable",
    ),
    "a GPU JobSet's image bumped under the same name": (
        "gpu-training",
        lambda o: _first_job_pod(o)["spec"]["containers"][0].update(
            image="registry.example/trainer@sha256:" + "1" * 64
        ),
        ("JobSet", "spec.replicatedJobs"),
        "jobset.replicated-jobs-immutable",
        "field is immutable",
    ),
    "a serving slice reshaped (hosts per subgroup 4 -> 8)": (
        "serve-llama405b",
        lambda o: _kind(o, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]["subGroupPolicy"].update(subGroupSize=8),
        ("LeaderWorkerSet", "spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize"),
        "lws.subgroup-size-immutable",
        "field is immutable (was 4)",
    ),
    "a Deployment's selector given another label": (
        "serve-saxml",
        lambda o: _named(o, "serve-saxml-admin")["spec"]["selector"]["matchLabels"].update(tier="admin"),
        ("Deployment", "spec.selector"),
        "k8s.workload-fields-immutable",
        "field is immutable",
    ),
}
