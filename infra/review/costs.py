"""What the node pools cost (infra/catalogue/prices.py): per pool at its fewest and most nodes, the totals, and
the review's cost section."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from infra.catalogue import prices
from infra.derive.names import COMPUTE_CLASS_LABEL
from infra.review.model import PoolCost, StackReview, block


def _node_range(body: Mapping[str, Any]) -> tuple[int, int]:
    """(fewest, most) nodes of a pool: a fixed size, an autoscaler's totals, or its per-zone limits times the
    pool's zones."""
    autoscaling = block(body.get("autoscaling"))
    zones = len(body.get("node_locations") or []) or 1
    if int(autoscaling.get("total_max_node_count") or 0):
        return int(autoscaling.get("total_min_node_count") or 0), int(autoscaling["total_max_node_count"])
    if int(autoscaling.get("max_node_count") or 0):
        return int(autoscaling.get("min_node_count") or 0) * zones, int(autoscaling["max_node_count"]) * zones
    nodes = int(body.get("node_count") or 0) * (zones if body.get("node_locations") else 1)
    return nodes, nodes


def pool_cost(body: Mapping[str, Any]) -> PoolCost:
    """What a node pool body (synthesized or a plan's values) costs."""
    config = block(body.get("node_config"))
    machine = str(config.get("machine_type", ""))
    location = str((body.get("node_locations") or [body.get("location", "")])[0])
    capacity, _ = capacity_of(config, body)
    fewest, most = _node_range(body)
    price = prices.node_price(machine, location, capacity)
    compute_class = str(block(config.get("labels")).get(COMPUTE_CLASS_LABEL, ""))
    return PoolCost(str(body.get("name", "?")), machine, location, capacity, fewest, most, price, compute_class)


def pool_costs(pools: Mapping[str, Mapping[str, Any]]) -> dict[str, PoolCost]:
    """Cost of each node pool body by its resource address."""
    return {address: pool_cost(body) for address, body in sorted(pools.items())}


def stack_pools(stack_json: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The node pool bodies of a synthesized stack by resource address."""
    pools = (stack_json.get("resource") or {}).get("google_container_node_pool") or {}
    return {f"google_container_node_pool.{k}": v for k, v in pools.items()}


def capacity_of(config: Mapping[str, Any], body: Mapping[str, Any]) -> tuple[str, str]:
    """(capacity type, how the review says it) of a node pool (synthesized, or a plan's values: blocks as lists)."""
    if block(body.get("queued_provisioning")).get("enabled"):
        return "queued", "queued provisioning: only while an admitted job holds them"
    if config.get("flex_start"):
        return "flex-start", "flex-start: only while a job runs"
    if config.get("spot"):
        return "spot", "spot"
    if block(config.get("reservation_affinity")).get("consume_reservation_type") == "SPECIFIC_RESERVATION":
        return "reservation", "reservation"
    return "on-demand", "on-demand"


def cost_json(costs: Mapping[str, PoolCost] | None) -> dict[str, Any] | None:
    if costs is None:
        return None
    fewest, most = pool_totals(costs.values())
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
                "priced_because": c.price.note or None,
            }
            for address, c in sorted(costs.items())
        ],
    }


def usd(value: float | None) -> str:
    return "\u2014" if value is None else f"{value:,.2f}"


def _change(before: str, after: str) -> str:
    """One cell: the value, or before \u2192 after where it changed."""
    return after if before == after else f"{before} \u2192 {after}"


def fewest_hourly(pools: Iterable[PoolCost], one_class: bool = False) -> float:
    """USD per hour of `pools` at their fewest nodes: their sum, or where they are the tiers of one ComputeClass
    (`one_class`), its cheapest tier's (its nodes are counted once, whichever tier holds them)."""
    hourly = [c.hourly(c.min_nodes) or 0.0 for c in pools]
    return (min(hourly) if one_class else sum(hourly)) if hourly else 0.0


def pool_totals(costs: Iterable[PoolCost]) -> tuple[float, float]:
    """(USD per hour at the fewest nodes, at the most) of the priced pools. The tiers of one ComputeClass count
    once: its nodes are the servers' whichever tiers hold them, so at the fewest on its cheapest tier, at the most
    on its priciest."""
    priced = [c for c in costs if c.price.usd_per_hour is not None]
    fewest = fewest_hourly(c for c in priced if not c.compute_class)
    most = sum(c.hourly(c.max_nodes) or 0.0 for c in priced if not c.compute_class)
    for name in sorted({c.compute_class for c in priced if c.compute_class}):
        tiers = [c for c in priced if c.compute_class == name]
        fewest += fewest_hourly(tiers, one_class=True)
        most += max(c.hourly(c.max_nodes) or 0.0 for c in tiers)
    return fewest, most


