"""Checks across an environment's sections about who holds each slice: GKE, Slurm, Vertex AI or a VM
group (one each), and what each orchestrator needs of the slices, buckets and identities it names."""

from __future__ import annotations

from typing import TYPE_CHECKING

from infra.config.base import Problem, _not_in
from infra.config.findings import Finding
from infra.config.findings import field_path as path_text

if TYPE_CHECKING:
    from infra.config.environment import Environment


def gke_users(env: Environment, *, placed_per_pool: bool = False) -> dict[str, tuple[str | int, ...]]:
    """Slice key -> the first field of a GKE workload (training, batch, serving) that names it; with
    `placed_per_pool`, of the workloads whose pods name their node pool (Ray worker groups, Kueue flavors, every
    engine but vLLM, whose servers may select a ComputeClass instead)."""
    users: dict[str, tuple[str | int, ...]] = {}
    if env.training is not None:
        users.setdefault(env.training.slice, ("training", "slice"))
    if env.batch is not None:
        for i, key in enumerate(env.batch.slices):
            users.setdefault(key, ("batch", "slices", i))
    for name, d in env.serving.items():
        if placed_per_pool and d.engine == "vllm":
            continue
        for path, key in d.slice_fields():
            users.setdefault(key, ("serving", name, *path))
    return users


def other_holders(env: Environment) -> list[tuple[str, str, tuple[str | int, ...]]]:
    """(slice key, orchestrator, field) of every slice an orchestrator other than GKE names."""
    held: list[tuple[str, str, tuple[str | int, ...]]] = []
    if env.slurm is not None:
        for name, partition in env.slurm.partitions.items():
            held.append((partition.slice, "slurm", ("slurm", "partitions", name, "slice")))
    if env.vertex is not None:
        for section, job in (("nccl_test", env.vertex.nccl_test), ("training", env.vertex.training)):
            if job is not None:
                held.append((job.slice, "vertex", ("vertex", section, "slice")))
    for name, group in env.vm_groups.items():
        held.append((group.slice, "vms", ("vm_groups", name, "slice")))
    return held


def holder_problems(env: Environment) -> list[Problem]:
    """A slice's machines are held by one orchestrator: GKE (a node pool), Slurm (a partition), a VM group,
    or Vertex AI (whose jobs hold machines only while they run, so its jobs may share a slice)."""
    problems: list[Problem] = []
    gke = gke_users(env)
    first: dict[str, tuple[str, tuple[str | int, ...]]] = {}
    for key, holder, where in other_holders(env):
        if key not in env.slices:
            problems += _not_in(where, key, env.slices, "slices")
            continue
        if env.slices[key].slice.kind != "gpu":
            problems.append(Finding(where, key, f"{holder} runs on GPU slices here; this is a TPU slice"))
        if env.slices[key].falls_back:
            problems.append(
                Finding(
                    ("slices", key, "capacity"),
                    [t.label for t in env.slices[key].tiers],
                    f"a capacity list is GKE's fallback (a ComputeClass over a node pool per tier); {holder} "
                    f"({path_text(where)}) takes one capacity type: give the slice one",
                )
            )
        if key in gke:
            problems.append(
                Finding(
                    where,
                    key,
                    f"also used on GKE by {path_text(gke[key])}: a slice's machines are held by one "
                    "orchestrator (GKE makes a node pool of it); give each its own slice",
                )
            )
        elif key in first and not (holder == first[key][0] == "vertex"):
            problems.append(
                Finding(where, key, f"also named by {path_text(first[key][1])}: a slice is held by one owner")
            )
        first.setdefault(key, (holder, where))
    return problems


