"""Training: the Ray training cluster and batch jobs (NCCL test, GPU training) through Kueue and JobSet."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from infra.config.base import KubernetesName, Model, Name

# What MaxText's goodput recording and monitoring take (ml-goodput-measurement 0.2.3 src/goodput.py _CloudLogger
# writes and lists Cloud Logging entries; src/gcp_metrics.py writes time series):
# https://cloud.google.com/logging/docs/access-control, https://cloud.google.com/monitoring/access-control.
GOODPUT_ROLES = ("roles/logging.logWriter", "roles/logging.viewer", "roles/monitoring.metricWriter")


class PodSize(Model):
    cpu: Annotated[str, StringConstraints(pattern=r"^[0-9]+m?$")]
    memory: Annotated[str, StringConstraints(pattern=r"^[0-9]+(Mi|Gi)$")]


def millicores(cpu: str) -> int:
    """A CPU quantity of the forms PodSize allows (`24`, `500m`) in millicores."""
    return int(cpu[:-1]) if cpu.endswith("m") else int(cpu) * 1000


def mebibytes(memory: str) -> int:
    """A memory quantity of the forms PodSize allows (`512Mi`, `16Gi`) in MiB."""
    return int(memory[:-2]) * (1024 if memory.endswith("Gi") else 1)


def _exit_codes(value: int | str) -> list[int]:
    if isinstance(value, int):
        return [value]
    low, high = (int(part) for part in value.split("-"))
    return list(range(low, high + 1))


# An exit code (1-255; 0 is success), or a range of them: "128-255".
ExitCodes = Annotated[int, Field(ge=1, le=255)] | Annotated[str, StringConstraints(pattern=r"^[0-9]{1,3}-[0-9]{1,3}$")]


# JobSet's failurePolicy.maxRestarts is an int32 (kubernetes-sigs/jobset api/jobset/v1alpha2/jobset_types.go).
INT32_MAX = 2**31 - 1


class Resilience(Model):
    """How a training job survives a failure: how many times it restarts and on which exit codes. Every restart
    resumes from the newest complete checkpoint in the bucket (docs/training.md, "Surviving a failure", says why the
    in-cluster tiers are not offered for MaxText on Ray)."""

    max_restarts: int = Field(default=3, ge=0, le=INT32_MAX)
    """Restarts of the whole job before it fails for good (Ray Train's FailureConfig max_failures; a JobSet's
    failurePolicy.maxRestarts)."""
    retry_exit_codes: list[ExitCodes] = []  # noqa: RUF012
    """The exit codes that mean "retry" (JobSet training): a process that exits with any other code fails the job at
    once, counting no restart (a Job podFailurePolicy). xpk's default is 42 and 127-255 (killed by a signal, 128+N).
    Empty: every failure restarts."""

    @property
    def exit_codes(self) -> list[int]:
        return sorted({code for value in self.retry_exit_codes for code in _exit_codes(value)})

    @model_validator(mode="after")
    def _ranges(self) -> Resilience:
        for value in self.retry_exit_codes:
            codes = _exit_codes(value)
            if not codes or codes[0] < 1 or codes[-1] > 255:
                raise ValueError(f"retry_exit_codes: {value!r} is not a range of exit codes within 1-255, low-high")
        return self


class LocalTier(Model):
    """GKE's multi-tier checkpointing for MaxText (its `enable_multi_tier_checkpointing`): each host saves to a RAM
    disk the GKE add-on mounts (`/local`), the add-on's replicator copies each save to a peer node and backs it up to
    the bucket, and a restart restores from the nearest copy: the host's own, a peer's, else the bucket. Only with
    `training.launcher: jobset` (docs/training.md, "Checkpoint tiers by launcher")."""

    bucket: Name
    """The bucket (a `buckets` key) the add-on backs the saves up to: one with `hierarchical_namespace: true`, as
    the add-on's backups need."""
    every_steps: int = Field(ge=1)
    """Steps between saves to the RAM disk (MaxText's local_checkpoint_period)."""
    bucket_every_steps: int = Field(ge=1)
    """Steps between the replicator's backups of a local save to the bucket (MaxText's
    multi_tier_checkpointing_backup_interval_steps): a multiple of every_steps, at least every_steps."""
    ram_disk: Annotated[str, StringConstraints(pattern=r"^[1-9][0-9]*Gi$")]
    """The RAM disk per node (the CheckpointConfiguration's inMemoryVolumeSize): at least two of this host's
    checkpoints (its own and a peer's replica; rule maxtext.local-tier-holds-two-saves) and inside the node's
    memory beside the worker."""

    @model_validator(mode="after")
    def _backup_after_save(self) -> LocalTier:
        # MaxText refuses a backup interval shorter than the local period (maxtext configs/types.py, 0.2.5); a backup
        # between two local saves would copy the same save again.
        if self.bucket_every_steps % self.every_steps:
            raise ValueError(
                f"bucket_every_steps {self.bucket_every_steps} is not a multiple of every_steps {self.every_steps}: "
                "the replicator backs up a local save, so the bucket's steps are some of the RAM disk's "
                "(MaxText refuses a shorter interval: maxtext configs/types.py @ 0.2.5)"
            )
        return self

    @property
    def ram_disk_gib(self) -> int:
        return int(self.ram_disk.removesuffix("Gi"))


