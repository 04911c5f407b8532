"""Training: the Ray training cluster and batch jobs (NCCL test, GPU training) through Kueue and JobSet."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from infra.config.base import KubernetesName, Model, Name


class PodSize(Model):
    cpu: Annotated[str, StringConstraints(pattern=r"^[0-9]+m?$")]
    memory: Annotated[str, StringConstraints(pattern=r"^[0-9]+(Mi|Gi)$")]


class Training(Model):
    """The Ray training cluster: which slice, identity, bucket and image it uses."""

    slice: Name
    identity: Name
    bucket: Name
    image: Name
    # The recipe (workloads/trainer/recipes.yaml) `make train` runs here: it must run on `slice` (rule
    # maxtext.recipe-runs-on-training-slice; `make plan` lists the recipes that do).
    recipe: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")] | None = None
    head: PodSize = PodSize(cpu="4", memory="16Gi")
    worker: PodSize
    shared_memory: Annotated[str, StringConstraints(pattern=r"^[0-9]+(Mi|Gi)$")] = "16Gi"
    # Ray Train restarts the worker group this many times; each restart resumes from the last checkpoint.
    max_failures: int = Field(default=3, ge=0)


class NcclCheck(Model):
    """The NCCL all-gather test: proves a GPU slice's nodes talk at full bandwidth (wherever it runs)."""

    # Bus bandwidth (GB/s per GPU) of the largest message below which the test fails.
    # About 185-190 is healthy on A3 Mega over two nodes; no A3 node moves more than its NICs' 1,600 Gbps
    # (200 GB/s: https://cloud.google.com/compute/docs/gpus/gpu-network-bandwidth), so a higher gate always fails.
    min_bus_bandwidth_gbps: float = Field(gt=0, le=200)
    # Nodes to span; default: all of the slice's nodes.
    nodes: int | None = Field(default=None, ge=2)
    # Bump to run the test again with unchanged settings.
    run: int = Field(default=1, ge=1)


class NcclTest(NcclCheck):
    """The NCCL all-gather test JobSet on a slice of the cluster."""

    slice: Name


class TrainerRun(Model):
    """The trainer on a GPU slice, one process per node, checkpoints in a bucket (wherever it runs)."""

    image: Name
    bucket: Name
    steps: int = Field(ge=1)
    run: int = Field(default=1, ge=1)


class GpuTraining(TrainerRun):
    """A JobSet that trains the canary with JAX on a GPU slice, one process per node."""

    slice: Name


class Batch(Model):
    """Batch jobs through Kueue and JobSet.

    Kueue gets one ResourceFlavor per listed slice, one ClusterQueue whose
    quota is the sum of those slices, and a LocalQueue named `queue` in the
    namespace of `identity`, whose service account the jobs run as. Slices
    with `queued` capacity are reached through a ProvisioningRequest admission
    check (Dynamic Workload Scheduler).
    """

    identity: Name
    queue: KubernetesName
    slices: list[Name] = Field(min_length=1)
    nccl_test: NcclTest | None = None
    training: GpuTraining | None = None
