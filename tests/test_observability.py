"""What each environment watches: its dashboard and alert policies, derived from what it runs, held to the Monitoring
APIs' types and to metrics that are written, created by the stack and linked from the review."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.cloud.monitoring_dashboard_v1.types import Dashboard
from google.cloud.monitoring_v3 import AlertPolicy

from infra.catalogue.cloud_metrics import GKE_METRICS
from infra.catalogue.serving_metrics import SERVER_METRICS
from infra.config import ConfigError, Environment
from infra.derive import observability
from infra.review.costs import pool_costs, stack_pools
from infra.review.diff import review_stack
from infra.review.render import render, review_json
from infra.rules import RULES
from infra.rules.cloud_monitoring import filter_problems, known_metrics, promql_problems
from infra.rules.manifest_subject import ReleaseContext
from infra.synth.load import load_environment
from tests.helpers import REPO, of_type, one, rendered

DEV = yaml.safe_load((REPO / "infra" / "environments" / "dev.yaml").read_text())


def _titles(dashboard: dict[str, Any]) -> list[str]:
    return [tile["widget"]["title"] for tile in dashboard["mosaicLayout"]["tiles"]]


def test_the_dashboard_shows_the_accelerators_each_watched_server_and_the_capacity(
    envs: dict[str, Environment],
) -> None:
    env = envs["dev"]
    dashboard = observability.dashboard(env)
    Dashboard.from_json(json.dumps(dashboard), ignore_unknown_fields=False)
    titles = _titles(dashboard)
    assert titles[:3] == ["Accelerators", "Accelerator duty cycle", "Accelerator memory in use (HBM)"]
    assert {"TPU TensorCore utilization", "Nodes not Ready", "Multi-host TPU slices whole"} <= set(titles)
    # vLLM and the canary server export what the platform reads; JetStream and Saxml are left off.
    servers = {key for key, d in env.serving.items() if d.engine in ("vllm", "canary")}
    assert {t.removeprefix("Serving: ") for t in titles if t.startswith("Serving: ")} == servers
    assert titles.count("KV cache in use") == sum(env.serving[k].engine == "vllm" for k in servers)
    assert titles[-2:] == ["Capacity", "Capacity"]
    # Tiles never overlap: two to a row, headers and text full width.
    cells = set()
    for tile in dashboard["mosaicLayout"]["tiles"]:
        for x in range(tile["xPos"], tile["xPos"] + tile["width"]):
            for y in range(tile["yPos"], tile["yPos"] + tile["height"]):
                assert (x, y) not in cells, tile["widget"]["title"]
                cells.add((x, y))
        assert tile["xPos"] + tile["width"] <= observability.COLUMNS


def test_the_capacity_tile_lists_every_node_pool_of_the_stack(
    envs: dict[str, Environment], stacks: dict[str, dict[str, Any]]
) -> None:
    text = observability.dashboard(envs["dev"])["mosaicLayout"]["tiles"][-1]["widget"]["text"]["content"]
    rows = [line.split("|") for line in text.splitlines()[2:] if line.startswith("| ")]
    listed = {row[1].strip(): row[4].strip() for row in rows}
    # Each pool with the fewest and most nodes the stack gives it, as the review counts them.
    costs = pool_costs(stack_pools(stacks["dev"])).values()
    assert listed == {c.pool: f"{c.min_nodes} to {c.max_nodes}" for c in costs}


def _filters(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node[k] for k in ("filter", "denominatorFilter") if k in node]
        return found + [f for v in node.values() for f in _filters(v)]
    if isinstance(node, list):
        return [f for v in node for f in _filters(v)]
    return []


def test_every_series_of_the_dashboard_and_policies_is_scoped_to_the_environments_cluster(
    envs: dict[str, Environment],
) -> None:
    env = envs["prod"]
    filters = _filters([observability.dashboard(env), observability.alert_policies(env)])
    assert len(filters) > 20
    # The training run's goodput is its workload's (no cluster label): scoped by the run's name, `<recipe>-<env>`.
    scoped = (f'cluster_name="{env.cluster.name}"', f'resource.labels.cluster="{env.cluster.name}"')
    scoped += (f'resource.labels.workload_id="{observability.goodput_job(env)}"',)
    assert observability.goodput_job(env) == f"llama3-8b-{env.name}"
    for f in filters:
        assert any(term in f for term in scoped), f


def test_the_alert_policies_page_on_nodes_errors_and_stuck_queues(envs: dict[str, Environment]) -> None:
    env = envs["dev"]
    policies = observability.alert_policies(env)
    for body in policies.values():
        AlertPolicy.from_json(json.dumps(body), ignore_unknown_fields=False)
        assert observability.dashboard_url(env) in body["documentation"]["content"]
    servers = sorted(observability.watched_servers(env))
    assert sorted(policies) == sorted(
        [
            "slices-not-ready",
            "kueue-stuck",
            "kueue-queue-inactive",
            *(f"{k}-errors" for k in servers),
            *(f"{k}-queue-stuck" for k in servers),
        ]
    )
    # Stuck is waiting while nothing runs: a team's job waiting behind the training cluster (Kueue's "inadmissible")
    # pages no one (review 10: the alert on inadmissible workloads paged on ordinary queueing).
    stuck_queues = policies["kueue-stuck"]
    assert stuck_queues["combiner"] == "AND"
    waiting, idle = (c["conditionThreshold"] for c in stuck_queues["conditions"])
    assert "kueue_pending_workloads" in waiting["filter"] and "status" not in waiting["filter"]
    assert (waiting["comparison"], waiting["thresholdValue"]) == ("COMPARISON_GT", 0)
    assert "kueue_admitted_active_workloads" in idle["filter"]
    assert (idle["comparison"], idle["thresholdValue"]) == ("COMPARISON_LT", 1)
    # dev's standing training cluster is admitted for good: counted, no queue of dev could ever page as stuck.
    assert env.training is not None and env.training.runs == "cluster"
    assert idle["filter"].endswith(f'metric.labels.cluster_queue!="{env.training.queue}"')
    assert "make training-pause" in stuck_queues["documentation"]["content"]
    (inactive,) = policies["kueue-queue-inactive"]["conditions"]
    assert 'metric.labels.status="pending"' in inactive["conditionThreshold"]["filter"]
    errors = policies["llama70b-vllm-errors"]["conditions"][0]["conditionThreshold"]
    assert errors["thresholdValue"] == env.monitoring.error_rate
    assert 'metric.labels.status="5xx"' in errors["filter"] and "5xx" not in errors["denominatorFilter"]
    stuck = policies["canary-queue-stuck"]
    # Both conditions on the same server: requests wait and no token comes out.
    assert stuck["combiner"] == "AND_WITH_MATCHING_RESOURCE"
    assert [c["conditionThreshold"]["duration"] for c in stuck["conditions"]] == [
        f"{env.monitoring.queue_stuck_minutes * 60}s"
    ] * 2
    assert "crossSeriesReducer" not in json.dumps(stuck["conditions"])


def test_with_training_runs_as_jobs_every_admitted_workload_counts_against_stuck(envs: dict[str, Environment]) -> None:
    """Runs as jobs end and free the slice: a run admitted on it is work that ends, so waiting behind it is queueing."""
    env = envs["dev"]
    assert env.training is not None
    jobs = env.model_copy(update={"training": env.training.model_copy(update={"runs": "jobs"})})
    _, idle = (c["conditionThreshold"] for c in observability.alert_policies(jobs)["kueue-stuck"]["conditions"])
    assert "cluster_queue" not in idle["filter"]


def test_a_cluster_with_gpu_slices_collects_dcgm_and_charts_each_gpu_model(
    envs: dict[str, Environment], stacks: dict[str, dict[str, Any]]
) -> None:
    """GKE collects NVIDIA's DCGM exporter only where the cluster's component list names DCGM (the list is the whole
    set: before, ["SYSTEM_COMPONENTS"] left GPU metrics off); the dashboard's GPU section reads those series."""
    assert one(stacks["dev"], "google_container_cluster")["monitoring_config"]["enable_components"] == [
        "SYSTEM_COMPONENTS",
        "DCGM",
    ]
    titles = _titles(observability.dashboard(envs["dev"]))
    gpus = titles.index("GPUs (DCGM)")
    assert titles[gpus + 1 : gpus + 4] == ["GPU utilization", "GPU Tensor Core activity", "GPU memory in use"]

    no_gpus = copy.deepcopy(DEV)
    for key in [k for k, spec in no_gpus["slices"].items() if spec["accelerator"].startswith("a3")]:
        del no_gpus["slices"][key]
    for section in ("batch", "teams", "slurm", "vertex", "vm_groups"):
        no_gpus.pop(section, None)
    for field in ("network_attachment_cidr", "gpudirect_cidr"):
        no_gpus["network"].pop(field, None)
    env = Environment.model_validate(no_gpus)
    assert "GPUs (DCGM)" not in _titles(observability.dashboard(env))


