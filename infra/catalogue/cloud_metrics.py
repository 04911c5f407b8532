"""The Cloud Monitoring metrics the platform's dashboards and alert policies read, as Cloud Monitoring names them.

Two families:
- GKE's system metrics (`kubernetes.io/...`), written by GKE for the cluster's nodes, node pools and containers
  (https://docs.cloud.google.com/monitoring/api/metrics_kubernetes, generated 2026-04-10: kind, value type, unit,
  labels; the accelerator metrics are percentages 0 to 100);
- what Managed Service for Prometheus collects from the servers' /metrics (each release's PodMonitoring): metric
  type `prometheus.googleapis.com/<name>/<kind>` on the monitored resource `prometheus_target`; a counter keeps its
  `_total`, a histogram is a CUMULATIVE DISTRIBUTION under its base name (GoogleCloudPlatform/prometheus
  google/export/series_cache.go @ 0b1ec61a: getMetricType, extractResource).

Which Aggregation aligners and reducers fit which kind and value type is the Monitoring API's own rule
(google.monitoring.v3 Aggregation.Aligner and .Reducer, as google-cloud-monitoring 2.32.0 documents each value).

Checked 2026-11-28.
"""

from __future__ import annotations

from dataclasses import dataclass

GKE_METRICS_SOURCE = "https://docs.cloud.google.com/monitoring/api/metrics_kubernetes (generated 2026-04-10)"
GMP_SOURCE = (
    "GoogleCloudPlatform/prometheus google/export/series_cache.go @ 0b1ec61a (prometheus.googleapis.com/<name>/"
    "<gauge|counter|histogram>; resource prometheus_target)"
)
# Where Managed Service for Prometheus runs its collectors (the pods that scrape every PodMonitoring) on GKE, and
# their Kubernetes service account (prometheus-engine's operator: the `collector` DaemonSet in `gmp-system`).
MONITORING_NAMESPACE = "gmp-system"
COLLECTOR_SERVICE_ACCOUNT = "collector"
AGGREGATION_SOURCE = "google.monitoring.v3 Aggregation.Aligner / Aggregation.Reducer (google-cloud-monitoring 2.32.0)"


def dashboard_link(project: str, dashboard_id: str) -> str:
    """A dashboard's page in the Cloud Console (the form the console's own links take; not documented as an API)."""
    return f"https://console.cloud.google.com/monitoring/dashboards/builder/{dashboard_id}?project={project}"


# Monitored resource types and their labels (https://cloud.google.com/monitoring/api/resources; prometheus_target:
# series_cache.go extractResource).
RESOURCES: dict[str, frozenset[str]] = {
    "k8s_container": frozenset(
        {"project_id", "location", "cluster_name", "namespace_name", "pod_name", "container_name"}
    ),
    "k8s_node": frozenset({"project_id", "location", "cluster_name", "node_name"}),
    "k8s_node_pool": frozenset({"project_id", "location", "cluster_name", "node_pool_name"}),
    "prometheus_target": frozenset({"project_id", "location", "cluster", "namespace", "job", "instance"}),
    # A training job's goodput (ml-goodput-measurement src/monitoring.py: resource_labels).
    "compute.googleapis.com/Workload": frozenset({"project_id", "location", "workload_id", "replica_id"}),
}


@dataclass(frozen=True)
class CloudMetric:
    """One metric type as Cloud Monitoring stores it."""

    type: str
    resource: str
    kind: str  # GAUGE | DELTA | CUMULATIVE
    value: str  # BOOL | INT64 | DOUBLE | DISTRIBUTION
    labels: frozenset[str]
    source: str


def _gke(name: str, resource: str, kind: str, value: str, *labels: str) -> CloudMetric:
    return CloudMetric(f"kubernetes.io/{name}", resource, kind, value, frozenset(labels), GKE_METRICS_SOURCE)


_ACCELERATOR = ("make", "accelerator_id", "model")
GKE_METRICS: dict[str, CloudMetric] = {
    m.type: m
    for m in (
        # Both TPUs and GPUs: the share of time the accelerator was busy, and its memory (bytes).
        _gke("container/accelerator/duty_cycle", "k8s_container", "GAUGE", "INT64", *_ACCELERATOR),
        _gke("container/accelerator/memory_used", "k8s_container", "GAUGE", "INT64", *_ACCELERATOR),
        _gke("container/accelerator/memory_total", "k8s_container", "GAUGE", "INT64", *_ACCELERATOR),
        # TPUs only (they carry the slice's topology).
        _gke(
            "container/accelerator/tensorcore_utilization",
            "k8s_container",
            "GAUGE",
            "DOUBLE",
            *_ACCELERATOR,
            "tpu_topology",
        ),
        # Each node's conditions (Ready: True, False, or Unknown when the node controller has not heard from it).
        _gke("node/status_condition", "k8s_node", "GAUGE", "BOOL", "condition", "status"),
        # A multi-host TPU node pool: true while every node of the slice is available.
        _gke("node_pool/multi_host/available", "k8s_node_pool", "GAUGE", "BOOL", "unavailability_reason"),
    )
}

