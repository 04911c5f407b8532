"""Serving that scales with its traffic: the autoscaler a deployment declares, the pool that holds its most servers,
the metrics it reads and who collects them, and the replica count it would choose."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.catalogue.serving_metrics import HPA_TOLERANCE, desired_replicas, signals_of
from infra.config import ENVIRONMENTS_DIR, ConfigError
from infra.synth.load import load_environment
from tests.helpers import by_name, needs_crds, of_type, one_of_kind, picker_config, rendered

DEV = yaml.safe_load((ENVIRONMENTS_DIR / "dev.yaml").read_text())


def _refused(tmp_path: Path, edit: Any) -> str:
    data = copy.deepcopy(DEV)
    edit(data)
    path = tmp_path / "dev.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        load_environment(path)
    return str(err.value)


@needs_crds
def test_the_vllm_servers_scale_on_their_queue_between_one_and_three_groups(stacks: dict[str, dict[str, Any]]) -> None:
    objects = rendered(stacks["dev"], "serve-llama70b-vllm")
    hpa = one_of_kind(objects, "HorizontalPodAutoscaler")["spec"]
    assert hpa["scaleTargetRef"] == {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "name": "serve-llama70b-vllm",
    }
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (1, 3)
    (metric,) = hpa["metrics"]
    assert metric["pods"]["metric"]["name"] == "prometheus.googleapis.com|vllm:num_requests_waiting|gauge"
    assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": "10"}
    # A server takes up to 90 minutes to warm (the startup probe's budget): a lull shorter than the API's longest
    # window (an hour) keeps every server, and then one group goes per half hour (review 10: with no behavior, a
    # five-minute lull removed a slice that took half an hour to warm).
    assert hpa["behavior"] == {
        "scaleDown": {
            "stabilizationWindowSeconds": 3600,
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 1800}],
        }
    }
    from infra.constructs.serving import scaling_behavior
    from infra.serving.cold_start import CANARY_WARM_UP_S

    assert scaling_behavior(CANARY_WARM_UP_S)["scaleDown"]["stabilizationWindowSeconds"] == 300, "warm in seconds"
    # The autoscaler owns the count: a Helm upgrade must not set it back.
    assert "replicas" not in one_of_kind(objects, "LeaderWorkerSet")["spec"]
    (monitoring,) = [
        o["spec"] for o in objects if o["kind"] == "PodMonitoring" and o["metadata"]["name"] == "serve-llama70b-vllm"
    ]
    assert monitoring["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "15s"}]
    # The pools grow and shrink with the servers: a v6e host per server, up to three on each capacity tier.
    pool = by_name(stacks["dev"], "google_container_node_pool")["vllm"]
    assert "node_count" not in pool
    assert (pool["autoscaling"]["min_node_count"], pool["autoscaling"]["max_node_count"]) == (0, 3)


def test_the_metrics_adapter_reads_cloud_monitoring_as_its_own_kubernetes_account(
    stacks: dict[str, dict[str, Any]],
) -> None:
    adapter = by_name(stacks["dev"], "helm_release")["metrics-adapter"]
    assert (adapter["namespace"], adapter["create_namespace"]) == ("custom-metrics", True)
    (grant,) = [
        m for m in of_type(stacks["dev"], "google_project_iam_member").values() if "custom-metrics" in m["member"]
    ]
    assert grant["role"] == "roles/monitoring.viewer"
    assert grant["member"] == (
        "principal://iam.googleapis.com/projects/100000000001/locations/global/workloadIdentityPools/"
        "acme-ml-platform-dev.svc.id.goog/subject/ns/custom-metrics/sa/custom-metrics-stackdriver-adapter"
    )
    # prod autoscales nothing: no adapter, no grant.
    assert "metrics-adapter" not in by_name(stacks["prod"], "helm_release")


@needs_crds
def test_every_server_declares_what_managed_prometheus_scrapes(stacks: dict[str, dict[str, Any]]) -> None:
    for release in ("serve-llama70b-vllm", "serve-llama70b-vllm-mh", "serve-canary"):
        # The release's servers' own (the endpoint picker's, behind the gateway, has its own PodMonitoring).
        (monitoring,) = [
            o
            for o in rendered(stacks["dev"], release)
            if o["kind"] == "PodMonitoring" and o["metadata"]["name"] == release
        ]
        assert monitoring["spec"]["endpoints"][0]["port"] == "http", release


def test_an_autoscaled_deployment_may_not_also_fix_its_replicas(tmp_path: Path) -> None:
    message = _refused(tmp_path, lambda d: d["serving"]["llama70b-vllm"].update(replicas=2))
    assert "serving.llama70b-vllm.replicas: 2: the autoscaler sets the number of servers" in message


@needs_crds
def test_multi_host_servers_scale_by_whole_slices_one_group_to_a_pool(stacks: dict[str, dict[str, Any]]) -> None:
    objects = rendered(stacks["dev"], "serve-llama70b-vllm-mh")
    hpa = one_of_kind(objects, "HorizontalPodAutoscaler")["spec"]
    assert (hpa["scaleTargetRef"]["kind"], hpa["minReplicas"], hpa["maxReplicas"]) == ("LeaderWorkerSet", 1, 2)
    lws = one_of_kind(objects, "LeaderWorkerSet")
    # LWS's exclusive placement: a group's pods on one pool, no two groups on one pool.
    assert lws["metadata"]["annotations"] == {
        "leaderworkerset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"
    }
    template = lws["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        spec = template[role]["spec"]
        assert "cloud.google.com/gke-nodepool" not in spec["nodeSelector"]
        assert spec["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "4x4"
        (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        assert term["matchExpressions"] == [
            {"key": "cloud.google.com/gke-nodepool", "operator": "In", "values": ["vllm-multihost", "vllm-multihost-1"]}
        ]
    # Every pool grows from zero to a whole slice (GKE adds a multi-host slice's hosts all at once); the HPA's
    # minimum holds the fewest servers' slices. A fixed pool for them let a group recreated after a preemption land
    # on the other pool while the fixed one came back empty and paid for (review 10, L4).
    pools = by_name(stacks["dev"], "google_container_node_pool")
    for pool in ("vllm-multihost", "vllm-multihost-1"):
        scaling = pools[pool]["autoscaling"]
        assert "node_count" not in pools[pool] and (scaling["min_node_count"], scaling["max_node_count"]) == (0, 4)
    assert pools["vllm-multihost-1"]["placement_policy"] == pools["vllm-multihost"]["placement_policy"]


def test_a_multi_host_server_count_is_held_to_the_slice_count(tmp_path: Path) -> None:
    message = _refused(tmp_path, lambda d: d["serving"]["llama70b-vllm-mh"]["autoscaling"].update(max=3))
    assert (
        "serving.llama70b-vllm-mh.autoscaling.max: 3: each server takes a whole v6e-16 slice, a node pool of its own, "
        "and slices.vllm-multihost has count 2 (one pool per slice): set slices.vllm-multihost.count to 3"
    ) in message

    def fixed(d: dict[str, Any]) -> None:
        del d["serving"]["llama70b-vllm-mh"]["autoscaling"]
        d["serving"]["llama70b-vllm-mh"]["replicas"] = 1

    assert "serving.llama70b-vllm-mh.replicas: 1: each server takes a whole v6e-16 slice" in _refused(tmp_path, fixed)


def test_a_signal_the_server_does_not_export_is_refused_naming_what_it_exports(tmp_path: Path) -> None:
    message = _refused(
        tmp_path, lambda d: d["serving"]["canary"].update(autoscaling={"min": 1, "max": 2, "signal": "kv-cache"})
    )
    assert "serving.canary.autoscaling.signal: 'kv-cache': the canary server exports no such signal" in message
    assert "queue (canary_queue_depth)" in message


@pytest.mark.parametrize(
    "autoscaling, fragment",
    [
        ({"min": 3, "max": 2}, "min 3 is above max 2"),
        ({"min": 0, "max": 2}, "min 0 needs cold_start_budget_s"),
        ({"min": 1, "max": 2, "cold_start_budget_s": 600}, "applies to min 0 only (min is 1: a server is always warm)"),
        ({"min": 0, "max": 2, "cold_start_budget_s": 7200}, "less than or equal to 3600"),
        ({"min": 1, "max": 17}, "less than or equal to 16"),
        ({"min": 1, "max": 2, "signal": "latency"}, "'queue' or 'kv-cache'"),
        ({"min": 1, "max": 2, "signal": "kv-cache", "target": 80}, "a fraction from 0 to 1"),
    ],
)
def test_bounds_and_signals_out_of_range_are_refused(tmp_path: Path, autoscaling: dict, fragment: str) -> None:
    message = _refused(tmp_path, lambda d: d["serving"]["llama70b-vllm"].update(autoscaling=autoscaling))
    assert "serving.llama70b-vllm.autoscaling" in message and fragment in message


def test_the_pool_at_the_autoscalers_most_must_hold_every_server(stacks: dict[str, dict[str, Any]]) -> None:
    """The cluster autoscaler adds nodes only up to the pool's maximum: an HPA that may add a fourth server on a pool
    of three hosts leaves it Pending, which the plan refuses."""
    from infra.rules import RULES
    from infra.rules.manifest_subject import ReleaseContext
    from infra.rules.run import stack_releases

    releases = stack_releases(stacks["dev"])
    objects = {n: objs for n, (_, objs) in releases.items()}
    mine = copy.deepcopy(objects["serve-llama70b-vllm"])
    ctx = ReleaseContext("serve-llama70b-vllm", "ml-serving", stacks["dev"], objects)
    assert RULES["gke.pools-hold-their-pods-together"].run(mine, ctx) == []
    # The servers' ComputeClass has three tiers of three hosts: a tenth server has nowhere to go.
    one_of_kind(mine, "HorizontalPodAutoscaler")["spec"]["maxReplicas"] = 10
    (refusal,) = RULES["gke.pools-hold-their-pods-together"].run(mine, ctx)
    assert "vllm" in refusal.message


def test_the_replica_count_the_autoscaler_chooses() -> None:
    # Within the tolerance nothing changes; beyond it, ceil(current x average / target), within min and max.
    assert desired_replicas(2, 10.0 * (1 + HPA_TOLERANCE / 2), 10.0, 1, 3) == 2
    assert desired_replicas(2, 10.0 * (1 - HPA_TOLERANCE / 2), 10.0, 1, 3) == 2
    assert desired_replicas(1, 25.0, 10.0, 1, 3) == 3
    assert desired_replicas(1, 12.0, 10.0, 1, 3) == 2
    assert desired_replicas(3, 0.0, 10.0, 1, 3) == 1
    assert desired_replicas(1, 400.0, 10.0, 1, 3) == 3
    assert signals_of("vllm")["queue"].hpa_metric == "prometheus.googleapis.com|vllm:num_requests_waiting|gauge"


def test_a_queue_on_the_real_canary_server_makes_the_autoscaler_add_servers() -> None:
    """The canary server under load, its queue gauge read from /metrics as the adapter serves it, and the HPA's
    choice: one server while the batch holds the load, more once requests wait beyond the target."""
    from infra.catalogue.serving_metrics import signals_of
    from scripts.bench import canary_server, scaling_under_load

    signal = signals_of("canary")["queue"]
    with canary_server(max_batch=8) as url:
        rows = scaling_under_load(
            url,
            "/generate",
            {"prompt": "A slice is healthy when", "max_tokens": 64},
            signal=signal,
            target=signal.default_target,
            low=1,
            high=3,
            loads=[1, 32],
        )
    (_, quiet_mean, _, quiet), (_, busy_mean, busy_peak, busy) = rows
    # One at a time: a request may be seen waiting for the instant before the batch takes it, never more.
    assert quiet == 1 and quiet_mean < 1, rows
    # 32 at once on a batch of 8: about 24 wait; at a target of 4 a server the HPA asks for its most.
    assert busy_peak >= 16 and busy_mean > signal.default_target and busy == 3, rows


def test_the_review_prices_the_autoscaled_servers_at_their_fewest_and_most(synth_dir: Path, tmp_path: Path) -> None:
    import json
    import shutil

    from infra.review import write_reviews

    out = tmp_path / "out"
    shutil.copytree(synth_dir / "stacks", out / "stacks")
    write_reviews(out)
    text = (out / "review" / "dev.md").read_text()
    # One v6e-8 host (ct6e-standard-8t) a server: 9.72 USD/hour on spot, the first tier, at the fewest; 21.60 on
    # demand, the priciest tier, at the most.
    # Held warm for the startup probe's 90 minutes: no cold start of the model on a v6e-8 is measured yet.
    unmeasured = (
        "5400 s (not measured: the startup probe's allowance; 140 GB of weights streamed from gs:// (runai_streamer))"
    )
    row = (
        f"| serve-llama70b-vllm | 1-3 | `vllm:num_requests_waiting` | 10 | ComputeClass slice-vllm | {unmeasured} | "
        "9.72 | 64.80 |"
    )
    assert row in text
    assert "| vllm | ct6e-standard-8t | spot, a tier of slice-vllm | 0-3 |" in text
    # A multi-host server is a whole v6e-16 slice (4 ct6e-standard-4t hosts at 4.86 on spot), one pool each.
    row = (
        "| serve-llama70b-vllm-mh | 1-2 | `vllm:num_requests_waiting` | 10 | vllm-multihost, vllm-multihost-1 | "
        f"{unmeasured} | 19.44 | 38.88 |"
    )
    assert row in text
    assert "| vllm-multihost-1 | ct6e-standard-4t | spot | 0-4 |" in text
    scalers = {s["release"]: s for s in json.loads((out / "review" / "dev.json").read_text())["autoscaling"]}
    assert scalers["serve-llama70b-vllm"]["usd_per_hour"] == {"fewest": 9.72, "most": 64.8}
    assert scalers["serve-llama70b-vllm"]["warm_up"] == {
        "seconds": 5400,
        "basis": "not measured: the startup probe's allowance; 140 GB of weights streamed from gs:// (runai_streamer)",
    }
    assert scalers["serve-llama70b-vllm-mh"]["usd_per_hour"] == {"fewest": 19.44, "most": 38.88}
    assert "## Serving autoscaling" not in (out / "review" / "prod.md").read_text()


@needs_crds
def test_a_deployment_at_zero_servers_scales_up_on_the_gateways_queue(stacks: dict[str, dict[str, Any]]) -> None:
    """At 0 servers the HPA reads the endpoint picker's flow control queue of the pool (an External metric: no server
    exports anything), the picker holds each request for the cold-start budget, and the load balancer waits that much
    longer; the servers' own metric takes over once one runs."""
    from infra.charts.check import render
    from infra.config import Environment
    from infra.constructs.serving import vllm_values

    data = copy.deepcopy(DEV)
    data["serving"]["llama70b-vllm"]["autoscaling"].update(min=0, cold_start_budget_s=900)
    values = vllm_values(Environment.model_validate(data), "llama70b-vllm")
    objects = render("vllm-tpu", values, name="serve-llama70b-vllm", namespace="ml-serving")
    hpa = one_of_kind(objects, "HorizontalPodAutoscaler")["spec"]
    assert hpa["minReplicas"] == 0
    pods, external = hpa["metrics"]
    assert pods["type"] == "Pods"
    assert external == {
        "type": "External",
        "external": {
            "metric": {
                "name": "prometheus.googleapis.com|inference_extension_flow_control_queue_size|gauge",
                "selector": {"matchLabels": {"metric.labels.inference_pool": "serve-llama70b-vllm"}},
            },
            "target": {"type": "AverageValue", "averageValue": "1"},
        },
    }
    picker = picker_config(objects, "serve-llama70b-vllm")
    assert picker["featureGates"] == ["flowControl"]
    assert picker["flowControl"] == {"defaultRequestTTL": "900s"}
    assert one_of_kind(objects, "GCPBackendPolicy")["spec"]["default"]["timeoutSec"] == 1200
    # At one server or more: no flow control, no external metric, the load balancer's 300 s.
    dev = rendered(stacks["dev"], "serve-llama70b-vllm")
    picker = picker_config(dev, "serve-llama70b-vllm")
    assert "featureGates" not in picker and "flowControl" not in picker
    assert one_of_kind(dev, "GCPBackendPolicy")["spec"]["default"]["timeoutSec"] == 300
    assert len(one_of_kind(dev, "HorizontalPodAutoscaler")["spec"]["metrics"]) == 1