def test_kueues_metrics_are_scraped_with_a_bearer_token_and_charted_per_queue(
    envs: dict[str, Environment], stacks: dict[str, dict[str, Any]]
) -> None:
    """Kueue serves /metrics over HTTPS to a bearer token the API server authorizes: the kueue-queues release scrapes
    its controller's pods with one (a service account allowed GET /metrics alone, its token Secret readable by
    Managed Prometheus's collector), and the dashboard charts what waits in each ClusterQueue."""
    objects = {(o["kind"], o["metadata"]["name"]): o for o in rendered(stacks["dev"], "kueue-queues")}
    (endpoint,) = objects[("PodMonitoring", "kueue")]["spec"]["endpoints"]
    assert endpoint["scheme"] == "https" and endpoint["port"] == "metrics"
    assert endpoint["authorization"]["credentials"]["secret"] == {"name": "kueue-metrics-scraper-token", "key": "token"}
    secret = objects[("Secret", "kueue-metrics-scraper-token")]
    assert secret["type"] == "kubernetes.io/service-account-token" and "data" not in secret
    assert objects[("ClusterRole", "kueue-metrics-scraper")]["rules"] == [
        {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}
    ]
    (reader,) = objects[("RoleBinding", "kueue-metrics-scraper-token-reader")]["subjects"]
    assert (reader["namespace"], reader["name"]) == ("gmp-system", "collector")
    titles = _titles(observability.dashboard(envs["dev"]))
    at = titles.index("Queues (Kueue)")
    assert titles[at + 1 : at + 3] == ["Workloads waiting", "Admission wait (p95)"]

    rule = RULES["monitoring.pod-monitoring-reaches-its-pods"]
    pm = copy.deepcopy(objects[("PodMonitoring", "kueue")])
    del pm["spec"]["endpoints"][0]["authorization"]
    pm["spec"]["endpoints"][0]["scheme"] = "http"
    context = ReleaseContext("kueue-queues", "kueue-system", stacks["dev"])
    found = {v.field.rsplit(".", 1)[-1] for v in rule.run([pm], context)}
    assert found == {"scheme", "authorization"}
    pm["spec"]["selector"]["matchLabels"] = {"app.kubernetes.io/name": "kueue", "control-plane": "webhook"}
    assert "selects no pod of this release or its controller" in " ".join(f.message for f in rule.run([pm], context))


