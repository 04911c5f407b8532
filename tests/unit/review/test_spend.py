"""`make cost`: what an environment spent by team, node pool and service, from the Cloud Billing detailed usage
export (a fixture answer of `bq` here), against the list prices and the budgets (infra/review/spend.py,
scripts/cost.py)."""

from __future__ import annotations

import json
import os
import shlex
from datetime import date
from pathlib import Path
from typing import Any

import pytest
import sqlglot
from sqlglot import exp

from infra.catalogue.billing_export import EXPORT_COLUMNS
from infra.config import ConfigError
from infra.review.spend import SpendError, month, query
from infra.synth.load import load_environment
from scripts import cost
from tests.helpers import REPO

EXPORT = REPO / "tests/fixtures/billing/dev-2026-11.json"
TABLE = "acme-billing.billing_export.gcp_billing_export_resource_v1_01A2B3_C4D5E6_F7A8B9"
BQ = """#!/bin/bash
printf '%s\\n' "$@" > "$STANDIN_BQ_ARGS"
if [ -n "$STANDIN_BQ_ERROR" ]; then echo "$STANDIN_BQ_ERROR" >&2; exit 1; fi
cat "$STANDIN_BQ_ANSWER"
"""

# The detailed usage cost export's columns the query may read, with their nested fields
# (https://cloud.google.com/billing/docs/how-to/export-data-bigquery-tables/detailed-usage: labels.key and
# labels.value, cost, currency, credits.amount (and .name, .full_name, .id, .type), usage_start_time, project.id,
# service.description, resource.name and .global_name).
SCHEMA = {
    "labels": {"key", "value"},
    "cost": set(),
    "currency": set(),
    "credits": {"name", "amount", "full_name", "id", "type"},
    "usage_start_time": set(),
    "project": {"id", "number", "name"},
    "service": {"id", "description"},
    "resource": {"name", "global_name"},
}


