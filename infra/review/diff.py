"""The changes a plan makes, by resource address: offline from two synthesized stacks (as Terraform would plan
them), or from a real plan (`terraform show -json`)."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from infra.catalogue.consequences import CAPACITY_LOST
from infra.catalogue.optional_computed import optional_computed
from infra.catalogue.terraform_google import replaces
from infra.review.autoscaling import autoscalers, fallbacks
from infra.review.costs import pool_costs, stack_pools
from infra.review.engines import engine_args
from infra.review.gate import gate
from infra.review.holdings import accelerator_inventory, pool_inventory
from infra.review.model import (
    META_ARGUMENTS,
    SECRET_WORDS,
    SUPPORTED_PLAN_FORMAT_MAJOR,
    Change,
    Holding,
    PlanFormatError,
    StackReview,
)
from infra.review.monitoring import watching
from infra.review.queues import pods_ready_wait, team_queues


def resources(stack_json: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Resources by address (`type.name`), without cdktf's metadata."""
    out: dict[str, dict[str, Any]] = {}
    for rtype, items in (stack_json.get("resource") or {}).items():
        for name, body in items.items():
            out[f"{rtype}.{name}"] = {k: v for k, v in body.items() if k != "//"}
    return out


def _redact(path: str, value: Any) -> Any:
    last = path.rsplit(".", 1)[-1].lower()
    return "***" if value is not None and any(word in last for word in SECRET_WORDS) else value


def _decoded(key: str, value: Any) -> Any:
    """A helm_release's `values` (JSON documents in a list) and a dashboard's `dashboard_json` as data, so a change
    shows as values, not text."""
    try:
        if key == "values" and isinstance(value, list):
            return [json.loads(v) if isinstance(v, str) else v for v in value]
        if key == "dashboard_json" and isinstance(value, str):
            return json.loads(value)
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


# What a plan shows for a value it cannot know until the apply (Terraform's own words).
KNOWN_AFTER_APPLY = "(known after apply)"
# `${type.name.attribute...}`: a reference to another resource's attribute, as cdktf writes it.
_REFERENCE = re.compile(r"\$\{([a-z][a-z0-9_]*\.[A-Za-z0-9_-]+)\.([A-Za-z0-9_]+)")


def _references(value: Any, path: str = "") -> list[tuple[str, str, str]]:
    """(dotted path, the address referred to, its attribute) of every reference in a resource's body (list indices
    dropped, as the provider's schema paths have none)."""
    if isinstance(value, dict):
        return [
            found
            for key, inner in value.items()
            if path or key not in META_ARGUMENTS
            for found in _references(inner, f"{path}.{key}" if path else key)
        ]
    if isinstance(value, list):
        return [found for inner in value for found in _references(inner, path)]
    if isinstance(value, str):
        return [(path, address, attribute) for address, attribute in _REFERENCE.findall(value)]
    return []


def _ignored(body: Mapping[str, Any], values: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any]]:
    """The values whose change Terraform plans: those under the resource's `lifecycle.ignore_changes` (its list of
    attributes, indices dropped, or "all") are left as the state has them."""
    ignored = (body.get("lifecycle") or {}).get("ignore_changes") or []
    if ignored == "all" or ignored == ["all"]:
        return []
    paths = [re.sub(r"\[[^]]*\]", "", str(p)) for p in ignored]
    return [v for v in values if not any(v[0] == p or v[0].startswith(p + ".") for p in paths)]


def _kept(address: str, values: list[tuple[str, Any, Any]]) -> list[tuple[str, Any, Any]]:
    """The values whose change Terraform plans: an attribute the provider's schema marks optional and computed,
    once the configuration leaves it out, keeps the value the state holds (a pool's `node_count` once it
    autoscales): no change (infra/catalogue/optional_computed.py, read from the real providers' schemas)."""
    kept = optional_computed(address.split(".", 1)[0])
    return [v for v in values if not (v[2] is None and v[0] in kept)]


def _followed(
    old: Mapping[str, Any], new: Mapping[str, Any], direct: Mapping[str, list[tuple[str, Any, Any]]]
) -> dict[str, list[tuple[str, Any, Any]]]:
    """By address, the values that change because a value they read elsewhere does, as Terraform plans them: a
    configured value that changes changes what reads it; a resource replaced has a new identity, so every attribute
    its configuration does not set (its id, self link, email) is known only after the apply. Each resource that
    reads such a value is updated, or replaced where that value forces it, and what reads it changes in turn."""
    pointing = {address: _references(new[address]) for address in new if address in old}
    followed: dict[str, list[tuple[str, Any, Any]]] = {}

    def changes(address: str) -> list[tuple[str, Any, Any]]:
        return [*direct.get(address, []), *followed.get(address, [])]

    queue = [address for address, values in direct.items() if values]
    while queue:
        target = queue.pop()
        rtype = target.split(".", 1)[0]
        configured = new.get(target) or {}
        keys = {p.split(".", 1)[0] for p, _, _ in changes(target)}
        renewed = any(replaces(rtype, p, b, a) for p, b, a in changes(target))
        for address, references in pointing.items():
            for path, to, attribute in references:
                unknown = renewed and attribute not in configured
                if to != target or not (unknown or attribute in keys):
                    continue
                if any(p == path for p, _, _ in changes(address)):
                    continue
                after = KNOWN_AFTER_APPLY if unknown else f"(as {to}.{attribute} changes)"
                followed.setdefault(address, []).append((path, f"${{{to}.{attribute}}}", after))
                queue.append(address)
    return followed