class TrainingResilience(Resilience):
    """The Ray training's resilience: Ray Train's restarts, and where the slice count allows it, elastic slices."""

    min_slices: int | None = Field(default=None, ge=1)
    """Elastic: a lost slice shrinks the run to the slices left, down to this many, instead of waiting for it with
    every slice idle; the run resumes on them from the newest complete checkpoint and grows back when the slice
    returns (Ray Train's elastic worker group, in whole slices). From 1 to the training slice's count less one;
    the recipe must run on every count in the range (its `min_slices`, each count compiled). None: a fixed count,
    every restart waits for all the slices."""
    local_tier: LocalTier | None = None
    """A RAM-disk and peer tier under the bucket (GKE's multi-tier checkpointing): a restart reads the newest save
    from the host's own RAM disk or a peer's instead of the bucket. Needs `training.launcher: jobset`. None: the
    bucket is the only tier."""


class Training(Model):
    """The Ray training cluster: which slice, identity, bucket and image it uses."""

    slice: Name
    """The TPU slice (a `slices` key) the Ray workers run on, one worker per host."""
    identity: Name
    """The identity (an `identities` key) the head and workers run as; it writes the checkpoints."""
    bucket: Name
    """The bucket (a `buckets` key) the checkpoints and the run's outputs go to."""
    image: Name
    """The trainer image (a `release.images` key)."""
    recipe: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")] | None = None
    """The recipe (workloads/trainer/recipes.yaml) `make train` runs here: it must run on `slice` (rule
    maxtext.recipe-runs-on-training-slice; `make plan` lists the recipes that do)."""
    head: PodSize = PodSize(cpu="4", memory="16Gi")
    worker: PodSize
    shared_memory: Annotated[str, StringConstraints(pattern=r"^[0-9]+(Mi|Gi)$")] = "16Gi"
    resilience: TrainingResilience = TrainingResilience()
    """Ray Train restarts the worker group up to resilience.max_restarts times, each resuming from the newest
    complete checkpoint (on fewer slices, down to resilience.min_slices, when a slice is lost)."""
    goodput: bool = True
    """MaxText records the run's goodput and badput with ML Goodput Measurement (Cloud Logging, `goodput_<run>`) and
    uploads them to Cloud Monitoring (compute.googleapis.com/workload/goodput_time, badput_time): the identity gets
    the project roles that takes (GOODPUT_ROLES) and the dashboard charts them."""
    queue: KubernetesName | None = None
    """Kueue admits the Ray cluster through a queue of this name (a ClusterQueue holding the slice's pools, one
    flavor each, and the head's share; a LocalQueue in the identity's namespace): all its slices at once or none, and
    a second cluster waits instead of taking part of them. Needs Kueue pinned (release.controllers.kueue). None: a
    standing cluster no queue admits."""
    runs: Literal["cluster", "jobs"] = "cluster"
    """How a training run reaches the slice. `cluster`: a standing Ray cluster holds it (queued: Kueue admits the
    cluster), and `make train` submits each run to it. `jobs`: no standing cluster; each `make train` is a RayJob that
    Kueue admits whole through `queue` (its own Ray cluster, made for the run and deleted when it ends), so a second
    run waits in the queue and the slice is free (to a team with borrow_training) between runs. Needs `queue`."""
    launcher: Literal["ray", "jobset"] = "ray"
    """What runs a MaxText run on the slices. `ray`: Ray Train's JaxTrainer (restarts, elastic slices; the bucket is
    the only checkpoint tier). `jobset`: each run is a JobSet of one Job per slice, one pod per host, running MaxText's
    own trainer, which GKE's multi-tier checkpointing needs (resilience.local_tier): MaxText then starts JAX's
    distributed runtime itself, which Ray's JAX backend does under `ray`. Needs `runs: jobs` (no standing cluster) and
    a maxtext recipe; refuses resilience.min_slices (elastic slices are Ray Train's)."""

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: object) -> object:
        if isinstance(data, dict) and "max_failures" in data:
            raise ValueError(
                f"max_failures ({data['max_failures']!r}) is now resilience.max_restarts: write "
                f"`resilience: {{max_restarts: {data['max_failures']}}}`"
            )
        return data


