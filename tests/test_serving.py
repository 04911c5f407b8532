"""Serving on TPU slices: Saxml, JetStream + Pathways (also disaggregated), vLLM, the canary; the HBM fit check."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.catalogue.accelerators import tpu_slice
from infra.charts.check import render
from infra.config import ENVIRONMENTS_DIR, ConfigError, Environment, SaxmlServing, ServedModel
from infra.rules import RULES
from infra.synth.load import load_environment
from scripts import saxml
from tests.helpers import by_name, needs_crds, of_type, one_of_kind, picker_config, release_values, rendered

DEV = yaml.safe_load((ENVIRONMENTS_DIR / "dev.yaml").read_text())


# --- must show, from the synthesized stacks ---------------------------------------------------------


@needs_crds
def test_saxml_model_servers_are_one_job_of_8_hosts_per_v5e_4x8_slice(stacks: dict[str, dict[str, Any]]) -> None:
    objects = rendered(stacks["dev"], "serve-saxml")
    jobset = one_of_kind(objects, "JobSet")
    assert jobset["metadata"]["annotations"]["alpha.jobset.sigs.k8s.io/exclusive-topology"] == (
        "cloud.google.com/gke-nodepool"
    )
    jobs = jobset["spec"]["replicatedJobs"]
    assert [j["name"] for j in jobs] == ["sax-a", "sax-b"]
    for job in jobs:
        spec = job["template"]["spec"]
        assert job["replicas"] == 1
        assert spec["parallelism"] == spec["completions"] == 8
        assert spec["backoffLimit"] == 0, "no retries inside a slice"
        pod = spec["template"]["spec"]
        assert pod["nodeSelector"] == {
            "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
            "cloud.google.com/gke-tpu-topology": "4x8",
            "cloud.google.com/gke-nodepool": job["name"],
        }
        server = pod["containers"][0]
        assert server["resources"]["limits"] == server["resources"]["requests"] == {"google.com/tpu": "4"}
        assert 8471 in {p["containerPort"] for p in server["ports"]}
        env = {e["name"]: e["value"] for e in server["env"]}
        assert env["MEGASCALE_NUM_SLICES"] == "" and env["SAX_ROOT"] == "gs://acme-ml-platform-dev-saxml/sax-root"
        assert "--platform_topology=4x8" in server["args"] and "--platform_chip=tpuv5e" in server["args"]
    service = one_of_kind(objects, "Service")
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["metadata"]["annotations"] == {"networking.gke.io/load-balancer-type": "Internal"}
    # Both pools exist with 8 hosts each.
    for key in ("sax-a", "sax-b"):
        pool = by_name(stacks["dev"], "google_container_node_pool")[key]
        assert (pool["node_count"], pool["node_config"]["machine_type"]) == (8, "ct5lp-hightpu-4t")


def test_saxml_identity_is_admin_of_its_bucket_and_nothing_else(stacks: dict[str, dict[str, Any]]) -> None:
    stack = stacks["dev"]
    account = next(a for a in of_type(stack, "google_service_account").values() if a["account_id"] == "wi-saxml")
    assert account
    grants = [
        (m["bucket"], m["role"])
        for m in of_type(stack, "google_storage_bucket_iam_member").values()
        if "wi-saxml" in json.dumps(m["member"]) or "saxml_gsa" in json.dumps(m["member"])
    ]
    assert len(grants) == 1 and grants[0][1] == "roles/storage.objectAdmin"
    assert "bucket-saxml" in grants[0][0]
    project_roles = [m for m in of_type(stack, "google_project_iam_member").values() if "saxml" in json.dumps(m)]
    assert project_roles == [], "no project-wide storage role (the tutorial grants storage admin)"


@needs_crds
def test_jetstream_follows_the_gke_tutorial_chipless_leader_and_a_worker_per_v6e_4x4_host(
    stacks: dict[str, dict[str, Any]],
) -> None:
    """The GKE JetStream + Pathways tutorial (shared/seeds/003): LWS size = hosts + 1, a leader without TPU
    chips on the CPU pool, one Pathways worker per TPU host, MaxText's 405B inference config with the Llama 3
    tokenizer, ici_autoregressive_parallelism=2 x ici_tensor_parallelism=8, and pools with GCE_METADATA."""
    objects = rendered(stacks["dev"], "serve-llama405b")
    lws = one_of_kind(objects, "LeaderWorkerSet")
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 5
    assert template["subGroupPolicy"] == {"subGroupPolicyType": "LeaderExcluded", "subGroupSize": 4}
    leader, worker = template["leaderTemplate"]["spec"], template["workerTemplate"]["spec"]
    assert leader["nodeSelector"] == {"cloud.google.com/gke-nodepool": "system"}
    assert not any("google.com/tpu" in json.dumps(c.get("resources", {})) for c in leader["containers"])
    assert worker["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": "4x4",
    }
    assert [c["resources"]["limits"] for c in worker["containers"]] == [{"google.com/tpu": "4"}]
    assert [c["name"] for c in leader["initContainers"]] == ["pathways-rm", "pathways-proxy"]
    assert {c["name"] for c in leader["containers"]} == {"jetstream", "jetstream-http"}
    rm_args = leader["initContainers"][0]["args"]
    assert "--instance_type=tpuv6e:4x4" in rm_args and "--instance_count=1" in rm_args
    jetstream = next(c for c in leader["containers"] if c["name"] == "jetstream")
    args = jetstream["args"]
    assert args[0] == "MaxText/configs/v5e/inference/llama3_405b_v5e-64.yml"
    assert "tokenizer_path=assets/tokenizer_llama3.tiktoken" in args
    assert "ici_autoregressive_parallelism=2" in args and "ici_tensor_parallelism=8" in args
    assert "quantization=int8" in args and "checkpoint_is_quantized=true" in args
    probe = jetstream["startupProbe"]
    assert probe["initialDelaySeconds"] + probe["periodSeconds"] * probe["failureThreshold"] >= 600 + 10000
    service = one_of_kind(objects, "Service")
    assert service["spec"]["ports"][0]["port"] == 8000
    pool = by_name(stacks["dev"], "google_container_node_pool")["serve"]
    assert pool["node_config"]["workload_metadata_config"] == {"mode": "GCE_METADATA"}
    assert "pathways" in pool["node_config"]["service_account"]
    # The checkpoint conversion Job reads the Meta checkpoint from the bucket and writes int8 next to it,
    # on the CPU pool that holds it.
    job = one_of_kind(objects, "Job")
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"cloud.google.com/gke-nodepool": "convert"}
    assert pod["tolerations"][0]["value"] == "convert"
    assert pod["containers"][0]["resources"]["requests"]["memory"] == "1636Gi"
    script = pod["containers"][0]["args"][0]
    assert "/data/source/meta/Llama3.1-405B-Instruct" in script


def test_pathways_pools_act_as_their_own_node_identity_with_only_the_serving_buckets(
    stacks: dict[str, dict[str, Any]],
) -> None:
    """GCE_METADATA pools expose the node's service account to pods: it is a separate account, holding
    exactly the bucket roles of the JetStream deployments' identity."""
    stack = stacks["dev"]
    pools = by_name(stack, "google_container_node_pool")
    gce = sorted(k for k, p in pools.items() if p["node_config"]["workload_metadata_config"]["mode"] == "GCE_METADATA")
    assert gce == ["decode", "prefill", "serve"]
    accounts = {a["account_id"] for a in of_type(stack, "google_service_account").values()}
    assert "ml-platform-dev-pathways" in accounts
    granted = sorted(
        (m["bucket"].split(".")[1].split("_")[0], m["role"])
        for m in of_type(stack, "google_storage_bucket_iam_member").values()
        if "pathways-node-identity" in m["member"]
    )
    assert granted == [
        ("bucket-checkpoints", "roles/storage.objectViewer"),
        # Read only: the conversion Jobs, which write the models, have an identity of their own .
        ("bucket-models", "roles/storage.objectViewer"),
        ("bucket-pathways", "roles/storage.objectUser"),
    ]