def created_values(value: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted path, None, value) of every leaf of a new resource's body (a list is one value), secrets redacted."""
    if isinstance(value, dict):
        return [
            leaf
            for key in sorted(value)
            if path or key not in META_ARGUMENTS
            for leaf in created_values(_decoded(key, value[key]), f"{path}.{key}" if path else key)
        ]
    return [(path, None, _redact(path, value))]


def diff(
    before: Mapping[str, Any] | None, after: Mapping[str, Any], upgrades: Mapping[str, tuple[str, bool]] | None = None
) -> list[Change]:
    """The changes from `before` to `after` (synthesized stacks), as Terraform would plan them: meta-arguments
    alone change nothing, nor do the attributes `lifecycle.ignore_changes` names; a change under a ForceNew path of
    the provider's schema is a replacement, and a value read from another resource changes as it does
    (`_followed`). `upgrades`: by helm_release address, why its Helm upgrade stops the apply and whether it may be
    confirmed (`infra.review.upgrades`), which a release's update takes over the gate's other reasons."""
    old = resources(before or {})
    new = resources(after)
    direct = {
        address: _kept(address, _ignored(new[address], changed_values(old[address], new[address])))
        for address in old.keys() & new.keys()
    }
    followed = {address: _ignored(new[address], values) for address, values in _followed(old, new, direct).items()}
    changes: list[Change] = []
    for address in sorted(old.keys() | new.keys()):
        rtype = address.split(".", 1)[0]
        values: list[tuple[str, Any, Any]] = []
        if address not in old:
            action = "create"
            values = created_values(new[address])  # what it is created with, as a plan shows it
        elif address not in new:
            action = "delete"
        else:
            values = direct[address] + followed.get(address, [])
            if not values:
                continue
            action = "update"
        paths = [p for p, _, _ in values]
        forcing = () if action == "create" else tuple(sorted({p for p, b, a in values if replaces(rtype, p, b, a)}))
        if forcing:
            action = "replace"
        why, confirmable, kinds = gate(rtype, action, paths, old.get(address), new.get(address))
        if action == "update" and address in (upgrades or {}):
            (why, confirmable), kinds = (upgrades or {})[address], (CAPACITY_LOST,)
        attributes = tuple(sorted({p.split(".", 1)[0] for p in paths}))
        was = tuple((p, b) for p, b, _ in values if action == "update" or p in forcing)
        changes.append(Change(action, address, attributes, forcing, tuple(values), why, confirmable, kinds, was))
    return changes


def review_stack(
    stack: str,
    after: Mapping[str, Any],
    before: Mapping[str, Any] | None,
    confirmed: Iterable[str] = (),
    *,
    holdings: Iterable[Holding] = (),
    posture: Iterable[str] = (),
    upgrades: Mapping[str, tuple[str, bool]] | None = None,
    in_change: Iterable[str] = (),
) -> StackReview:
    """The offline review of one synthesized stack against its baseline (None: no baseline, everything is new);
    `upgrades` as `diff` takes them."""
    return StackReview(
        holdings=list(holdings),
        posture=list(posture),
        autoscalers=autoscalers(after),
        fallbacks=fallbacks(after),
        engines=engine_args(after),
        queues=team_queues(after),
        pods_ready_wait=pods_ready_wait(after),
        watching=watching(after),
        confirmed=frozenset(confirmed),
        confirmed_in_change=frozenset(in_change),
        stack=stack,
        changes=diff(before, after, upgrades),
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
# Actions that change nothing in the cloud: no-op, a data source's read, a `removed` block's forget (Terraform stops
# managing the object and leaves it). Any other action is refused: the gate never passes what it cannot read.
_UNCHANGED = {("no-op",), ("read",), ("forget",)}


def _changed(before: Any, after: Any) -> tuple[str, ...]:
    before, after = before or {}, after or {}
    return tuple(sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k)))


