"""A Slurm cluster on the environment's GPU slices, deployed through Cluster Toolkit (`infra/slurm`)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints, field_validator, model_validator

from infra.catalogue.cpu_machines import CPU_MACHINES
from infra.config.base import Model, Name
from infra.config.compute import MAX_POOL_NODES, _cpu_machine
from infra.config.training import NcclCheck, TrainerRun

# A partition's name as the environment writes it (rule ctk.partition-name holds it to the toolkit's pattern).
PartitionName = Annotated[str, StringConstraints(min_length=1, max_length=63)]


class SlurmHost(Model):
    """The controller or a login node: a small CPU VM that runs all the time."""

    machine_type: str
    disk_size_gb: int = Field(default=50, ge=20, le=65536)

    @field_validator("machine_type")
    @classmethod
    def _known_machine(cls, value: str) -> str:
        return _cpu_machine(value)

    @property
    def disk_type(self) -> str:
        return CPU_MACHINES[self.machine_type].disk_type


class SlurmPartition(Model):
    """A partition of one GPU slice's machines.

    Its nodes are Slurm's cloud nodes: `static_nodes` exist all the time, the rest of the slice's
    nodes are created when a job needs them and deleted after `suspend_after_minutes` idle (Slurm's
    power saving, as Slurm-GCP runs it), so an idle partition of 0 static nodes holds no GPU.
    """

    slice: Name
    static_nodes: int = Field(default=0, ge=0, le=MAX_POOL_NODES)
    default: bool = False
    suspend_after_minutes: int = Field(default=10, ge=1, le=10080)
    """Minutes a dynamic node may stay idle before Slurm deletes it (the partition's SuspendTime)."""


class SlurmNcclTest(NcclCheck):
    """The NCCL all-gather test as a batch job of a partition (its slice's nodes, or `nodes` of them)."""

    partition: PartitionName


class SlurmTraining(TrainerRun):
    """The trainer as a batch job of a partition: one process per node of its slice."""

    partition: PartitionName


class SlurmCluster(Model):
    """A Slurm cluster: a controller, login nodes, and one partition per GPU slice it holds.

    The cluster reuses what the platform stack created (the VPC and subnet, the GPUDirect networks,
    the buckets, the registry) and runs as the stack's `slurm-<name>` service accounts: the nodes may
    write to `bucket` (mounted on every node at /gcs/<bucket key>) and read the registry. `make plan`
    writes its Cluster Toolkit blueprint, deployment file and batch jobs.
    """

    name: Annotated[str, StringConstraints(min_length=1, max_length=63)]
    """slurm_cluster_name of the toolkit's controller module (rule ctk.slurm-names checks its pattern)."""
    controller: SlurmHost = SlurmHost(machine_type="n2-standard-4")
    login: SlurmHost = SlurmHost(machine_type="n2-standard-2")
    partitions: dict[PartitionName, SlurmPartition] = Field(min_length=1)
    bucket: Name
    nccl_test: SlurmNcclTest | None = None
    training: SlurmTraining | None = None

    @field_validator("partitions")
    @classmethod
    def _no_reserved_partition_names(cls, partitions: dict[str, SlurmPartition]) -> dict[str, SlurmPartition]:
        for name in partitions:
            if name.lower() == "default":
                raise ValueError(
                    f"partition {name!r}: PartitionName=DEFAULT is Slurm's record of defaults for the partitions "
                    "after it, not a partition (https://slurm.schedmd.com/slurm.conf.html, PartitionName); name it "
                    "otherwise and mark it `default: true`"
                )
        return partitions

    @model_validator(mode="after")
    def _one_default_partition(self) -> SlurmCluster:
        defaults = [name for name, p in self.partitions.items() if p.default]
        if len(defaults) > 1:
            raise ValueError(f"at most one partition is the default; {', '.join(defaults)} all say default: true")
        return self

    @property
    def default_partition(self) -> str:
        """The partition jobs go to without `--partition`: the one marked default, else the first."""
        return next((name for name, p in self.partitions.items() if p.default), next(iter(self.partitions)))
