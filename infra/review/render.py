"""A review as the pull request reads it (Markdown) and as machines read it (JSON: docs/review.schema.json)."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from typing import Any

from infra.catalogue import prices
from infra.catalogue.consequences import CAPACITY_LOST, PERSON_ONLY
from infra.review.costs import cost_json, held_by_autoscalers, most_nodes_change, pool_totals, render_costs, usd
from infra.review.model import Autoscaler, Change, PoolCost, StackReview

REVIEW_SCHEMA = "platform-review/1"  # docs/review.schema.json


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def review_json(review: StackReview) -> dict[str, Any]:
    """The facts the Markdown review shows, for machines: what changes with its values before and after,
    what the gate stops (and whether it is confirmed), the accelerator inventory, the costs, what each orchestrator
    would hold and the security posture. Its shape: docs/review.schema.json."""

    def change(c: Change) -> dict[str, Any]:
        gate = None
        if c.blocked:
            gate = {
                "why": c.blocked,
                "consequences": list(c.kinds),
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
        "real_plan": review.real_plan,
        "disagreements": [dataclasses.asdict(d) for d in review.disagreements],
        "baseline": review.has_baseline,
        "counts": {action: counts.get(action, 0) for action in ("create", "update", "replace", "delete")},
        "changes": [change(c) for c in review.changes],
        "blocking": [c.address for c in review.blocking],
        "drift": [change(c) for c in review.drift],
        "inventory": {"before": inventory(review.inventory_before), "after": inventory(review.inventory_after)},
        "cost": {"after": cost_json(review.costs_after), "before": cost_json(review.costs_before)},
        "holdings": [dataclasses.asdict(h) for h in review.holdings],
        "autoscaling": [
            {
                "release": a.release,
                "fewest": a.fewest,
                "most": a.most,
                "metric": a.metric,
                "target": a.target,
                "pool": a.pool or None,
                "warm_up": {"seconds": a.warm_up_s, "basis": a.warm_up_basis} if a.warm_up_s else None,
                "usd_per_hour": dict(zip(("fewest", "most"), map(_rounded, _scaler_usd(a, review)), strict=True)),
            }
            for a in review.autoscalers
        ],
        "fallback": [
            {
                "compute_class": f.compute_class,
                "tiers": [
                    {"pool": c.pool, "capacity": c.capacity, "usd_per_node_hour": c.price.usd_per_hour}
                    for c in f.tiers(review.costs_after)
                ],
                "usd_per_hour_at_most": dict(
                    zip(
                        ("first_tier", "priciest_tier"),
                        map(_rounded, _fallback_usd(f.tiers(review.costs_after))),
                        strict=True,
                    )
                ),
            }
            for f in review.fallbacks
        ],
        "monitoring": {
            "dashboards": [{"title": title, "url": url} for title, url in review.watching.dashboards],
            "alerts": list(review.watching.alerts),
            "notify": list(review.watching.notify),
            "budget": None
            if review.watching.budget is None
            else {
                "billing_account": review.watching.budget.billing_account,
                "usd_per_month": review.watching.budget.usd_per_month,
                "thresholds": [{"share": s, "basis": b} for s, b in review.watching.budget.thresholds],
            },
        },
        "posture": list(review.posture),
        "engines": [{"release": e.release, "engine": e.engine, "args": list(e.args)} for e in review.engines],
        "queues": [dataclasses.asdict(q) for q in review.queues],
    }


def _holdings_section(review: StackReview) -> list[str]:
    """What each orchestrator would hold at most, and what it costs if left running."""
    if not review.holdings:
        return []
    lines = [
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
    return lines


def _autoscaling_section(review: StackReview) -> list[str]:
    """The serving releases a Horizontal Pod Autoscaler scales, priced at their fewest and most servers."""
    if not review.autoscalers:
        return []
    lines = [
        "",
        "## Serving autoscaling",
        "",
        "Servers a Horizontal Pod Autoscaler adds and removes, holding the average of its metric per server near",
        "the target; the pool grows and shrinks with them (its cost above, from its fewest to its most nodes). A",
        "server's warm-up (node to ready) is how long a lull must last before one goes (up to the API's hour), and",
        "at 0 servers how long the first request waits.",
        "",
        "| release | servers | scales on | target per server | pool | warm-up | USD/hour at fewest "
        "| USD/hour at most |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for scaler in review.autoscalers:
        low, high = _scaler_usd(scaler, review)
        servers = f"{scaler.fewest}-{scaler.most}"
        pool = (f"ComputeClass {scaler.pool}" if scaler.compute_class else scaler.pool) or "(CPU nodes)"
        warm_up = f"{scaler.warm_up_s} s ({scaler.warm_up_basis})" if scaler.warm_up_s else "\u2014"
        lines.append(
            f"| {scaler.release} | {servers} | `{scaler.metric}` | {scaler.target} | {pool} | {warm_up} | {usd(low)} | "
            f"{usd(high)} |"
        )
    if any(s.compute_class for s in review.autoscalers):
        lines += ["", "Over a ComputeClass: at the fewest servers on its cheapest tier, at the most on its priciest."]
    return lines


def _scaler_usd(scaler: Autoscaler, review: StackReview) -> tuple[float | None, float | None]:
    """What the autoscaler's nodes cost per hour at its fewest servers and at its most (over a ComputeClass's
    tiers: the cheapest at the fewest, the priciest at the most)."""
    return (
        scaler.usd_per_hour(scaler.fewest, review.costs_after),
        scaler.usd_per_hour(scaler.most, review.costs_after, priciest=True),
    )


def _fallback_section(review: StackReview) -> list[str]:
    """The slices whose capacity falls back: each tier in the order GKE tries it, what it costs, and the range."""
    if not review.fallbacks:
        return []
    lines = [
        "",
        "## Capacity that falls back",
        "",
        "A custom ComputeClass per slice: GKE grows the first tier's pool it can, falls back down the list when",
        "a tier has no capacity, and moves servers back up when it returns (active migration). Each tier's pool",
        "scales from zero to every server's nodes; together they hold no more than that.",
    ]
    for fallback in review.fallbacks:
        tiers = fallback.tiers(review.costs_after)
        lines += [
            "",
            f"`{fallback.compute_class}`:",
            "",
            "| tier | pool | capacity | USD/node-hour | USD/hour at the most nodes |",
            "|---|---|---|---|---|",
        ]
        for i, c in enumerate(tiers, 1):
            lines.append(
                f"| {i} | {c.pool} | {c.price.basis} | {usd(c.price.usd_per_hour)} | {usd(c.hourly(c.max_nodes))} |"
            )
        first, priciest = _fallback_usd(tiers)
        if first is not None and priciest is not None:
            lines += [
                "",
                f"At the most nodes: {usd(first)} USD/hour on the first tier, up to {usd(priciest)} USD/hour if GKE "
                "falls back to the priciest.",
            ]
    return lines


def _fallback_usd(tiers: list[PoolCost]) -> tuple[float | None, float | None]:
    """(USD/hour at the most nodes on the first tier, on the priciest tier)."""
    priced = [c.hourly(c.max_nodes) for c in tiers if c.price.usd_per_hour is not None]
    if not priced or tiers[0].price.usd_per_hour is None:
        return None, None
    return tiers[0].hourly(tiers[0].max_nodes), max(p or 0.0 for p in priced)


def _queues_section(review: StackReview) -> list[str]:
    """Who can use and borrow what of the batch slices (Kueue, one cohort), and how long Kueue waits for a run's
    pods."""
    wait = review.pods_ready_wait
    if not review.queues and wait is None:
        return []
    lines = ["", "## Batch queues", *_team_queue_lines(review)]
    if wait is not None:
        lines += [
            "",
            f"Kueue evicts an admitted run whose pods are not all Ready {wait.get('timeout')} after its admission, or "
            f"{wait.get('recoveryTimeout')} after one of them failed, and queues it again (waitForPodsReady: "
            + (
                wait.get("why")
                or "twice the slowest `queued_start` of the queued slices once each has one, else Kueue's default"
            )
            + ").",
        ]
    return lines


def _team_queue_lines(review: StackReview) -> list[str]:
    """The teams' queues and the platform's: what each is guaranteed, may borrow and lends."""
    if not review.queues:
        return []
    lines = [
        "",
        "Each team's Kueue queue and the platform's own, in one cohort: guaranteed accelerators of each batch slice",
        "(and of the training slice's pools, where teams may borrow it), and at most how many more each may borrow",
        "while the others leave them unused (the queues lend all of theirs; the training queue takes its slice back).",
        "",
    ]
    fair = review.queues[0].weight is not None
    if fair:
        lines += [
            "Fair sharing is on: when several queues want more than is left unused, Kueue admits from the one with the",
            "lowest share (what it borrows over its weight) first, and preempts from the highest.",
            "",
        ]
    lines += [
        "| queue | namespace | slice | guaranteed | may borrow | preemption |" + (" weight |" if fair else ""),
        "|---|---|---|---|---|---|" + ("---|" if fair else ""),
    ]
    for q in review.queues:
        borrow = "all unused" if q.borrow_limit is None else str(q.borrow_limit)
        weight = f" {q.weight:g} |" if q.weight is not None else ""
        lines.append(
            f"| {q.queue} | {q.namespace} | {q.flavor} | {q.guaranteed} {q.resource} | {borrow} | {q.preemption} |"
            + weight
        )
    lenders = {q.queue: q.lends for q in review.queues if q.lends}
    if lenders:
        lines += ["", *(f"The training queue `{name}` lends its slice {lends}." for name, lends in lenders.items())]
    return lines


def _engines_section(review: StackReview) -> list[str]:
    """What each serving release passes its engine, one argument per line."""
    if not review.engines:
        return []
    lines = ["", "## Serving engines' arguments", ""]
    for e in review.engines:
        lines += [f"- `{e.release}`, {e.engine}:", "", "  ```", *(f"  {a}" for a in e.args), "  ```", ""]
    return lines[:-1]


def _monitoring_section(review: StackReview) -> list[str]:
    """The stack's dashboards (linked), its alert policies and who they notify."""
    watching = review.watching
    if not (watching.dashboards or watching.alerts):
        return []
    lines = ["", "## Monitoring", ""]
    lines += [f"- Dashboard: [{title}]({url})" for title, url in watching.dashboards]
    notify = ", ".join(watching.notify) if watching.notify else "no one (set monitoring.notify)"
    lines += [f"- Alert policies ({len(watching.alerts)}), notifying {notify}:"]
    lines += [f"  - {name}" for name in watching.alerts]
    lines += _budget_lines(review)
    return lines


