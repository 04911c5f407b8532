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


_KIND = re.compile(r"^kind:\s*['\"]?([A-Za-z]+)['\"]?\s*$", re.M)
_DOC_API = re.compile(r"^apiVersion:\s*['\"]?(?:([a-z0-9.-]+)/)?[a-z0-9]+['\"]?\s*$", re.M)


@cache
def chart_kinds(chart: str) -> frozenset[tuple[str, str]]:
    """The (API group, kind) of every object a chart's templates may write ("" for the core group), read from the
    templates' documents whatever their conditions (a superset of what one set of values renders)."""
    found = set()
    for path in sorted((CHARTS / chart / "templates").rglob("*.yaml")):
        for document in re.split(r"^---\s*$", path.read_text(), flags=re.M):
            api, kind = _DOC_API.search(document), _KIND.search(document)
            if api and kind:
                found.add((api.group(1) or "", kind.group(1)))
    return frozenset(found)
