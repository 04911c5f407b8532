"""What each environment watches: its dashboard and its alert policies, derived from what it runs, written as the
Cloud Monitoring API takes them (v1 Dashboard, v3 AlertPolicy; JSON field names).

- Accelerators (any GKE slice): duty cycle and memory of every TPU and GPU by namespace; TensorCore utilization of
  the TPUs; nodes not Ready; multi-host TPU slices not whole.
- Serving (each vLLM and canary deployment, whose PodMonitoring Managed Prometheus scrapes): queue, KV cache, latency,
  server errors, tokens generated.
- Training (a Ray training cluster with a recipe): the run's goodput and badput by cause, as MaxText's goodput
  monitor uploads them (compute.googleapis.com/workload/goodput_time, badput_time).
- Capacity: every node pool the stack declares, its accelerator and its fewest and most nodes.

Alert policies page on what a platform team acts on: a node not Ready or a multi-host slice not whole for
`monitoring.not_ready_minutes`; a serving deployment's share of server errors above `monitoring.error_rate`; a queue
that waits while its server generates nothing for `monitoring.queue_stuck_minutes`.

The metrics are Cloud Monitoring's names (infra/catalogue/cloud_metrics.py, serving_metrics.SERVER_METRICS); rule
monitoring.dashboards-and-alerts-read-real-metrics holds every filter and aggregation to them, and to the API's types.
JetStream and Saxml servers export no metric this platform has verified; their deployments are left off (the review
says so).
"""

from __future__ import annotations

from typing import Any

from infra.catalogue.cloud_metrics import (
    DCGM_METRICS,
    EPP_METRICS,
    GKE_METRICS,
    GOODPUT_METRICS,
    KUEUE_METRICS,
    CloudMetric,
    dashboard_link,
)
from infra.catalogue.serving_metrics import SERVER_METRICS, ServerMetrics
from infra.config import Environment
from infra.derive.names import endpoint_picker, serving_release
from infra.derive.queues import fair_sharing

PERIOD = "60s"
COLUMNS = 48  # a mosaic layout's width
_DUTY = GKE_METRICS["kubernetes.io/container/accelerator/duty_cycle"]
_USED = GKE_METRICS["kubernetes.io/container/accelerator/memory_used"]
_TOTAL = GKE_METRICS["kubernetes.io/container/accelerator/memory_total"]
_TENSORCORE = GKE_METRICS["kubernetes.io/container/accelerator/tensorcore_utilization"]
_CONDITION = GKE_METRICS["kubernetes.io/node/status_condition"]
_MULTI_HOST = GKE_METRICS["kubernetes.io/node_pool/multi_host/available"]


def dashboard_id(env: Environment) -> str:
    """The dashboard's id, fixed by its resource name (as Config Connector creates dashboards), so links to it are
    known before the apply."""
    return f"ml-platform-{env.name}"


def dashboard_url(env: Environment) -> str:
    return dashboard_link(env.project, dashboard_id(env))


def _filter(env: Environment, metric: CloudMetric, *terms: str) -> str:
    """`metric`'s series of this environment's cluster, narrowed by `terms`."""
    cluster = "cluster" if metric.resource == "prometheus_target" else "cluster_name"
    return " ".join(
        [
            f'metric.type="{metric.type}"',
            f'resource.type="{metric.resource}"',
            f'resource.labels.{cluster}="{env.cluster.name}"',
            *terms,
        ]
    )


