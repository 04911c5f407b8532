"""The references of the orchestrators' sections: who holds each slice (GKE, Slurm, Vertex AI or a VM group, one
each, on the kind of slice each takes), and the buckets, images and partitions they name exist. What each
orchestrator may do with its slice is a rule (infra/rules/orchestrators.py)."""

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
    """The bucket, images and partitions the Slurm section names exist (its slices: `holder_problems`)."""
    slurm = env.slurm
    if slurm is None:
        return []
    problems: list[Problem] = []
    problems += _not_in(("slurm", "bucket"), slurm.bucket, env.buckets, "buckets")
    if slurm.training is not None:
        problems += _not_in(("slurm", "training", "image"), slurm.training.image, env.release.images, "release.images")
        problems += _not_in(("slurm", "training", "bucket"), slurm.training.bucket, env.buckets, "buckets")
    for section in ("nccl_test", "training"):
        job = getattr(slurm, section)
        if job is not None:
            where = ("slurm", section, "partition")
            problems += _not_in(where, job.partition, slurm.partitions, "slurm.partitions")
    return problems


def vertex_problems(env: Environment) -> list[Problem]:
    """The images and buckets the Vertex AI jobs name exist (their slices: `holder_problems`)."""
    training = env.vertex.training if env.vertex is not None else None
    if training is None:
        return []
    where = ("vertex", "training")
    return [
        *_not_in((*where, "image"), training.image, env.release.images, "release.images"),
        *_not_in((*where, "bucket"), training.bucket, env.buckets, "buckets"),
    ]
