"""Compute Engine: regions and zones that exist, and machine types only where a zone offers them.

A node pool whose machine type its zone does not offer fails to create ("The resource ... was not found"
/ "Machine type ... does not exist in zone"); a regional pool without `node_locations` spans every zone
the cluster uses. The catalogue is dated data in infra/catalogue/zones.yaml.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from infra.catalogue import zones as catalogue
from infra.rules import Finding, rule
from infra.rules.terraform_subject import _NAME_RULES, _ref

if TYPE_CHECKING:
    from infra.config import Environment

SOURCE = (
    "https://cloud.google.com/compute/docs/regions-zones; https://cloud.google.com/compute/docs/gpus/"
    "gpu-regions-zones; https://cloud.google.com/tpu/docs/regions-zones; zones per machine type as "
    "`gcloud compute machine-types list` lists them (infra/catalogue/zones.yaml, checked "
    f"{catalogue.ZONES_CHECKED.isoformat()})"
)


def _offered(machine_type: str, zones: list[str] | tuple[str, ...], field: str, why: str) -> Iterator[Finding]:
    offering = catalogue.zones_offering(machine_type)
    if offering is None:
        known = ", ".join(sorted(catalogue.FAMILY_ZONES))
        yield Finding(
            field, machine_type, f"not in the zone catalogue (infra/catalogue/zones.yaml); known families: {known}"
        )
        return
    missing = [z for z in zones if z not in offering]
    if missing:
        near = sorted(z for z in offering if any(z.startswith(catalogue.region_of(m) or m) for m in missing))
        yield Finding(
            field,
            machine_type,
            f"not offered in {', '.join(missing)} ({why}); offered in this region: {', '.join(near) or 'none'}",
        )


@rule(
    id="gce.machine-type-offered-in-zone",
    system="Compute Engine",
    layer="apply",
    summary=(
        "The region and zones exist, and every node pool's machine type is offered in each zone its nodes "
        "go to (a slice's zone; a dedicated CPU pool's zones; every zone of the region for the system pool; the Slurm "
        "deployment's zone for its controller and login node)."
    ),
    source=SOURCE,
    subject="environment",
)
def _machine_zones(env: Environment) -> Iterator[Finding]:
    if env.region not in catalogue.REGIONS:
        yield Finding(
            "region", env.region, f"not a Compute Engine region; regions: {', '.join(sorted(catalogue.REGIONS))}"
        )
        return
    for i, zone in enumerate(env.zones):
        if not catalogue.zone_exists(zone):
            yield Finding(
                f"zones[{i}]", zone, f"no such zone; {env.region} has {', '.join(catalogue.REGIONS[env.region])}"
            )
    system = env.cluster.system_pool.machine_type
    yield from _offered(
        system, catalogue.REGIONS[env.region], "cluster.system_pool.machine_type", "the system pool spans the region"
    )
    for key, cpu in env.cpu_pools.items():
        yield from _offered(cpu.machine_type, env.zones, f"cpu_pools.{key}.machine_type", "the pool's zones")
    for key, spec in env.slices.items():
        field = f"slices.{key}.zone" if spec.zone else f"slices.{key}"
        why = "its zone" if spec.zone else f"no `zone`: it goes to the first of `zones`, {env.zone_of(key)}"
        yield from _offered(spec.slice.machine_type, [env.zone_of(key)], field, why)
    # The Slurm controller and login node: the deployment's zone, its first partition's slice's (infra/slurm).
    if env.slurm is not None:
        first = next(iter(env.slurm.partitions.values()))
        if first.slice in env.slices:
            zone = env.zone_of(first.slice)
            why = f"the Slurm deployment's zone, its first partition's slice's, {zone}"
            for host in ("controller", "login"):
                machine = getattr(env.slurm, host).machine_type
                yield from _offered(machine, [zone], f"slurm.{host}.machine_type", why)


@rule(
    id="gce.multinic.one-vpc-per-nic",
    system="Compute Engine",
    layer="apply",
    summary="Each network interface of a VM is in a different VPC network, none of them the node's primary VPC.",
    source="https://cloud.google.com/vpc/docs/multiple-interfaces-concepts (each interface in a different VPC)",
    subject="terraform",
    types=("google_container_node_pool",),
)
def _one_vpc_per_nic(pools: list[tuple[str, dict[str, Any]]], stack: dict[str, Any]) -> Iterator[Finding]:
    for where, pool in pools:
        extra = (pool.get("network_config") or {}).get("additional_node_network_configs") or []
        networks = [e.get("network") for e in extra]
        cluster = _ref("google_container_cluster", stack, str(pool.get("cluster", ""))) or {}
        primary = str(cluster.get("network", "")).replace(".id}", "").replace(".name}", "")
        for i, net in enumerate(networks):
            base = str(net).replace(".id}", "").replace(".name}", "")
            if networks.count(net) > 1 or (primary and base == primary):
                yield Finding(
                    f"{where}.network_config.additional_node_network_configs[{i}].network", net, "a VPC used twice"
                )


@rule(
    id="gcp.resource-names",
    system="GKE / Compute Engine",
    layer="apply",
    summary=(
        "Cluster and node pool names are at most 40 characters; networks, subnets and firewalls at most 63 (RFC 1035)."
    ),
    source=(
        "https://cloud.google.com/kubernetes-engine/docs/reference/rest/v1/projects.locations.clusters#Cluster "
        "(name: up to 40 characters); https://cloud.google.com/compute/docs/naming-resources"
    ),
    subject="terraform",
    types=tuple(_NAME_RULES),
)
def _names(named: list[tuple[str, dict[str, Any]]], stack: dict[str, Any]) -> Iterator[Finding]:
    for where, body in named:
        pattern, allowed = _NAME_RULES[where.split(".", 1)[0]]
        name = body.get("name")
        if isinstance(name, str) and "${" not in name and not re.match(pattern, name):
            yield Finding(f"{where}.name", name, f"allowed: {allowed}")


# VM groups (infra/vms): the environment, the stack's instance template and the bulkInsert request ----------------

LIBRARY = "google-cloud-compute 1.57.0 (google.cloud.compute_v1)"
BULK = "compute.v1.BulkInsertInstanceResource"
FLEX_VMS = "https://cloud.google.com/compute/docs/instances/about-flex-start-vms"
GPUDIRECT = "https://cloud.google.com/compute/docs/gpus/gpudirect"
MAX_RUN_S = 7 * 24 * 3600


@rule(
    id="gce.vm-capacity",
    system="Compute Engine",
    layer="apply",
    summary=(
        "A VM group's slice takes a capacity a VM has a provisioning model for: on-demand and a specific "
        "reservation (STANDARD), spot (SPOT) or flex-start (FLEX_START, at most 7 days); queued provisioning is "
        "GKE's (a Kueue ProvisioningRequest)."
    ),
    source=(
        f"{LIBRARY} Scheduling.ProvisioningModel (FLEX_START, RESERVATION_BOUND, SPOT, STANDARD); {FLEX_VMS}; "
        "https://cloud.google.com/compute/docs/instance-groups/about-resize-requests-mig"
    ),
    subject="environment",
)
def _vm_capacity(env: Environment) -> Iterator[Finding]:
    for name, group in env.vm_groups.items():
        spec = env.slices.get(group.slice)
        if spec is not None and spec.primary.type == "queued":
            yield Finding(
                f"slices.{group.slice}.capacity.type",
                "queued",
                f"VM group {name!r} is on this slice, and a VM has no queued provisioning (GKE's ProvisioningRequest "
                "through Kueue): use flex-start (a resize request of its group), spot, on-demand or a reservation",
            )


def reservations_of(env: Environment) -> list[tuple[str, str, str]]:
    """(slice key, the reservation's project, its name) of each capacity of the environment that consumes one."""
    found = []
    for key, spec in env.slices.items():
        for tier in spec.tiers:
            if tier.reservation:
                owner, _, name = tier.reservation.rpartition("/reservations/")
                found.append((key, owner.removeprefix("projects/") or env.project, name))
    return found


@rule(
    id="gce.reservation-consumed-by-one-orchestrator",
    system="Compute Engine",
    layer="apply",
    summary=(
        "A specific reservation is drawn on by one orchestrator: GKE's node pools and a Slurm nodeset, a VM group "
        "or Vertex AI jobs on one reservation each count on its machines, and whichever starts first takes them."
    ),
    source=(
        "https://cloud.google.com/compute/docs/instances/reservations-overview (a specific reservation's VMs are "
        "consumed by the instances that target it, up to its count)"
    ),
    subject="environment",
)
def _reservation_once(env: Environment) -> Iterator[Finding]:
    holders: dict[tuple[str, str], tuple[str, str]] = {}
    for key, project, name in reservations_of(env):
        holder = env.slice_holder(key)
        first = holders.setdefault((project, name), (key, holder))
        if first[1] != holder:
            yield Finding(
                f"slices.{key}.capacity",
                name,
                f"reservation {name} is drawn on by slice {first[0]} ({first[1]}) too; slice {key} is {holder}'s: "
                "give each orchestrator a reservation of its own",
            )


def _gpu_vm(props: dict[str, Any], where: str) -> Iterator[Finding]:
    """What an A3 VM's properties (API field names) must hold: its NICs, its maintenance, its capacity."""
    from infra.catalogue.accelerators import accelerator_for_machine

    found = accelerator_for_machine(str(props.get("machineType")))
    if found is None or found[0].kind != "gpu":
        return
    shape = found[1]
    nics = props.get("networkInterfaces") or []
    if shape.gpudirect is not None:
        want = 1 + shape.gpudirect.extra_nics
        if len(nics) != want:
            yield Finding(f"{where}.networkInterfaces", len(nics), f"{props['machineType']} takes {want} NICs")
        for i, nic in enumerate(nics):
            if nic.get("nicType") != "GVNIC":
                yield Finding(f"{where}.networkInterfaces[{i}].nicType", nic.get("nicType"), "GVNIC on every NIC")
        networks = [nic.get("network") for nic in nics]
        for i, network in enumerate(networks):
            if networks.count(network) > 1:
                yield Finding(f"{where}.networkInterfaces[{i}].network", network, "each NIC in its own VPC network")
    scheduling = props.get("scheduling") or {}
    if scheduling.get("onHostMaintenance") != "TERMINATE":
        yield Finding(
            f"{where}.scheduling.onHostMaintenance",
            scheduling.get("onHostMaintenance"),
            "GPU VMs cannot live-migrate: TERMINATE",
        )
    model = scheduling.get("provisioningModel", "STANDARD")
    if model in ("FLEX_START", "SPOT") and scheduling.get("instanceTerminationAction") != "DELETE":
        yield Finding(
            f"{where}.scheduling.instanceTerminationAction",
            scheduling.get("instanceTerminationAction"),
            f"{model} VMs here are deleted when they end (DELETE), never kept stopped holding their disks",
        )
    run = scheduling.get("maxRunDuration")
    seconds = str(run.get("seconds", "")) if isinstance(run, dict) else ""
    if run is not None and seconds.isdigit() and not 0 < int(seconds) <= MAX_RUN_S:
        # (A malformed duration is the types' to refuse: gce.bulk-insert-types.)
        yield Finding(f"{where}.scheduling.maxRunDuration", run, f"1 to {MAX_RUN_S} seconds (7 days)")
    affinity = props.get("reservationAffinity") or {}
    if affinity.get("consumeReservationType") == "SPECIFIC_RESERVATION":
        if model != "STANDARD":
            yield Finding(f"{where}.reservationAffinity", affinity, f"a {model} VM consumes no reservation")
        if affinity.get("key") != "compute.googleapis.com/reservation-name" or not affinity.get("values"):
            yield Finding(
                f"{where}.reservationAffinity", affinity, "key compute.googleapis.com/reservation-name and its name"
            )


@rule(
    id="gce.gpu-vm",
    system="Compute Engine",
    layer="apply",
    summary=(
        "A GPU VM of a bulkInsert request has one gVNIC per NIC of its machine, "
        "each in its own VPC network, host maintenance TERMINATE; flex-start and spot VMs are deleted when they "
        "end, run at most 7 days; a specific reservation is named by its key and name and consumed by STANDARD."
    ),
    source=(
        f"{GPUDIRECT}; https://cloud.google.com/vpc/docs/multiple-interfaces-concepts; {FLEX_VMS}; "
        "https://cloud.google.com/compute/docs/instances/reservations-consume; "
        f"{LIBRARY} Scheduling, ReservationAffinity"
    ),
    subject="request",
)
def _bulk_gpu_vm(request: dict[str, Any], ctx: Any) -> Iterator[Finding]:
    if ctx.api == BULK:
        yield from _gpu_vm(request.get("instanceProperties") or {}, "instanceProperties")


def _template_properties(body: dict[str, Any]) -> dict[str, Any]:
    """An instance template's Terraform body in the API's field names, as far as `_gpu_vm` reads it."""
    sched = (body.get("scheduling") or [{}])[0] if isinstance(body.get("scheduling"), list) else body.get("scheduling")
    sched = sched or {}
    affinity = body.get("reservation_affinity") or {}
    if isinstance(affinity, list):
        affinity = affinity[0] if affinity else {}
    specific = affinity.get("specific_reservation") or {}
    props: dict[str, Any] = {
        "machineType": body.get("machine_type"),
        "networkInterfaces": [
            {"network": n.get("network"), "nicType": n.get("nic_type")} for n in body.get("network_interface") or []
        ],
        "scheduling": {
            "onHostMaintenance": sched.get("on_host_maintenance"),
            "provisioningModel": sched.get("provisioning_model", "STANDARD"),
            "instanceTerminationAction": sched.get("instance_termination_action"),
        },
        "reservationAffinity": {
            "consumeReservationType": affinity.get("type"),
            "key": specific.get("key"),
            "values": specific.get("values"),
        },
    }
    if sched.get("max_run_duration"):
        props["scheduling"]["maxRunDuration"] = sched["max_run_duration"]
    return props


@rule(
    id="gce.gpu-vm-template",
    system="Compute Engine",
    layer="apply",
    summary="The stack's GPU instance templates hold to what a GPU VM needs (as gce.gpu-vm checks a bulkInsert).",
    source=f"{GPUDIRECT}; https://cloud.google.com/vpc/docs/multiple-interfaces-concepts; {FLEX_VMS}",
    subject="terraform",
    types=("google_compute_instance_template",),
)
def _template_gpu_vm(templates: list[tuple[str, dict[str, Any]]], stack: dict[str, Any]) -> Iterator[Finding]:
    for where, body in templates:
        yield from _gpu_vm(_template_properties(body), where)


@rule(
    id="gce.bulk-insert-types",
    system="Compute Engine",
    layer="apply",
    summary=(
        "The request is a BulkInsertInstanceResource as the API's types define it: no unknown or proto-named "
        "field, every enum-valued string one of the library's enum names (its protos declare them as strings), "
        "and the library's own JSON parser accepts it."
    ),
    source=f"{LIBRARY}; https://cloud.google.com/compute/docs/reference/rest/v1/instances/bulkInsert",
    api=BULK,
    subject="request",
)
def _bulk_types(request: dict[str, Any], ctx: Any) -> Iterator[Finding]:
    from google.cloud import compute_v1

    from infra.config import api_types

    yield from api_types.refusals(request, compute_v1.BulkInsertInstanceResource)


@rule(
    id="gce.bulk-insert-all-or-nothing",
    system="Compute Engine",
    layer="apply",
    summary=(
        "A group's bulkInsert creates all its VMs or none (minCount equal to count), names them explicitly "
        "(perInstanceProperties, one per VM, RFC 1035 names) and not also by a namePattern."
    ),
    source=(
        f"{LIBRARY} BulkInsertInstanceResource (min_count: 'If minCount instances cannot be created, then no "
        "instances will be created'; name_pattern or per_instance_properties); "
        "https://cloud.google.com/compute/docs/naming-resources"
    ),
    api=BULK,
    subject="request",
)
def _bulk_all_or_nothing(request: dict[str, Any], ctx: Any) -> Iterator[Finding]:
    count, minimum = str(request.get("count")), str(request.get("minCount"))
    if minimum != count:
        yield Finding("minCount", request.get("minCount"), f"equal to count ({count}): all the group's VMs or none")
    names = request.get("perInstanceProperties") or {}
    if request.get("namePattern"):
        yield Finding("namePattern", request["namePattern"], "the VMs are named by perInstanceProperties")
    if str(len(names)) != count:
        yield Finding("perInstanceProperties", len(names), f"one entry per VM ({count})")
    for name in names:
        if not re.match(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$", name):
            yield Finding(f"perInstanceProperties.{name}", name, "an RFC 1035 name of at most 63 characters")


INSTANCE_ADMIN_ROLES = ("roles/compute.instanceAdmin", "roles/compute.instanceAdmin.v1", "roles/compute.admin")


@rule(
    id="gce.instance-admin-held-to-its-instances",
    system="Compute Engine IAM",
    layer="apply",
    summary=(
        "A project-wide instance admin grant (the Slurm controller's, which creates and deletes its nodes) carries an "
        "IAM condition on the names of the instances it manages: without one it can stop, reset or delete every VM "
        "of the project, GKE's TPU and GPU nodes included."
    ),
    source=(
        "https://cloud.google.com/iam/docs/configuring-resource-based-access (grant access to resources by name "
        "prefix: VM instances); https://cloud.google.com/iam/docs/conditions-attribute-reference (resource.type, "
        "resource.name, extract())"
    ),
    subject="terraform",
    types=("google_project_iam_member",),
)
def _instance_admin(grants: list[tuple[str, dict[str, Any]]], stack: dict[str, Any]) -> Iterator[Finding]:
    for where, grant in grants:
        if grant.get("role") not in INSTANCE_ADMIN_ROLES:
            continue
        expression = str((grant.get("condition") or {}).get("expression", ""))
        if "compute.googleapis.com/Instance" not in expression or ".startsWith(" not in expression:
            yield Finding(
                f"{where}.condition",
                grant.get("condition"),
                f"{grant.get('role')} on the whole project: hold it to the instances it manages (resource.type != "
                '"compute.googleapis.com/Instance" || resource.name.extract("/instances/{name}").startsWith('
                '"<prefix>"))',
            )