@needs_crds
def test_disaggregated_serving_spans_two_v6e_2x4_pools(stacks: dict[str, dict[str, Any]]) -> None:
    for key in ("prefill", "decode"):
        pool = by_name(stacks["dev"], "google_container_node_pool")[key]
        assert pool["placement_policy"] == {"type": "COMPACT", "tpu_topology": "2x4"}
        assert (pool["node_count"], pool["node_config"]["machine_type"]) == (2, "ct6e-standard-4t")
    objects = rendered(stacks["dev"], "serve-llama70b-disagg")
    lws = one_of_kind(objects, "LeaderWorkerSet")
    assert lws["metadata"]["annotations"] == {
        "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology": "cloud.google.com/gke-nodepool"
    }
    template = lws["spec"]["leaderWorkerTemplate"]
    assert (template["size"], template["subGroupPolicy"]["subGroupSize"]) == (5, 2)
    leader, worker = template["leaderTemplate"]["spec"], template["workerTemplate"]["spec"]
    assert "--instance_count=2" in leader["initContainers"][0]["args"]
    terms = worker["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == ["prefill", "decode"]
    jetstream = next(c for c in leader["containers"] if c["name"] == "jetstream")
    assert "inference_server=ExperimentalMaxtextDisaggregatedServer_8" in jetstream["args"]
    assert "ici_tensor_parallelism=8" in jetstream["args"]  # Llama 2 70B: 8 KV heads, 8 chips per slice
    # The 70B deployment converts its checkpoint too, on the same CPU pool.
    job = one_of_kind(objects, "Job")
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {"cloud.google.com/gke-nodepool": "convert"}


def test_disaggregated_slices_may_use_one_8_chip_host_each(tmp_path: Path) -> None:
    data = copy.deepcopy(DEV)
    for key in ("prefill", "decode"):
        data["slices"][key]["machine_type"] = "ct6e-standard-8t"
    env = _load(tmp_path, data)
    from infra.constructs.serving import jetstream_values

    values = jetstream_values(env, "llama70b-disagg")
    assert (values["size"], values["subGroupSize"], values["chipsPerHost"]) == (3, 1, 8)


def _lws(stacks: dict[str, dict[str, Any]], release: str) -> dict[str, Any]:
    return one_of_kind(rendered(stacks["dev"], release), "LeaderWorkerSet")


@needs_crds
def test_single_host_vllm_is_tensor_parallel_over_the_hosts_chips_and_streams_its_weights(
    stacks: dict[str, dict[str, Any]], envs: dict[str, Environment]
) -> None:
    lws = _lws(stacks, "serve-llama70b-vllm")
    spec = lws["spec"]
    # Its autoscaler owns the number of groups (tests/test_autoscaling.py); a group is one host.
    assert "replicas" not in spec and spec["leaderWorkerTemplate"]["size"] == 1
    assert "leaderTemplate" not in spec["leaderWorkerTemplate"]
    container = spec["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    assert container["command"] == ["bash", "/platform/serve.sh"] and container["args"][0] == "server"
    args = container["args"][1:]
    assert "--tensor-parallel-size=8" in args and "--pipeline-parallel-size=1" in args
    assert container["resources"]["limits"] == {"google.com/tpu": "8"}
    # Streamed from the bucket, not through a FUSE file cache in the host's memory.
    assert "--model=gs://acme-ml-platform-dev-models/hf/Llama-3.3-70B-Instruct" in args
    assert "--load-format=runai_streamer" in args
    # The recipe's scheduler knobs for Llama 3.x 70B on v6e.
    assert "--max-num-batched-tokens=512" in args and "--max-num-seqs=256" in args
    key = next(e for e in container["env"] if e["name"] == "VLLM_API_KEY")
    assert key["valueFrom"]["secretKeyRef"] == {"name": "vllm-api-key", "key": "token"}
    assert "TPU_MULTIHOST_BACKEND" not in {e["name"] for e in container["env"]}


@needs_crds
def test_a_vllm_server_loads_its_adapters_from_the_bucket_read_only_under_one_lora_modules_flag(
    stacks: dict[str, dict[str, Any]],
) -> None:
    """dev's llama70b-vllm serves one adapter: a slot for it at rank 16, the adapter after one --lora-modules (a
    second flag would replace the first), read through a read-only mount of the models bucket. A deployment
    without adapters mounts nothing and loads no LoRA."""
    pod = _lws(stacks, "serve-llama70b-vllm")["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    args = pod["containers"][0]["args"]
    assert {"--enable-lora", "--max-loras=1", "--max-lora-rank=16"} <= set(args)
    at = args.index("--lora-modules")
    assert args.count("--lora-modules") == 1 and json.loads(args[at + 1]) == {
        "name": "llama70b-support",
        "path": "/data/adapters",
        "base_model_name": "meta-llama/Llama-3.3-70B-Instruct",
    }
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "adapters"]
    assert mount == {"name": "adapters", "mountPath": "/data/adapters", "readOnly": True}
    (volume,) = [v for v in pod["volumes"] if v["name"] == "adapters"]
    assert volume["csi"]["readOnly"] is True
    # The adapters' folder of the models bucket, not the weights beside it.
    assert volume["csi"]["volumeAttributes"] == {
        "bucketName": "acme-ml-platform-dev-models",
        "mountOptions": "implicit-dirs,only-dir=adapters/llama70b-support",
    }
    other = _lws(stacks, "serve-llama70b-vllm-mh")["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    assert "--enable-lora" not in other["containers"][0]["args"]
    assert "adapters" not in {v["name"] for v in other["volumes"]}


@needs_crds
def test_the_router_sends_an_adapters_requests_to_a_server_already_running_it(
    stacks: dict[str, dict[str, Any]],
) -> None:
    """Where a deployment serves adapters, its endpoint picker scores LoRA affinity (gateway-api-inference-extension
    v1.5.0's lora-affinity-scorer, at the EPP's default weight): a server running the requested adapter first, then
    one with a free slot, read from vLLM's vllm:lora_requests_info (tests/test_vllm.py holds the real vLLM to
    exporting it). A deployment without adapters routes as before."""
    picker = picker_config(rendered(stacks["dev"], "serve-llama70b-vllm"), "serve-llama70b-vllm")
    assert {"type": "lora-affinity-scorer"} in picker["plugins"]
    (profile,) = picker["schedulingProfiles"]
    assert {"pluginRef": "lora-affinity-scorer", "weight": 1} in profile["plugins"]
    declared = {p.get("name", p["type"]) for p in picker["plugins"]}
    assert {p["pluginRef"] for p in profile["plugins"]} <= declared
    without = picker_config(
        rendered(stacks["prod"], "serve-llama70b-vllm"), "serve-llama70b-vllm"
    )  # prod's serves no adapter
    assert "lora-affinity-scorer" not in {p["type"] for p in without["plugins"]}


@needs_crds
def test_multi_host_vllm_forms_a_ray_cluster_with_pipeline_parallelism_over_the_hosts(
    stacks: dict[str, dict[str, Any]], envs: dict[str, Environment]
) -> None:
    slice_ = envs["dev"].slices["vllm-multihost"].slice
    template = _lws(stacks, "serve-llama70b-vllm-mh")["spec"]["leaderWorkerTemplate"]
    assert template["size"] == slice_.hosts == 4 and template["restartPolicy"] == "RecreateGroupOnPodRestart"
    leader = template["leaderTemplate"]["spec"]["containers"][0]
    worker = template["workerTemplate"]["spec"]["containers"][0]
    assert leader["args"][0] == "leader" and worker["args"] == ["worker"]
    assert "--pipeline-parallel-size=4" in leader["args"] and "--tensor-parallel-size=4" in leader["args"]
    for c in (leader, worker):
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["TPU_MULTIHOST_BACKEND"] == "ray"  # tpu-inference's executor, on every pod
        assert c["resources"]["limits"] == {"google.com/tpu": "4"}
    assert "readinessProbe" in leader and "readinessProbe" not in worker  # only the leader serves HTTP


def test_vllm_chart_refuses_parallelism_that_does_not_cover_the_chips(stacks: dict[str, dict[str, Any]]) -> None:
    _, values = release_values(stacks["dev"], "serve-llama70b-vllm")
    from infra.charts.check import ChartCheckError

    args = [a.replace("--tensor-parallel-size=8", "--tensor-parallel-size=4") for a in values["args"]]
    with pytest.raises(ChartCheckError, match="tensor x pipeline parallelism 4 x 1 must be the group's chips 1 x 8"):
        render("vllm-tpu", {**values, "args": args}, name="v", namespace="ml-serving")
    with pytest.raises(ChartCheckError, match="needs TPU_MULTIHOST_BACKEND=ray on every pod"):
        render("vllm-tpu", {**values, "hosts": 2, "chipsPerHost": 4}, name="v", namespace="ml-serving")


@needs_crds
def test_the_gateway_routes_to_an_inference_pool_of_the_servers(stacks: dict[str, dict[str, Any]]) -> None:
    objects = rendered(stacks["dev"], "serve-llama70b-vllm")
    gateway, route, pool = (one_of_kind(objects, k) for k in ("Gateway", "HTTPRoute", "InferencePool"))
    assert gateway["spec"]["gatewayClassName"] == "gke-l7-rilb"
    assert route["spec"]["parentRefs"][0]["name"] == gateway["metadata"]["name"]
    assert route["spec"]["rules"][0]["backendRefs"] == [
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": pool["metadata"]["name"]}
    ]
    server = one_of_kind(objects, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    labels = server["metadata"]["labels"]
    assert all(labels[k] == v for k, v in pool["spec"]["selector"]["matchLabels"].items())
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    assert pool["spec"]["endpointPickerRef"]["failureMode"] == "FailOpen"
    epp = one_of_kind(objects, "Deployment")
    assert epp["spec"]["template"]["spec"]["containers"][0]["image"].endswith("epp:v1.5.0")
    check = one_of_kind(objects, "HealthCheckPolicy")["spec"]["default"]["config"]["httpHealthCheck"]
    assert check == {"requestPath": "/health", "portSpecification": "USE_FIXED_PORT", "port": 8000}


def test_the_gateways_prerequisites_are_in_the_stack(stacks: dict[str, dict[str, Any]], envs: dict[str, Any]) -> None:
    """The cluster's Gateway API, the region's proxy-only subnet without flow logs, and the firewall rule that
    lets the proxies and Google's health checkers reach the servers' port (the VPC denies all other ingress)."""
    stack = stacks["dev"]
    (cluster,) = of_type(stack, "google_container_cluster").values()
    assert cluster["gateway_api_config"] == {"channel": "CHANNEL_STANDARD"}
    subnet = by_name(stack, "google_compute_subnetwork")["ml-platform-proxy-only-us-east5"]
    assert subnet["purpose"] == "REGIONAL_MANAGED_PROXY" and subnet["role"] == "ACTIVE"
    assert subnet["ip_cidr_range"] == envs["dev"].network.proxy_only_cidr and "log_config" not in subnet
    rule = by_name(stack, "google_compute_firewall")["ml-platform-proxy-only-to-servers"]
    assert rule["source_ranges"] == ["10.10.18.0/23", "35.191.0.0/16", "130.211.0.0/22"]
    assert rule["allow"] == [{"protocol": "tcp", "ports": ["8000", "9002"]}]  # the servers and the endpoint picker
    # Each capacity tier's pool of the single-host slice holds one host per server, from none (the ComputeClass
    # chooses the tier) to the autoscaler's most.
    for tier in ("vllm", "vllm-flex-start", "vllm-on-demand"):
        scaling = by_name(stack, "google_container_node_pool")[tier]["autoscaling"]
        assert (scaling["min_node_count"], scaling["max_node_count"]) == (0, 3)


def test_gkes_health_check_rules_refuse_the_extension_charts_shape(stacks: dict[str, dict[str, Any]]) -> None:
    """The inference extension's chart writes the health check's port without portSpecification; GKE's published
    CRD refuses that (its CEL rules). Checked with the CRD where it is available, and by the rule always."""
    from infra.charts.check import cel_failures, crd_openapi
    from infra.rules import RULES

    objects = rendered(stacks["dev"], "serve-llama70b-vllm")
    policy = one_of_kind(objects, "HealthCheckPolicy")
    chart_shape = copy.deepcopy(policy)
    chart_shape["spec"]["default"]["config"]["httpHealthCheck"].pop("portSpecification")
    (found,) = RULES["gke.inference-gateway-policies"].run([*objects, chart_shape], None)
    assert "a port needs portSpecification: USE_FIXED_PORT" in found.message
    if (policy["apiVersion"], policy["kind"]) in crd_openapi():
        assert cel_failures(policy) == []
        messages = " ".join(f.message for f in cel_failures(chart_shape))
        assert "port and portName must be unset" in messages


@needs_crds
def test_canary_server_is_ready_only_with_weights_and_exposes_metrics(stacks: dict[str, dict[str, Any]]) -> None:
    deployment = one_of_kind(rendered(stacks["dev"], "serve-canary"), "Deployment")
    pod = deployment["spec"]["template"]
    container = pod["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert pod["metadata"]["annotations"]["prometheus.io/path"] == "/metrics"
    assert "--checkpoint-dir=/data/checkpoints/canary" in container["args"]


# --- the fit check --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parameters_b", "precision", "accelerator", "topology", "fits"),
    [
        (175, "bf16", "v5e", "4x8", True),  # Saxml's 175B test model: 350 GB on 32 x 16 GB
        (175, "bf16", "v5e", "2x4", False),  # ... not on 8 chips (128 GB)
        (405, "int8", "v6e", "4x4", True),  # Llama 3.1 405B int8: 405 GB on 16 x 32 GB
        (405, "bf16", "v6e", "4x4", False),  # 810 GB in bf16
    ],
)
def test_fit_check_matches_the_seeds(
    parameters_b: float, precision: str, accelerator: str, topology: str, fits: bool
) -> None:
    model = ServedModel(name="m", parameters_b=parameters_b, precision=precision, kv_cache_gb=0)
    assert (model.fit_problem("s", tpu_slice(accelerator, topology)) is None) is fits


def _load(tmp_path: Path, data: dict[str, Any]) -> Environment:
    path = tmp_path / "dev.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_environment(path)


def _problems(tmp_path: Path, data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, data)
    assert str(tmp_path / "dev.yaml") in str(err.value)
    return err.value.problems


def test_a_model_too_big_for_its_slice_fails_loading_with_the_arithmetic(tmp_path: Path) -> None:
    data = copy.deepcopy(DEV)
    data["slices"]["sax-b"]["topology"] = "2x4"  # 8 chips x 16 GB = 128 GB
    problems = _problems(tmp_path, data)
    assert problems == [
        "serving.saxml.model: '175B bf16': lmcloudspmd175b: 175B parameters in bf16 need 350 GB of weights + "
        "100 GB of KV cache = 450 GB, more than the 128 GB of HBM of slice 'sax-b' (v5litepod-8: 8 chips x 16 GB); "
        "the smallest v5e slice that holds it is 4x8 (32 chips, 512 GB), or lower kv_cache_gb or the precision "
        f"[rule models.weights-fit-the-slice (MaxText / vLLM / Saxml (TPU HBM), refused at engine-start); source: "
        f"{RULES['models.weights-fit-the-slice'].source}]"
    ]


def test_the_kv_cache_budget_counts(tmp_path: Path) -> None:
    data = copy.deepcopy(DEV)
    data["serving"]["llama405b"]["model"]["kv_cache_gb"] = 120  # 405 + 120 > 512
    (problem,) = _problems(tmp_path, data)
    assert problem.startswith("serving.llama405b.model:") and "= 525 GB, more than the 512 GB" in problem


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (
            lambda d: d["serving"]["llama70b-vllm"].update(tensor_parallel_size=4),
            "serving.llama70b-vllm.tensor_parallel_size: 4: tensor x pipeline parallelism (4 x 1) must be the "
            "slice's 8 chips",
        ),
        (
            lambda d: d["slices"]["decode"].update(machine_type="ct6e-standard-8t"),
            "serving.llama70b-disagg.decode_slice: 'decode': prefill and decode slices must have one shape",
        ),
        (
            lambda d: d["serving"]["llama405b"].update(prefill_slice="prefill"),
            "give either `slice`, or `prefill_slice` and `decode_slice`",
        ),
        (
            lambda d: d["identities"]["saxml"]["bucket_roles"].update(models="roles/storage.objectViewer"),
            "Saxml's identity gets roles/storage.objectAdmin on bucket 'saxml' and no other role (remove models)",
        ),
        (
            lambda d: d["identities"]["saxml"].update(mode="direct"),
            "Saxml runs as a Google service account: use mode impersonation",
        ),
        (
            lambda d: d["release"]["controllers"].pop("lws"),
            "(jetstream, chart jetstream-pathways) creates custom resources of the lws controller",
        ),
        (
            lambda d: d["serving"]["llama405b"]["conversion"].update(model_size="llama4-400b"),
            "llama3.1-405b",
        ),
        (
            lambda d: d["serving"]["canary"].update(bucket="datasets"),
            "serving.canary.identity: 'serving': has no role on bucket 'datasets'",
        ),
        (
            lambda d: d["serving"]["saxml"].update(slices=["sax-a", "a3mega"]),
            "serving.saxml.slices[1]: 'a3mega': serving here runs on TPU slices",
        ),
        (
            lambda d: d["serving"]["llama405b"].update(engine="triton"),
            "'triton'",
        ),
    ],
)
def test_bad_serving_configurations_are_refused(tmp_path: Path, mutate: Any, fragment: str) -> None:
    data = copy.deepcopy(DEV)
    mutate(data)
    problems = _problems(tmp_path, data)
    assert any(fragment in p for p in problems), problems


# --- the Saxml client -------------------------------------------------------------------------------------


@pytest.fixture
def saxml_http() -> Iterator[tuple[str, list[tuple[str, str, Any]]]]:
    """A stand-in for Saxml's HTTP server that records each request and answers with JSON."""
    seen: list[tuple[str, str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"null")
            seen.append((self.command, self.path, body))
            payload = json.dumps({"ok": True, "path": self.path}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()


def test_saxml_client_publishes_lists_generates_and_unpublishes(
    saxml_http: tuple[str, list[tuple[str, str, Any]]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, seen = saxml_http
    for action in ("publish", "list", "generate", "unpublish"):
        argv = [action, "--env", "dev", "--url", url] + (
            ["--prompt", "How many days are in a week?"] * (action == "generate")
        )
        assert saxml.main(argv) == 0
        printed = json.loads(capsys.readouterr().out)
        assert printed["answer"]["ok"] is True
    model = "/sax/saxml/lmcloudspmd175b"
    assert seen == [
        (
            "POST",
            "/publish",
            {
                "model": model,
                "model_path": "saxml.server.pax.lm.params.lm_cloud.LmCloudSpmd175B32Test",
                "checkpoint": "None",
                "replicas": 2,
            },
        ),
        ("GET", "/listcell", {"model": model}),
        ("POST", "/generate", {"model": model, "query": "How many days are in a week?"}),
        ("POST", "/unpublish", {"model": model}),
    ]


def test_saxml_client_errors_are_clear(capsys: pytest.CaptureFixture[str]) -> None:
    assert saxml.main(["generate", "--env", "dev", "--url", "http://127.0.0.1:9"]) == 2
    assert "generate needs --prompt" in capsys.readouterr().err
    assert saxml.main(["list", "--env", "dev", "--url", "http://127.0.0.1:9"]) == 2
    assert "cannot reach the Saxml HTTP server at http://127.0.0.1:9" in capsys.readouterr().err
    assert saxml.main(["list", "--env", "dev", "--deployment", "llama405b"]) == 2
    assert "no Saxml deployment 'llama405b'; Saxml deployments: saxml" in capsys.readouterr().err
    d = load_environment(ENVIRONMENTS_DIR / "dev.yaml").serving["saxml"]
    assert isinstance(d, SaxmlServing)
