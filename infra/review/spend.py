"""What an environment spent, read from the Cloud Billing detailed usage export, beside what the review estimated:
by team, by node pool and by service, each team against its budget (`make cost`).

Where the figures come from:
- The detailed usage cost export to BigQuery (https://cloud.google.com/billing/docs/how-to/export-data-bigquery-tables/
  detailed-usage), table `gcp_billing_export_resource_v1_<billing account>`: a row per resource, SKU and hour, with
  `cost`, `credits` (negative amounts; net = cost + credits, the page's own example), `currency`, `project.id`,
  `service.description`, `usage_start_time` and the resource's `labels`.
- GKE's labels on those rows: `goog-k8s-node-pool-name` on every GKE row, and with GKE cost allocation (on in every
  environment: the cluster's `cost_management_config`) `k8s-namespace`, the namespace whose pods requested the
  resources (https://cloud.google.com/kubernetes-engine/docs/how-to/cost-allocations). Cost allocation is in the
  detailed export only and splits a node by what its pods request; what no pod requested is `kube:unallocated`, the
  node's own reservation `kube:system-overhead`.
- A team's spend is what its namespace (`teams.<team>.namespace`) requested; every other namespace, the unallocated
  and overhead shares and everything outside the cluster (buckets, Vertex AI, the Slurm and plain VMs, the
  network) is the platform's (`labels.team`).

What stands in: the export itself (tests read a fixture of rows as `bq query --format=json` prints them); the query's
text is held to BigQuery's grammar and the export's columns offline (tests/unit/review/test_spend.py), not run.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from infra.catalogue.billing_export import NAMESPACE, NODE_POOL, NOT_REQUESTED
from infra.config import Environment
from infra.review.model import PoolCost

# A pool's spend within this share of its list-price range is within its estimate: the catalogue's prices are rounded
# and a month's nodes come and go by the second, not the hour.
TOLERANCE = 0.05
# The statuses of a team or the project that `make cost` exits 2 on and the verdict names.
OVER = frozenset({"over budget", "forecast over budget"})
CURRENCY = "USD"  # the budgets' and the list prices' currency (monitoring.budget, teams.<team>.budget)

# One row per namespace, node pool, service and currency: what the report needs, summed in BigQuery. The table path
# is written into the text (a query parameter cannot name a table); it was checked against its pattern at load. The
# GROUP BY takes positions: `service` and `cost` are the export's own columns as well as this query's names.
QUERY = """\
SELECT
  (SELECT l.value FROM UNNEST(labels) AS l WHERE l.key = '{namespace}') AS namespace,
  (SELECT l.value FROM UNNEST(labels) AS l WHERE l.key = '{node_pool}') AS node_pool,
  service.description AS service,
  currency,
  SUM(cost) AS cost,
  SUM(IFNULL((SELECT SUM(c.amount) FROM UNNEST(credits) AS c), 0)) AS credits
FROM `{table}`
WHERE project.id = @project
  AND usage_start_time >= TIMESTAMP(@start)
  AND usage_start_time < TIMESTAMP(@end)
GROUP BY 1, 2, 3, 4
"""


class SpendError(ValueError):
    """The export's answer cannot be reported: what is wrong and what to do."""


@dataclass(frozen=True)
class Period:
    """A calendar month (budgets count by month), `start` to `end` (exclusive), read on `today` (the export holds the
    days before it: Cloud Billing writes it several times a day, hours behind the usage)."""

    start: date
    end: date
    today: date

    @property
    def elapsed(self) -> float:
        """The share of the month behind `today` (1.0 for a month that ended)."""
        days = (self.end - self.start).days
        return min(max((self.today - self.start).days, 0), days) / days

    @property
    def hours(self) -> float:
        return (self.end - self.start).days * 24 * self.elapsed