def test_the_endpoint_pickers_metrics_are_scraped_with_a_bearer_token_and_charted_with_its_deployment(
    envs: dict[str, Environment], stacks: dict[str, dict[str, Any]]
) -> None:
    """The picker (--metrics-endpoint-auth on by default) answers /metrics only to an authorized bearer token: the
    vLLM release behind the Inference Gateway brings the scraper's token and its grants, lets the picker review
    tokens, and the dashboard shows the picker's view of the pool beside the servers' own charts."""
    objects = {(o["kind"], o["metadata"]["name"]): o for o in rendered(stacks["dev"], "serve-llama70b-vllm")}
    (endpoint,) = objects[("PodMonitoring", "serve-llama70b-vllm-epp")]["spec"]["endpoints"]
    secret = "serve-llama70b-vllm-epp-metrics-reader-token"
    assert (endpoint["port"], endpoint["scheme"]) == ("metrics", "http")
    assert endpoint["authorization"] == {"type": "Bearer", "credentials": {"secret": {"name": secret, "key": "token"}}}
    assert "data" not in objects[("Secret", secret)]
    (auth,) = [o for (kind, name), o in objects.items() if kind == "ClusterRole" and name.endswith("-metrics-auth")]
    assert {r["resources"][0] for r in auth["rules"]} == {"tokenreviews", "subjectaccessreviews"}
    titles = _titles(observability.dashboard(envs["dev"]))
    at = titles.index("Serving: llama70b-vllm")
    assert {"Gateway: requests waiting per server (the picker's view)", "Gateway: servers ready in the pool"} <= set(
        titles[at : at + 9]
    )

    rule = RULES["monitoring.pod-monitoring-reaches-its-pods"]
    pods = [o for o in objects.values() if o["kind"] == "Deployment"]
    pm = copy.deepcopy(objects[("PodMonitoring", "serve-llama70b-vllm-epp")])
    del pm["spec"]["endpoints"][0]["authorization"]
    context = ReleaseContext("serve-llama70b-vllm", "ml-serving", stacks["dev"])
    (found,) = rule.run([pm, *pods], context)
    assert found.field.endswith("authorization") and "bearer token" in found.message


