"""The cluster, its system pool, and the accelerator slices with how their capacity is obtained."""

from __future__ import annotations

from datetime import date
from functools import cached_property
from typing import Annotated, Literal, Union

from pydantic import Discriminator, Field, StringConstraints, Tag, field_validator, model_validator

from infra.catalogue.accelerators import Slice, gpu_slice, lookup, tpu_slice
from infra.catalogue.cpu_machines import CPU_MACHINES, CpuMachine
from infra.catalogue.errors import ShapeError
from infra.config.base import Model
from infra.config.maintenance import Maintenance

# GKE: at most 1,000 nodes per node pool per zone (https://cloud.google.com/kubernetes-engine/quotas);
# a boot disk of 10 GB to 64 TB (https://cloud.google.com/compute/docs/disks#disk-types), 20 GB the
# least GKE's node images leave room in.
MAX_POOL_NODES = 1000
# Slices of one multislice job: MaxText's multislice runs go to hundreds of slices; 64 bounds a typo here (the
# quota and capacity checks hold the real limit).
MAX_SLICES = 64
# Capacity tiers of one slice (reservation, flex-start, spot, on-demand, and a second reservation at most): more is a
# typo here.
MAX_TIERS = 6


def _cpu_machine(value: str) -> str:
    """A CPU machine type of the catalogue (its size and boot disk are known), or a ValueError listing them."""
    if value not in CPU_MACHINES:
        raise ValueError(f"unknown CPU machine type; known: {', '.join(CPU_MACHINES)}")
    return value


class SystemPool(Model):
    """The CPU node pool for system pods, controllers and Ray heads."""

    machine_type: str = "e2-standard-8"
    min_nodes: int = Field(ge=0, le=MAX_POOL_NODES, default=1)
    max_nodes: int = Field(ge=1, le=MAX_POOL_NODES, default=3)
    disk_size_gb: int = Field(ge=20, le=65536, default=100)

    @property
    def disk_type(self) -> str:
        return CPU_MACHINES[self.machine_type].disk_type

    @field_validator("machine_type")
    @classmethod
    def _known_machine(cls, value: str) -> str:
        return _cpu_machine(value)

    @model_validator(mode="after")
    def _min_not_above_max(self) -> SystemPool:
        if self.min_nodes > self.max_nodes:
            raise ValueError(f"min_nodes {self.min_nodes} is above max_nodes {self.max_nodes}")
        return self


class Cluster(Model):
    name: Annotated[str, StringConstraints(pattern=r"^[a-z]([a-z0-9-]{0,22}[a-z0-9])?$")]
    """At most 24 characters: the node service account is `<name>-nodes` (30 at most)."""
    release_channel: Literal["RAPID", "REGULAR", "STABLE", "EXTENDED"]
    """GKE's release channel: how soon new versions reach the cluster."""
    min_master_version: Annotated[str, StringConstraints(pattern=r"^1\.[0-9]+(\.[0-9]+(-gke\.[0-9]+)?)?$")]
    """Checked against GKE's calendar (infra/catalogue/gke_versions.py) by rule gke.version-in-support."""
    deletion_protection: bool
    """GKE's deletion protection and Terraform's prevent_destroy on the cluster."""
    system_pool: SystemPool = SystemPool()
    """The CPU node pool for the controllers and the platform's own pods."""
    maintenance: Maintenance | None = None
    """When GKE may upgrade the control plane and the nodes (infra/config/maintenance.py); none: at any time."""


ReservationRef = Annotated[
    str,
    StringConstraints(
        pattern=r"^(projects/[a-z][a-z0-9-]{4,28}[a-z0-9]/reservations/)?[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"
    ),
]