def test_a_deployment_whose_measured_cold_start_fits_its_budget_scales_to_zero_through_every_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dev's 70B vLLM deployment at 0 servers with a 900 s budget, on GKE 1.37 (RAPID), given a cold start of 745 s
    measured on its v6e-8: loaded, synthesized and held to every rule (environment, Terraform and the rendered
    releases), nothing is refused. GKE's calendar has no support dates for 1.37 yet (Rapid only), so this test
    gives it the 24-month policy's; today the platform refuses 1.37 until they are published."""
    from datetime import date

    from infra.catalogue import gke_versions as gv
    from infra.catalogue.cold_starts import MEASURED, ColdStart
    from infra.rules.run import run
    from infra.synth.app import synth

    monkeypatch.setitem(gv.MINORS, "1.37", gv.Minor(date(2027, 12, 1), date(2028, 10, 1), estimated=True))
    measured = ColdStart(node_s=240, image_s=95, serve_s=410, measured="2026-12-04", source="a test's figure")
    monkeypatch.setitem(MEASURED, ("meta-llama/Llama-3.3-70B-Instruct", "v6e-8"), measured)
    text = (ENVIRONMENTS_DIR / "dev.yaml").read_text()
    for old, new in (
        ("    autoscaling: {min: 1, max: 3, signal: queue}\n", "    autoscaling: {min: 0, max: 3, signal: queue, "
         "cold_start_budget_s: 900}\n"),
        ("  release_channel: REGULAR\n", "  release_channel: RAPID\n"),
        ('  min_master_version: "1.35"\n', '  min_master_version: "1.37"\n'),
    ):  # fmt: skip
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "dev.yaml"
    path.write_text(text)
    env = load_environment(path)
    synth({"dev": env}, tmp_path / "out")
    assert run({"dev": env}, tmp_path / "out" / "stacks").lines == []
    (stack,) = (tmp_path / "out" / "stacks").glob("*/cdk.tf.json")
    hpa = one_of_kind(rendered(json.loads(stack.read_text()), "serve-llama70b-vllm"), "HorizontalPodAutoscaler")
    assert hpa["spec"]["minReplicas"] == 0
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 745