def month(text: str | None, today: date) -> Period:
    """The month `YYYY-MM` (default: `today`'s), or SpendError naming the value."""
    if text is None:
        first = today.replace(day=1)
    else:
        try:
            first = datetime.strptime(text, "%Y-%m").date()
        except ValueError:
            raise SpendError(f"--month {text!r}: not a month; write it YYYY-MM (e.g. {today:%Y-%m})") from None
        if first > today:
            raise SpendError(f"--month {text}: a month to come has spent nothing; the latest is {today:%Y-%m}")
    end = date(first.year + first.month // 12, first.month % 12 + 1, 1)
    return Period(first, end, min(today, end))


def query(table: str) -> str:
    return QUERY.format(namespace=NAMESPACE, node_pool=NODE_POOL, table=table)


def bq_argv(table: str, project: str, period: Period) -> list[str]:
    """`bq query` of the period's rows of the project, as JSON (the planner's roles/viewer reads the dataset where it
    is in the environment's project; elsewhere it needs roles/bigquery.dataViewer there)."""
    return [
        "bq", f"--project_id={project}", "--format=json", "query", "--nouse_legacy_sql",
        f"--parameter=project:STRING:{project}", f"--parameter=start:DATE:{period.start.isoformat()}",
        f"--parameter=end:DATE:{period.end.isoformat()}", query(table),
    ]  # fmt: skip


@dataclass(frozen=True)
class Row:
    namespace: str | None
    node_pool: str | None
    service: str
    net: float


def rows(answer: str, table: str) -> list[Row]:
    """The query's rows from `bq`'s JSON (numbers come as strings), or SpendError: not JSON, a row without the
    columns, or a currency other than the budgets'."""
    try:
        found = json.loads(answer or "[]")
    except json.JSONDecodeError as err:
        raise SpendError(f"bq's answer from {table} is not JSON ({err})") from None
    out = []
    for raw in found if isinstance(found, list) else [found]:
        try:
            currency = str(raw["currency"])
            net = float(raw["cost"] or 0) + float(raw["credits"] or 0)
            row = Row(raw.get("namespace") or None, raw.get("node_pool") or None, str(raw["service"]), net)
        except (KeyError, TypeError, ValueError) as err:
            raise SpendError(f"a row of {table} lacks the query's columns ({err}): {raw!r}") from None
        if currency != CURRENCY:
            raise SpendError(
                f"{table} bills in {currency}; the budgets and list prices here are in {CURRENCY}: the report "
                "would compare amounts in two currencies (a billing account's currency is fixed when it is made)"
            )
        out.append(row)
    return out


def owner(env: Environment, namespace: str | None) -> str:
    """Who a row's spend is counted to: the team whose namespace requested it, or the platform."""
    return env.team_of(namespace) or "platform"


def _status(spent: float, forecast: float, budget: float | None) -> str:
    if budget is None:
        return "no budget"
    if spent > budget:
        return "over budget"
    return "forecast over budget" if forecast > budget else "within budget"


def report(env: Environment, found: Iterable[Row], pools: Mapping[str, PoolCost], period: Period) -> dict[str, Any]:
    """The figures `make cost` prints (and `--json`): teams, node pools against their estimate, services, total."""
    found = list(found)
    by_team: dict[str, float] = defaultdict(float)
    by_pool: dict[str, float] = defaultdict(float)
    by_service: dict[str, float] = defaultdict(float)
    not_requested: dict[str, float] = defaultdict(float)
    for row in found:
        by_team[owner(env, row.namespace)] += row.net
        by_service[row.service] += row.net
        if row.node_pool:
            by_pool[row.node_pool] += row.net
        if row.namespace in NOT_REQUESTED:
            not_requested[NOT_REQUESTED[row.namespace]] += row.net
    total = sum(r.net for r in found)

    def forecast(spent: float) -> float:
        return spent / period.elapsed if period.elapsed else 0.0

    budgets = {name: float(t.budget.monthly_usd) for name, t in env.teams.items() if t.budget}
    teams = [
        {"team": name, "spent": round(spent, 2), "forecast": round(forecast(spent), 2), "budget": budgets.get(name),
         "status": _status(spent, forecast(spent), budgets.get(name))}
        for name, spent in sorted({**dict.fromkeys(env.teams, 0.0), **by_team}.items())
    ]  # fmt: skip
    project_budget = float(env.monitoring.budget.monthly_usd) if env.monitoring.budget else None
    return {
        "env": env.name,
        "project": env.project,
        "month": f"{period.start:%Y-%m}",
        "elapsed": round(period.elapsed, 4),
        "currency": CURRENCY,
        "total": {
            "spent": round(total, 2),
            "forecast": round(forecast(total), 2),
            "budget": project_budget,
            "status": _status(total, forecast(total), project_budget),
        },
        "teams": teams,
        "not_requested": {k: round(v, 2) for k, v in sorted(not_requested.items())},
        "pools": _pools(pools, by_pool, period),
        "services": [{"service": s, "spent": round(v, 2)} for s, v in sorted(by_service.items(), key=lambda i: -i[1])],
    }


def _pools(pools: Mapping[str, PoolCost], spent: Mapping[str, float], period: Period) -> list[dict[str, Any]]:
    """Each node pool's spend against its list price over the hours behind (at its fewest and its most nodes), the
    most spent first; then what the export names and the stack does not."""
    out = []
    for cost in sorted(pools.values(), key=lambda c: (-spent.get(c.pool, 0.0), c.pool)):
        actual = round(spent.get(cost.pool, 0.0), 2)
        low, high = cost.hourly(cost.min_nodes), cost.hourly(cost.max_nodes)
        if low is None or high is None:
            verdict, estimate = f"no list price ({cost.price.missing})", None
        else:
            estimate = [round(low * period.hours, 2), round(high * period.hours, 2)]
            verdict = "within its estimate"
            if actual > estimate[1] * (1 + TOLERANCE) + 0.01:
                verdict = "above its most nodes at list price"
            elif actual < estimate[0] * (1 - TOLERANCE) - 0.01:
                verdict = "below its fewest nodes at list price"
        out.append({"pool": cost.pool, "spent": actual, "estimate": estimate, "verdict": verdict})
    for name in sorted(set(spent) - {c.pool for c in pools.values()}):
        out.append({"pool": name, "spent": round(spent[name], 2), "estimate": None, "verdict": "not in the stack"})
    return out


def exit_code(found: Mapping[str, Any]) -> int:
    """2 where a team or the project is over its budget or forecast to pass it, else 0."""
    lines = [*found["teams"], found["total"]]
    return 2 if any(line["status"] in OVER for line in lines) else 0


def _money(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def render(found: Mapping[str, Any]) -> str:
    """The report as a person reads it: the verdict first, then the tables."""
    over = [t["team"] for t in found["teams"] if t["status"] in OVER]
    if found["total"]["status"] in OVER:
        over.append(f"the project ({found['project']})")
    days = f"{found['elapsed']:.0%} of {found['month']}"
    lines = [
        f"# Spend of {found['env']} ({found['project']}), {days}, in {found['currency']}",
        "",
        f"**{'Over or forecast over its budget: ' + ', '.join(over) if over else 'Every budget holds.'}**",
        "",
        "| who | spent | forecast for the month | budget | status |",
        "|---|---:|---:|---:|---|",
    ]
    for t in [*found["teams"], {**found["total"], "team": "whole project"}]:
        lines.append(f"| {t['team']} | {_money(t['spent'])} | {_money(t['forecast'])} | {_money(t['budget'])} | "
                     f"{t['status']} |")  # fmt: skip
    if found["not_requested"]:
        parts = ", ".join(f"{k} {_money(v)}" for k, v in found["not_requested"].items())
        lines += ["", f"Counted to the platform, requested by no pod: {parts}."]
    lines += ["", "| node pool | spent | list price so far (fewest-most nodes) | |", "|---|---:|---:|---|"]
    for p in found["pools"]:
        estimate = "-" if p["estimate"] is None else f"{_money(p['estimate'][0])}-{_money(p['estimate'][1])}"
        lines.append(f"| {p['pool']} | {_money(p['spent'])} | {estimate} | {p['verdict']} |")
    lines += ["", "| service | spent |", "|---|---:|"]
    lines += [f"| {s['service']} | {_money(s['spent'])} |" for s in found["services"]]
    return "\n".join(lines) + "\n"
