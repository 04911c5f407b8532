"""Cluster Toolkit's Slurm modules: what their variable validations and preconditions refuse.

`gcluster` checks a blueprint's settings against the modules' interfaces before it writes anything
(`infra.slurm.validate`, run by `make plan`); the modules' own `validation` blocks and `precondition`s run only
at `terraform plan`, in a real project. The ones the generated blueprint relies on are checked here, at load,
on the nodesets and partitions `infra.slurm.blueprint` derives, and reported at the environment's field. Each
cites its module file at the pinned release (infra/catalogue/cluster_toolkit.py); tests/test_slurm.py holds the patterns
and bounds equal to those files.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from infra.catalogue.cluster_toolkit import CLUSTER_TOOLKIT
from infra.rules import Finding, rule

if TYPE_CHECKING:
    from infra.config import Environment

AT = f"GoogleCloudPlatform/cluster-toolkit @ {CLUSTER_TOOLKIT.tag}"
NODESET = "community/modules/compute/schedmd-slurm-gcp-v6-nodeset"
PARTITION = "community/modules/compute/schedmd-slurm-gcp-v6-partition"
CONTROLLER = "community/modules/scheduler/schedmd-slurm-gcp-v6-controller"

# The patterns and bounds of the module files (tests/test_slurm.py reads them there).
SLURM_CLUSTER_NAME = r"^[a-z]([-a-z0-9]{0,19})$"  # controller variables.tf: slurm_cluster_name
PARTITION_NAME = r"^[a-z](?:[a-z0-9-]*)$"  # partition variables.tf: partition_name
DWS_MAX_RUN_DURATION = (600, 604800)  # nodeset variables.tf: dws_flex.max_run_duration
# nodeset outputs.tf: disk types a machine family refuses ("${substr(var.machine_type, 0, 3)}:${var.disk_type}").
REFUSED_DISKS = ("c3-:pd-standard", "h3-:pd-standard", "h3-:pd-ssd")


def _nodesets(env: Environment) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(partition, nodeset settings, partition settings) as the blueprint derives them."""
    from infra.slurm.blueprint import partition_modules

    assert env.slurm is not None
    for name, partition in env.slurm.partitions.items():
        if partition.slice not in env.slices or env.slices[partition.slice].primary.type == "queued":
            continue  # named by the config, and by ctk.slurm-capacity
        nodeset, part = partition_modules(env, name, partition)
        yield name, nodeset["settings"], part["settings"]


@rule(
    id="ctk.slurm-names",
    system="Cluster Toolkit (Slurm-GCP 6)",
    layer="apply",
    summary=(
        "The cluster's name matches the controller's slurm_cluster_name pattern (at most 20 characters), each "
        "partition's name the partition's, and the nodeset names Slurm-GCP derives from them are unique."
    ),
    source=(
        f"{AT} {CONTROLLER}/variables.tf (slurm_cluster_name: '{SLURM_CLUSTER_NAME}'; nodeset: 'All nodesets "
        f"must have a unique name'); {PARTITION}/variables.tf (partition_name: '{PARTITION_NAME}'); "
        f'{NODESET}/main.tf (name = substr(replace(var.name, "/[^a-z0-9]/", ""), 0, 14))'
    ),
    subject="environment",
)
def _names(env: Environment) -> Iterator[Finding]:
    from infra.slurm.blueprint import nodeset_name

    if env.slurm is None:
        return
    if not re.match(SLURM_CLUSTER_NAME, env.slurm.name):
        yield Finding(
            "slurm.name", env.slurm.name, f"must match {SLURM_CLUSTER_NAME}: a letter, then up to 19 of a-z, 0-9, -"
        )
    seen: dict[str, str] = {}
    for name in env.slurm.partitions:
        if not re.match(PARTITION_NAME, name):
            yield Finding(f"slurm.partitions.{name}", name, f"a partition name must match {PARTITION_NAME}")
        derived = nodeset_name(name)
        if derived in seen:
            yield Finding(
                f"slurm.partitions.{name}",
                name,
                f"its nodeset is named {derived!r}, as partition {seen[derived]!r}'s is: names must be unique",
            )
        seen.setdefault(derived, name)