def held_by_autoscalers(review: StackReview) -> float:
    """USD per hour the serving autoscalers' fewest servers hold beyond their pools' own fewest nodes: an HPA's
    minimum keeps its servers' nodes where their pools may shrink to zero (a multi-host server's pools, a
    ComputeClass's tiers). At the cheapest pool or tier."""
    extra = 0.0
    for scaler in review.autoscalers:
        held = scaler.usd_per_hour(scaler.fewest, review.costs_after) or 0.0
        own = [
            c
            for c in review.costs_after.values()
            if (c.compute_class if scaler.compute_class else c.pool) in scaler.pools
        ]
        extra += max(0.0, held - fewest_hourly(own, one_class=bool(scaler.compute_class)))
    return extra


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
        *(
            [
                "The capacity tiers of one ComputeClass count once in the totals: at the fewest nodes on the cheapest",
                "tier, at the most on the priciest (Capacity that falls back, below).",
            ]
            if any(c.compute_class for c in review.costs_after.values())
            else []
        ),
        "",
        "| pool | machine | capacity | nodes | USD/node-hour | USD/hour (fewest-most) | USD/month (fewest-most) |",
        "|---|---|---|---|---|---|---|",
    ]
    before_all = review.costs_before if review.costs_before is not None else {}
    missing: list[str] = []
    noted: list[str] = []
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
            if c is not None and c.price.note and f"{c.pool}: {c.price.note}" not in noted:
                noted.append(f"{c.pool}: {c.price.note}")
    fewest, most = pool_totals(review.costs_after.values())
    if review.costs_before is None:
        total_hour, total_month = f"{fewest:,.2f}-{most:,.2f}", f"{fewest * month:,.2f}-{most * month:,.2f}"
    else:
        b_fewest, b_most = pool_totals(before_all.values())
        total_hour = _change(f"{b_fewest:,.2f}-{b_most:,.2f}", f"{fewest:,.2f}-{most:,.2f}")
        total_month = _change(
            f"{b_fewest * month:,.2f}-{b_most * month:,.2f}", f"{fewest * month:,.2f}-{most * month:,.2f}"
        )
    lines.append(f"| **total** (priced pools) | | | | | {total_hour} | {total_month} |")
    held = held_by_autoscalers(review)
    if held:
        lines += [
            "",
            f"The serving autoscalers' fewest servers hold {held:,.2f} USD/hour ({held * month:,.2f} USD/month) more "
            "than their pools' fewest nodes: an HPA's minimum keeps its servers' nodes, where the pools may shrink to",
            f"zero. At the fewest servers, the node pools cost {fewest + held:,.2f} USD/hour "
            f"({(fewest + held) * month:,.2f} USD/month).",
        ]
    if missing:
        lines += ["", "No price (not counted in the total):", ""] + [f"- {m}" for m in missing]
    if noted:
        lines += ["", "Not the source's own row (priced higher, an upper bound):", ""] + [f"- {n}" for n in noted]
    if review.costs_before is not None:
        b_fewest, b_most = pool_totals(before_all.values())
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


def most_nodes_change(review: StackReview) -> float | None:
    """What the change does to the node pools' cost per hour at their most nodes (None: no baseline)."""
    if review.costs_before is None:
        return None
    return pool_totals(review.costs_after.values())[1] - pool_totals(review.costs_before.values())[1]


def cost_summary(review: StackReview) -> str:
    """One line: what the stack's node pools cost per hour and per month at their fewest-most nodes, and the
    change from the baseline where there is one."""
    month = prices.HOURS_PER_MONTH
    fewest, most = pool_totals(review.costs_after.values())
    line = f"node pools {fewest:,.2f}-{most:,.2f} USD/hour, {fewest * month:,.2f}-{most * month:,.2f} USD/month"
    change = most_nodes_change(review)
    if change is not None:
        line += f" (at the most nodes {change:+,.2f} USD/hour, {change * month:+,.2f} USD/month)"
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
        return usd(b) if a == b else f"{usd(a)}-{usd(b)}"

    monthly = [None if v is None else v * month for v in (fewest, most)]
    basis = f"{c.price.basis}, a tier of {c.compute_class}" if c.compute_class else c.price.basis
    return [c.machine_type, basis, c.nodes, usd(c.price.usd_per_hour), span(fewest, most), span(*monthly)]
