"""What an environment spent this month (or `--month`), by team, node pool and service, from its Cloud Billing
detailed usage export, beside the node pools' list prices and each team's budget (infra/review/spend.py).

  python -m scripts.cost <env> [--month YYYY-MM] [--json]    (make cost ENV= [MONTH=] [JSON=1])

Reads the synthesized stack (make synth) for the node pools and `bq query` for the spend, as the caller (the planner
in CI: roles/bigquery.dataViewer on the export's dataset and roles/bigquery.jobUser in the project).
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import date
from pathlib import Path

from infra.cdk.layout import read_stack, stack_name
from infra.config import ConfigError, Environment, environment_file
from infra.review.costs import pool_costs, stack_pools
from infra.review.spend import Period, SpendError, bq_argv, exit_code, month, render, report, rows
from infra.synth.load import load_named
from scripts.parser import ArgumentParser, refuse

OUTDIR = Path("cdktf.out")


def _read_export(env: Environment, table: str, period: Period) -> str:
    """`bq`'s JSON answer, or SpendError saying what to do about the failure."""
    field = f"monitoring.billing_export {table!r}"
    try:
        done = subprocess.run(bq_argv(table, env.project, period), capture_output=True, text=True, timeout=300)
    except FileNotFoundError:
        raise SpendError(
            "bq (the Google Cloud CLI's BigQuery tool) is not on PATH: install the Google Cloud CLI"
        ) from None
    except subprocess.TimeoutExpired:
        raise SpendError(f"{field}: the query ran past 300 s") from None
    if done.returncode == 0:
        return done.stdout
    said = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:] or ["no message"]
    if "Not found" in said[0]:
        raise SpendError(
            f"{field}: BigQuery has no such table ({said[0]}): turn on the detailed usage cost export to BigQuery "
            "for the billing account (Billing > Billing export), or correct the field; it holds usage from the day "
            "it is turned on, never before"
        )
    if "Access Denied" in said[0] or "permission" in said[0].lower():
        raise SpendError(
            f"{field}: {said[0]}: the caller needs roles/bigquery.dataViewer on the export's dataset and "
            f"roles/bigquery.jobUser in {env.project}"
        )
    raise SpendError(f"{field}: bq failed: {said[0]}")


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m scripts.cost",
        description=__doc__.split("\n\n")[0],
        epilog="exit codes: 0 every budget holds; 2 a team or the project over its budget or forecast to pass it; 1 "
        "refused input (no monitoring.billing_export, a bad --month) or an export that could not be read",
    )
    parser.add_argument("env")
    parser.add_argument("--month", default=None, help="YYYY-MM (default: this month, to today)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--outdir", type=Path, default=OUTDIR, help="the synthesized stacks (make synth)")
    args = parser.parse_args(argv)
    try:
        env = load_named(args.env)
    except ConfigError as err:
        return refuse(err, 1)
    table = env.monitoring.billing_export
    if table is None:
        said = "not set: name the billing account's detailed usage cost export table (docs/monitoring.md#cost)"
        return refuse(f"{environment_file(env.name)}: monitoring.billing_export: {said}", 1)
    try:
        period = month(args.month, date.today())
        stack = read_stack(args.outdir, stack_name(env.name))
    except SpendError as err:
        return refuse(err, 1)
    except FileNotFoundError:
        return refuse(f"{args.outdir}: no synthesized {stack_name(env.name)}: run make synth first", 1)
    try:
        found = report(env, rows(_read_export(env, table, period), table), pool_costs(stack_pools(stack)), period)
    except SpendError as err:
        print(f"error: cost: {env.name}: {err}", file=sys.stderr)
        return 1
    print(json.dumps(found, indent=1) if args.json else render(found), end="\n" if args.json else "")
    return exit_code(found)


if __name__ == "__main__":
    sys.exit(main())
