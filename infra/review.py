"""Plan review: what a change does, in Markdown, for the pull request.

One renderer, two inputs:
- offline (no credentials): the synthesized stacks of this checkout against
  a baseline `cdktf.out`, by resource address;
- online: a real Terraform plan as `terraform show -json` prints it.

It reports counts per action, every create / update / replace / delete with
the attributes that changed (and those forcing a replacement), resource drift,
the accelerator inventory before and after (chips per generation and zone),
what every node pool costs per hour and per month at its fewest and most nodes
and what the change does to it (infra/catalogue/prices.py), and a blocking
section for any destroy or replacement of a protected stateful resource, in
every form a plan can express it.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infra.catalogue import prices
from infra.catalogue.accelerators import accelerator_for_machine
from infra.catalogue.controller_crds import crd_changes
from infra.catalogue.controllers import CONTROLLERS
from infra.catalogue.destructive_updates import destructive
from infra.catalogue.terraform_google import forces_replacement
from infra.posture import security_posture  # issue 25: the security posture section

# Stateful resources whose loss loses data or the platform itself: never confirmable here (make destroy and the
# resources' own prevent_destroy guard them).
PROTECTED_TYPES = ("google_storage_bucket", "google_container_cluster", "google_artifact_registry_repository")

# Meta-arguments: Terraform plans no change to a resource when only these differ.
META_ARGUMENTS = frozenset({"depends_on", "lifecycle", "provider", "count", "for_each", "//"})

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

    @property
    def resource_type(self) -> str:
        return self.address.split(".", 1)[0]


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


def _block(value: Any) -> dict[str, Any]:
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

    def hourly(self, nodes: int) -> float | None:
        return None if self.price.usd_per_hour is None else self.price.usd_per_hour * nodes

    @property
    def nodes(self) -> str:
        return str(self.max_nodes) if self.min_nodes == self.max_nodes else f"{self.min_nodes}-{self.max_nodes}"


def _node_range(body: Mapping[str, Any]) -> tuple[int, int]:
    """(fewest, most) nodes of a pool: a fixed size, an autoscaler's totals, or its per-zone limits times the
    pool's zones."""
    autoscaling = _block(body.get("autoscaling"))
    zones = len(body.get("node_locations") or []) or 1
    if int(autoscaling.get("total_max_node_count") or 0):
        return int(autoscaling.get("total_min_node_count") or 0), int(autoscaling["total_max_node_count"])
    if int(autoscaling.get("max_node_count") or 0):
        return int(autoscaling.get("min_node_count") or 0) * zones, int(autoscaling["max_node_count"]) * zones
    nodes = int(body.get("node_count") or 0) * (zones if body.get("node_locations") else 1)
    return nodes, nodes


def pool_cost(body: Mapping[str, Any]) -> PoolCost:
    """What a node pool body (synthesized or a plan's values) costs."""
    config = _block(body.get("node_config"))
    machine = str(config.get("machine_type", ""))
    location = str((body.get("node_locations") or [body.get("location", "")])[0])
    capacity, _ = _capacity_of(config, body)
    fewest, most = _node_range(body)
    price = prices.node_price(machine, location, capacity)
    return PoolCost(str(body.get("name", "?")), machine, location, capacity, fewest, most, price)


def pool_costs(pools: Mapping[str, Mapping[str, Any]]) -> dict[str, PoolCost]:
    """Cost of each node pool body by its resource address."""
    return {address: pool_cost(body) for address, body in sorted(pools.items())}


