"""Vertex AI custom training: what a CustomJob request must be, beyond what the client library's types accept.

The request is first held to the API's own message types (`vertex.custom-job-types`: google-cloud-aiplatform's
aiplatform_v1, which refuses unknown fields and enum names); the service then refuses more, which the types let
through (measured with the library: a primary pool of 3 replicas, 3 GPUs on an 8-GPU machine, a machine type
that does not exist, VPC peering beside a network attachment all parse). Those rules are here, each with the
page it is written on, and run on every request `make plan` writes (`python -m scripts.vertex write`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from infra.catalogue.accelerators import accelerator_for_machine
from infra.rules import Finding, rule

if TYPE_CHECKING:
    from infra.config import Environment
    from infra.rules.request_subject import RequestContext

LIBRARY = "google-cloud-aiplatform 2.7.0 (google.cloud.aiplatform_v1: CustomJob, MachineSpec, Scheduling)"
API = "aiplatform.v1.CustomJob"
DWS = "https://cloud.google.com/vertex-ai/docs/training/schedule-jobs-dws"
SEVEN_DAYS_S = 7 * 24 * 3600
# Scheduling.Strategy in the library: ON_DEMAND and LOW_COST are marked "Deprecated"; unset means STANDARD.
STRATEGIES = ("STANDARD", "SPOT", "FLEX_START")


def _vertex_slices(env: Environment) -> Iterator[tuple[str, str]]:
    """(field, slice key) of every Vertex AI job."""
    if env.vertex is None:
        return
    for section, job in (("nccl_test", env.vertex.nccl_test), ("training", env.vertex.training)):
        if job is not None and job.slice in env.slices:
            yield f"vertex.{section}.slice", job.slice


@rule(
    id="vertex.capacity",
    system="Vertex AI",
    layer="apply",
    summary=(
        "A Vertex AI job's slice takes a capacity a custom job can schedule: on-demand (STANDARD), spot (SPOT), "
        "flex-start (FLEX_START, at most 7 days) or a specific reservation; queued provisioning is GKE's "
        "(a Kueue ProvisioningRequest) and has no Vertex AI equivalent."
    ),
    source=f"{LIBRARY} Scheduling.Strategy; {DWS}; https://cloud.google.com/vertex-ai/docs/training/use-reservations",
    subject="environment",
)
def _capacity(env: Environment) -> Iterator[Finding]:
    for field, key in _vertex_slices(env):
        capacity = env.slices[key].primary
        if capacity.type == "queued":
            yield Finding(
                f"slices.{key}.capacity.type",
                "queued",
                f"{field} runs on this slice, and Vertex AI schedules a custom job STANDARD, SPOT, FLEX_START or on a "
                "reservation: queued provisioning is GKE's (a ProvisioningRequest through Kueue); use flex-start",
            )


@rule(
    id="vertex.accelerator",
    system="Vertex AI",
    layer="apply",
    summary="A Vertex AI job's slice is of a machine Vertex AI trains on: its GPUs have a Vertex AI accelerator name.",
    source=f"{LIBRARY} AcceleratorType; https://cloud.google.com/vertex-ai/docs/training/configure-compute",
    subject="environment",
)
def _accelerator(env: Environment) -> Iterator[Finding]:
    for field, key in _vertex_slices(env):
        slice_ = env.slices[key].slice
        if slice_.kind == "gpu" and slice_.shape.vertex_accelerator is None:
            yield Finding(field, key, f"{slice_.machine_type} has no Vertex AI accelerator in the catalogue")


def _pools(request: dict[str, Any]) -> list[dict[str, Any]]:
    return list((request.get("jobSpec") or {}).get("workerPoolSpecs") or [])


@rule(
    id="vertex.custom-job-types",
    system="Vertex AI",
    layer="apply",
    summary=(
        "The request is a CustomJob as the API's types define it: no unknown or proto-named field, every enum a "
        "name the API defines (AcceleratorType, Scheduling.Strategy, ReservationAffinity.Type), and the client "
        "library's own JSON parser accepts it."
    ),
    source=f"{LIBRARY}; https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.customJobs",
    api=API,
    subject="request",
)
def _types(request: dict[str, Any], ctx: RequestContext) -> Iterator[Finding]:
    from google.cloud import aiplatform_v1

    from infra.config import api_types

    yield from api_types.refusals(request, aiplatform_v1.CustomJob)


@rule(
    id="vertex.worker-pools",
    system="Vertex AI",
    layer="apply",
    summary=(
        "Worker pool 0 holds the one primary replica (replicaCount 1); the workers are pool 1; every pool names "
        "its machine and replica count."
    ),
    source=(
        "https://cloud.google.com/vertex-ai/docs/training/distributed-training ('Use the first worker pool "
        "specification only for your primary replica, and set its replicaCount to 1')"
    ),
    api=API,
    subject="request",
)
def _worker_pools(request: dict[str, Any], ctx: RequestContext) -> Iterator[Finding]:
    pools = _pools(request)
    if not pools:
        yield Finding("jobSpec.workerPoolSpecs", pools, "a custom job needs at least worker pool 0")
        return
    if str(pools[0].get("replicaCount")) != "1":
        yield Finding(
            "jobSpec.workerPoolSpecs[0].replicaCount", pools[0].get("replicaCount"), "the primary pool holds 1 replica"
        )
    for i, pool in enumerate(pools):
        count = str(pool.get("replicaCount", ""))
        if not count.isdigit() or int(count) < 1:
            yield Finding(f"jobSpec.workerPoolSpecs[{i}].replicaCount", pool.get("replicaCount"), "at least 1")


@rule(
    id="vertex.machine-accelerators",
    system="Vertex AI",
    layer="apply",
    summary=(
        "Each pool's machine is one the catalogue knows, with its own GPUs: the accelerator type and count its "
        "machine carries (a3-megagpu-8g: 8 x NVIDIA_H100_MEGA_80GB)."
    ),
    source=(
        "https://cloud.google.com/vertex-ai/docs/training/configure-compute (GPU machine types); "
        "GoogleCloudPlatform/vertex-ai-samples notebooks/official/training/vertex-distributed-training/a3mega/"
        "llama-3-8b-nemo-pretraining/README.md (a3-megagpu-8g, NVIDIA_H100_MEGA_80GB, 8 per node)"
    ),
    api=API,
    subject="request",
)
def _machines(request: dict[str, Any], ctx: RequestContext) -> Iterator[Finding]:
    for i, pool in enumerate(_pools(request)):
        where = f"jobSpec.workerPoolSpecs[{i}].machineSpec"
        machine = pool.get("machineSpec") or {}
        found = accelerator_for_machine(str(machine.get("machineType")))
        if found is None:
            yield Finding(f"{where}.machineType", machine.get("machineType"), "not a machine type of the catalogue")
            continue
        _, shape = found
        if machine.get("acceleratorType") != shape.vertex_accelerator:
            yield Finding(
                f"{where}.acceleratorType",
                machine.get("acceleratorType"),
                f"{machine['machineType']} carries {shape.vertex_accelerator}",
            )
        if str(machine.get("acceleratorCount")) != str(shape.chips):
            yield Finding(
                f"{where}.acceleratorCount",
                machine.get("acceleratorCount"),
                f"{machine['machineType']} has {shape.chips} GPUs: request all of them",
            )


def _seconds(duration: Any) -> float | None:
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)s", str(duration))
    return float(match.group(1)) if match else None


@rule(
    id="vertex.scheduling",
    system="Vertex AI",
    layer="apply",
    summary=(
        "The strategy is STANDARD, SPOT or FLEX_START (ON_DEMAND and LOW_COST are deprecated). FLEX_START: a "
        "timeout of at most 7 days, the same machine in every pool and no reservation; maxWaitDuration only "
        "with FLEX_START; SPOT consumes no reservation."
    ),
    source=f"{LIBRARY} Scheduling (strategy, max_wait_duration); {DWS}",
    api=API,
    subject="request",
)
def _scheduling(request: dict[str, Any], ctx: RequestContext) -> Iterator[Finding]:
    scheduling = (request.get("jobSpec") or {}).get("scheduling") or {}
    strategy = scheduling.get("strategy", "STANDARD")
    where = "jobSpec.scheduling"
    if strategy not in STRATEGIES:
        yield Finding(f"{where}.strategy", strategy, f"one of {', '.join(STRATEGIES)}")
    pools = _pools(request)
    reserved = [i for i, p in enumerate(pools) if (p.get("machineSpec") or {}).get("reservationAffinity")]
    if strategy == "FLEX_START":
        seconds = _seconds(scheduling.get("timeout", f"{SEVEN_DAYS_S}s"))
        if seconds is None:
            yield Finding(f"{where}.timeout", scheduling.get("timeout"), "a duration in seconds, like 86400s")
        elif seconds > SEVEN_DAYS_S:
            yield Finding(f"{where}.timeout", scheduling.get("timeout"), "FLEX_START jobs run at most 7 days")
        specs = {repr(p.get("machineSpec")) for p in pools}
        if len(specs) > 1:
            yield Finding("jobSpec.workerPoolSpecs", len(specs), "FLEX_START needs the same machine in every pool")
    elif "maxWaitDuration" in scheduling:
        yield Finding(f"{where}.maxWaitDuration", scheduling["maxWaitDuration"], "only FLEX_START jobs wait")
    if strategy in ("FLEX_START", "SPOT"):
        for i in reserved:
            yield Finding(
                f"jobSpec.workerPoolSpecs[{i}].machineSpec.reservationAffinity",
                "reservation",
                f"{strategy} capacity consumes no reservation",
            )


@rule(
    id="vertex.reservation-affinity",
    system="Vertex AI",
    layer="apply",
    summary=(
        "A specific reservation is named by the key compute.googleapis.com/reservation-name and its full resource "
        "name projects/<project>/zones/<zone of the job's region>/reservations/<name>."
    ),
    source=(
        f"{LIBRARY} ReservationAffinity (key, values); https://cloud.google.com/vertex-ai/docs/training/"
        "use-reservations"
    ),
    api=API,
    subject="request",
)
def _reservations(request: dict[str, Any], ctx: RequestContext) -> Iterator[Finding]:
    pattern = rf"^projects/[a-z0-9-]+/zones/{re.escape(ctx.env.region)}-[a-z]/reservations/[a-z0-9-]+$"
    for i, pool in enumerate(_pools(request)):
        affinity = (pool.get("machineSpec") or {}).get("reservationAffinity")
        if not affinity or affinity.get("reservationAffinityType") != "SPECIFIC_RESERVATION":
            continue
        where = f"jobSpec.workerPoolSpecs[{i}].machineSpec.reservationAffinity"
        if affinity.get("key") != "compute.googleapis.com/reservation-name":
            yield Finding(f"{where}.key", affinity.get("key"), "compute.googleapis.com/reservation-name")
        values = affinity.get("values") or []
        if not values or not all(re.match(pattern, str(v)) for v in values):
            yield Finding(f"{where}.values", values, f"full reservation names in {ctx.env.region}, like {pattern}")


@rule(
    id="vertex.private-network",
    system="Vertex AI",
    layer="apply",
    summary=(
        "A job reaches the VPC through a network attachment of its own region (Private Service Connect "
        "interface); A3 Mega jobs cannot use VPC peering (`network`), and a job names one or the other."
    ),
    source=(
        "https://cloud.google.com/vertex-ai/docs/training/psc-i-egress ('The network attachment name must be "
        "included in the request'); https://cloud.google.com/vertex-ai/docs/training/using-private-ip (VPC "
        "peering is not supported for A3 Mega; not re-read here)"
    ),
    api=API,
    subject="request",
)
def _network(request: dict[str, Any], ctx: RequestContext) -> Iterator[Finding]:
    spec = request.get("jobSpec") or {}
    attachment = (spec.get("pscInterfaceConfig") or {}).get("networkAttachment")
    if spec.get("network"):
        machines = {(p.get("machineSpec") or {}).get("machineType") for p in _pools(request)}
        if "a3-megagpu-8g" in machines:
            yield Finding("jobSpec.network", spec["network"], "A3 Mega jobs cannot peer: use a network attachment")
        if attachment:
            yield Finding("jobSpec.network", spec["network"], "name either a peered network or a network attachment")
    if attachment is not None:
        pattern = rf"^projects/[a-z0-9-]+/regions/{re.escape(ctx.env.region)}/networkAttachments/[a-z0-9-]+$"
        if not re.match(pattern, str(attachment)):
            yield Finding("jobSpec.pscInterfaceConfig.networkAttachment", attachment, f"must match {pattern}")
