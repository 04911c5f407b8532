"""The batch slices' Kueue quota, shared: what each slice holds, each team's guaranteed share of it, and the
platform's own queue (`batch.queue`) with the rest; all in one cohort, so what one queue leaves unused another
may borrow (https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/#cohort)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from infra.catalogue.controllers import PodsReadyWait, pods_ready_wait
from infra.config.training import Preemption

if TYPE_CHECKING:
    from infra.config import Environment

# Every ClusterQueue of the environment is in this cohort when it has teams.
COHORT = "platform"

# Kueue WorkloadPriorityClasses a job names (label kueue.x-k8s.io/priority-class): xpk's five classes and values
# (AI-Hypercomputer/xpk src/xpk/core/kueue_manager.py: very-low 100 ... very-high 1000).
PRIORITIES = {"very-low": 100, "low": 250, "medium": 500, "high": 750, "very-high": 1000}


@dataclass(frozen=True)
class SliceCapacity:
    """What a batch slice's nodes hold: its accelerators, vCPUs and memory (GB), all hosts together."""

    resource: str  # nvidia.com/gpu, google.com/tpu
    accelerators: int
    cpu: int
    memory_gb: int

    @property
    def whole(self) -> dict[str, int]:
        return self.share(self.accelerators)

    def share(self, accelerators: int) -> dict[str, int]:
        """The part of every resource that goes with `accelerators` of them (rounded down)."""
        return {
            self.resource: accelerators,
            "cpu": self.cpu * accelerators // self.accelerators,
            "memory": self.memory_gb * accelerators // self.accelerators,
        }


@dataclass(frozen=True)
class QueueShare:
    """One ClusterQueue: its guaranteed quota of each slice (resource -> amount, memory in GB), how much more it
    may borrow (None: no limit), its preemption and the namespace of its LocalQueue."""

    name: str
    namespace: str
    nominal: dict[str, dict[str, int]]
    preemption: Preemption
    borrowing_limit: dict[str, dict[str, int] | None] = field(default_factory=dict)
    weight: float | None = None  # in Kueue's fair sharing; None: Kueue's default, 1


def fair_sharing(env: Environment) -> bool:
    """Whether Kueue shares what the cohort's queues leave unused by weight (any team's `weight`) rather than first
    come, first served (Kueue's classic preemption)."""
    return any(team.weight is not None for team in env.teams.values())


def capacity(env: Environment, key: str) -> SliceCapacity:
    slice_ = env.slices[key].slice
    return SliceCapacity(
        slice_.resource_name, slice_.chips, slice_.hosts * slice_.shape.vcpus, slice_.hosts * slice_.shape.memory_gb
    )


def queue_shares(env: Environment) -> list[QueueShare]:
    """The platform's queue (the remainder of each slice once the teams have their shares), then each team's."""
    batch = env.batch
    if batch is None:
        return []
    teams = []
    taken: dict[str, dict[str, int]] = {key: {} for key in batch.slices}
    for name, team in sorted(env.teams.items()):
        nominal = {}
        for key in batch.slices:
            share = capacity(env, key).share(team.quota.get(key, 0))
            nominal[key] = share
            for resource, amount in share.items():
                taken[key][resource] = taken[key].get(resource, 0) + amount
        limits: dict[str, dict[str, int] | None] = {
            key: (capacity(env, key).share(team.borrowing_limit[key]) if key in team.borrowing_limit else None)
            for key in batch.slices
        }
        teams.append(QueueShare(name, team.namespace, nominal, team.preemption, limits, team.weight))
    platform = {
        key: {r: amount - taken[key].get(r, 0) for r, amount in capacity(env, key).whole.items()}
        for key in batch.slices
    }
    namespace = env.identities[batch.identity].namespace if batch.identity in env.identities else ""
    # The platform's queue takes its own share back from a borrower, as a team's does by default.
    return [QueueShare(batch.queue, namespace, platform, Preemption()), *teams]


@dataclass(frozen=True)
class Commitment:
    """What a team's guaranteed quota holds at list price: USD per month (None: a slice with no list price, named
    in `unpriced`) and, per slice, the nodes and their price."""

    usd_per_month: float | None
    parts: tuple[str, ...]
    unpriced: tuple[str, ...]