class Capacity(Model):
    """How a slice's nodes are obtained.

    `flex-start` and `queued` are the Dynamic Workload Scheduler's two modes:
    nodes come (all at once) when capacity is found, for at most
    `max_run_hours` (flex-start), or when a queued ProvisioningRequest is
    admitted (queued provisioning, through Kueue).
    """

    type: Literal["on-demand", "spot", "reservation", "flex-start", "queued"]
    reservation: ReservationRef | None = None
    """A reservation of the environment's project by name (a Compute Engine name: 1-63 characters), or a shared one
    by its path, projects/<project>/reservations/<name> (GKE's reservation_affinity values and Cluster Toolkit's
    reservation_name take both: a 43-character name and a shared project's path are valid)."""
    max_run_hours: int | None = Field(default=None, ge=1, le=168)

    def reservation_path(self, project: str, zone: str) -> str:
        """The reservation's zonal resource name, projects/<project>/zones/<zone>/reservations/<name> (Vertex AI's
        ReservationAffinity.values): a shared reservation's own project, else `project`."""
        assert self.reservation is not None
        owner, _, name = self.reservation.rpartition("/reservations/")  # owner: "projects/<p>", or "" for a name
        return f"{owner or f'projects/{project}'}/zones/{zone}/reservations/{name}"

    @model_validator(mode="after")
    def _fields_fit_the_type(self) -> Capacity:
        if self.type == "reservation" and not self.reservation:
            raise ValueError("capacity type 'reservation' needs `reservation: <reservation name>`")
        if self.type == "queued" and self.reservation:
            raise ValueError(
                "queued provisioning cannot consume a reservation: the Dynamic Workload Scheduler finds the "
                "capacity (remove `reservation`, or use type 'reservation')"
            )
        if self.type == "flex-start" and self.reservation:
            raise ValueError(
                "flex-start cannot consume a reservation: its nodes come from the Dynamic Workload Scheduler "
                "(remove `reservation`, or use type 'reservation')"
            )
        if self.type in ("on-demand", "spot") and self.reservation:
            raise ValueError(f"`reservation` is only allowed with capacity type 'reservation', not {self.type!r}")
        if self.type == "flex-start" and self.max_run_hours is None:
            raise ValueError("capacity type 'flex-start' needs `max_run_hours` (1 to 168)")
        if self.type != "flex-start" and self.max_run_hours is not None:
            raise ValueError(f"`max_run_hours` is only allowed with capacity type 'flex-start', not {self.type!r}")
        return self

    @property
    def dynamic(self) -> bool:
        """Nodes come and go with demand (Dynamic Workload Scheduler): no fixed node count."""
        return self.type in ("flex-start", "queued")

    @property
    def label(self) -> str:
        """The tier as the review and the pool names say it: its type, with the reservation's name."""
        return f"reservation {self.reservation}" if self.reservation else self.type


def _capacity_shape(value: object) -> str:
    return "tiers" if isinstance(value, list) else "one"


# One capacity type, or an ordered list of them: the tiers GKE falls back through (a custom ComputeClass over a node
# pool per tier, infra/constructs/compute_class.py), first the one it prefers. The tags are pydantic's, not keys
# of the file (infra/config/loading.py drops them from error paths).
CapacitySetting = Annotated[
    Union[Annotated[Capacity, Tag("one")], Annotated[list[Capacity], Tag("tiers")]],  # noqa: UP007 (Tag needs it)
    Discriminator(_capacity_shape),
]


class QueuedStart(Model):
    """The slowest measured start of a Kueue-admitted run on a slice: seconds from its admission to every pod Ready
    (its Workload's PodsReady condition), as `make status ENV=<env>` prints it for each run (pods_ready_s) on the real
    cluster. Kueue's wait for pods (waitForPodsReady) is set from it (infra/derive/queues.py pods_ready_timeout)."""

    seconds: float = Field(gt=0, le=86_400)
    measured: date
    """The day it was read."""
    source: Annotated[str, StringConstraints(min_length=1)]
    """Where it was read: the command and the run (`make status` writes `make status ENV=<env>, <namespace>/<run>`);
    add the image digest it ran where it matters."""