def _budget_lines(review: StackReview) -> list[str]:
    """The budget, and which of its thresholds the node pools alone pass at their fewest and most nodes."""
    budget = review.watching.budget
    if budget is None:
        return []
    shares = ", ".join(
        f"{share:.0%}" + (" forecast" if basis == "FORECASTED_SPEND" else "") for share, basis in budget.thresholds
    )
    lines = [
        f"- Budget: {budget.usd_per_month:,.0f} USD/month on billing account {budget.billing_account}, alerting at "
        f"{shares} of the month's spend."
    ]
    if review.costs_after:
        fewest, most = pool_totals(review.costs_after.values())
        fewest, most = (fewest + held_by_autoscalers(review)) * prices.HOURS_PER_MONTH, most * prices.HOURS_PER_MONTH
        said = []
        for what, usd_month in (("fewest", fewest), ("most", most)):
            crossed = budget.crossed(usd_month)
            past = f"past its {crossed:.0%} threshold" if crossed is not None else "within its first threshold"
            said.append(f"at their {what} nodes {usd_month:,.2f} USD/month, {past}")
        lines.append(f"  The node pools alone, at list prices: {'; '.join(said)}.")
    return lines


def _actions_from(review: StackReview) -> list[str]:
    """Whose actions the review shows: the real providers' plan of the change where one was read, and every
    resource the offline review planned otherwise; else the offline review's, and how to get the real plan's."""
    if not review.has_baseline:
        return []
    if review.real_plan is None:
        return [
            "The actions are the offline review's (the providers' ForceNew fields as read into "
            "infra/catalogue/terraform_google.py); with the engine built (`make tofu`), `make plan BASE_REF=` takes "
            "them from OpenTofu's plan of the change with the real providers.",
            "",
        ]
    lines = [
        f"The actions are OpenTofu's: the real providers' plan of this change against a stand-in state of the "
        f"baseline (`{review.real_plan}` in the plan's folder).",
        "",
    ]
    if review.disagreements:
        lines += [
            "The offline review planned these otherwise; the real plan's action is the one above and below:",
            "",
            "| resource | offline | real plan |",
            "|---|---|---|",
        ]
        lines += [f"| `{d.address}` | {d.offline} | {d.real} |" for d in review.disagreements]
        lines.append("")
    return lines


