"""What a plan review holds: the changes, what the gate says of each, the GPUs each orchestrator holds and what
the node pools cost."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from infra.catalogue import prices, terraform_google
from infra.catalogue.consequences import PERSON_ONLY

# Stateful resources whose loss loses data or the platform itself: never confirmable here (make destroy and the
# resources' own prevent_destroy guard them).
PROTECTED_TYPES = ("google_storage_bucket", "google_container_cluster", "google_artifact_registry_repository")


# Meta-arguments: Terraform plans no change to a resource when only these differ.
META_ARGUMENTS = terraform_google.META_ARGUMENTS


# Where a changed value is shown as *** instead of its text (a Helm value or attribute of that name).
SECRET_WORDS = ("key", "token", "secret", "password", "credential")


BLOCKED = 3


SUPPORTED_PLAN_FORMAT_MAJOR = 1


class PlanFormatError(ValueError):
    """A plan file this renderer cannot read."""


@dataclass(frozen=True)
class Change:
    action: str  # create | update | delete | replace
    address: str
    attributes: tuple[str, ...] = ()
    replaced_by: tuple[str, ...] = ()
    # (dotted path, before, after) of each changed value, secrets redacted (offline reviews).
    values: tuple[tuple[str, Any, Any], ...] = ()
    # Why the change blocks the apply until it is confirmed ("" where it does not block).
    blocked: str = ""
    confirmable: bool = True
    # The consequences the gate named (infra/catalogue/consequences.py KINDS).
    kinds: tuple[str, ...] = ()
    # (dotted path, value before) of what the change changes (an update: every changed value; a replacement: the
    # paths that force it): the values a `confirm:` entry is bound to (infra/delivery/confirmations.py).
    before: tuple[tuple[str, Any], ...] = ()

    @property
    def resource_type(self) -> str:
        return self.address.split(".", 1)[0]

    @property
    def before_values(self) -> dict[str, Any]:
        """`before` by path; a path changed in several blocks of a list holds their values in order."""
        found: dict[str, list[Any]] = {}
        for path, value in self.before:
            found.setdefault(path, []).append(value)
        return {path: values[0] if len(values) == 1 else values for path, values in found.items()}


@dataclass(frozen=True)
class Disagreement:
    """One resource the offline review and the real providers' plan of the same change act on differently: the
    action each plans ("no change" where one plans none). The real plan's is the one the review shows."""

    address: str
    offline: str
    real: str


@dataclass(frozen=True)
class Holding:
    """GPUs one orchestrator would hold for one group of machines, at most (what a reviewer pays for), and what
    the machines cost per hour if they were left running (where the price catalogue knows
    the machine and zone: infra/catalogue/prices.py)."""

    orchestrator: str
    what: str
    gpus: int
    how: str
    machines: int = 0
    machine_type: str = ""
    zone: str = ""
    # The capacity type as the environment names it (on-demand, spot, flex-start, reservation, queued); empty
    # where the price is another service's (Vertex AI bills its own rates).
    capacity: str = ""

    @property
    def hourly(self) -> float | None:
        if not self.capacity:
            return None
        price = prices.hourly(self.machine_type, self.zone, self.capacity)
        return None if price is None else round(price * self.machines, 2)


def block(value: Any) -> dict[str, Any]:
    """A nested block as a dict: plan values hold blocks as lists of one."""
    if isinstance(value, list):
        value = value[0] if value else {}
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class PoolCost:
    """One node pool's nodes and what they cost (infra/catalogue/prices.py): the price of a node under the pool's
    capacity type, at the pool's fewest and its most nodes."""

    pool: str
    machine_type: str
    location: str
    capacity: str
    min_nodes: int
    max_nodes: int
    price: prices.NodePrice
    # The custom ComputeClass the pool is a capacity tier of ("" for none): its tiers' nodes count once.
    compute_class: str = ""

    def hourly(self, nodes: int) -> float | None:
        return None if self.price.usd_per_hour is None else self.price.usd_per_hour * nodes

    @property
    def nodes(self) -> str:
        return str(self.max_nodes) if self.min_nodes == self.max_nodes else f"{self.min_nodes}-{self.max_nodes}"


@dataclass(frozen=True)
class Autoscaler:
    release: str
    fewest: int
    most: int
    metric: str
    target: str
    pools: tuple[str, ...] = ()  # the accelerator pool(s) its servers run on, or the ComputeClass over its tiers'
    hosts: int = 0  # the pool's nodes one server takes
    compute_class: bool = False  # `pools` names a ComputeClass
    warm_up_s: int = 0  # how long a server takes from node to ready: what the autoscaler holds a warm one for
    warm_up_basis: str = ""  # where that comes from: measured (and when), or the startup probe's allowance

    @property
    def pool(self) -> str:
        """The pools as the review names them."""
        return ", ".join(self.pools)

    def usd_per_hour(self, servers: int, costs: Mapping[str, PoolCost], *, priciest: bool = False) -> float | None:
        """What the nodes of `servers` servers cost per hour, where the pool is priced; over a ComputeClass's
        tiers, on the cheapest tier (or the priciest)."""
        if not self.hosts:
            return None
        found = [
            c.price.usd_per_hour
            for c in costs.values()
            if (c.compute_class if self.compute_class else c.pool) in self.pools and c.price.usd_per_hour is not None
        ]
        if not found:
            return None
        return (max(found) if priciest else min(found)) * self.hosts * servers