@rule(
    id="ctk.slurm-capacity",
    system="Cluster Toolkit (Slurm-GCP 6)",
    layer="apply",
    summary=(
        "A Slurm partition's slice takes a capacity a Slurm-GCP nodeset provisions: on-demand, spot "
        "(enable_spot_vm), a specific reservation (reservation_name) or DWS flex-start (dws_flex, 10 minutes to "
        "7 days); queued provisioning is GKE's (a Kueue ProvisioningRequest) and has no nodeset equivalent."
    ),
    source=(
        f"{AT} {NODESET}/variables.tf (reservation_name, enable_spot_vm, dws_flex: max_run_duration "
        f"{DWS_MAX_RUN_DURATION[0]}..{DWS_MAX_RUN_DURATION[1]} s), docs/slurm-dws-flex.md"
    ),
    subject="environment",
)
def _capacity(env: Environment) -> Iterator[Finding]:
    if env.slurm is None:
        return
    for name, partition in env.slurm.partitions.items():
        spec = env.slices.get(partition.slice)
        if spec is None:
            continue
        where = f"slices.{partition.slice}.capacity.type"
        if spec.primary.type == "queued":
            yield Finding(
                where,
                "queued",
                f"partition {name!r} is on this slice, and Slurm has no queued provisioning (a GKE ProvisioningRequest "
                "through Kueue): use flex-start (Slurm-GCP's DWS flex), spot, on-demand or a reservation",
            )


@rule(
    id="ctk.slurm-nodeset-preconditions",
    system="Cluster Toolkit (Slurm-GCP 6)",
    layer="apply",
    summary=(
        "Each partition's nodeset meets the nodeset's and partition's preconditions: one provisioning model "
        "(a reservation, spot or DWS flex), DWS flex with TERMINATE maintenance, at least one node, a boot disk "
        "its machine takes, and no static nodes in an exclusive partition."
    ),
    source=(
        f'{AT} {NODESET}/outputs.tf (preconditions of output "nodeset"); {PARTITION}/outputs.tf ("Can\'t use '
        'static nodes within partition with `var.exclusive` set to `true`")'
    ),
    subject="environment",
)
def _preconditions(env: Environment) -> Iterator[Finding]:
    if env.slurm is None:
        return
    for name, nodeset, part in _nodesets(env):
        where = f"slurm.partitions.{name}"
        reservation = nodeset.get("reservation_name") or ""
        spot = bool(nodeset.get("enable_spot_vm"))
        dws = bool((nodeset.get("dws_flex") or {}).get("enabled"))
        if sum((bool(reservation), spot, dws)) > 1:
            yield Finding(
                where,
                {"reservation": reservation, "spot": spot, "dws_flex": dws},
                "Cannot use more than one of a reservation, Spot VMs and DWS Flex",
            )
        if dws and nodeset.get("on_host_maintenance") != "TERMINATE":
            yield Finding(
                where,
                nodeset.get("on_host_maintenance"),
                "If DWS Flex is used, `on_host_maintenance` should be set to 'TERMINATE'",
            )
        if nodeset["node_count_static"] + nodeset["node_count_dynamic_max"] <= 0:
            yield Finding(
                where, 0, "This nodeset contains zero nodes, there should be at least one static or dynamic node"
            )
        family_disk = f"{str(nodeset['machine_type'])[:3]}:{nodeset.get('disk_type')}"
        if family_disk in REFUSED_DISKS:
            yield Finding(
                where,
                family_disk,
                f"A disk_type={nodeset.get('disk_type')} cannot be used with machine_type={nodeset['machine_type']}",
            )
        if nodeset["node_count_static"] > 0 and part.get("exclusive", True):
            yield Finding(
                f"{where}.static_nodes",
                nodeset["node_count_static"],
                "Can't use static nodes within an exclusive partition",
            )