def _entries(plan: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    """A plan's `resource_changes` or `resource_drift`, each entry checked for the shape `terraform show -json`
    writes: a refusal names what is wrong and where, never a crash."""
    found = plan.get(key) or []
    if not isinstance(found, list):
        raise PlanFormatError(f"{key} is a {type(found).__name__}, not a list: a plan the gate cannot read")
    for i, entry in enumerate(found):
        if not isinstance(entry, Mapping):
            raise PlanFormatError(f"{key}[{i}] is a {type(entry).__name__}, not an object: a plan the gate cannot read")
        address = entry.get("address")
        if not isinstance(address, str) or not address:
            raise PlanFormatError(f"{key}[{i}] has no address: a plan the gate cannot read")
        change = entry.get("change")
        if change is not None and not isinstance(change, Mapping):
            raise PlanFormatError(
                f"{address}: its change is a {type(change).__name__}, not an object: a plan the gate cannot read"
            )
        for side in ("before", "after"):
            value = (change or {}).get(side)
            if value is not None and not isinstance(value, Mapping):
                raise PlanFormatError(
                    f"{address}: its {side} is a {type(value).__name__}, not an object or null: a plan the gate "
                    "cannot read"
                )
    return found


def _plan_change(entry: Mapping[str, Any], held: Mapping[str, tuple[str, bool]] | None = None) -> Change | None:
    found = entry.get("change")
    change: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    actions = change.get("actions")
    address = entry.get("address", "(no address)")
    if not isinstance(actions, list) or tuple(actions) in _UNCHANGED:
        if isinstance(actions, list):
            return None
        raise PlanFormatError(f"{address}: a resource change without a list of actions: a plan the gate cannot read")
    action = _PLAN_ACTIONS.get(tuple(actions))
    if action is None:
        raise PlanFormatError(
            f"{address}: actions {actions} are none Terraform plans (create, update, delete, delete and create, "
            "no-op, read, forget): a plan the gate cannot read"
        )
    replaced_by = tuple(sorted({".".join(map(str, path)) for path in change.get("replace_paths") or []}))
    attributes = _changed(change.get("before"), change.get("after")) if action in ("update", "replace") else ()
    values = changed_values(change.get("before"), change.get("after")) if action == "update" else []
    # What a confirm: entry is bound to: every changed value of an update, the forcing paths of a replacement (their
    # list indices dropped, as changed_values drops them).
    forcing = {".".join(str(p) for p in path if not isinstance(p, int)) for path in change.get("replace_paths") or []}
    changed = changed_values(change.get("before"), change.get("after")) if action == "replace" else values
    before = tuple((p, b) for p, b, _ in changed if action == "update" or p in forcing)
    why, confirmable, kinds = gate(
        str(entry.get("type") or entry["address"].split(".", 1)[0]),
        action,
        [p for p, _, _ in values],
        change.get("before"),
        change.get("after"),
    )
    if action in ("create", "update") and entry["address"] in (held or {}):
        (why, confirmable), kinds = (held or {})[entry["address"]], (CAPACITY_LOST,)
    return Change(action, entry["address"], attributes, replaced_by, tuple(values), why, confirmable, kinds, before)


def planned(plan: Mapping[str, Any], rtype: str, *actions: str) -> list[str]:
    """The addresses of a real plan's changes of resources of type `rtype` whose action is one of `actions`
    (create, update, delete, replace)."""
    return [
        e["address"]
        for e in plan.get("resource_changes") or []
        if e.get("type") == rtype and _PLAN_ACTIONS.get(tuple((e.get("change") or {}).get("actions") or ())) in actions
    ]


def review_plan(
    stack: str,
    plan: Mapping[str, Any],
    confirmed: Iterable[str] = (),
    held: Mapping[str, tuple[str, bool]] | None = None,
    in_change: Iterable[str] = (),
) -> StackReview:
    """Review a real plan (`terraform show -json`); refuse a format this renderer does not know. `held`: by address
    of a create or update, why what the cluster runs refuses it and whether a person may confirm it (the gate at
    the apply: scripts/apply.py `cluster_holds`), which takes over the gate's other reasons."""
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
    entries = _entries(plan, "resource_changes")
    changes = [c for c in (_plan_change(e, held) for e in entries) if c is not None]
    drift = [c for c in map(_plan_change, _entries(plan, "resource_drift")) if c is not None]
    pools = [e for e in entries if e.get("type") == "google_container_node_pool"]
    after_types: Counter[str] = Counter(
        str(e.get("type") or e["address"].split(".", 1)[0])
        for e in entries
        if (e.get("change") or {}).get("after") is not None
    )
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
        confirmed_in_change=frozenset(in_change),
        costs_after=pool_costs({e["address"]: e["change"]["after"] for e in pools if e["change"].get("after")}),
        costs_before=pool_costs({e["address"]: e["change"]["before"] for e in pools if e["change"].get("before")}),
    )