def _aggregation(aligner: str, reducer: str = "", by: tuple[str, ...] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {"alignmentPeriod": PERIOD, "perSeriesAligner": aligner}
    if reducer:
        out["crossSeriesReducer"] = reducer
    if by:
        out["groupByFields"] = list(by)
    return out


def _series(filter_: str, aggregation: dict[str, Any]) -> dict[str, Any]:
    return {"filter": filter_, "aggregation": aggregation}


def _line(filter_: str, aggregation: dict[str, Any]) -> dict[str, Any]:
    """A chart's query of one filter's series."""
    return {"timeSeriesFilter": _series(filter_, aggregation)}


def _chart(title: str, unit: str, query: dict[str, Any]) -> dict[str, Any]:
    return {
        "title": title,
        "xyChart": {
            "dataSets": [{"timeSeriesQuery": query, "plotType": "LINE"}],
            "yAxis": {"label": unit, "scale": "LINEAR"},
        },
    }


def _header(title: str, subtitle: str) -> dict[str, Any]:
    return {"title": title, "sectionHeader": {"subtitle": subtitle, "dividerBelow": True}}


def _accelerator_widgets(env: Environment) -> list[dict[str, Any]]:
    slices = env.gke_slices
    if not slices:
        return []
    by_namespace = ("resource.labels.namespace_name",)
    widgets = [
        _header("Accelerators", "TPUs and GPUs of every GKE slice, by namespace"),
        _chart(
            "Accelerator duty cycle",
            "% of time busy",
            _line(_filter(env, _DUTY), _aggregation("ALIGN_MEAN", "REDUCE_MEAN", by_namespace)),
        ),
        _chart(
            "Accelerator memory in use (HBM)",
            "fraction of memory",
            {
                "timeSeriesFilterRatio": {
                    "numerator": _series(_filter(env, _USED), _aggregation("ALIGN_MEAN", "REDUCE_SUM", by_namespace)),
                    "denominator": _series(
                        _filter(env, _TOTAL), _aggregation("ALIGN_MEAN", "REDUCE_SUM", by_namespace)
                    ),
                }
            },
        ),
    ]
    if any(spec.slice.kind == "tpu" for spec in slices.values()):
        widgets.append(
            _chart(
                "TPU TensorCore utilization",
                "% of TensorCore",
                _line(_filter(env, _TENSORCORE), _aggregation("ALIGN_MEAN", "REDUCE_MEAN", by_namespace)),
            )
        )
    widgets.append(
        _chart(
            "Nodes not Ready",
            "nodes",
            _line(_not_ready(env), _aggregation("ALIGN_NEXT_OLDER", "REDUCE_COUNT_TRUE")),
        )
    )
    if _multi_host_pools(env):
        widgets.append(
            _chart(
                "Multi-host TPU slices whole",
                "fraction of time available",
                _line(
                    _filter(env, _MULTI_HOST),
                    _aggregation("ALIGN_FRACTION_TRUE", "REDUCE_MEAN", ("resource.labels.node_pool_name",)),
                ),
            )
        )
    return widgets


def _gpu_widgets(env: Environment) -> list[dict[str, Any]]:
    """GKE's DCGM exporter's series (monitoring_config DCGM, on when a GKE slice is of GPUs), per GPU model."""
    if not any(spec.slice.kind == "gpu" for spec in env.gke_slices.values()):
        return []
    by_model = ("metric.labels.modelName",)

    def mean(name: str) -> dict[str, Any]:
        metric = DCGM_METRICS[f"prometheus.googleapis.com/{name}/gauge"]
        return _line(_filter(env, metric), _aggregation("ALIGN_MEAN", "REDUCE_MEAN", by_model))

    return [
        _header("GPUs (DCGM)", "Every GPU of the GKE GPU slices, by model: NVIDIA's DCGM exporter, run by GKE"),
        _chart("GPU utilization", "% of time a kernel ran", mean("DCGM_FI_DEV_GPU_UTIL")),
        _chart("GPU Tensor Core activity", "fraction of cycles", mean("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")),
        _chart("GPU memory in use", "MiB per GPU", mean("DCGM_FI_DEV_FB_USED")),
    ]


def _queue_widgets(env: Environment) -> list[dict[str, Any]]:
    """Kueue's own series (the kueue-queues release scrapes them): what waits in each ClusterQueue, and for how long
    an admitted workload waited."""
    if env.batch is None or "kueue" not in env.release.controllers:
        return []
    pending = KUEUE_METRICS["prometheus.googleapis.com/kueue_pending_workloads/gauge"]
    wait = KUEUE_METRICS["prometheus.googleapis.com/kueue_admission_wait_time_seconds/histogram"]
    by_queue = ("metric.labels.cluster_queue",)
    return [
        _header("Queues (Kueue)", "Every ClusterQueue: the batch queue, the teams' and the training cluster's"),
        _chart(
            "Workloads waiting",
            "workloads (active: may be admitted; inadmissible: cannot be as things stand)",
            _line(
                _filter(env, pending),
                _aggregation("ALIGN_MEAN", "REDUCE_SUM", (*by_queue, "metric.labels.status")),
            ),
        ),
        _chart(
            "Admission wait (p95)",
            "seconds from creation to admission",
            _line(_filter(env, wait), _aggregation("ALIGN_DELTA", "REDUCE_PERCENTILE_95", by_queue)),
        ),
        *_fair_share_widgets(env),
    ]


def _fair_share_widgets(env: Environment) -> list[dict[str, Any]]:
    """With fair sharing on (a team's weight): each queue's weighted share, the figure Kueue admits the lowest of
    first and preempts the highest of; 0 while the queue uses no more than it is guaranteed."""
    if not fair_sharing(env):
        return []
    share = KUEUE_METRICS["prometheus.googleapis.com/kueue_cluster_queue_weighted_share/gauge"]
    return [
        _chart(
            "Fair sharing: borrowed share over weight",
            "share (0: within its guarantee)",
            _line(_filter(env, share), _aggregation("ALIGN_MEAN", "REDUCE_MAX", ("metric.labels.cluster_queue",))),
        )
    ]


def goodput_job(env: Environment) -> str | None:
    """The goodput job the training cluster's runs record under: `make train`'s run name, `<recipe>-<env>`
    (workloads/trainer/__main__.py); None without a recipe or with goodput off."""
    training = env.training
    if training is None or not training.goodput or training.recipe is None:
        return None
    return f"{training.recipe}-{env.name}"


def _training_widgets(env: Environment) -> list[dict[str, Any]]:
    """Where the training run's time goes: productive (goodput) and lost (badput, by cause), as MaxText's goodput
    monitor uploads them."""
    job = goodput_job(env)
    if job is None:
        return []
    charts = []
    for name, title, by in (
        ("goodput_time", "Training goodput: productive time", "metric.labels.goodput_source"),
        ("badput_time", "Training badput: time lost, by cause", "metric.labels.badput_source"),
    ):
        metric = GOODPUT_METRICS[f"compute.googleapis.com/workload/{name}"]
        filter_ = f'metric.type="{metric.type}" resource.type="{metric.resource}" resource.labels.workload_id="{job}"'
        charts.append(_chart(title, "seconds", _line(filter_, _aggregation("ALIGN_MAX", "REDUCE_SUM", (by,)))))
    return [_header("Training", f"goodput of the run {job} (MaxText, ML Goodput Measurement)"), *charts]


def _not_ready(env: Environment) -> str:
    return _filter(env, _CONDITION, 'metric.labels.condition="Ready"', 'metric.labels.status!="True"')


def _multi_host_pools(env: Environment) -> list[str]:
    return sorted(k for k, spec in env.gke_slices.items() if spec.slice.kind == "tpu" and spec.slice.multi_host)


def watched_servers(env: Environment) -> dict[str, ServerMetrics]:
    """The serving deployments whose servers' metrics the platform reads, by key."""
    return {key: SERVER_METRICS[d.engine] for key, d in sorted(env.serving.items()) if d.engine in SERVER_METRICS}


def _job(env: Environment, key: str) -> tuple[str, ...]:
    """The filter terms of one deployment's scraped series: its namespace and its PodMonitoring (the release)."""
    namespace = env.identities[env.serving[key].identity].namespace
    return f'resource.labels.namespace="{namespace}"', f'resource.labels.job="{serving_release(key)}"'


def _serving_widgets(env: Environment, key: str, server: ServerMetrics) -> list[dict[str, Any]]:
    job = _job(env, key)
    widgets = [
        _header(f"Serving: {key}", f"{server.engine} servers of release {serving_release(key)}"),
        _chart(
            "Requests waiting",
            "requests",
            _line(_filter(env, server.queue, *job), _aggregation("ALIGN_MEAN", "REDUCE_SUM")),
        ),
        _chart(
            f"{server.latency_meaning.capitalize()}, 95th percentile",
            "seconds",
            _line(_filter(env, server.latency, *job), _aggregation("ALIGN_DELTA", "REDUCE_PERCENTILE_95")),
        ),
        _chart(
            "Server errors (5xx), share of answers",
            "fraction",
            {"timeSeriesFilterRatio": _error_ratio(env, key, server)},
        ),
        _chart(
            "Tokens generated",
            "tokens/s",
            _line(_filter(env, server.tokens, *job), _aggregation("ALIGN_RATE", "REDUCE_SUM")),
        ),
    ]
    deployment = env.serving[key]
    if getattr(deployment, "gateway", False):
        picker = endpoint_picker(serving_release(key))
        terms = (_job(env, key)[0], f'resource.labels.job="{picker}"')
        for name, title, unit in (
            (
                "inference_pool_average_queue_size",
                "Gateway: requests waiting per server (the picker's view)",
                "requests",
            ),
            ("inference_pool_ready_pods", "Gateway: servers ready in the pool", "servers"),
        ):
            metric = EPP_METRICS[f"prometheus.googleapis.com/{name}/gauge"]
            widgets.append(
                _chart(title, unit, _line(_filter(env, metric, *terms), _aggregation("ALIGN_MEAN", "REDUCE_MEAN")))
            )
    price = _price_per_million_tokens(env, key, server)
    if price is not None:
        widgets.append(price)
    if server.cache is not None:
        widgets.append(
            _chart(
                "KV cache in use",
                "fraction",
                _line(_filter(env, server.cache, *job), _aggregation("ALIGN_MEAN", "REDUCE_MEAN")),
            )
        )
    return widgets


def replica_price(env: Environment, key: str) -> float | None:
    """USD an hour of one replica of a serving deployment on one slice: the slice's hosts at the list price of its
    primary tier (infra/catalogue/prices.py); None for a deployment on no slice, or a slice with no list price."""
    slice_key = getattr(env.serving[key], "slice", None)
    if slice_key not in env.slices:
        return None
    price = env.node_price(slice_key)
    return None if price.usd_per_hour is None else price.usd_per_hour * env.slices[slice_key].slice.hosts


def _price_per_million_tokens(env: Environment, key: str, server: ServerMetrics) -> dict[str, Any] | None:
    """What a million generated tokens cost at list price, now: the replicas serving (each pod that exports the
    token counter is one replica's server: on a multi-host slice, its leader) times a replica's price an hour, over
    the tokens they generate an hour. PromQL (Managed Prometheus): a filter cannot multiply by a price."""
    per_replica = replica_price(env, key)
    if per_replica is None:
        return None
    namespace = env.identities[env.serving[key].identity].namespace
    name = server.tokens.type.split("/")[1]
    series = f'{name}{{cluster="{env.cluster.name}",namespace="{namespace}",job="{serving_release(key)}"}}'
    query = f"{per_replica:.4f} * count(max by (pod) ({series})) / (sum(rate({series}[5m])) * 3600) * 1000000"
    title = f"List price per million generated tokens (a replica: {per_replica:,.2f} USD an hour)"
    return _chart(title, "USD", {"prometheusQuery": query})


def _error_ratio(env: Environment, key: str, server: ServerMetrics) -> dict[str, Any]:
    job = _job(env, key)
    rate = _aggregation("ALIGN_RATE", "REDUCE_SUM")
    return {
        "numerator": _series(_filter(env, server.requests, *job, server.errors), rate),
        "denominator": _series(_filter(env, server.requests, *job), rate),
    }


def _capacity_text(env: Environment) -> dict[str, Any]:
    rows = ["| node pool | accelerator | hosts per slice | nodes |", "|---|---|---|---|"]
    for key, spec in sorted(env.gke_slices.items()):
        for (pool, low, high), (_, tier) in zip(env.pool_sizes(key), spec.tier_pools(key), strict=True):
            rows.append(f"| {pool} | {spec.slice.name} ({tier.type}) | {spec.slice.hosts} | {low} to {high} |")
    system = env.cluster.system_pool
    rows.append(f"| system | {system.machine_type} | 1 | {system.min_nodes} to {system.max_nodes} |")
    for key, cpu in sorted(env.cpu_pools.items()):
        rows.append(f"| {key} | {cpu.machine_type} | 1 | 0 to {cpu.max_nodes} |")
    rows.append("")
    rows.append("What each pool costs at its fewest and most nodes: the plan review of this environment.")
    return {"title": "Capacity", "text": {"content": "\n".join(rows), "format": "MARKDOWN"}}


def _tiles(widgets: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Widgets laid out two to a row; a section header takes a row of its own."""
    tiles, x, y = [], 0, 0
    for widget in widgets:
        full = "sectionHeader" in widget or "text" in widget
        if full and x:  # a half row left open
            x, y = 0, y + 16
        width, height = (COLUMNS, 4 if "sectionHeader" in widget else 16) if full else (COLUMNS // 2, 16)
        tiles.append({"xPos": x, "yPos": y, "width": width, "height": height, "widget": widget})
        x += width
        if x >= COLUMNS:
            x, y = 0, y + height
    return tiles


def dashboard(env: Environment) -> dict[str, Any]:
    """The environment's dashboard, as the Dashboards API takes it."""
    widgets = _accelerator_widgets(env) + _gpu_widgets(env) + _queue_widgets(env) + _training_widgets(env)
    for key, server in watched_servers(env).items():
        widgets += _serving_widgets(env, key, server)
    widgets += [_header("Capacity", "Node pools of the cluster"), _capacity_text(env)]
    return {
        "name": f"projects/{env.project}/dashboards/{dashboard_id(env)}",
        "displayName": f"ML platform: {env.name}",
        "mosaicLayout": {"columns": COLUMNS, "tiles": _tiles(widgets)},
    }


def _threshold(
    name: str,
    series: dict[str, Any],
    comparison: str,
    value: float,
    minutes: int,
    denominator: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A condition on `series` (a filter and its aggregation; over `denominator`'s, for a ratio) held for `minutes`."""
    condition: dict[str, Any] = {"filter": series["filter"], "aggregations": [series["aggregation"]]}
    if denominator is not None:
        condition |= {
            "denominatorFilter": denominator["filter"],
            "denominatorAggregations": [denominator["aggregation"]],
        }
    condition |= {
        "comparison": comparison,
        "thresholdValue": value,
        "duration": f"{minutes * 60}s",
        "trigger": {"count": 1},
    }
    return {"displayName": name, "conditionThreshold": condition}


def _policy(env: Environment, name: str, what: str, conditions: list[dict[str, Any]], combiner: str = "OR") -> dict:
    return {
        "displayName": f"{env.name}: {name}",
        "combiner": combiner,
        "conditions": conditions,
        "severity": "ERROR",
        "documentation": {
            "content": f"{what}\n\nDashboard: {dashboard_url(env)}",
            "mimeType": "text/markdown",
        },
    }


def alert_policies(env: Environment) -> dict[str, dict[str, Any]]:
    """The environment's alert policies by key, as the AlertPolicies API takes them (notification channels are
    added where they are created)."""
    policies: dict[str, dict[str, Any]] = {}
    if env.gke_slices:
        policies["slices-not-ready"] = _slices_not_ready(env)
    for key, server in watched_servers(env).items():
        policies.update(_server_policies(env, key, server))
    if _queue_widgets(env):
        policies.update(_kueue_policies(env))
    return policies


def _slices_not_ready(env: Environment) -> dict[str, Any]:
    """A node not Ready, or a multi-host TPU slice not whole, for the environment's minutes."""
    watch = env.monitoring
    conditions = [
        _threshold(
            "A node is not Ready",
            _series(_not_ready(env), _aggregation("ALIGN_NEXT_OLDER", "REDUCE_COUNT_TRUE")),
            "COMPARISON_GT",
            0,
            watch.not_ready_minutes,
        )
    ]
    if _multi_host_pools(env):
        conditions.append(
            _threshold(
                "A multi-host TPU slice is not whole",
                _series(
                    _filter(env, _MULTI_HOST),
                    _aggregation("ALIGN_FRACTION_TRUE", "REDUCE_MEAN", ("resource.labels.node_pool_name",)),
                ),
                "COMPARISON_LT",
                1,
                watch.not_ready_minutes,
            )
        )
    return _policy(
        env,
        "nodes or slices not ready",
        f"A node of cluster {env.cluster.name} has not been Ready, or a multi-host TPU slice not whole, for "
        f"{watch.not_ready_minutes} minutes: the workloads on that slice are stopped. See the node's conditions "
        "(kubectl describe node) and GKE's repair operations.",
        conditions,
    )


def _server_policies(env: Environment, key: str, server: ServerMetrics) -> dict[str, dict[str, Any]]:
    """A serving deployment's alerts: its server errors, and its queue stuck while it generates nothing."""
    watch = env.monitoring
    policies: dict[str, dict[str, Any]] = {}
    job = _job(env, key)
    ratio = _error_ratio(env, key, server)
    errors = _threshold(
        f"More than {watch.error_rate:.0%} of answers are server errors",
        ratio["numerator"],
        "COMPARISON_GT",
        watch.error_rate,
        5,
        denominator=ratio["denominator"],
    )
    policies[f"{key}-errors"] = _policy(
        env,
        f"{key} server errors",
        f"Serving deployment {key} ({server.engine}) answers more than {watch.error_rate:.0%} of its requests "
        "with a server error (5xx) over 5 minutes.",
        [errors],
    )
    minutes = watch.queue_stuck_minutes
    policies[f"{key}-queue-stuck"] = _policy(
        env,
        f"{key} queue stuck",
        f"A server of deployment {key} has had requests waiting for {minutes} minutes while generating no "
        "token: its engine is hung or its batch is full of requests that never finish.",
        [
            _threshold(
                "Requests waiting",
                _series(_filter(env, server.queue, *job), _aggregation("ALIGN_MEAN")),
                "COMPARISON_GT",
                0,
                minutes,
            ),
            _threshold(
                "No token generated",
                _series(_filter(env, server.tokens, *job), _aggregation("ALIGN_RATE")),
                "COMPARISON_LT",
                0.001,
                minutes,
            ),
        ],
        combiner="AND_WITH_MATCHING_RESOURCE",
    )
    return policies


def _kueue_policies(env: Environment) -> dict[str, dict[str, Any]]:
    """Kueue's alerts: workloads stuck while nothing runs, a ClusterQueue inactive."""
    watch = env.monitoring
    policies: dict[str, dict[str, Any]] = {}
    pending = KUEUE_METRICS["prometheus.googleapis.com/kueue_pending_workloads/gauge"]
    admitted = KUEUE_METRICS["prometheus.googleapis.com/kueue_admitted_active_workloads/gauge"]
    status = KUEUE_METRICS["prometheus.googleapis.com/kueue_cluster_queue_status/gauge"]
    minutes = watch.queue_stuck_minutes
    # A workload that waits while another runs is queueing, as it should (a team's job behind a training run, Kueue's
    # "inadmissible": no quota free now): no page. Stuck is waiting while nothing that ends runs. A standing training
    # cluster (training.runs: cluster) is admitted for good and frees nothing by itself: counted, it kept this alert
    # from ever firing (review of #54); a run waiting for its slice waits for a person (make training-pause).
    training = env.training
    standing = training.queue if training is not None and training.queue and training.runs == "cluster" else None
    ends = (f'metric.labels.cluster_queue!="{standing}"',) if standing else ()
    held = (
        f" The standing training cluster (queue {standing}) is not counted: it frees its slice only when a person "
        "pauses it (make training-pause), so a run waiting for that slice pages too."
        if standing
        else ""
    )
    policies["kueue-stuck"] = _policy(
        env,
        "Kueue queues stuck",
        f"Kueue workloads have waited {minutes} minutes while no workload that ends is admitted anywhere in the "
        "cluster: nothing runs that would free their quota, so they wait for something else (a job that asks for "
        "more than its queue and what it may borrow hold, a flavor no queue covers, a slice that does not come). "
        f"`kubectl get workloads -A` shows each one's reason. Waiting behind running work does not page.{held}",
        [
            _threshold(
                "Workloads wait",
                _series(_filter(env, pending), _aggregation("ALIGN_MEAN", "REDUCE_SUM")),
                "COMPARISON_GT",
                0,
                minutes,
            ),
            _threshold(
                "No workload that ends admitted",
                _series(_filter(env, admitted, *ends), _aggregation("ALIGN_MEAN", "REDUCE_SUM")),
                "COMPARISON_LT",
                1,
                minutes,
            ),
        ],
        combiner="AND",
    )
    policies["kueue-queue-inactive"] = _policy(
        env,
        "Kueue ClusterQueue inactive",
        f"A Kueue ClusterQueue has been inactive (status pending) for {minutes} minutes: it admits nothing (a "
        "ResourceFlavor or an admission check it names is missing). `kubectl describe clusterqueue` says which.",
        [
            _threshold(
                "ClusterQueue inactive",
                _series(
                    _filter(env, status, 'metric.labels.status="pending"'),
                    _aggregation("ALIGN_MEAN", "REDUCE_MAX", ("metric.labels.cluster_queue",)),
                ),
                "COMPARISON_GT",
                0,
                minutes,
            )
        ],
    )
    return policies