class SliceSpec(Model):
    """One accelerator slice as written in the environment file."""

    accelerator: str
    """The accelerator: a TPU generation (v5e, v6e, v5p, tpu7x) or a GPU machine family (a3-high, a3-mega), as
    infra/catalogue/accelerators.py names them."""
    topology: str | None = None
    """TPU slices: the chips' topology (2x4, 4x4, ...), from which the hosts and the machine type follow."""
    nodes: int | None = Field(default=None, ge=1, le=MAX_POOL_NODES)
    """GPU slices: the number of machines (TPU slices derive theirs from `topology`)."""
    machine_type: str | None = None
    """Default: the accelerator's machine for the topology; given, it must be one of them."""
    zone: str | None = None
    """The zone of its node pools (one of `zones`); default: the first of `zones`."""
    capacity: CapacitySetting
    """How its nodes are obtained (on-demand, spot, a reservation, flex-start, queued), or an ordered list of tiers
    GKE falls back through."""
    min_nodes: int | None = Field(default=None, ge=0, le=MAX_POOL_NODES)
    """GPU slices only: autoscale between min_nodes and `nodes` (default: a fixed `nodes`)."""
    auto_upgrade: bool = True
    """Whether GKE upgrades its nodes on its own (in the cluster's maintenance window)."""
    count: int = Field(default=1, ge=1, le=MAX_SLICES)
    """TPU slices only: how many slices of this shape, one node pool each (`<key>`, `<key>-1`, ...: raising the count
    adds pools and replaces none), trained on together as one multislice job (the training slice)."""
    auto_repair: bool | None = None
    """Default: on, except for flex-start and queued provisioning, whose nodes GKE must not repair."""
    queued_start: QueuedStart | None = None
    """Slices Kueue admits runs onto (the training queue's, the batch slices): the slowest measured start of a run
    on it. Once every such slice has one, Kueue evicts a run whose pods are not all Ready within twice the slowest
    (at least 10 minutes) instead of its default 30 (infra/derive/queues.py pods_ready_timeout)."""

    @property
    def tiers(self) -> list[Capacity]:
        """The capacity tiers in the order GKE tries them (one, unless `capacity` is a list)."""
        return list(self.capacity) if isinstance(self.capacity, list) else [self.capacity]

    @property
    def primary(self) -> Capacity:
        """The capacity the slice prefers (its only one, unless `capacity` is a list)."""
        return self.tiers[0]

    @property
    def falls_back(self) -> bool:
        """Whether the slice has more than one capacity tier (a ComputeClass chooses among their pools)."""
        return len(self.tiers) > 1

    def tier_pools(self, key: str) -> list[tuple[str, Capacity]]:
        """(node pool, its capacity) of every pool of slice `key`. Where `capacity` is a list, one per tier: the
        first keeps the slice's own name (adding tiers to a slice replaces none of its pools), the others
        `<key>-<type>`, a repeated type numbered (`<key>-reservation-2`). Otherwise one per slice of its count
        (`key`, then `key-1` ... `key-<count-1>`), each on the slice's one capacity."""
        if not self.falls_back:
            return [(pool, self.primary) for pool in [key, *(f"{key}-{i}" for i in range(1, self.count))]]
        out: list[tuple[str, Capacity]] = []
        seen: dict[str, int] = {}
        for i, tier in enumerate(self.tiers):
            seen[tier.type] = seen.get(tier.type, 0) + 1
            n = seen[tier.type]
            out.append((key if i == 0 else f"{key}-{tier.type}" + (f"-{n}" if n > 1 else ""), tier))
        return out

    @field_validator("capacity")
    @classmethod
    def _tiers_fit_a_class(cls, capacity: Capacity | list[Capacity]) -> Capacity | list[Capacity]:
        """A list of capacity tiers must be a ComputeClass's priorities: each tier once, none queued."""
        if not isinstance(capacity, list):
            return capacity
        if not 1 <= len(capacity) <= MAX_TIERS:
            raise ValueError(f"{len(capacity)} capacity tiers: a list holds 1 to {MAX_TIERS}")
        labels = [t.label for t in capacity]
        repeated = sorted({x for x in labels if labels.count(x) > 1})
        if repeated:
            raise ValueError(f"tier {repeated[0]!r} is listed twice: each tier is tried once, in order")
        if len(capacity) > 1 and any(t.type == "queued" for t in capacity):
            raise ValueError(
                "'queued' cannot be a tier of a list: queued provisioning's nodes come through a ProvisioningRequest "
                "that Kueue makes, not from a ComputeClass priority (GKE docs: about-custom-compute-classes lists "
                "reservations, flex-start, spot and on-demand) [use 'flex-start' as the tier]"
            )
        return capacity

    def _tier_problem(self, slice_: Slice) -> str | None:
        """Why this slice's capacity tiers cannot each be a pool its pods take whole; None when they can."""
        if not self.falls_back:
            return None
        if slice_.multi_host or self.count > 1:
            return (
                f"a capacity list on a {'multi-host slice' if slice_.multi_host else 'counted slice'}: every host "
                "of a slice must come from one tier's pool, and the platform places pods per tier only where each "
                "pod takes a whole single-host slice (a vLLM server); give this slice one capacity type"
            )
        if self.min_nodes is not None:
            return (
                f"min_nodes {self.min_nodes} with a capacity list: each tier's pool scales from zero and the "
                "ComputeClass chooses which one grows (remove `min_nodes`)"
            )
        return None

    @model_validator(mode="after")
    def _shape_is_in_catalogue(self) -> SliceSpec:
        slice_ = self.slice  # derive once so a bad shape fails at load
        why = self._tier_problem(slice_)
        if why:
            raise ShapeError("capacity", [t.label for t in self.tiers], why, [])
        kind = self.primary.type
        dynamic = next((t.type for t in self.tiers if t.dynamic), None)
        if dynamic and self.auto_repair:
            raise ValueError(
                f"capacity type {dynamic!r} needs auto_repair off (remove `auto_repair: true`): the Dynamic Workload "
                "Scheduler's nodes are not repaired (GKE docs: provisioningrequest, dws-flex-start-training: "
                "--no-enable-autorepair)"
            )
        if self.count > 1 and slice_.kind != "tpu":
            raise ValueError(
                f"count {self.count}: only TPU slices are counted (a multislice job's slices talk over the "
                "data-center network); a GPU slice grows with `nodes`"
            )
        if self.min_nodes is not None:
            if slice_.kind == "tpu":
                raise ValueError(
                    "a TPU slice is provisioned as one unit of all its hosts: remove `min_nodes` "
                    "(use capacity 'flex-start' or 'queued' for a slice that exists only while it is used)"
                )
            if kind == "queued" and self.min_nodes != 0:
                raise ValueError(
                    f"queued provisioning needs min_nodes 0, not {self.min_nodes}: its nodes exist only "
                    "while an admitted ProvisioningRequest holds them"
                )
            if kind == "flex-start" and self.min_nodes != 0:
                raise ValueError(
                    f"flex-start takes no static node count (min_nodes {self.min_nodes}): its nodes come "
                    "and go with the workload"
                )
            if self.min_nodes > slice_.hosts:
                raise ValueError(f"min_nodes {self.min_nodes} is above nodes {slice_.hosts}")
        return self

    @property
    def node_range(self) -> tuple[int, int] | None:
        """(min, max) nodes of an autoscaled pool, or None for a fixed node count (a list's tiers:
        Environment.slice_node_range)."""
        if self.primary.dynamic:
            return (0, self.slice.hosts)
        if self.min_nodes is not None:
            return (self.min_nodes, self.slice.hosts)
        return None

    def pools(self, key: str) -> list[str]:
        """The node pools of slice `key` (`tier_pools`)."""
        return [pool for pool, _ in self.tier_pools(key)]

    def repairs_tier(self, tier: Capacity) -> bool:
        """Whether GKE repairs the nodes of this tier's pool: `auto_repair`, else on but for the Dynamic Workload
        Scheduler's nodes."""
        return self.auto_repair if self.auto_repair is not None else not tier.dynamic

    @property
    def repairs(self) -> bool:
        return self.repairs_tier(self.primary)

    @cached_property
    def slice(self) -> Slice:
        acc = lookup(self.accelerator)
        if acc.kind == "gpu":
            if self.topology is not None:
                raise ShapeError("topology", self.topology, "GPU slices take `nodes`, not a topology: remove it", [])
            return gpu_slice(self.accelerator, self.nodes or 0, self.machine_type)
        if self.nodes is not None:
            raise ShapeError(
                "nodes", self.nodes, "TPU slices take a `topology`; the node count is derived from it: remove it", []
            )
        if self.topology is None:
            raise ShapeError("topology", None, f"a {self.accelerator} slice needs a topology", acc.all_topologies())
        return tpu_slice(self.accelerator, self.topology, self.machine_type)


class CpuPool(Model):
    """An extra CPU node pool for jobs the system pool cannot hold (checkpoint conversion), from zero nodes.

    Its nodes are tainted `platform.pool=<name>:NoSchedule`, so only the jobs
    placed there (which tolerate it) start them.
    """

    machine_type: str
    max_nodes: int = Field(ge=1, le=MAX_POOL_NODES, default=1)

    @field_validator("machine_type")
    @classmethod
    def _known_machine(cls, value: str) -> str:
        return _cpu_machine(value)

    @property
    def shape(self) -> CpuMachine:
        return CPU_MACHINES[self.machine_type]