def slurm_problems(env: Environment) -> list[Problem]:
    slurm = env.slurm
    if slurm is None:
        return []
    problems: list[Problem] = []
    problems += _not_in(("slurm", "bucket"), slurm.bucket, env.buckets, "buckets")
    for name, partition in slurm.partitions.items():
        spec = env.slices.get(partition.slice)
        if spec is None:
            continue  # named by _holder_problems
        where = ("slurm", "partitions", name)
        if partition.static_nodes > spec.slice.hosts:
            problems.append(
                Finding(
                    (*where, "static_nodes"),
                    partition.static_nodes,
                    f"slice {partition.slice!r} has {spec.slice.hosts} nodes",
                )
            )
        if spec.primary.dynamic and partition.static_nodes:
            problems.append(
                Finding(
                    (*where, "static_nodes"),
                    partition.static_nodes,
                    f"the slice's {spec.primary.type} nodes come and go with the jobs: static_nodes must be 0",
                )
            )
    jobs: list[tuple[str, str, int | None]] = []
    if slurm.nccl_test is not None:
        jobs.append(("nccl_test", slurm.nccl_test.partition, slurm.nccl_test.nodes))
    if slurm.training is not None:
        jobs.append(("training", slurm.training.partition, None))
        problems += _not_in(("slurm", "training", "image"), slurm.training.image, env.release.images, "release.images")
        problems += _not_in(("slurm", "training", "bucket"), slurm.training.bucket, env.buckets, "buckets")
        if slurm.training.bucket != slurm.bucket:
            problems.append(
                Finding(
                    ("slurm", "training", "bucket"),
                    slurm.training.bucket,
                    f"the cluster mounts and may write one bucket, slurm.bucket ({slurm.bucket!r})",
                )
            )
    for section, partition_name, nodes in jobs:
        where = ("slurm", section, "partition")
        if partition_name not in slurm.partitions:
            problems += _not_in(where, partition_name, slurm.partitions, "slurm.partitions")
            continue
        spec = env.slices.get(slurm.partitions[partition_name].slice)
        if spec is not None and nodes is not None and nodes > spec.slice.hosts:
            problems.append(
                Finding(("slurm", section, "nodes"), nodes, f"partition {partition_name!r} has {spec.slice.hosts}")
            )
    return problems


def vertex_problems(env: Environment) -> list[Problem]:
    vertex = env.vertex
    problems: list[Problem] = []
    if vertex is None:
        if env.network.network_attachment_cidr is not None:
            problems.append(
                Finding(
                    ("network", "network_attachment_cidr"),
                    env.network.network_attachment_cidr,
                    "only Vertex AI jobs use a network attachment: remove it, or declare `vertex` jobs",
                )
            )
        return problems
    test = vertex.nccl_test
    if test is not None and test.nodes is not None and test.slice in env.slices:
        hosts = env.slices[test.slice].slice.hosts
        if test.nodes > hosts:
            problems.append(
                Finding(("vertex", "nccl_test", "nodes"), test.nodes, f"slice {test.slice!r} has only {hosts} nodes")
            )
    training = vertex.training
    if training is not None:
        where = ("vertex", "training")
        problems += _not_in((*where, "image"), training.image, env.release.images, "release.images")
        problems += _not_in((*where, "bucket"), training.bucket, env.buckets, "buckets")
    return problems


def vm_problems(env: Environment) -> list[Problem]:
    problems: list[Problem] = []
    for name, group in env.vm_groups.items():
        spec = env.slices.get(group.slice)
        if spec is None:
            continue  # named by _holder_problems
        where = ("vm_groups", name)
        direct = spec.slice.gpudirect
        if spec.slice.kind == "gpu" and (direct is None or direct.transport != "tcpxo"):
            problems.append(
                Finding(
                    (*where, "slice"),
                    group.slice,
                    f"a VM group's start-up sets up GPUDirect-TCPXO machines (A3 Mega) only; {spec.slice.name} "
                    f"is {spec.slice.machine_type}",
                )
            )
        test = group.nccl_test
        if test is not None and test.nodes is not None and test.nodes > spec.slice.hosts:
            problems.append(
                Finding(
                    (*where, "nccl_test", "nodes"),
                    test.nodes,
                    f"slice {group.slice!r} has only {spec.slice.hosts} nodes",
                )
            )
    return problems
