"""The repository's own Helm charts (workloads/charts/<name>) and the version each one carries."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import yaml

CHARTS = Path(__file__).resolve().parents[2] / "workloads" / "charts"


@cache
def local_chart_versions() -> dict[str, str]:
    """{chart name: its Chart.yaml version} of every chart in the repository."""
    return {
        path.parent.name: str(yaml.safe_load(path.read_text())["version"])
        for path in sorted(CHARTS.glob("*/Chart.yaml"))
    }
