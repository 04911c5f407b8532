"""The platform's own rules about who holds a slice and what each orchestrator runs there: choices no real system
forces (layer `platform`), each with the document that says why, except where a real system refuses it.

The schema (infra/config/orchestrator_checks.py) keeps what every later check reads: each slice a job names exists,
is of the kind its orchestrator takes (GKE serving on TPU, the others on GPU), and has one owner.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from infra.config.findings import Finding
from infra.config.findings import field_path as path_text
from infra.config.orchestrator_checks import gke_users, other_holders
from infra.rules import rule
from infra.rules.sources import QUEUED_DOC

if TYPE_CHECKING:
    from infra.config import Environment


@rule(
    id="platform.queued-provisioning-through-kueue",
    system="ML platform (Kueue batch jobs)",
    layer="platform",
    summary=(
        "A slice on GKE's queued provisioning is requested through Kueue's ProvisioningRequests, which queue the GPU "
        "batch jobs here: the slice is listed in batch.slices, and a TPU slice takes another capacity (nothing "
        "queues a TPU slice's workload)."
    ),
    source=f"docs/gpu.md (Kueue, JobSet and queued provisioning); {QUEUED_DOC}",
    subject="environment",
)
def _queued_through_kueue(env: Environment) -> Iterator[Finding]:
    batch = env.batch.slices if env.batch is not None else []
    for key, spec in env.gke_slices.items():
        if spec.primary.type != "queued":
            continue
        if spec.slice.kind == "tpu":
            yield Finding(
                ("slices", key, "capacity", "type"),
                "queued",
                "queued provisioning is requested through Kueue, which queues the GPU batch jobs here (batch.slices "
                "takes GPU slices); a TPU slice takes on-demand, spot, reservation or flex-start (flex-start: the "
                "Dynamic Workload Scheduler's TPUs without a queue)",
            )
        elif key not in batch:
            yield Finding(
                ("slices", key, "capacity", "type"),
                "queued",
                "queued provisioning is requested through Kueue: list this slice in `batch.slices`",
            )


def _node_asks(env: Environment) -> Iterator[tuple[tuple[str | int, ...], int, str, str]]:
    """(field, nodes asked for, slice key, what is said of the slice) of every job or partition that asks for a
    number of a slice's nodes."""
    only = "slice {key!r} has only {hosts} nodes"
    if env.batch is not None and env.batch.nccl_test is not None and env.batch.nccl_test.nodes is not None:
        yield ("batch", "nccl_test", "nodes"), env.batch.nccl_test.nodes, env.batch.nccl_test.slice, only
    if env.vertex is not None and env.vertex.nccl_test is not None and env.vertex.nccl_test.nodes is not None:
        yield ("vertex", "nccl_test", "nodes"), env.vertex.nccl_test.nodes, env.vertex.nccl_test.slice, only
    for name, group in env.vm_groups.items():
        if group.nccl_test is not None and group.nccl_test.nodes is not None:
            yield ("vm_groups", name, "nccl_test", "nodes"), group.nccl_test.nodes, group.slice, only
    slurm = env.slurm
    if slurm is None:
        return
    for name, partition in slurm.partitions.items():
        at = ("slurm", "partitions", name, "static_nodes")
        yield at, partition.static_nodes, partition.slice, "slice {key!r} has {hosts} nodes"
    test = slurm.nccl_test
    if test is not None and test.nodes is not None and test.partition in slurm.partitions:
        said = f"partition {test.partition!r} has {{hosts}}"
        yield ("slurm", "nccl_test", "nodes"), test.nodes, slurm.partitions[test.partition].slice, said


@rule(
    id="platform.jobs-within-their-slice",
    system="ML platform (slices)",
    layer="platform",
    summary=(
        "A job (an NCCL test on GKE, Vertex AI, a VM group or Slurm) asks for at most the nodes of its slice, and a "
        "Slurm partition keeps at most the slice's nodes static: a slice's `hosts` is every machine the platform "
        "makes of it."
    ),
    source="docs/environments.md (slices: a slice is `hosts` machines of one shape); docs/orchestrators.md",
    subject="environment",
)
def _within_the_slice(env: Environment) -> Iterator[Finding]:
    for at, nodes, key, said in _node_asks(env):
        spec = env.slices.get(key)
        if spec is not None and nodes > spec.slice.hosts:
            yield Finding(at, nodes, said.format(key=key, hosts=spec.slice.hosts))


