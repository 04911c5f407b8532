"""The repository's own Helm charts (workloads/charts/<name>): the version each one carries, and the API
groups its templates write; which chart each serving engine deploys."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import yaml

CHARTS = Path(__file__).resolve().parents[2] / "workloads" / "charts"

# The chart each serving engine's deployments are releases of.
SERVING_CHART = {"saxml": "saxml", "jetstream": "jetstream-pathways", "vllm": "vllm-tpu", "canary": "canary-server"}

_API_VERSION = re.compile(r"^\s*apiVersion:\s*['\"]?([a-z0-9.-]+)/[a-z0-9]+['\"]?\s*$", re.M)


@cache
def local_chart_versions() -> dict[str, str]:
    """{chart name: its Chart.yaml version} of every chart in the repository."""
    return {
        path.parent.name: str(yaml.safe_load(path.read_text())["version"])
        for path in sorted(CHARTS.glob("*/Chart.yaml"))
    }


@cache
def chart_api_groups(chart: str) -> frozenset[str]:
    """The API groups (`group` of `group/version`) a chart's templates may write, read from the templates:
    every one a template names, whatever its conditions (a superset of what one set of values renders).
    The rule helm.release-after-its-kinds holds the rendered objects to the same owners."""
    return frozenset(
        m.group(1)
        for path in sorted((CHARTS / chart / "templates").rglob("*.yaml"))
        for m in _API_VERSION.finditer(path.read_text())
    )