def test_dcgm_needs_gkes_managed_driver_on_every_gpu_pool(stacks: dict[str, dict[str, Any]]) -> None:
    stack = copy.deepcopy(stacks["dev"])
    rule = RULES["monitoring.dcgm-series-are-collected"]
    assert rule.run(stack) == []
    (pool,) = [
        p for p in of_type(stack, "google_container_node_pool").values() if "guest_accelerator" in p["node_config"]
    ]
    pool["node_config"]["guest_accelerator"][0]["gpu_driver_installation_config"] = {
        "gpu_driver_version": "INSTALLATION_DISABLED"
    }
    (found,) = rule.run(stack)
    assert "GKE-managed drivers" in found.message and found.value == "INSTALLATION_DISABLED"


def test_an_environment_running_no_server_watches_its_nodes_only() -> None:
    data = copy.deepcopy(DEV)
    data["serving"] = {}
    del data["slices"]["vllm-multihost"]["count"]  # a slice per server of a vLLM deployment no longer there
    env = Environment.model_validate(data)
    assert list(observability.alert_policies(env)) == ["slices-not-ready", "kueue-stuck", "kueue-queue-inactive"]
    assert not [t for t in _titles(observability.dashboard(env)) if t.startswith("Serving")]


def test_the_stack_creates_them_notifying_every_address(
    envs: dict[str, Environment], stacks: dict[str, dict[str, Any]]
) -> None:
    env, stack = envs["dev"], stacks["dev"]
    channels = of_type(stack, "google_monitoring_notification_channel")
    assert sorted(c["labels"]["email_address"] for c in channels.values()) == env.monitoring.notify
    policies = of_type(stack, "google_monitoring_alert_policy")
    assert len(policies) == len(observability.alert_policies(env))
    for body in policies.values():
        assert len(body["notification_channels"]) == len(channels)
        assert all(ref.startswith("${google_monitoring_notification_channel.") for ref in body["notification_channels"])
    dashboard = json.loads(one(stack, "google_monitoring_dashboard")["dashboard_json"])
    assert dashboard == observability.dashboard(env)