GOODPUT_SOURCE = (
    "AI-Hypercomputer/ml-goodput-measurement 0.2.3 (MaxText's pin) src/monitoring.py (metric types, labels, "
    "resource compute.googleapis.com/Workload), src/gcp_metrics.py create_time_series (a point with an end time: "
    "GAUGE, DOUBLE seconds)"
)
# What MaxText's goodput monitor uploads for a training job (`workload_id`: the run's goodput job name, its run name).
GOODPUT_METRICS: dict[str, CloudMetric] = {
    m.type: m
    for m in (
        CloudMetric(
            "compute.googleapis.com/workload/goodput_time",
            "compute.googleapis.com/Workload",
            "GAUGE",
            "DOUBLE",
            frozenset({"goodput_source", "accelerator_type"}),
            GOODPUT_SOURCE,
        ),
        CloudMetric(
            "compute.googleapis.com/workload/badput_time",
            "compute.googleapis.com/Workload",
            "GAUGE",
            "DOUBLE",
            frozenset({"badput_source", "accelerator_type"}),
            GOODPUT_SOURCE,
        ),
        # The run's time since it started, across its restarts: what goodput_time is a share of.
        CloudMetric(
            "compute.googleapis.com/workload/total_elapsed_time",
            "compute.googleapis.com/Workload",
            "GAUGE",
            "DOUBLE",
            frozenset({"accelerator_type", "window_type"}),
            GOODPUT_SOURCE,
        ),
    )
}

DCGM_SOURCE = (
    "NVIDIA/dcgm-exporter 4.5.3-4.8.2 etc/default-counters.csv (the counters, gauges; GPU_UTIL in %, FB_* in MiB, "
    "PROF_* ratios 0 to 1) and internal/pkg/rendermetrics/render_metrics.go (labels gpu, UUID, pci_bus_id, device, "
    "modelName, Hostname); GKE collects them with monitoring_config DCGM "
    "(https://cloud.google.com/kubernetes-engine/docs/how-to/dcgm-metrics)"
)
_DCGM_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")


def _dcgm(name: str) -> CloudMetric:
    return prometheus(name, "gauge", _DCGM_LABELS, DCGM_SOURCE)


PROMETHEUS_KINDS = {
    "gauge": ("GAUGE", "DOUBLE"),
    "counter": ("CUMULATIVE", "DOUBLE"),
    "histogram": ("CUMULATIVE", "DISTRIBUTION"),
}


def prometheus(name: str, kind: str, labels: tuple[str, ...], source: str) -> CloudMetric:
    """A metric a server exports in Prometheus format (`name` as exported: a counter with its `_total`), as Managed
    Prometheus writes it to Cloud Monitoring."""
    metric_kind, value = PROMETHEUS_KINDS[kind]
    return CloudMetric(
        f"prometheus.googleapis.com/{name}/{kind}",
        "prometheus_target",
        metric_kind,
        value,
        frozenset(labels),
        f"{source}; {GMP_SOURCE}",
    )


# Which aligner fits which (kind, value type): the API refuses any other pair ("valid for GAUGE and DELTA metrics
# with numeric values", ...). Numeric: INT64 and DOUBLE.
_NUMERIC = ("INT64", "DOUBLE")
ALIGNERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "ALIGN_DELTA": (("CUMULATIVE", "DELTA"), (*_NUMERIC, "DISTRIBUTION")),
    "ALIGN_RATE": (("CUMULATIVE", "DELTA"), _NUMERIC),
    "ALIGN_MEAN": (("GAUGE", "DELTA"), _NUMERIC),
    "ALIGN_MAX": (("GAUGE", "DELTA"), _NUMERIC),
    "ALIGN_MIN": (("GAUGE", "DELTA"), _NUMERIC),
    "ALIGN_SUM": (("GAUGE", "DELTA"), (*_NUMERIC, "DISTRIBUTION")),
    "ALIGN_NEXT_OLDER": (("GAUGE",), ("BOOL", *_NUMERIC, "DISTRIBUTION")),
    "ALIGN_FRACTION_TRUE": (("GAUGE",), ("BOOL",)),
    "ALIGN_COUNT_TRUE": (("GAUGE",), ("BOOL",)),
    "ALIGN_PERCENTILE_50": (("GAUGE", "DELTA"), ("DISTRIBUTION",)),
    "ALIGN_PERCENTILE_95": (("GAUGE", "DELTA"), ("DISTRIBUTION",)),
    "ALIGN_PERCENTILE_99": (("GAUGE", "DELTA"), ("DISTRIBUTION",)),
}