def stack_pools(stack_json: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The node pool bodies of a synthesized stack by resource address."""
    pools = (stack_json.get("resource") or {}).get("google_container_node_pool") or {}
    return {f"google_container_node_pool.{k}": v for k, v in pools.items()}


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
    # Addresses whose blocking change the author confirmed (CONFIRM_CHANGE=...): listed, no longer blocking.
    confirmed: frozenset[str] = frozenset()
    # Security posture lines (infra/posture.py, issue 25): privileged, Pod Security, who reaches what.
    posture: list[str] = field(default_factory=list)
    # Node pool costs by address, after the change and before it (None: no baseline).
    costs_after: dict[str, PoolCost] = field(default_factory=dict)
    costs_before: dict[str, PoolCost] | None = None

    @property
    def gated(self) -> list[Change]:
        """Every change the gate stops, confirmed or not."""
        return [c for c in self.changes if c.blocked]

    @property
    def blocking(self) -> list[Change]:
        """The changes that stop the apply: gated and not confirmed (a protected resource cannot be confirmed)."""
        return [c for c in self.gated if not self.is_confirmed(c)]

    def is_confirmed(self, change: Change) -> bool:
        """A gated change let through: confirmable, and its address confirmed."""
        return change.confirmable and change.address in self.confirmed


def resources(stack_json: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Resources by address (`type.name`), without cdktf's metadata."""
    out: dict[str, dict[str, Any]] = {}
    for rtype, items in (stack_json.get("resource") or {}).items():
        for name, body in items.items():
            out[f"{rtype}.{name}"] = {k: v for k, v in body.items() if k != "//"}
    return out


def accelerator_inventory(stack_json: Mapping[str, Any]) -> Counter[tuple[str, str]]:
    """Chips per (accelerator generation, zone) that the stack's node pools hold."""
    return pool_inventory((stack_json.get("resource") or {}).get("google_container_node_pool", {}).values())


def pool_inventory(pools: Iterable[Mapping[str, Any]]) -> Counter[tuple[str, str]]:
    """Chips per (accelerator generation, zone) of node pool bodies (config or plan values)."""
    inventory: Counter[tuple[str, str]] = Counter()
    for body in pools:
        node_config = body.get("node_config") or {}
        if isinstance(node_config, list):  # plan values hold blocks as lists
            node_config = node_config[0] if node_config else {}
        found = accelerator_for_machine(str(node_config.get("machine_type", "")))
        if found is None:
            continue
        acc, shape = found
        nodes = body.get("node_count")
        if nodes is None:
            autoscaling = body.get("autoscaling") or {}
            if isinstance(autoscaling, list):
                autoscaling = autoscaling[0] if autoscaling else {}
            # Per-zone limits (TPU slices) or a total over the pool's zones (GPU pools).
            nodes = autoscaling.get("max_node_count") or autoscaling.get("total_max_node_count") or 0
        zones = body.get("node_locations") or [body.get("location", "?")]
        for zone in zones:
            inventory[(acc.name, zone)] += int(nodes) * shape.chips
    return inventory


def _capacity_of(config: Mapping[str, Any], body: Mapping[str, Any]) -> tuple[str, str]:
    """(capacity type, how the review says it) of a node pool (synthesized, or a plan's values: blocks as lists)."""
    if _block(body.get("queued_provisioning")).get("enabled"):
        return "queued", "queued provisioning: only while an admitted job holds them"
    if config.get("flex_start"):
        return "flex-start", "flex-start: only while a job runs"
    if config.get("spot"):
        return "spot", "spot"
    if _block(config.get("reservation_affinity")).get("consume_reservation_type") == "SPECIFIC_RESERVATION":
        return "reservation", "reservation"
    return "on-demand", "on-demand"


def gke_holdings(stack_json: Mapping[str, Any]) -> list[Holding]:
    """The GPUs of the stack's GPU node pools, each at its maximum size."""
    out = []
    for body in ((stack_json.get("resource") or {}).get("google_container_node_pool") or {}).values():
        config = body.get("node_config") or {}
        found = accelerator_for_machine(str(config.get("machine_type", "")))
        if found is None or found[0].kind != "gpu":
            continue
        autoscaling = body.get("autoscaling") or {}
        nodes = int(body.get("node_count") or autoscaling.get("total_max_node_count") or 0)
        capacity, how = _capacity_of(config, body)
        out.append(
            Holding(
                "GKE",
                f"node pool {body.get('name')}",
                nodes * found[1].chips,
                f"{config['machine_type']} x{nodes}, {how}",
                nodes,
                str(config["machine_type"]),
                str((body.get("node_locations") or [""])[0]),
                capacity,
            )
        )
    return out


def slurm_holdings(blueprint: Mapping[str, Any]) -> list[Holding]:
    """The GPUs of a Slurm blueprint's nodesets: static nodes always, dynamic ones while jobs run."""
    out = []
    for group in blueprint.get("deployment_groups") or []:
        for module in group.get("modules") or []:
            if not str(module.get("source", "")).endswith("schedmd-slurm-gcp-v6-nodeset"):
                continue
            settings = module.get("settings") or {}
            found = accelerator_for_machine(str(settings.get("machine_type", "")))
            if found is None or found[0].kind != "gpu":
                continue
            static, dynamic = int(settings.get("node_count_static", 0)), int(settings.get("node_count_dynamic_max", 0))
            how = f"{settings['machine_type']} x{static + dynamic}: {static} static"
            how += f", {dynamic} created for jobs and deleted when idle" if dynamic else ""
            if settings.get("enable_spot_vm"):
                capacity = "spot"
            elif (settings.get("dws_flex") or {}).get("enabled"):
                capacity = "flex-start"
            else:
                capacity = "reservation" if settings.get("reservation_name") else "on-demand"
            nodes = static + dynamic
            out.append(
                Holding(
                    "Slurm",
                    f"nodeset {module.get('id')}",
                    nodes * found[1].chips,
                    how,
                    nodes,
                    str(settings["machine_type"]),
                    str(settings.get("zone", "")),
                    capacity,
                )
            )
    return out


def vertex_holdings(requests: Mapping[str, Mapping[str, Any]]) -> list[Holding]:
    """The GPUs of each Vertex AI job request (by job name): every replica's, only while the job runs."""
    out = []
    for name, request in requests.items():
        spec = request.get("jobSpec") or {}
        pools = spec.get("workerPoolSpecs") or []
        replicas = sum(int(p.get("replicaCount", 0)) for p in pools)
        gpus = sum(int(p.get("replicaCount", 0)) * int(p["machineSpec"].get("acceleratorCount", 0)) for p in pools)
        machine = (pools[0].get("machineSpec") or {}).get("machineType", "?") if pools else "?"
        strategy = (spec.get("scheduling") or {}).get("strategy", "STANDARD")
        if any((p.get("machineSpec") or {}).get("reservationAffinity") for p in pools):
            strategy += " on its reservation"
        how = f"{machine} x{replicas}, {strategy}: only while the job runs (Vertex AI bills its own rates)"
        out.append(Holding("Vertex AI", f"job {name}", gpus, how, replicas, str(machine)))
    return out


def vm_holdings(stack_json: Mapping[str, Any]) -> list[Holding]:
    """The GPUs of the stack's VM groups: empty until `make vm-up`, then every VM of its template's group."""
    res = stack_json.get("resource") or {}
    templates = {f"${{google_compute_instance_template.{k}.self_link_unique}}": v for k, v in
                 (res.get("google_compute_instance_template") or {}).items()}  # fmt: skip
    out = []
    for group in (res.get("google_compute_instance_group_manager") or {}).values():
        template = templates.get(group["version"][0]["instance_template"]) or {}
        found = accelerator_for_machine(str(template.get("machine_type", "")))
        if found is None or found[0].kind != "gpu":
            continue
        vms = len(str((template.get("metadata") or {}).get("platform-hosts", "")).split(","))
        sched = template.get("scheduling") or {}
        model = sched.get("provisioning_model", "STANDARD")
        reserved = (template.get("reservation_affinity") or {}).get("type") == "SPECIFIC_RESERVATION"
        capacity = {"SPOT": "spot", "FLEX_START": "flex-start"}.get(model, "reservation" if reserved else "on-demand")
        how = f"{template['machine_type']} x{vms}, {capacity}: none until `make vm-up`, all until `make vm-down`"
        if capacity == "flex-start":
            how += " or the run ends"
        out.append(
            Holding(
                "VMs",
                f"group {group.get('name')}",
                vms * found[1].chips,
                how,
                vms,
                str(template["machine_type"]),
                str(group.get("zone", "")),
                capacity,
            )
        )
    return out


def _redact(path: str, value: Any) -> Any:
    last = path.rsplit(".", 1)[-1].lower()
    return "***" if value is not None and any(word in last for word in SECRET_WORDS) else value


def _decoded(key: str, value: Any) -> Any:
    """A helm_release's `values` (JSON documents in a list) as data, so a change shows as values, not text."""
    if key == "values" and isinstance(value, list):
        try:
            return [json.loads(v) if isinstance(v, str) else v for v in value]
        except json.JSONDecodeError:
            return value
    return value


def changed_values(before: Any, after: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted path, before, after) of every leaf that differs; list indices are dropped from the path (the
    provider's schema paths have none), lists of different lengths are one change."""
    if isinstance(before, dict) and isinstance(after, dict):
        out = []
        for key in sorted(before.keys() | after.keys()):
            if not path and key in META_ARGUMENTS:
                continue
            b, a = _decoded(key, before.get(key)), _decoded(key, after.get(key))
            if b != a:
                out += changed_values(b, a, f"{path}.{key}" if path else key)
        return out
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return [c for b, a in zip(before, after, strict=True) for c in changed_values(b, a, path)]
    return [(path, _redact(path, before), _redact(path, after))]


def _machine(body: Mapping[str, Any] | None) -> str:
    config = (body or {}).get("node_config") or {}
    if isinstance(config, list):
        config = config[0] if config else {}
    return str(config.get("machine_type", ""))


def gate(
    rtype: str, action: str, paths: Iterable[str], before: Mapping[str, Any] | None, after: Mapping[str, Any] | None
) -> tuple[str, bool]:
    """(why the gate stops this change, whether CONFIRM_CHANGE may let it through), or ("", True)."""
    if action not in ("delete", "replace", "update"):
        return "", True
    losing = action in ("delete", "replace")
    if rtype in PROTECTED_TYPES and losing:
        return "a protected stateful resource would be destroyed", False
    if rtype == "google_container_node_pool":
        found = accelerator_for_machine(_machine(before or after))
        moved = action == "update" and any(p == "node_locations" for p in paths)
        if found is not None and (losing or moved):
            what = (
                "replaced (destroyed, then created: its name is fixed)"
                if action == "replace"
                else ("deleted" if action == "delete" else "moved to other zones (its nodes are recreated)")
            )
            return (
                f"an accelerator slice pool ({found[0].name}, {_machine(before or after)}) would be {what}: its "
                "capacity is released, and on-demand or spot capacity may not come back"
            ), True
    if rtype in ("kubernetes_namespace_v1", "kubernetes_namespace") and losing:
        return "a namespace would be deleted, with every object in it (the Secrets made by hand too)", True
    if rtype == "helm_release" and losing:
        return "a Helm release would be uninstalled: its objects go (a controller's, every object of its kinds)", True
    if rtype == "helm_release" and action == "update" and "version" in paths:
        return _controller_bump(before or {}, after or {}), True
    if action == "update":
        slice_pool = rtype == "google_container_node_pool" and accelerator_for_machine(_machine(before or after))
        rows = destructive(rtype, list(paths), before, after, accelerator_pool=bool(slice_pool))
        if rows:
            # The resource stays; what it holds goes (infra/catalogue/destructive_updates.py, with sources).
            what = "; ".join(f"{', '.join(hits)}: {row.what}" for row, hits in rows)
            return f"an in-place update that destroys: {what}", True
    return "", True


def _controller_bump(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    """Why a controller's version change stops the apply: what it does to the CRDs the platform applies from the
    pinned files (infra/catalogue/controller_crds.py); "" when it changes none of them, or is no controller."""
    name = str(after.get("name", ""))
    controller = CONTROLLERS.get(name)
    if controller is None or after.get("repository") != controller.repository:
        return ""
    old, new = str(before.get("version")), str(after.get("version"))
    changes = crd_changes(name, old, new)
    if not changes:
        return ""
    return (
        f"controller {name} {old} -> {new} changes the CRDs of {controller.api_group} that every existing object "
        f"is read through: {'; '.join(changes)}. Check the objects against the new schema and the controller's "
        'release notes first (docs/operations.md, "Upgrade a controller")'
    )


def diff(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> list[Change]:
    """The changes from `before` to `after` (synthesized stacks), as Terraform would plan them: meta-arguments
    alone change nothing; a change under a ForceNew path of the provider's schema is a replacement."""
    old = resources(before or {})
    new = resources(after)
    changes: list[Change] = []
    for address in sorted(old.keys() | new.keys()):
        rtype = address.split(".", 1)[0]
        values: list[tuple[str, Any, Any]] = []
        if address not in old:
            action = "create"
        elif address not in new:
            action = "delete"
        else:
            values = changed_values(old[address], new[address])
            if not values:
                continue
            action = "update"
        paths = [p for p, _, _ in values]
        forcing = tuple(sorted({p for p in paths if forces_replacement(rtype, p)}))
        if forcing:
            action = "replace"
        why, confirmable = gate(rtype, action, paths, old.get(address), new.get(address))
        attributes = tuple(sorted({p.split(".", 1)[0] for p in paths}))
        changes.append(Change(action, address, attributes, forcing, tuple(values), why, confirmable))
    return changes


def review_stack(
    stack: str, after: Mapping[str, Any], before: Mapping[str, Any] | None, confirmed: Iterable[str] = ()
) -> StackReview:
    return StackReview(
        confirmed=frozenset(confirmed),
        stack=stack,
        changes=diff(before, after),
        types_after=Counter(a.split(".")[0] for a in resources(after)),
        inventory_before=accelerator_inventory(before or {}),
        inventory_after=accelerator_inventory(after),
        has_baseline=before is not None,
        costs_after=pool_costs(stack_pools(after)),
        costs_before=None if before is None else pool_costs(stack_pools(before)),
    )


_PLAN_ACTIONS = {
    ("create",): "create",
    ("update",): "update",
    ("delete",): "delete",
    ("delete", "create"): "replace",
    ("create", "delete"): "replace",
}


def _changed(before: Any, after: Any) -> tuple[str, ...]:
    before, after = before or {}, after or {}
    return tuple(sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k)))


def _plan_change(entry: Mapping[str, Any]) -> Change | None:
    change = entry.get("change") or {}
    action = _PLAN_ACTIONS.get(tuple(change.get("actions") or ()))
    if action is None:  # no-op, read
        return None
    replaced_by = tuple(sorted({".".join(map(str, path)) for path in change.get("replace_paths") or []}))
    attributes = _changed(change.get("before"), change.get("after")) if action in ("update", "replace") else ()
    values = changed_values(change.get("before"), change.get("after")) if action == "update" else []
    why, confirmable = gate(
        str(entry.get("type") or entry["address"].split(".", 1)[0]),
        action,
        [p for p, _, _ in values],
        change.get("before"),
        change.get("after"),
    )
    return Change(action, entry["address"], attributes, replaced_by, tuple(values), why, confirmable)


def review_plan(stack: str, plan: Mapping[str, Any], confirmed: Iterable[str] = ()) -> StackReview:
    """Review a real plan (`terraform show -json`); refuse a format this renderer does not know."""
    if not isinstance(plan, Mapping):
        raise PlanFormatError(f"a JSON {type(plan).__name__}, not a plan (terraform show -json <plan file>)")
    if "values" in plan and "resource_changes" not in plan and "planned_values" not in plan:
        raise PlanFormatError(
            "this is a state (terraform show -json of a state file), not a plan: give the JSON of a saved plan, "
            "terraform show -json <plan file>"
        )
    version = str(plan.get("format_version", ""))
    major = version.split(".", 1)[0]
    if not major.isdigit() or int(major) != SUPPORTED_PLAN_FORMAT_MAJOR:
        raise PlanFormatError(
            f"plan format_version {version or '(missing)'!r} is not supported; "
            f"this review reads format {SUPPORTED_PLAN_FORMAT_MAJOR}.x (terraform show -json)"
        )
    entries = plan.get("resource_changes") or []
    changes = [c for c in map(_plan_change, entries) if c is not None]
    drift = [c for c in map(_plan_change, plan.get("resource_drift") or []) if c is not None]
    pools = [e for e in entries if e.get("type") == "google_container_node_pool"]
    after_types: Counter[str] = Counter(e["type"] for e in entries if (e.get("change") or {}).get("after") is not None)
    return StackReview(
        stack=stack,
        changes=sorted(changes, key=lambda c: c.address),
        types_after=after_types,
        inventory_before=pool_inventory(e["change"]["before"] for e in pools if e["change"].get("before")),
        inventory_after=pool_inventory(e["change"]["after"] for e in pools if e["change"].get("after")),
        has_baseline=True,
        source="plan",
        drift=drift,
        confirmed=frozenset(confirmed),
        costs_after=pool_costs({e["address"]: e["change"]["after"] for e in pools if e["change"].get("after")}),
        costs_before=pool_costs({e["address"]: e["change"]["before"] for e in pools if e["change"].get("before")}),
    )


REVIEW_SCHEMA = "platform-review/1"  # docs/review.schema.json


def _cost_json(costs: Mapping[str, PoolCost] | None) -> dict[str, Any] | None:
    if costs is None:
        return None
    fewest, most = _totals(costs.values())
    month = prices.HOURS_PER_MONTH
    return {
        "usd_per_hour": {"fewest": round(fewest, 2), "most": round(most, 2)},
        "usd_per_month": {"fewest": round(fewest * month, 2), "most": round(most * month, 2)},
        "pools": [
            {
                "address": address,
                "pool": c.pool,
                "machine_type": c.machine_type,
                "location": c.location,
                "capacity": c.capacity,
                "min_nodes": c.min_nodes,
                "max_nodes": c.max_nodes,
                "usd_per_node_hour": c.price.usd_per_hour,
                "unpriced_because": c.price.missing or None,
            }
            for address, c in sorted(costs.items())
        ],
    }


def review_json(review: StackReview) -> dict[str, Any]:
    """The facts the Markdown review shows, for machines (issue 37): what changes with its values before and after,
    what the gate stops (and whether it is confirmed), the accelerator inventory, the costs, what each orchestrator
    would hold and the security posture. Its shape: docs/review.schema.json."""

    def change(c: Change) -> dict[str, Any]:
        gate = None
        if c.blocked:
            gate = {
                "why": c.blocked,
                "confirmable": c.confirmable,
                "confirmed": review.is_confirmed(c),
            }
        return {
            "action": c.action,
            "address": c.address,
            "attributes": list(c.attributes),
            "replaced_by": list(c.replaced_by),
            "values": [{"path": p, "before": b, "after": a} for p, b, a in c.values],
            "gate": gate,
        }

    def inventory(counts: Counter[tuple[str, str]]) -> list[dict[str, Any]]:
        return [{"generation": g, "zone": z, "chips": n} for (g, z), n in sorted(counts.items())]

    counts = Counter(c.action for c in review.changes)
    return {
        "schema": REVIEW_SCHEMA,
        "stack": review.stack,
        "source": review.source,
        "baseline": review.has_baseline,
        "counts": {action: counts.get(action, 0) for action in ("create", "update", "replace", "delete")},
        "changes": [change(c) for c in review.changes],
        "blocking": [c.address for c in review.blocking],
        "drift": [change(c) for c in review.drift],
        "inventory": {"before": inventory(review.inventory_before), "after": inventory(review.inventory_after)},
        "cost": {"after": _cost_json(review.costs_after), "before": _cost_json(review.costs_before)},
        "holdings": [dataclasses.asdict(h) for h in review.holdings],
        "posture": list(review.posture),
    }


def render(review: StackReview) -> str:
    lines = [f"# Plan review: {review.stack}", ""]
    if review.source == "plan":
        lines += ["Review of a Terraform plan (`terraform show -json`).", ""]
    else:
        basis = "against the baseline" if review.has_baseline else "with no baseline: every resource is new"
        lines += [f"Offline review of the synthesized configuration, {basis}.", ""]
    counts = Counter(c.action for c in review.changes)
    lines += ["| action | resources |", "|---|---|"]
    lines += [f"| {action} | {counts.get(action, 0)} |" for action in ("create", "update", "replace", "delete")]
    lines.append("")
    if review.gated:
        lines += ["## Blocking", "", "The apply stops here until each change below is confirmed for its resource:", ""]
        for c in review.gated:
            forced = f" (forced by {', '.join(c.replaced_by)})" if c.replaced_by else ""
            if not c.confirmable:
                state = "cannot be confirmed here"
            elif review.is_confirmed(c):
                state = "**confirmed**"
            else:
                state = f"confirm with `CONFIRM_CHANGE={c.address}`"
            lines.append(f"- **{c.action}** `{c.address}`{forced}: {c.blocked}; {state}")
        lines.append("")
    lines += [
        "## Accelerator inventory",
        "",
        "| accelerator | zone | chips before | chips after | change |",
        "|---|---|---|---|---|",
    ]
    keys = sorted(review.inventory_before.keys() | review.inventory_after.keys())
    for key in keys:
        b, a = review.inventory_before.get(key, 0), review.inventory_after.get(key, 0)
        lines.append(f"| {key[0]} | {key[1]} | {b} | {a} | {a - b:+d} |")
    if not keys:
        lines.append("| (none) | | 0 | 0 | +0 |")
    lines += render_costs(review)
    lines += ["", "## Resources by type", "", "| type | count |", "|---|---|"]
    lines += [f"| `{t}` | {n} |" for t, n in sorted(review.types_after.items())]
    if review.has_baseline:
        lines += ["", "## Changes", ""]
        for c in review.changes:
            attrs = f": {', '.join(c.attributes)}" if c.attributes else ""
            forced = f" (replacement forced by {', '.join(c.replaced_by)})" if c.replaced_by else ""
            lines.append(f"- {c.action} `{c.address}`{attrs}{forced}")
            lines += [f"  - `{path}`: {_shown(b)} \u2192 {_shown(a)}" for path, b, a in c.values[:MAX_VALUES_SHOWN]]
            if len(c.values) > MAX_VALUES_SHOWN:
                lines.append(f"  - and {len(c.values) - MAX_VALUES_SHOWN} more")
        if not review.changes:
            lines.append("No changes.")
    if review.holdings:
        lines += [
            "",
            "## GPUs by orchestrator",
            "",
            "What each orchestrator would hold at most, and when, and what those machines cost per hour if they were",
            f"left running: {prices.PRICE_SOURCE};",
            "flex-start at the on-demand list price (billed up to 53% less), a reservation at the on-demand rate,",
            "\u2014 where the table has no price.",
            "",
            "| orchestrator | machines | GPUs | how | USD/hour if left running |",
            "|---|---|---|---|---|",
        ]
        for h in review.holdings:
            cost = "\u2014" if h.hourly is None else f"{h.hourly:,.2f}"
            lines.append(f"| {h.orchestrator} | {h.what} | {h.gpus} | {h.how} | {cost} |")
        known = [h.hourly for h in review.holdings if h.hourly is not None]
        total = f"{sum(known):,.2f} (of the priced groups)" if known else "\u2014"
        lines.append(f"| total | | {sum(h.gpus for h in review.holdings)} | | {total} |")
    if review.posture:
        lines += ["", "## Security posture", "", *review.posture]
    if review.drift:
        lines += ["", "## Drift", "", "Changed outside Terraform since the last apply:", ""]
        lines += [f"- {c.action} `{c.address}`: {', '.join(c.attributes) or 'changed'}" for c in review.drift]
    return "\n".join(lines) + "\n"


MAX_VALUES_SHOWN = 12


def _usd(value: float | None) -> str:
    return "\u2014" if value is None else f"{value:,.2f}"


def _change(before: str, after: str) -> str:
    """One cell: the value, or before \u2192 after where it changed."""
    return after if before == after else f"{before} \u2192 {after}"


def _totals(costs: Iterable[PoolCost]) -> tuple[float, float]:
    """(USD per hour at the fewest nodes, at the most) of the priced pools."""
    priced = [c for c in costs if c.price.usd_per_hour is not None]
    return sum(c.hourly(c.min_nodes) or 0.0 for c in priced), sum(c.hourly(c.max_nodes) or 0.0 for c in priced)


def _delta(before: float, after: float, unit: str) -> str:
    return f"{before:,.2f} \u2192 {after:,.2f} {unit} ({after - before:+,.2f})"


def render_costs(review: StackReview) -> list[str]:
    """The review's cost section: each node pool per hour and per month at its fewest and most nodes, the totals,
    and with a baseline each changed figure before \u2192 after and the change of the totals."""
    if not review.costs_after and not review.costs_before:
        return []
    month = prices.HOURS_PER_MONTH
    lines = [
        "",
        "## Cost",
        "",
        f"Node pools at list prices: {prices.PRICE_SOURCE}.",
        f"Per hour, and per month of {month} hours, at each pool's fewest and most nodes. Spot at the spot price;",
        "flex-start and queued (DWS) pools at the on-demand price, an upper bound; a reservation at the on-demand",
        "rate, billed whether or not nodes use it. Not counted: disks, network, the GKE cluster fee, Vertex AI, and",
        "the Slurm and VM groups (see GPUs by orchestrator).",
        "",
        "| pool | machine | capacity | nodes | USD/node-hour | USD/hour (fewest-most) | USD/month (fewest-most) |",
        "|---|---|---|---|---|---|---|",
    ]
    before_all = review.costs_before if review.costs_before is not None else {}
    missing: list[str] = []
    for address in sorted(review.costs_after.keys() | before_all.keys(), key=lambda a: _pool_order(a, review)):
        after, before = review.costs_after.get(address), before_all.get(address)
        if after is None:  # deleted by the change
            assert before is not None
            row = [f"{old} \u2192 none" for old in _cost_cells(before)]
        elif review.costs_before is None:  # no baseline: the values
            row = _cost_cells(after)
        elif before is None:  # created by the change
            row = [f"none \u2192 {new}" for new in _cost_cells(after)]
        else:
            row = [_change(old, new) for old, new in zip(_cost_cells(before), _cost_cells(after), strict=True)]
        pool = after.pool if after is not None else before.pool if before is not None else address
        lines.append(f"| {pool} | " + " | ".join(row) + " |")
        for c in (before, after):
            if c is not None and c.price.missing and f"{c.pool}: {c.price.missing}" not in missing:
                missing.append(f"{c.pool}: {c.price.missing}")
    fewest, most = _totals(review.costs_after.values())
    if review.costs_before is None:
        total_hour, total_month = f"{fewest:,.2f}-{most:,.2f}", f"{fewest * month:,.2f}-{most * month:,.2f}"
    else:
        b_fewest, b_most = _totals(before_all.values())
        total_hour = _change(f"{b_fewest:,.2f}-{b_most:,.2f}", f"{fewest:,.2f}-{most:,.2f}")
        total_month = _change(
            f"{b_fewest * month:,.2f}-{b_most * month:,.2f}", f"{fewest * month:,.2f}-{most * month:,.2f}"
        )
    lines.append(f"| **total** (priced pools) | | | | | {total_hour} | {total_month} |")
    if missing:
        lines += ["", "No price (not counted in the total):", ""] + [f"- {m}" for m in missing]
    if review.costs_before is not None:
        b_fewest, b_most = _totals(before_all.values())
        lines += [
            "",
            "Cost change of this plan:",
            "",
            f"- at the most nodes: {_delta(b_most, most, 'USD/hour')}, "
            f"{_delta(b_most * month, most * month, 'USD/month')}",
            f"- at the fewest nodes: {_delta(b_fewest, fewest, 'USD/hour')}, "
            f"{_delta(b_fewest * month, fewest * month, 'USD/month')}",
        ]
    return lines


def cost_summary(review: StackReview) -> str:
    """One line: what the stack's node pools cost per hour and per month at their fewest-most nodes, and the
    change from the baseline where there is one."""
    month = prices.HOURS_PER_MONTH
    fewest, most = _totals(review.costs_after.values())
    line = f"node pools {fewest:,.2f}-{most:,.2f} USD/hour, {fewest * month:,.2f}-{most * month:,.2f} USD/month"
    if review.costs_before is not None:
        _, b_most = _totals(review.costs_before.values())
        line += f" (at the most nodes {most - b_most:+,.2f} USD/hour, {(most - b_most) * month:+,.2f} USD/month)"
    unpriced = sorted(c.pool for c in review.costs_after.values() if c.price.usd_per_hour is None)
    return line + (f"; no price for {', '.join(unpriced)}" if unpriced else "")


def _pool_order(address: str, review: StackReview) -> str:
    cost = review.costs_after.get(address) or (review.costs_before or {}).get(address)
    return cost.pool if cost is not None else address


def _cost_cells(c: PoolCost) -> list[str]:
    """machine, capacity, nodes, USD/node-hour, USD/hour and USD/month at fewest-most."""
    month = prices.HOURS_PER_MONTH
    fewest, most = c.hourly(c.min_nodes), c.hourly(c.max_nodes)

    def span(a: float | None, b: float | None) -> str:
        return _usd(b) if a == b else f"{_usd(a)}-{_usd(b)}"

    monthly = [None if v is None else v * month for v in (fewest, most)]
    return [c.machine_type, c.price.basis, c.nodes, _usd(c.price.usd_per_hour), span(fewest, most), span(*monthly)]


def _shown(value: Any) -> str:
    """A value as the review shows it: JSON, cut at 80 characters."""
    text = "(none)" if value is None else json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


def _load_stacks(outdir: Path) -> dict[str, dict[str, Any]]:
    """Every `stacks/<stack>/cdk.tf.json` under `outdir`; a file that is not a stack's JSON object is refused by
    path (PlanFormatError)."""
    stacks = {}
    for path in sorted((outdir / "stacks").glob("*/cdk.tf.json")):
        try:
            body = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise PlanFormatError(f"{path}: not JSON ({err}); synthesize it again (make synth)") from err
        if not isinstance(body, dict):
            raise PlanFormatError(f"{path}: a {type(body).__name__}, not a synthesized stack (a JSON object)")
        stacks[path.parent.name] = body
    return stacks


def _recipes_section(env: str) -> str:
    """Which training recipes run on the environment's training slice (`python -m scripts.recipes`), if its file
    is among the environments."""
    from infra.config import environments_dir, parse_environment
    from workloads.trainer.compiled import environment_recipes

    path = environments_dir() / f"{env}.yaml"
    lines = environment_recipes(parse_environment(path)) if path.exists() else []
    return "\n## Training recipes on its slice\n\n```\n" + "\n".join(lines) + "\n```\n" if lines else ""


def write_reviews(
    outdir: Path,
    baseline: Path | None = None,
    confirmed: Iterable[str] = (),
    confirmed_by_stack: Mapping[str, Iterable[str]] | None = None,
) -> list[StackReview]:
    """Write `<outdir>/review/<env>.md` for every synthesized stack; return the reviews. `confirmed` holds for every
    stack, `confirmed_by_stack` for the stack it names (an environment file's `confirm:` entries)."""
    current = _load_stacks(outdir)
    if not current:
        raise FileNotFoundError(f"no synthesized stacks under {outdir}/stacks; run `make synth` first")
    base = _load_stacks(baseline) if baseline else None
    if baseline is not None and not base:
        # Before: a baseline folder with no stacks (a typo, an unsynthesized checkout) reviewed everything as new.
        raise FileNotFoundError(f"baseline {baseline}: no synthesized stacks under {baseline}/stacks")
    review_dir = outdir / "review"
    review_dir.mkdir(exist_ok=True)
    reviews = []
    for stack, body in current.items():
        mine = [*confirmed, *(confirmed_by_stack or {}).get(stack, ())]
        review = review_stack(stack, body, base.get(stack, {}) if base is not None else None, mine)
        env = stack.removeprefix("platform-")
        review.holdings = gke_holdings(body)
        blueprint = outdir / "slurm" / env / "blueprint.yaml"
        if blueprint.exists():
            review.holdings += slurm_holdings(yaml.safe_load(blueprint.read_text()))
        jobs = sorted((outdir / "vertex" / env).glob("*.json"))
        review.holdings += vertex_holdings({p.stem: json.loads(p.read_text()) for p in jobs})
        review.holdings += vm_holdings(body)
        review.posture = security_posture(body)
        (review_dir / f"{env}.md").write_text(render(review) + _recipes_section(env))
        (review_dir / f"{env}.json").write_text(json.dumps(review_json(review), indent=1, sort_keys=True) + "\n")
        reviews.append(review)
    return reviews