def test_the_review_links_the_dashboard_and_names_the_policies(
    envs: dict[str, Environment], stacks: dict[str, dict[str, Any]]
) -> None:
    review = review_stack("platform-dev", stacks["dev"], None)
    text, facts = render(review), review_json(review)["monitoring"]
    url = observability.dashboard_url(envs["dev"])
    assert f"- Dashboard: [ML platform: dev]({url})" in text
    assert facts["dashboards"] == [{"title": "ML platform: dev", "url": url}]
    assert "  - dev: llama70b-vllm queue stuck" in text
    assert facts["alerts"] == sorted(b["displayName"] for b in observability.alert_policies(envs["dev"]).values())
    assert facts["notify"] == envs["dev"].monitoring.notify


@pytest.mark.parametrize(
    ("filter_", "aggregations", "fragment"),
    [
        ('metric.type="kubernetes.io/container/accelerator/duty_cycles"', [], "is not one the platform knows"),
        (
            'metric.type="kubernetes.io/node/status_condition" resource.type="k8s_container"',
            [],
            "is written on resource k8s_node, not k8s_container",
        ),
        (
            'metric.type="kubernetes.io/node/status_condition" resource.labels.namespace_name="x"',
            [],
            "resource k8s_node has no label 'namespace_name'",
        ),
        (
            'metric.type="prometheus.googleapis.com/http_requests_total/counter" metric.labels.code="500"',
            [],
            "has no label 'code'",
        ),
        (
            'metric.type="prometheus.googleapis.com/vllm:num_requests_waiting/gauge"',
            [{"perSeriesAligner": "ALIGN_RATE"}],
            "aligner ALIGN_RATE does not take GAUGE DOUBLE",
        ),
        (
            'metric.type="prometheus.googleapis.com/vllm:generation_tokens_total/counter"',
            [{"crossSeriesReducer": "REDUCE_SUM"}],
            "reducer REDUCE_SUM does not take CUMULATIVE DOUBLE",
        ),
        (
            'metric.type="prometheus.googleapis.com/vllm:time_to_first_token_seconds/histogram"',
            [{"perSeriesAligner": "ALIGN_PERCENTILE_95"}],
            "aligner ALIGN_PERCENTILE_95 does not take CUMULATIVE DISTRIBUTION",
        ),
        (
            'metric.type="kubernetes.io/node/status_condition"',
            [{"perSeriesAligner": "ALIGN_NEXT_OLDER", "crossSeriesReducer": "REDUCE_SUM"}],
            "reducer REDUCE_SUM does not take GAUGE BOOL",
        ),
        ('metric.type = one_of("a", "b")', [], "is not a conjunction"),
        ('resource.type="k8s_node"', [], "names no metric type"),
    ],
)
def test_a_filter_on_a_metric_that_is_not_written_or_aggregated_as_it_cannot_be_is_refused(
    filter_: str, aggregations: list[dict[str, Any]], fragment: str
) -> None:
    problems = filter_problems(filter_, aggregations, known_metrics())
    assert any(fragment in p for p in problems), problems


def test_what_the_platform_reads_is_scoped_to_known_metrics() -> None:
    """Every metric a server's dashboard section reads is catalogued with its source; the GKE ones cite GKE's list."""
    metrics = known_metrics()
    for server in SERVER_METRICS.values():
        assert all(m.type in metrics and "prometheus.googleapis.com" in m.type for m in server.metrics)
    assert all("metrics_kubernetes" in m.source for m in GKE_METRICS.values())


@pytest.mark.parametrize(
    ("monitoring", "field", "fragment"),
    [
        ({"notify": ["oncall"]}, "monitoring.notify[0]", "must match the pattern"),
        ({"error_rate": 1.5}, "monitoring.error_rate", "less than 1"),
        ({"queue_stuck_minutes": 2}, "monitoring.queue_stuck_minutes", "greater than or equal to 5"),
        ({"pager": "x"}, "monitoring.pager", "allowed keys here: notify, error_rate"),
    ],
)
def test_a_bad_monitoring_section_is_refused_naming_the_field(
    monitoring: dict[str, Any], field: str, fragment: str, tmp_path: Path
) -> None:
    data = copy.deepcopy(DEV)
    data["monitoring"] = monitoring
    path = tmp_path / "dev.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        load_environment(path)
    line = next((p for p in err.value.problems if p.startswith(field)), None)
    assert line is not None and fragment in line, err.value.problems