def guaranteed_cost(env: Environment, team: str) -> Commitment:
    """The team's quota of each batch slice as whole nodes of the slice's primary tier (a quota of part of a node
    holds that node), at list price for a month (prices.HOURS_PER_MONTH)."""
    from infra.catalogue import prices

    total, parts, unpriced = 0.0, [], []
    for key, count in sorted(env.teams[team].quota.items()):
        if count <= 0 or key not in env.slices:
            continue
        spec = env.slices[key]
        nodes = math.ceil(count / spec.slice.chips_per_host)
        price = env.node_price(key)
        if price.usd_per_hour is None:
            unpriced.append(f"{key}: {price.missing}")
            continue
        month = nodes * price.usd_per_hour * prices.HOURS_PER_MONTH
        total += month
        parts.append(f"{key}: {count} {spec.slice.resource_name} = {nodes} x {spec.slice.machine_type} "
                     f"at {price.usd_per_hour:,.2f} USD/hour, {month:,.2f} USD/month")  # fmt: skip
    return Commitment(None if unpriced else round(total, 2), tuple(parts), tuple(unpriced))


def training_flavors(env: Environment) -> list[str]:
    """The training queue's slice flavors: one per slice's pool (a Ray cluster's worker groups), or one for every
    slice (a JobSet run's one pod set)."""
    training = env.training
    assert training is not None and training.queue is not None
    if training.launcher == "jobset":
        return [f"{training.queue}-slices"]
    return [f"{training.queue}-{pool}" for pool in env.slices[training.slice].pools(training.slice)]


# Kueue's wait for an admitted run's pods, from measured starts: twice the slowest (a start on a real slice varies with
# the image's cache on the nodes, the nodes' own start and Ray's), and never under 10 minutes.
START_HEADROOM = 2
MIN_PODS_READY_TIMEOUT_S = 600
# How the Kueue release's Configuration says where its wait comes from: a YAML comment Kueue ignores, which the plan
# shows and the review reads (infra/review/queues.py).
WAIT_WHY = "# waitForPodsReady: "


@dataclass(frozen=True)
class PodsReadyTimeout:
    """Kueue's wait for an admitted run's pods as the platform sets it, and why."""

    wait: PodsReadyWait
    why: str  # from which measured start, or why Kueue's default

    def durations(self) -> dict[str, str]:
        """The Configuration's two timeouts, as Go durations in whole minutes where they are (`30m`, `12m`)."""
        return {"timeout": _duration(self.wait.timeout_s), "recoveryTimeout": _duration(self.wait.recovery_s)}


def _duration(seconds: int) -> str:
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"


def pods_ready_timeout(env: Environment) -> PodsReadyTimeout | None:
    """How long Kueue lets an admitted run's pods take to be Ready (and again after one fails): START_HEADROOM times
    the slowest `queued_start` of the queued slices, rounded up to the minute and at least MIN_PODS_READY_TIMEOUT_S,
    once every queued slice has one; until then Kueue's default, since a slice without a measured start may need all
    of it. None where the pinned Kueue does not wait for pods."""
    default = pods_ready_wait(env.release.controllers.get("kueue"))
    if default is None:
        return None
    keys = env.queued_slices
    measured = {k: start for k in keys if (start := env.slices[k].queued_start) is not None}
    unmeasured = [k for k in keys if k not in measured]
    if not measured or unmeasured:
        return PodsReadyTimeout(
            default, f"Kueue's default: no measured start of a run on {', '.join(unmeasured) or 'any slice'}"
        )
    slowest_key, slowest = max(measured.items(), key=lambda item: item[1].seconds)
    seconds = max(MIN_PODS_READY_TIMEOUT_S, 60 * math.ceil(START_HEADROOM * slowest.seconds / 60))
    return PodsReadyTimeout(
        PodsReadyWait(seconds, seconds),
        f"{START_HEADROOM} x the slowest measured start, {slowest.seconds:g} s on {slowest_key} "
        f"({slowest.measured.isoformat()}), at least {MIN_PODS_READY_TIMEOUT_S // 60} minutes",
    )
