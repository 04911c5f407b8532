"""Cloud Monitoring: a dashboard or alert policy is what the API parses, and it reads metrics that exist.

The Dashboards API and the AlertPolicies API refuse a body with an unknown field or enum value at apply; a filter on
a metric type nobody writes, on the wrong monitored resource, or on a label the metric lacks is accepted and shows an
empty chart or an alert that never fires; an aligner or reducer that does not fit the metric's kind and value type is
refused ("The aligner ALIGN_RATE is not valid for metrics of kind GAUGE").
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from infra.catalogue.cloud_metrics import (
    AGGREGATION_SOURCE,
    ALIGNERS,
    DCGM_METRICS,
    EPP_METRICS,
    GKE_METRICS,
    GOODPUT_METRICS,
    KUEUE_METRICS,
    REDUCERS,
    REDUCIBLE_KINDS,
    RESOURCES,
    CloudMetric,
    aligned,
)
from infra.catalogue.serving_metrics import SERVER_METRICS
from infra.catalogue.terraform_google import META_ARGUMENTS
from infra.config.api_types import refusals
from infra.rules import Finding, rule
from infra.rules.terraform_subject import resources

API_TYPES = (
    "google-cloud-monitoring-dashboards 3.2.0 (google.monitoring.dashboard.v1.Dashboard) and google-cloud-monitoring "
    "2.32.0 (google.monitoring.v3.AlertPolicy), parsed as the APIs parse a request body"
)
FILTER_DOC = "https://cloud.google.com/monitoring/api/v3/filters (metric.type, resource.type, labels)"
# What Terraform adds around the API's body of an alert policy.
_TERRAFORM_ONLY = META_ARGUMENTS | {"project", "timeouts"}
# One term of a filter: a selector, = or !=, and a quoted string, a function of one (starts_with("5")) or a number.
_TERM = re.compile(
    r'(?P<key>[a-z_]+(?:\.[A-Za-z0-9_]+)*)\s*(?P<op>!=|=)\s*(?P<value>"[^"]*"|[a-z_.]+\("[^"]*"\)|-?[0-9.]+)'
    r"(?:\s+AND\s+|\s+|$)"
)


def known_metrics() -> dict[str, CloudMetric]:
    """Every metric type the platform may read: GKE's system metrics, what its servers export, the trainer's goodput."""
    out = {**GKE_METRICS, **GOODPUT_METRICS, **DCGM_METRICS, **KUEUE_METRICS, **EPP_METRICS}
    for server in SERVER_METRICS.values():
        out.update({m.type: m for m in server.metrics})
    return out


# Map fields: their keys are the user's, not field names.
_MAPS = frozenset({"user_labels", "labels"})


def _json_names(value: Any) -> Any:
    """A Terraform body (the provider's snake_case field names) with the API's JSON field names (lowerCamelCase)."""
    if isinstance(value, dict):
        return {
            re.sub(r"_([a-z0-9])", lambda m: m[1].upper(), k): v if k in _MAPS else _json_names(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_json_names(v) for v in value]
    return value


def _bodies(stack: dict[str, Any]) -> Iterator[tuple[str, str, Any]]:
    """(where, API type, body with the API's JSON field names) of every dashboard and alert policy of the stack."""
    for where, body in resources(stack, "google_monitoring_dashboard"):
        try:
            parsed = json.loads(body.get("dashboard_json") or "")
        except json.JSONDecodeError:
            parsed = None
        yield f"{where}.dashboard_json", "dashboard", parsed
    for where, body in resources(stack, "google_monitoring_alert_policy"):
        yield where, "alert", _json_names({k: v for k, v in body.items() if k not in _TERRAFORM_ONLY})


@rule(
    id="monitoring.bodies-parse-as-the-api-types",
    system="Cloud Monitoring",
    layer="apply",
    summary=(
        "Every dashboard's dashboard_json and every alert policy's body parses as the API's own type: no unknown "
        "field, no unknown enum value (a percentile reducer the API lacks, a misspelt aligner)."
    ),
    source=API_TYPES,
    subject="terraform",
)
def _parses(stack: dict[str, Any]) -> Iterator[Finding]:
    from google.cloud.monitoring_dashboard_v1.types import Dashboard
    from google.cloud.monitoring_v3 import AlertPolicy

    for where, kind, body in _bodies(stack):
        for path, value, message in refusals(body, Dashboard if kind == "dashboard" else AlertPolicy):
            yield Finding(f"{where}.{path}", value, message)


def _objects(node: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, object) of every JSON object in a body, the body's own first."""
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _objects(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _objects(value, f"{path}[{i}]")


def _reads(node: Any, path: str) -> Iterator[tuple[str, str, list[dict[str, Any]]]]:
    """(path, filter, aggregations) of every filter in a body with the aggregations applied to it."""
    for where, obj in _objects(node, path):
        if isinstance(obj.get("filter"), str):
            aggregations = [obj["aggregation"]] if "aggregation" in obj else obj.get("aggregations") or []
            yield f"{where}.filter", obj["filter"], aggregations
        if isinstance(obj.get("denominatorFilter"), str):
            yield f"{where}.denominatorFilter", obj["denominatorFilter"], obj.get("denominatorAggregations") or []


def _promql(node: Any, path: str) -> Iterator[tuple[str, str]]:
    """(path, query) of every PromQL query (a dashboard chart's `prometheusQuery`) in a body."""
    for where, obj in _objects(node, path):
        if isinstance(obj.get("prometheusQuery"), str):
            yield f"{where}.prometheusQuery", obj["prometheusQuery"]


# A PromQL series selector: the metric's name and its label matchers.
_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}")
# The labels Managed Prometheus gives every series of a scraped target (its prometheus_target resource).
_TARGET_LABELS = frozenset({"project_id", "location", "cluster", "namespace", "job", "instance", "pod"})


def promql_problems(query: str, metrics: dict[str, CloudMetric]) -> list[str]:
    """What is wrong with one PromQL query: a series of a metric the platform does not know its servers export, or a
    label neither the metric nor its target has."""
    exported = {m.type.split("/")[1]: m for m in metrics.values() if m.type.startswith("prometheus.googleapis.com/")}
    problems = []
    selectors = _SELECTOR.findall(query)
    if not selectors:
        problems.append("reads no series (no metric{labels} selector)")
    for name, matchers in selectors:
        metric = exported.get(name)
        if metric is None:
            problems.append(f"{name}: no metric the platform knows is exported by that name")
            continue
        for label in re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!=|!~|=)", matchers):
            if label not in metric.labels | _TARGET_LABELS:
                problems.append(f"{name}: no label {label} (its labels: {', '.join(sorted(metric.labels))})")
    return problems


def _terms(filter_: str) -> list[tuple[str, str, str]] | None:
    """(selector, operator, value) of each term; None where the filter is not a conjunction of such terms."""
    terms, at = [], 0
    while at < len(filter_):
        m = _TERM.match(filter_, at)
        if m is None:
            return None
        terms.append((m["key"], m["op"], m["value"].strip('"')))
        at = m.end()
    return terms


def filter_problems(filter_: str, aggregations: list[dict[str, Any]], metrics: dict[str, CloudMetric]) -> list[str]:
    """What is wrong with one filter and its aggregations: the metric, its resource, its labels, the aligners."""
    terms = _terms(filter_)
    if terms is None:
        return ["is not a conjunction of `selector = value` terms this check can read"]
    types = [v for k, _, v in terms if k == "metric.type"]
    if len(types) != 1:
        return ["names no metric type (metric.type = ...), or more than one"]
    metric = metrics.get(types[0])
    if metric is None:
        return [f"metric type {types[0]!r} is not one the platform knows is written (known: {sorted(metrics)})"]
    problems = []
    for key, _, value in terms:
        if key == "resource.type" and value != metric.resource:
            problems.append(f"{metric.type} is written on resource {metric.resource}, not {value}")
        scope, _, label = key.partition(".labels.")
        if scope == "resource" and label and label not in RESOURCES[metric.resource]:
            problems.append(f"resource {metric.resource} has no label {label!r} ({sorted(RESOURCES[metric.resource])})")
        if scope == "metric" and label and label not in metric.labels:
            problems.append(f"{metric.type} has no label {label!r} ({sorted(metric.labels)}; {metric.source})")
    kind, value = metric.kind, metric.value
    for aggregation in aggregations:
        aligner = str(aggregation.get("perSeriesAligner", "ALIGN_NONE"))
        if aligner != "ALIGN_NONE":
            fits = ALIGNERS.get(aligner)
            if fits is None or kind not in fits[0] or value not in fits[1]:
                problems.append(f"aligner {aligner} does not take {kind} {value} ({metric.type})")
                break
            kind, value = aligned(aligner, kind, value)
        reducer = str(aggregation.get("crossSeriesReducer", "REDUCE_NONE"))
        if reducer != "REDUCE_NONE":
            if kind not in REDUCIBLE_KINDS or value not in REDUCERS.get(reducer, ()):
                problems.append(f"reducer {reducer} does not take {kind} {value} ({metric.type}, after {aligner})")
                break
            value = "INT64" if reducer in ("REDUCE_COUNT", "REDUCE_COUNT_TRUE") else value
    return problems


@rule(
    id="monitoring.filters-read-real-metrics",
    system="Cloud Monitoring",
    layer="apply",
    summary=(
        "Every filter of a dashboard or alert policy names one metric the platform knows is written (GKE's system "
        "metrics, what its servers export through Managed Prometheus) on its own monitored resource and labels, "
        "and each aligner and reducer fits the metric's kind and value type; every PromQL query's series likewise "
        "name such a metric and its labels."
    ),
    source=f"{FILTER_DOC}; {AGGREGATION_SOURCE}; infra/catalogue/cloud_metrics.py (each metric's own source)",
    subject="terraform",
)
def _filters(stack: dict[str, Any]) -> Iterator[Finding]:
    metrics = known_metrics()
    for where, _, body in _bodies(stack):
        for path, filter_, aggregations in _reads(body, where):
            for problem in filter_problems(filter_, aggregations, metrics):
                yield Finding(path, filter_, problem)
        for path, query in _promql(body, where):
            for problem in promql_problems(query, metrics):
                yield Finding(path, query, problem)


DCGM_DOC = (
    "https://cloud.google.com/kubernetes-engine/docs/how-to/dcgm-metrics (monitoring_config DCGM: GKE installs the "
    "DCGM exporter and Google-managed GPU drivers on the GPU nodes; a cluster's enable_components list is its whole "
    "set); hashicorp/terraform-provider-google 6.50.0 google_container_cluster monitoring_config.enable_components"
)


@rule(
    id="monitoring.dcgm-series-are-collected",
    system="GKE (managed DCGM metrics)",
    layer="apply",
    summary=(
        "A dashboard or alert that reads the DCGM exporter's series (prometheus.googleapis.com/DCGM_FI_*) belongs to "
        "a stack whose cluster collects them: monitoring_config.enable_components lists DCGM, and every GPU node pool "
        "installs GKE's managed driver (gpu_driver_installation_config), which the exporter needs. Else the charts "
        "read series nobody writes."
    ),
    source=DCGM_DOC,
    subject="terraform",
)
def _dcgm_collected(stack: dict[str, Any]) -> Iterator[Finding]:
    reads = [
        path
        for where, _, body in _bodies(stack)
        for path, filter_, _ in _reads(body, where)
        if any(t in filter_ for t in DCGM_METRICS)
    ]
    if not reads:
        return
    for where, cluster in resources(stack, "google_container_cluster"):
        components = (cluster.get("monitoring_config") or {}).get("enable_components") or []
        if "DCGM" not in components:
            yield Finding(
                f"{where}.monitoring_config.enable_components",
                components,
                f"{reads[0]} reads DCGM series: list DCGM, else GKE runs no DCGM exporter",
            )
    for where, pool in resources(stack, "google_container_node_pool"):
        config = pool.get("node_config") or {}
        for i, accelerator in enumerate(config.get("guest_accelerator") or []):
            driver = (accelerator.get("gpu_driver_installation_config") or {}).get("gpu_driver_version")
            if driver not in ("DEFAULT", "LATEST"):
                yield Finding(
                    f"{where}.node_config.guest_accelerator[{i}].gpu_driver_installation_config.gpu_driver_version",
                    driver,
                    "GKE's DCGM exporter runs on GKE-managed drivers: DEFAULT or LATEST",
                )