def test_a_dashboard_change_shows_in_the_review_as_the_fields_it_changes(stacks: dict[str, dict[str, Any]]) -> None:
    after = copy.deepcopy(stacks["dev"])
    body = one(after, "google_monitoring_dashboard")
    dashboard = json.loads(body["dashboard_json"])
    dashboard["displayName"] = "ML platform: dev (renamed)"
    body["dashboard_json"] = json.dumps(dashboard, sort_keys=True)
    [change] = review_stack("platform-dev", after, stacks["dev"]).changes
    assert change.values == (("dashboard_json.displayName", "ML platform: dev", "ML platform: dev (renamed)"),)


@pytest.mark.parametrize(
    ("mutate", "field", "fragment"),
    [
        (
            lambda s: one(s, "google_monitoring_dashboard").update(dashboard_json="[]"),
            "dashboard_json.Dashboard",
            "object is expected",
        ),
        (
            lambda s: next(iter(of_type(s, "google_monitoring_alert_policy").values())).update(severity="PAGE"),
            "severity",
            "not a google.monitoring.v3.AlertPolicy.Severity",
        ),
        (
            lambda s: next(iter(of_type(s, "google_monitoring_alert_policy").values()))["conditions"][0][
                "condition_threshold"
            ].update(treshold_value=1),
            "conditions[0].conditionThreshold.tresholdValue",
            "has no such field",
        ),
    ],
)
def test_a_body_the_api_would_refuse_is_refused_at_plan(
    mutate: Any, field: str, fragment: str, stacks: dict[str, dict[str, Any]]
) -> None:
    stack = copy.deepcopy(stacks["dev"])
    mutate(stack)
    found = RULES["monitoring.bodies-parse-as-the-api-types"].run(stack)
    assert len(found) == 1 and found[0].field.endswith(field) and fragment in found[0].message, [
        v.line() for v in found
    ]


def test_each_vllm_deployment_charts_what_a_million_generated_tokens_cost_at_list_price(
    envs: dict[str, Environment],
) -> None:
    """The replicas serving (the pods exporting the token counter) at a replica's list price an hour, over the
    tokens they generate an hour: in PromQL, whose every series the rule holds to the catalogued metrics."""
    env = envs["dev"]
    queries = {
        w["title"]: w["xyChart"]["dataSets"][0]["timeSeriesQuery"]["prometheusQuery"]
        for w in observability.dashboard(env)["mosaicLayout"]["tiles"]
        for w in [w["widget"]]
        if "prometheusQuery" in json.dumps(w)
    }
    # serve-llama70b-vllm-mh: a replica is a v6e 4x4 slice's four hosts at the spot list price (4.86 USD an hour).
    title = "List price per million generated tokens (a replica: 19.44 USD an hour)"
    series = (
        'vllm:generation_tokens_total{cluster="ml-platform-dev",namespace="ml-serving",job="serve-llama70b-vllm-mh"}'
    )
    assert queries[title] == (f"19.4400 * count(max by (pod) ({series})) / (sum(rate({series}[5m])) * 3600) * 1000000")
    assert len(queries) == sum(1 for d in env.serving.values() if d.engine == "vllm")
    metrics = known_metrics()
    assert all(promql_problems(q, metrics) == [] for q in queries.values())
    assert promql_problems(series.replace("generation_tokens", "generated_tokens"), metrics) == [
        "vllm:generated_tokens_total: no metric the platform knows is exported by that name"
    ]
    assert promql_problems(series.replace("job=", "release="), metrics) == [
        "vllm:generation_tokens_total: no label release (its labels: engine, model_name)"
    ]