@dataclass(frozen=True)
class Fallback:
    """A slice whose capacity falls back: its ComputeClass, its tiers' pools in order, and each tier's cost."""

    compute_class: str
    pools: tuple[str, ...]

    def tiers(self, costs: Mapping[str, PoolCost]) -> list[PoolCost]:
        by_pool = {c.pool: c for c in costs.values()}
        return [by_pool[p] for p in self.pools if p in by_pool]


@dataclass(frozen=True)
class TeamQueue:
    """A Kueue queue's share of one flavor (a batch slice): its guaranteed accelerators, at most how many more it may
    borrow from the cohort (None: whatever the others leave unused), and when it preempts."""

    queue: str
    namespace: str
    flavor: str
    resource: str
    guaranteed: int
    borrow_limit: int | None
    preemption: str
    # The training queue's rows: when its slice is free for the teams to borrow (its training.runs).
    lends: str = ""
    # Its weight in Kueue's fair sharing (1 unless the team sets one); None where fair sharing is off.
    weight: float | None = None


@dataclass(frozen=True)
class EngineArgs:
    """A serving release's engine and the arguments it passes it, in order."""

    release: str
    engine: str
    args: list[str]


@dataclass(frozen=True)
class Watching:
    """A stack's dashboards as (title, link), its alert policies' names, and the addresses they notify."""

    dashboards: list[tuple[str, str]] = field(default_factory=list)
    alerts: list[str] = field(default_factory=list)
    notify: list[str] = field(default_factory=list)
    budget: Budget | None = None


@dataclass(frozen=True)
class Budget:
    """The project's monthly budget: its billing account, amount, and each alert threshold (share, spend basis)."""

    billing_account: str
    usd_per_month: float
    thresholds: tuple[tuple[float, str], ...]

    def crossed(self, usd_per_month: float) -> float | None:
        """The highest threshold of actual spend that `usd_per_month` passes, or None."""
        passed = [share for share, basis in self.thresholds if basis == "CURRENT_SPEND"]
        passed = [share for share in passed if usd_per_month > share * self.usd_per_month]
        return max(passed) if passed else None


@dataclass
class StackReview:
    stack: str
    changes: list[Change]
    types_after: Counter[str]
    inventory_before: Counter[tuple[str, str]]
    inventory_after: Counter[tuple[str, str]]
    has_baseline: bool
    source: str = "offline"
    drift: list[Change] = field(default_factory=list)
    holdings: list[Holding] = field(default_factory=list)
    # Addresses whose blocking change is confirmed by a person (CONFIRM_CHANGE=...) or by an environment file's
    # entry merged before the change: listed, no longer blocking.
    confirmed: frozenset[str] = frozenset()
    # Addresses the change's own environment file confirms (infra/delivery/confirmations.py): enough for every
    # consequence but the PERSON_ONLY ones (data lost, security weakened).
    confirmed_in_change: frozenset[str] = frozenset()
    # Security posture lines (infra/review/posture.py): privileged, Pod Security, who reaches what.
    posture: list[str] = field(default_factory=list)
    # Node pool costs by address, after the change and before it (None: no baseline).
    costs_after: dict[str, PoolCost] = field(default_factory=dict)
    costs_before: dict[str, PoolCost] | None = None
    # The serving releases a Horizontal Pod Autoscaler scales (infra/review/autoscaling.py).
    autoscalers: list[Autoscaler] = field(default_factory=list)
    fallbacks: list[Fallback] = field(default_factory=list)
    # Its dashboards, alert policies and their channels (infra/review/monitoring.py).
    watching: Watching = field(default_factory=Watching)
    # What each serving release passes its engine (infra/review/engines.py).
    engines: list[EngineArgs] = field(default_factory=list)
    # Who can use and borrow what of the batch slices (infra/review/queues.py).
    queues: list[TeamQueue] = field(default_factory=list)
    # Kueue's wait for an admitted run's pods (waitForPodsReady), as its release writes it; None where it writes none.
    pods_ready_wait: dict[str, Any] | None = None
    # An offline review whose actions are the real providers' plan of the same change (infra/review/real_plan.py):
    # that plan's file (relative to the plan's folder), and where the offline review's own actions differed from it.
    real_plan: str | None = None
    disagreements: list[Disagreement] = field(default_factory=list)

    @property
    def gated(self) -> list[Change]:
        """Every change the gate stops, confirmed or not."""
        return [c for c in self.changes if c.blocked]

    @property
    def blocking(self) -> list[Change]:
        """The changes that stop the apply: gated and not confirmed (a protected resource cannot be confirmed)."""
        return [c for c in self.gated if not self.is_confirmed(c)]

    def is_confirmed(self, change: Change) -> bool:
        """A gated change let through: confirmable, and its address confirmed (by its own pull request's entry only
        where its consequences allow: infra/catalogue/consequences.py PERSON_ONLY)."""
        if not change.confirmable:
            return False
        if change.address in self.confirmed:
            return True
        # The pull request that causes a loss of data or a weakening of security cannot confirm it alone.
        return change.address in self.confirmed_in_change and not any(k in PERSON_ONLY for k in change.kinds)