# Releases by what stops when they change (their charts: workloads/charts/).
TRAINING_RELEASES = ("ray-training", "gpu-training", "nccl-test")
# A helm_release's arguments that steer Helm alone (hashicorp/terraform-provider-helm v3.1.2 resource_helm_release.go):
# changing only these renders the same objects, so nothing the release runs restarts.
HELM_ONLY = frozenset({
    "timeout", "wait", "wait_for_jobs", "atomic", "cleanup_on_fail", "max_history", "upgrade_install",
    "disable_webhooks", "disable_openapi_validation", "skip_crds", "recreate_pods", "lint", "description",
    "dependency_update", "reset_values", "reuse_values", "verify", "keyring", "replace",
})  # fmt: skip


def _release_name(address: str) -> str:
    """A helm_release's name as the stack's address carries it (`helm_release.serve-canary_release_8A6F4AA1`)."""
    return address.split(".", 1)[1].split("_", 1)[0]


def _restarts(review: StackReview) -> list[str]:
    """What the change stops or restarts: each release upgraded or reinstalled (training resumes from its last
    checkpoint, a server's pods roll), and each change the gate names as capacity or work lost."""
    said = []
    for c in review.changes:
        if c.resource_type == "helm_release" and c.action in ("update", "replace"):
            if c.action == "update" and c.attributes and set(c.attributes) <= HELM_ONLY:
                continue  # Helm's own settings: the same objects, nothing restarts
            name = _release_name(c.address)
            what = (
                "training (where its RayCluster or Job changes, it restarts from its last checkpoint)"
                if name in TRAINING_RELEASES
                else (
                    "a server (where its pod template changes, its pods roll)"
                    if name.startswith("serve-")
                    else "a controller or service"
                )
            )
            how = "reinstalled" if c.action == "replace" else "upgraded"
            said.append(f"`{name}` {how}: {what}")
        elif CAPACITY_LOST in c.kinds:
            said.append(f"`{c.address}` ({c.action}): {c.blocked.split('; ')[0].removeprefix(CAPACITY_LOST + ': ')}")
    return said