@rule(
    id="platform.slurm-static-nodes-on-fixed-capacity",
    system="ML platform (Slurm through Cluster Toolkit)",
    layer="platform",
    summary=(
        "A Slurm partition keeps static nodes only on a slice whose machines stay (on-demand or a reservation): "
        "spot, flex-start and queued nodes come and go with the jobs."
    ),
    source="docs/orchestrators.md (Slurm through Cluster Toolkit: static and dynamic nodes)",
    subject="environment",
)
def _static_nodes(env: Environment) -> Iterator[Finding]:
    if env.slurm is None:
        return
    for name, partition in env.slurm.partitions.items():
        spec = env.slices.get(partition.slice)
        if spec is not None and spec.primary.dynamic and partition.static_nodes:
            yield Finding(
                ("slurm", "partitions", name, "static_nodes"),
                partition.static_nodes,
                f"the slice's {spec.primary.type} nodes come and go with the jobs: static_nodes must be 0",
            )


@rule(
    id="platform.slurm-writes-one-bucket",
    system="ML platform (Slurm through Cluster Toolkit)",
    layer="platform",
    summary=(
        "The Slurm cluster mounts one bucket and may write only there (under slurm/): its training job writes its "
        "checkpoints to slurm.bucket."
    ),
    source="docs/orchestrators.md (Slurm through Cluster Toolkit); infra/slurm/jobs.py (BUCKET_PREFIX)",
    subject="environment",
)
def _slurm_bucket(env: Environment) -> Iterator[Finding]:
    slurm = env.slurm
    if slurm is not None and slurm.training is not None and slurm.training.bucket != slurm.bucket:
        yield Finding(
            ("slurm", "training", "bucket"),
            slurm.training.bucket,
            f"the cluster mounts and may write one bucket, slurm.bucket ({slurm.bucket!r})",
        )


@rule(
    id="platform.network-attachment-for-vertex-only",
    system="ML platform (Vertex AI)",
    layer="platform",
    summary=(
        "A network attachment's range is only for Vertex AI jobs (they reach the VPC through it): without `vertex` "
        "jobs the stack would make a subnet and an attachment no one uses."
    ),
    source="docs/orchestrators.md (Vertex AI custom jobs: the network attachment)",
    subject="environment",
)
def _attachment(env: Environment) -> Iterator[Finding]:
    if env.vertex is None and env.network.network_attachment_cidr is not None:
        yield Finding(
            ("network", "network_attachment_cidr"),
            env.network.network_attachment_cidr,
            "only Vertex AI jobs use a network attachment: remove it, or declare `vertex` jobs",
        )


@rule(
    id="platform.vm-groups-on-tcpxo",
    system="ML platform (Compute Engine VMs)",
    layer="platform",
    summary=(
        "A VM group's start-up script sets up GPUDirect-TCPXO machines (A3 Mega) only: its receive-data-path "
        "manager and NCCL plugin are TCPXO's."
    ),
    source="docs/orchestrators.md (Compute Engine VMs); infra/vms/files/startup.sh",
    subject="environment",
)
def _vm_machines(env: Environment) -> Iterator[Finding]:
    for name, group in env.vm_groups.items():
        spec = env.slices.get(group.slice)
        if spec is None or spec.slice.kind != "gpu":
            continue  # refused by the schema
        direct = spec.slice.gpudirect
        if direct is None or direct.transport != "tcpxo":
            yield Finding(
                ("vm_groups", name, "slice"),
                group.slice,
                f"a VM group's start-up sets up GPUDirect-TCPXO machines (A3 Mega) only; {spec.slice.name} is "
                f"{spec.slice.machine_type}",
            )


@rule(
    id="platform.capacity-lists-for-whole-host-servers",
    system="ML platform (capacity that falls back)",
    layer="platform",
    summary=(
        "A capacity list (a ComputeClass over a node pool per tier) is GKE's, and only for pods that may land on any "
        "tier: a vLLM deployment's single-host servers. Slurm, Vertex AI and VM groups take one capacity type; Ray "
        "worker groups, Kueue flavors and the other engines name their node pool."
    ),
    source="docs/serving.md (Capacity that falls back)",
    subject="environment",
)
def _capacity_lists(env: Environment) -> Iterator[Finding]:
    for key, holder, where in other_holders(env):
        spec = env.slices.get(key)
        if spec is not None and spec.falls_back:
            yield Finding(
                ("slices", key, "capacity"),
                [t.label for t in spec.tiers],
                f"a capacity list is GKE's fallback (a ComputeClass over a node pool per tier); {holder} "
                f"({path_text(where)}) takes one capacity type: give the slice one",
            )
    per_pool = gke_users(env, placed_per_pool=True)
    for key, spec in env.slices.items():
        if not spec.falls_back or env.slice_holder(key) != "gke" or spec.slice.multi_host:
            continue  # another holder's (above), or a multi-host slice's (refused where the count is checked)
        if key in per_pool:
            yield Finding(
                ("slices", key, "capacity"),
                [t.label for t in spec.tiers],
                f"a capacity list on a slice {'.'.join(map(str, per_pool[key]))} places per node pool (Ray worker "
                "groups, Kueue flavors and the other engines name their pool): only a vLLM deployment's servers, "
                "each a whole host, may land on any tier; give this slice one capacity type",
            )
