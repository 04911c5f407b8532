"""The rules of `infra/rules/cloud_monitoring.py`, each failing on its example: a change to dev's synthesized stack
(the dev stack as it ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import of_type, one
from tests.rules.examples import (
    TerraformExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
)


def _alert(stack: dict[str, Any], key: str) -> dict[str, Any]:
    return next(
        b
        for b in of_type(stack, "google_monitoring_alert_policy").values()
        if b["//"]["metadata"]["path"].endswith(f"/{key}")
    )


def _dashboard_percentile_90(stack: dict[str, Any]) -> None:
    body = one(stack, "google_monitoring_dashboard")
    body["dashboard_json"] = body["dashboard_json"].replace("REDUCE_PERCENTILE_95", "REDUCE_PERCENTILE_90")


TERRAFORM: dict[str, TerraformExample] = {
    # A percentile the Dashboards API lacks (it has 5, 50, 95 and 99); a rate of a gauge.
    "monitoring.bodies-parse-as-the-api-types": (
        _dashboard_percentile_90,
        "not a google.monitoring.dashboard.v1.Aggregation.Reducer",
    ),
    # The GPU charts of a cluster whose component list leaves DCGM out (it was: ["SYSTEM_COMPONENTS"] alone).
    "monitoring.dcgm-series-are-collected": (
        lambda s: one(s, "google_container_cluster")["monitoring_config"].update(
            enable_components=["SYSTEM_COMPONENTS"]
        ),
        "reads DCGM series: list DCGM",
    ),
    "monitoring.filters-read-real-metrics": (
        lambda s: _alert(s, "llama70b-vllm-queue-stuck")["conditions"][0]["condition_threshold"]["aggregations"][
            0
        ].update(per_series_aligner="ALIGN_RATE"),
        "aligner ALIGN_RATE does not take GAUGE DOUBLE",
    ),
}


@pytest.mark.parametrize("rule_id", sorted(TERRAFORM))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, TERRAFORM[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("cloud_monitoring", TERRAFORM)