def aligned(aligner: str, kind: str, value: str) -> tuple[str, str]:
    """The (kind, value type) a series has after `aligner` (each aligner's documented output)."""
    if aligner in ("ALIGN_RATE", "ALIGN_MEAN", "ALIGN_FRACTION_TRUE") or aligner.startswith("ALIGN_PERCENTILE"):
        return "GAUGE", "DOUBLE"
    if aligner == "ALIGN_COUNT_TRUE":
        return "GAUGE", "INT64"
    if aligner == "ALIGN_DELTA":
        return "DELTA", value
    return kind, value


# Which value types a cross-series reducer takes; every one takes DELTA and GAUGE series only (a CUMULATIVE series is
# aligned first).
REDUCIBLE_KINDS = ("DELTA", "GAUGE")
REDUCERS: dict[str, tuple[str, ...]] = {
    "REDUCE_SUM": (*_NUMERIC, "DISTRIBUTION"),
    "REDUCE_MEAN": (*_NUMERIC, "DISTRIBUTION"),
    "REDUCE_MAX": _NUMERIC,
    "REDUCE_MIN": _NUMERIC,
    "REDUCE_COUNT": ("BOOL", *_NUMERIC, "DISTRIBUTION"),
    "REDUCE_COUNT_TRUE": ("BOOL",),
    "REDUCE_FRACTION_TRUE": ("BOOL",),
    "REDUCE_PERCENTILE_50": (*_NUMERIC, "DISTRIBUTION"),
    "REDUCE_PERCENTILE_95": (*_NUMERIC, "DISTRIBUTION"),
    "REDUCE_PERCENTILE_99": (*_NUMERIC, "DISTRIBUTION"),
}


# What GKE's DCGM exporter writes for each GPU of a GKE GPU slice (the cluster's monitoring_config DCGM component).
DCGM_METRICS: dict[str, CloudMetric] = {
    m.type: m
    for m in (
        _dcgm("DCGM_FI_DEV_GPU_UTIL"),
        _dcgm("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"),
        _dcgm("DCGM_FI_DEV_FB_USED"),
        _dcgm("DCGM_FI_DEV_FB_FREE"),
    )
}


KUEUE_SOURCE = (
    "kubernetes-sigs/kueue pkg/metrics/metrics.go @ v0.17.3 and v0.19.2 (subsystem kueue: pending_workloads gauge "
    "{cluster_queue, status: active | inadmissible, replica_role}; admission_wait_time_seconds histogram "
    "{cluster_queue, priority_class, replica_role}; admitted_active_workloads gauge {cluster_queue, replica_role}; "
    "cluster_queue_status gauge {cluster_queue, status: pending | active | terminated, replica_role}, 1 for the "
    "queue's one status; cluster_queue_weighted_share gauge {cluster_queue, cohort, replica_role}: what the queue "
    "borrows over the cohort's lendable, divided by its weight), scraped by the kueue-queues release's PodMonitoring"
)
# What Kueue's controller exports, as Managed Prometheus writes it (the kueue-queues chart's metrics.yaml scrapes it).
KUEUE_METRICS: dict[str, CloudMetric] = {
    m.type: m
    for m in (
        prometheus("kueue_pending_workloads", "gauge", ("cluster_queue", "status", "replica_role"), KUEUE_SOURCE),
        prometheus("kueue_admitted_active_workloads", "gauge", ("cluster_queue", "replica_role"), KUEUE_SOURCE),
        prometheus("kueue_cluster_queue_status", "gauge", ("cluster_queue", "status", "replica_role"), KUEUE_SOURCE),
        prometheus(
            "kueue_admission_wait_time_seconds",
            "histogram",
            ("cluster_queue", "priority_class", "replica_role"),
            KUEUE_SOURCE,
        ),
        # Reported only with fair sharing on (pkg/cache/scheduler/clusterqueue.go reportResourceMetrics).
        prometheus(
            "kueue_cluster_queue_weighted_share", "gauge", ("cluster_queue", "cohort", "replica_role"), KUEUE_SOURCE
        ),
    )
}


EPP_SOURCE = (
    "kubernetes-sigs/gateway-api-inference-extension pkg/epp/metrics/metrics.go @ v1.5.0 (subsystem inference_pool, "
    "labels poolLabels = [name]: average_queue_size, average_kv_cache_utilization, ready_pods gauges), scraped by the "
    "vllm-tpu release's gateway-metrics.yaml PodMonitoring"
)
# What the Inference Gateway's endpoint picker exports about its pool (a vLLM deployment with `gateway: true`).
EPP_METRICS: dict[str, CloudMetric] = {
    m.type: m
    for m in (
        prometheus("inference_pool_average_queue_size", "gauge", ("name",), EPP_SOURCE),
        prometheus("inference_pool_average_kv_cache_utilization", "gauge", ("name",), EPP_SOURCE),
        prometheus("inference_pool_ready_pods", "gauge", ("name",), EPP_SOURCE),
    )
}