class NcclCheck(Model):
    """The NCCL all-gather test: proves a GPU slice's nodes talk at full bandwidth (wherever it runs)."""

    min_bus_bandwidth_gbps: float = Field(gt=0, le=200)
    """Bus bandwidth (GB/s per GPU) of the largest message below which the test fails. About 185-190 is healthy on A3
    Mega over two nodes; no A3 node moves more than its NICs' 1,600 Gbps (200 GB/s:
    https://cloud.google.com/compute/docs/gpus/gpu-network-bandwidth), so a higher gate always fails."""
    nodes: int | None = Field(default=None, ge=2)
    """Nodes to span; default: all of the slice's nodes."""
    run: int = Field(default=1, ge=1)
    """Bump to run the test again with unchanged settings."""


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
    resilience: Resilience = Resilience()
    """A JobSet's failurePolicy (maxRestarts, and a Job podFailurePolicy for retry_exit_codes)."""


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


class Preemption(Model):
    """When a team's pending job may stop running ones (Kueue's ClusterQueue `preemption`, its values)."""

    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] = "Any"
    """Take back the team's nominal share from teams that borrowed it (`Any`, whatever their priority)."""
    borrow_within_cohort: Literal["Never", "LowerPriority"] = "Never"
    """While borrowing, preempt lower-priority jobs of other teams (`LowerPriority`); Kueue refuses it beside
    reclaim_within_cohort Never (rule kueue.borrow-within-cohort-needs-reclaim)."""
    within_cluster_queue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] = "LowerPriority"
    """Within the team's own queue: a higher-priority job preempts a lower-priority one."""


class TeamBudget(Model):
    """A team's monthly budget, in USD as the project's (monitoring.budget) and the list prices are. Its guaranteed
    quota is capacity held for it whether or not its jobs run: the rule `platform.team-quota-within-budget` refuses a
    quota that commits more than the budget at list price."""

    monthly_usd: int = Field(ge=1, le=100_000_000)
    """What the team may spend a month (730 hours), in USD."""


class Team(Model):
    """A team sharing the batch slices through Kueue: a ClusterQueue of its own in the platform's cohort, with a
    guaranteed (nominal) share of each slice's accelerators, and a LocalQueue named after the team in its
    namespace, where its jobs (JobSets) name it (`kueue.x-k8s.io/queue-name`)."""

    namespace: KubernetesName
    quota: dict[Name, Annotated[int, Field(ge=0)]] = Field(min_length=1)
    """Accelerators (GPUs) of each batch slice the team is guaranteed: slice key -> count."""
    borrowing_limit: dict[Name, Annotated[int, Field(ge=0)]] = {}  # noqa: RUF012
    """At most this many more of each slice it may borrow from what the other queues leave unused (default: all)."""
    preemption: Preemption = Preemption()
    weight: Annotated[float, Field(ge=0.001, le=1000)] | None = None
    """The team's weight in Kueue's fair sharing of what the cohort's queues leave unused (its ClusterQueue's
    `fairSharing.weight`): a team of weight 3 borrows three times what a team of weight 1 does when both want more
    than is left. Any team's weight turns fair sharing on in Kueue's configuration, for every queue (the others
    weigh 1). From 0.001 to 1000: Kueue reads 0 as an infinite share, the first preempted and never lent anything
    (apis/kueue/v1beta2/fairsharing_types.go @ v0.17.0 and v0.19.2)."""
    borrow_training: bool = False
    """May borrow the TPU training slice (its chips, and the CPU and memory of its hosts) while the platform's
    training cluster does not hold it; the training queue takes it back when its cluster returns (Kueue's
    reclaimWithinCohort: the team's jobs there are preempted). Needs the training cluster queued (training.queue)."""
    budget: TeamBudget | None = None
    """The team's monthly budget (`monthly_usd`): its guaranteed quota priced for a month at list price must fit in
    it; `make status` shows what the team holds now beside it."""