@pytest.fixture
def bq(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A `bq` stand-in first on PATH: it answers the fixture export (or STANDIN_BQ_ERROR) and keeps its arguments."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "bq").write_text(BQ)
    (tmp_path / "bin" / "bq").chmod(0o755)
    answer = tmp_path / "answer.json"
    answer.write_text(EXPORT.read_text())
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_BQ_ARGS", str(tmp_path / "args"))
    monkeypatch.setenv("STANDIN_BQ_ANSWER", str(answer))
    return {"args": tmp_path / "args", "answer": answer}


def _cost(synth_dir: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cost.main([*argv, "--outdir", str(synth_dir)])
    out, err = capsys.readouterr()
    return code, out, err


def test_dev_spend_by_team_from_the_export(
    bq: dict[str, Path], synth_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _cost(synth_dir, capsys, "dev", "--month", "2026-11")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0] == "# Spend of dev (acme-ml-platform-dev), 100% of 2026-11, in USD"
    assert lines[2] == "**Every budget holds.**"
    # research's namespace (ml-gpu): what it requested of the training slice it borrowed and of the A3 Mega node.
    assert "| research | 44,340.65 | 44,340.65 | 75,000.00 | within budget |" in lines
    # Everything else, the unrequested shares and what is outside the cluster (net of credits) is the platform's.
    assert "| ml-platform | 127,386.05 | 127,386.05 | - | no budget |" in lines
    assert "| whole project | 171,726.70 | 171,726.70 | 320,000.00 | within budget |" in lines
    assert "Counted to the platform, requested by no pod: system overhead 620.00, unallocated 4,350.00." in lines
    # Each pool against its list price for the month's 720 hours: vllm (spot, 0-3 x 9.72 USD/hour) spent past its
    # most nodes; a pool the export names and the stack does not is said so.
    assert "| vllm | 23,200.00 | 0.00-20,995.20 | above its most nodes at list price |" in lines
    assert "| train | 31,100.75 | 31,104.00-31,104.00 | within its estimate |" in lines
    assert lines.index("| a3mega | 43,100.40 | 0.00-134,509.08 | within its estimate |") < lines.index(
        "| train | 31,100.75 | 31,104.00-31,104.00 | within its estimate |"
    ), "the most spent first"
    assert "| old-serve | 88.00 | - | not in the stack |" in lines
    assert "| Vertex AI | 3,480.00 |" in lines
    # The query: the month's rows of dev's project, as JSON.
    args = bq["args"].read_text().splitlines()
    assert args[:4] == ["--project_id=acme-ml-platform-dev", "--format=json", "query", "--nouse_legacy_sql"]
    assert "--parameter=project:STRING:acme-ml-platform-dev" in args
    assert {"--parameter=start:DATE:2026-11-01", "--parameter=end:DATE:2026-12-01"} <= set(args)
    assert f"FROM `{TABLE}`" in bq["args"].read_text()


def test_a_team_forecast_past_its_budget_exits_2_naming_it(
    bq: dict[str, Path], synth_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On 10 November research has spent 30,000 of 75,000: a third of the month gone, it is forecast to pass it."""
    monkeypatch.setattr(cost, "date", type("D", (), {"today": staticmethod(lambda: date(2026, 11, 11))}))
    bq["answer"].write_text(json.dumps([
        {"namespace": "ml-gpu", "node_pool": "a3mega", "service": "Compute Engine", "currency": "USD",
         "cost": "30000", "credits": "0"},
    ]))  # fmt: skip
    code, out, _ = _cost(synth_dir, capsys, "dev", "--json")
    assert code == 2
    found: dict[str, Any] = json.loads(out)
    assert found["month"] == "2026-11" and found["elapsed"] == pytest.approx(1 / 3, abs=1e-4)
    (research,) = [t for t in found["teams"] if t["team"] == "research"]
    assert research == {
        "team": "research", "spent": 30000.0, "forecast": 90000.0, "budget": 75000.0,
        "status": "forecast over budget",
    }  # fmt: skip
    code, out, _ = _cost(synth_dir, capsys, "dev")
    assert "**Over or forecast over its budget: research**" in out.splitlines()


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (
            f"BigQuery error in query operation: Error processing job: Not found: Table {TABLE.replace('.', ':', 1)}",
            "BigQuery has no such table",
        ),
        ("BigQuery error in query operation: Access Denied: Table: User does not have permission", "jobUser"),
    ],
)
def test_an_export_that_cannot_be_read_exits_1_naming_the_field_and_what_to_do(
    bq: dict[str, Path],
    synth_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    error: str,
    said: str,
) -> None:
    monkeypatch.setenv("STANDIN_BQ_ERROR", error)
    code, out, err = _cost(synth_dir, capsys, "dev")
    assert code == 1 and out == ""
    assert f"error: cost: dev: monitoring.billing_export '{TABLE}': " in err and said in err


def test_an_export_in_another_currency_is_refused(
    bq: dict[str, Path], synth_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bq["answer"].write_text(EXPORT.read_text().replace('"USD"', '"EUR"'))
    code, _, err = _cost(synth_dir, capsys, "dev", "--month", "2026-11")
    assert code == 1 and "bills in EUR; the budgets and list prices here are in USD" in err


def test_no_export_named_is_refused_naming_the_file_and_field(
    folder: Path, synth_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = folder / "prod.yaml"
    path.write_text("".join(line for line in path.read_text().splitlines(True) if "billing_export:" not in line))
    monkeypatch.setenv("PLATFORM_ENVIRONMENTS_DIR", str(folder))
    code, _, err = _cost(synth_dir, capsys, "prod")
    assert code == 1 and f"{path}: monitoring.billing_export: not set" in err


@pytest.mark.parametrize(
    ("table", "said"),
    [
        ("acme-billing.billing_export.gcp_billing_export_v1_01A2B3_C4D5E6_F7A8B9", "the standard usage cost export"),
        ("billing_export.gcp_billing_export_resource_v1_01A2B3_C4D5E6_F7A8B9", "<project>.<dataset>."),
        (
            "acme-billing.billing_export.gcp_billing_export_resource_v1_01A2B3_C4D5E6_F7A8B0",
            "the export of billing account 01A2B3-C4D5E6-F7A8B0, and budget.billing_account is 01A2B3-C4D5E6-F7A8B9",
        ),
    ],
)
def test_a_table_that_is_not_the_budgets_detailed_export_is_refused_at_load(
    folder: Path, table: str, said: str
) -> None:
    path = folder / "dev.yaml"
    path.write_text(path.read_text().replace(TABLE, table))
    with pytest.raises(ConfigError) as refused:
        load_environment(path)
    assert f"{path}: monitoring" in str(refused.value) and said in str(refused.value)


def test_a_month_is_a_calendar_month_up_to_today() -> None:
    today = date(2026, 12, 3)
    now = month(None, today)
    assert (now.start, now.end, now.elapsed) == (date(2026, 12, 1), date(2027, 1, 1), pytest.approx(2 / 31))
    december = month("2025-12", today)
    assert (december.start, december.end, december.elapsed, december.hours) == (
        date(2025, 12, 1), date(2026, 1, 1), 1.0, 744.0,
    )  # fmt: skip
    with pytest.raises(SpendError, match="--month '11/2026': not a month; write it YYYY-MM"):
        month("11/2026", today)
    with pytest.raises(SpendError, match="--month 2027-01: a month to come has spent nothing"):
        month("2027-01", today)


def test_the_query_is_bigquery_sql_that_reads_only_the_exports_columns() -> None:
    """Parsed by sqlglot as BigQuery's dialect: every column it reads is one of the detailed export's, or a field of
    one it unnests; the table is the one named, whole."""
    tree = sqlglot.parse_one(query(TABLE), read="bigquery")
    (table,) = [t for t in tree.find_all(exp.Table) if t.name]
    assert (table.catalog, table.db, table.name) == tuple(TABLE.split("."))
    # BigQuery's `UNNEST(x) AS a`: a's fields are x's (sqlglot keeps `a` as the alias's one column).
    unnested = {u.alias_column_names[0]: u.expressions[0].name for u in tree.find_all(exp.Unnest)}
    assert unnested == {"l": "labels", "c": "credits"}
    for column in tree.find_all(exp.Column):
        if column.table in unnested:
            assert column.name in SCHEMA[unnested[column.table]], column.sql()
        elif column.table:
            assert column.name in SCHEMA[column.table], column.sql()
        else:
            assert column.name in SCHEMA, column.sql()
    assert {p.name for p in tree.find_all(exp.Parameter)} >= {"project", "start", "end"}
    # What the preflight holds the table's schema to is the export's too.
    assert all(fields <= SCHEMA[column] for column, fields in EXPORT_COLUMNS.items())
    assert shlex.split(shlex.join(["bq", query(TABLE)]))[1] == query(TABLE)