def _verdict(review: StackReview) -> list[str]:
    """The first lines: whether the apply may go, what it stops or restarts, what it does to the cost."""
    if review.blocking:
        verdict = (
            f"**{len(review.blocking)} of {len(review.changes)} changes block the apply** until confirmed (Blocking, "
            "below, says what each needs)"
        )
    elif review.changes:
        confirmed = len(review.gated)
        count = f"{len(review.changes)} change{'s' * (len(review.changes) > 1)}"
        verdict = f"**Nothing blocks the apply** ({count}" + (
            f"; {confirmed} gated and confirmed)" if confirmed else ")"
        )
    else:
        verdict = "**No change**"
    lines = [f"Verdict: {verdict}."]
    if review.has_baseline and review.changes:
        restarts = _restarts(review)
        lines.append(
            "Stops or restarts: " + ("; ".join(restarts) + "." if restarts else "nothing (no release or node changes).")
        )
    change = most_nodes_change(review)
    if change is not None and review.changes:
        lines.append(f"Cost at the most nodes: {change * prices.HOURS_PER_MONTH:+,.2f} USD/month (Cost, below).")
    return [" ".join(lines) if len(lines) == 1 else "\n".join(f"- {line}" for line in lines), ""]


def render(review: StackReview) -> str:
    lines = [f"# Plan review: {review.stack}", ""]
    lines += _verdict(review)
    if review.source == "plan":
        lines += ["Review of a Terraform plan (`terraform show -json`).", ""]
    else:
        basis = "against the baseline" if review.has_baseline else "with no baseline: every resource is new"
        lines += [f"Offline review of the synthesized configuration, {basis}.", ""]
        lines += _actions_from(review)
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
            elif any(k in PERSON_ONLY for k in c.kinds):
                state = (
                    "confirm it with a `confirm:` entry in the environment file merged before this change, in a pull "
                    "request of its own (this pull request cannot confirm it alone; `make plan` prints the entry), "
                    f"or a person with `CONFIRM_CHANGE={c.address}` at the apply"
                )
            else:
                state = (
                    "confirm it with a `confirm:` entry in the environment file (`make plan` prints it), or "
                    f"`CONFIRM_CHANGE={c.address}` for your own run"
                )
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
        if any(len(_json(v)) > SHOWN_CHARACTERS for c in review.changes for _, b, a in c.values for v in (b, a)):
            lines += [
                "",
                f"A value longer than {SHOWN_CHARACTERS} characters is cut (`...`); the whole of every value is in "
                "the JSON review beside this file (`changes[].values`).",
            ]
    lines += _holdings_section(review)
    lines += _autoscaling_section(review)
    lines += _fallback_section(review)
    lines += _queues_section(review)
    lines += _engines_section(review)
    lines += _monitoring_section(review)
    if review.posture:
        lines += ["", "## Security posture", "", *review.posture]
    if review.drift:
        lines += ["", "## Drift", "", "Changed outside Terraform since the last apply:", ""]
        lines += [f"- {c.action} `{c.address}`: {', '.join(c.attributes) or 'changed'}" for c in review.drift]
    return "\n".join(lines) + "\n"


MAX_VALUES_SHOWN = 12


SHOWN_CHARACTERS = 80


def _json(value: Any) -> str:
    return "(none)" if value is None else json.dumps(value, sort_keys=True)


def _shown(value: Any) -> str:
    """A value as the review shows it: JSON, cut at SHOWN_CHARACTERS (the section says where the whole is)."""
    text = _json(value)
    return text if len(text) <= SHOWN_CHARACTERS else text[: SHOWN_CHARACTERS - 3] + "..."
