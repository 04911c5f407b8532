"""vLLM on TPU (vllm-tpu / tpu-inference): what makes a server restart forever or lose its compiled programs."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infra.catalogue.accelerators import Slice
from infra.catalogue.models import MODELS
from infra.config.serving import VllmServing
from infra.rules import Finding, containers, pod_templates, probe_budget, rule, where
from infra.rules.manifest_subject import at_most, autoscaled
from workloads.serving import vllm_args

if TYPE_CHECKING:
    from infra.config import Environment

CACHE_ENV = "VLLM_XLA_CACHE_PATH"
# A cold start: the weights through FUSE plus compiling every program from nothing. tpu-inference PR #3408
# (2026-08) measured about 30 minutes cold for a 70B model and raised its cold-start timeout to 2400 s;
# vllm PR #7533: 10-30 minutes first run. Twice the measured compile leaves room for the load.
COLD_START_S = 3600
TPU_INFERENCE = "vllm-project/tpu-inference"
GKE_VLLM_GUIDE = "https://cloud.google.com/kubernetes-engine/docs/tutorials/serve-vllm-tpu"


LWS_GROUP_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"


def _per_pod(container: dict[str, Any], value: str) -> bool:
    """Whether an env value differs per pod of a LeaderWorkerSet: it names ($(VAR)) a variable from the group
    index label and one from the worker index label."""
    fields = {
        e.get("name"): str(((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", ""))
        for e in container.get("env") or []
    }
    named = [fields.get(ref, "") for ref in re.findall(r"\$\((\w+)\)", value)]
    return any(LWS_GROUP_LABEL in f for f in named) and any(LWS_WORKER_LABEL in f for f in named)


def _vllm_containers(objects: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], str, dict, dict]]:
    """(object, path, pod spec, container) of every container that runs vLLM."""
    for obj in objects:
        for path, template in pod_templates(obj):
            spec = template.get("spec") or {}
            for cpath, c in containers(spec):
                if "vllm" in " ".join(c.get("command") or []) or "vllm" in str(c.get("image", "")):
                    yield obj, f"{path}.spec.{cpath}", spec, c


@rule(
    id="vllm.startup-probe-covers-cold-compile",
    system="vLLM on TPU / kubelet",
    layer="pod-start",
    summary=(
        f"A vLLM server's startup probe allows at least {COLD_START_S} s: loading the weights and compiling from "
        "nothing takes about 30 minutes for a 70B model, and a failed startup probe restarts it from the start."
    ),
    source=(
        f"{TPU_INFERENCE} PR #3408 (cold-cache start about 30 min; timeout raised from 960 s to 2400 s); "
        "vllm-project/vllm PR #7533 (first run 10-30 min, warm cache 1-3 min); "
        "https://kubernetes.io/docs/concepts/configuration/liveness-readiness-startup-probes/"
    ),
    subject="manifest",
)
def _vllm_startup(objects: list[dict[str, Any]], ctx: Any) -> Iterator[Finding]:
    for obj, path, _spec, c in _vllm_containers(objects):
        probe = c.get("startupProbe")
        budget = probe_budget(probe) if probe else None
        if budget is not None and budget < COLD_START_S:
            yield Finding(f"{where(obj)}: {path}.startupProbe", probe, f"allows {budget} s; at least {COLD_START_S} s")


@rule(
    id="vllm.xla-cache-persistent-single-writer",
    system="vLLM on TPU",
    layer="engine-start",
    summary=(
        f"{CACHE_ENV} is on a persistent volume (not the container's file system or an emptyDir), and a "
        "writable cache path has one writer: a Deployment of one replica replaced with Recreate, or a path per pod "
        "of a LeaderWorkerSet (from its group and worker index labels)."
    ),
    source=(
        f"{TPU_INFERENCE} tpu_inference/runner/compilation_manager.py (jax_compilation_cache_dir = "
        f"{CACHE_ENV}); {GKE_VLLM_GUIDE} (replicas sharing {CACHE_ENV}: 'RuntimeError: filesystem error: cannot "
        "create directories')"
    ),
    subject="manifest",
)
def _vllm_cache(objects: list[dict[str, Any]], ctx: Any) -> Iterator[Finding]:
    scaled = autoscaled(objects)
    for obj, path, spec, c in _vllm_containers(objects):
        env = {e.get("name"): e.get("value") for e in c.get("env") or []}
        cache = env.get(CACHE_ENV)
        at = f"{where(obj)}: {path}.env.{CACHE_ENV}"
        if cache is None:
            yield Finding(at, None, "not set: the cache goes to the container's home and is lost on every restart")
            continue
        mounts = [m for m in c.get("volumeMounts") or [] if str(cache).startswith(m["mountPath"])]
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        mount = max(mounts, key=lambda m: len(m["mountPath"]), default=None)
        volume = volumes.get(mount["name"]) if mount else None
        if mount is None or volume is None or not ("csi" in volume or "persistentVolumeClaim" in volume):
            yield Finding(at, cache, "not on a persistent volume: every restart compiles from nothing")
            continue
        writable = not mount.get("readOnly") and not (volume.get("csi") or {}).get("readOnly")
        if not writable:
            continue
        # An autoscaled object runs up to its HorizontalPodAutoscaler's maxReplicas.
        replicas = int((at_most(obj, scaled).get("spec") or {}).get("replicas", 1))
        strategy = ((obj.get("spec") or {}).get("strategy") or {}).get("type", "RollingUpdate")
        if obj.get("kind") == "LeaderWorkerSet":
            size = int(obj["spec"]["leaderWorkerTemplate"].get("size", 1))
            if (replicas > 1 or size > 1) and not _per_pod(c, str(cache)):
                yield Finding(
                    at,
                    cache,
                    f"{replicas} group(s) of {size} pod(s) write one path: make it per pod, from the group and worker "
                    "index labels the LeaderWorkerSet sets (an env var from metadata.labels['"
                    f"{LWS_GROUP_LABEL}'] and one from '{LWS_WORKER_LABEL}')",
                )
            continue
        if replicas > 1:
            yield Finding(f"{where(obj)}: spec.replicas", replicas, "more than one writer of the same cache path")
        if obj.get("kind") == "Deployment" and strategy != "Recreate":
            yield Finding(
                f"{where(obj)}: spec.strategy.type",
                strategy,
                "must be Recreate: a rolling update runs the old and the new pod, two writers",
            )


@rule(
    id="vllm.tensor-parallel-divides-heads",
    system="vLLM",
    layer="engine-start",
    summary="--tensor-parallel-size (each host's chips by default) divides the model's attention heads.",
    source=(
        "vllm-project/vllm vllm/config (verify_with_parallel_config): 'Total number of attention heads must be "
        "divisible by tensor parallel size'"
    ),
    subject="environment",
)
def _vllm_heads(env: Environment) -> Iterator[Finding]:
    for name, d, slice_ in _deployments(env):
        arch = MODELS.get(d.model.catalogue_name)
        tp, _ = vllm_args.parallelism(d, slice_)
        if arch is not None and arch.query_heads % tp:
            yield Finding(
                f"serving.{name}.slice",
                d.slice,
                f"{arch.query_heads} heads are not divisible by tensor parallelism {tp}",
            )


def _deployments(env: Environment) -> Iterator[tuple[str, VllmServing, Slice]]:
    for name, d in env.serving.items():
        if isinstance(d, VllmServing) and d.slice in env.slices:
            yield name, d, env.slices[d.slice].slice


SUPPORT = vllm_args.SUPPORT_SOURCE


@rule(
    id="vllm.support-matrix",
    system="vLLM on TPU (tpu-inference)",
    layer="engine-start",
    summary=(
        "A vLLM deployment serves a model its TPU generation's support matrix marks accurate (✅), with a "
        "parallelism the matrix marks tested: across hosts, pipeline parallelism over the hosts and tensor "
        "parallelism within each (tensor parallelism across hosts is ❓ Untested); tensor x pipeline = the chips."
    ),
    source=(
        f"{SUPPORT.format(gen='<gen>', matrix='model_support_matrix')}, parallelism_support_matrix.csv (v6e, v7x); "
        "tpu_inference/executors/ray_distributed_executor.py ('Cannot use PP across hosts, please set "
        "--pipeline-parallel-size to 1 or N')"
    ),
    subject="environment",
)
def _support(env: Environment) -> Iterator[Finding]:
    for name, d, slice_ in _deployments(env):
        gen = slice_.accelerator.name
        where = f"serving.{name}"
        if gen not in vllm_args.SUPPORTED_MODELS:
            known = ", ".join(vllm_args.MATRIX_GENERATION)
            yield Finding(
                f"{where}.slice", d.slice, f"tpu-inference publishes no support matrix for {gen}; it has {known}"
            )
            continue
        if d.model.catalogue_name not in vllm_args.SUPPORTED_MODELS[gen]:
            matrix = SUPPORT.format(gen=vllm_args.MATRIX_GENERATION[gen], matrix="model_support_matrix")
            own = (
                ""
                if d.model.architecture
                else (
                    "; a model under a name of its own (fine-tuned): keep model.name and say which of these it is "
                    "in model.architecture"
                )
            )
            yield Finding(
                f"{where}.{d.model.catalogue_field}",
                d.model.catalogue_name,
                f"not a model {matrix} marks ✅ on {gen}: {', '.join(vllm_args.SUPPORTED_MODELS[gen])}{own}",
            )
        tp, pp = vllm_args.parallelism(d, slice_)
        if slice_.multi_host and (pp != slice_.hosts or tp > slice_.chips_per_host):
            yield Finding(
                f"{where}.pipeline_parallel_size",
                f"tensor {tp} x pipeline {pp}",
                f"across {slice_.hosts} hosts only pipeline parallelism over the hosts is tested (pipeline "
                f"{slice_.hosts}, tensor {slice_.chips_per_host} within each host)",
            )


def serve_flags() -> set[str]:
    """Every option of `vllm serve` at the pinned version (workloads/serving/vllm-serve-flags.txt, recorded from the
    real parser; tests/test_vllm.py regenerates it)."""
    lines = vllm_args.FLAGS_FILE.read_text().splitlines()
    return {line for line in lines if line.startswith("--")}


@rule(
    id="vllm.flags-known",
    system="vLLM",
    layer="engine-start",
    summary=(
        "Every flag a vLLM deployment passes is one of `vllm serve`'s full option names, once: vLLM's parser "
        "refuses others, silently takes a prefix of a real flag (--max-num-seq for --max-num-seqs) and keeps the "
        "last of a flag given twice (extra_args over what the platform sets), a flag and its --no- form included."
    ),
    source=(
        f"vLLM {vllm_args.VLLM_VERSION} `vllm serve` parser (vllm/entrypoints/launchers/cli_args.py "
        "make_arg_parser, FlexibleArgumentParser with argparse's allow_abbrev), recorded in "
        "workloads/serving/vllm-serve-flags.txt"
    ),
    subject="environment",
)
def _flags(env: Environment) -> Iterator[Finding]:
    known = serve_flags()
    for name, d, _slice in _deployments(env):
        platform = {vllm_args.flag(a) for a in vllm_args.platform_args(env, name)}
        for arg in vllm_args.serve_args(env, name):
            flag = vllm_args.flag(arg)
            if flag not in known:
                prefix = sorted(k for k in known if k.startswith(flag))
                why = f"only a prefix of {', '.join(prefix)}" if prefix else "not an option of `vllm serve`"
                yield Finding(f"serving.{name} vllm args", flag, why)

        # A boolean flag and its --no- form set one option (argparse's BooleanOptionalAction): the last one wins.
        def dest(flag: str) -> str:
            positive = "--" + flag.removeprefix("--no-")
            return positive if flag.startswith("--no-") and positive in known else flag

        platform = {dest(f) for f in platform}
        for i, arg in enumerate(d.extra_args):
            flag = dest(vllm_args.flag(arg))
            if flag in platform or flag in (dest(vllm_args.flag(a)) for a in d.extra_args[:i]):
                yield Finding(
                    f"serving.{name}.extra_args[{i}]",
                    arg,
                    f"{flag} is given already ({'by the platform' if flag in platform else 'earlier'}): "
                    "argparse silently keeps the last one",
                )


# Loaders vLLM registers (vllm/model_executor/model_loader/__init__.py) and those tpu-inference adds.
LOADERS = {
    "auto", "hf", "dummy", "fastsafetensors", "instanttensor", "ipc_cache", "mistral", "modelexpress", "npcache",
    "pt", "runai_streamer", "runai_streamer_sharded", "safetensors", "sharded_state", "tensorizer",
    "tpu_streaming_loader", "jax_dummy", "pathways_dummy",
}  # fmt: skip
# Loaders that read object storage URIs (gs://, s3://); every other reads a local path.
STREAMING_LOADERS = {"runai_streamer", "runai_streamer_sharded"}


@rule(
    id="vllm.load-format",
    system="vLLM",
    layer="engine-start",
    summary=(
        "--load-format names a loader vLLM or tpu-inference registers (the parser takes any string; an unknown "
        "one fails only at load), and a model at a gs:// URI is read by the Run:ai streamer."
    ),
    source=(
        "vllm/model_executor/model_loader/__init__.py ('Load format `x` is not supported'); tpu-inference "
        "models/vllm/vllm_model_loader.py (runai_streamer, tpu_streaming_loader), weight_utils.py, "
        "pathways_dummy_loader.py; https://docs.vllm.ai/en/latest/models/extensions/runai_model_streamer.html"
    ),
    subject="environment",
)
def _load_format(env: Environment) -> Iterator[Finding]:
    for name, _d, _slice in _deployments(env):
        args = dict(a.split("=", 1) for a in vllm_args.serve_args(env, name) if "=" in a)
        loader = args.get("--load-format", "auto")
        if loader not in LOADERS:
            yield Finding(
                f"serving.{name} vllm args.--load-format", loader, f"not a loader: {', '.join(sorted(LOADERS))}"
            )
        elif args.get("--model", "").startswith(("gs://", "s3://")) and loader not in STREAMING_LOADERS:
            yield Finding(
                f"serving.{name} vllm args.--load-format",
                loader,
                f"the model is at {args['--model']}: only {', '.join(sorted(STREAMING_LOADERS))} read object storage",
            )


@rule(
    id="vllm.multihost-executor-env",
    system="vLLM on TPU (tpu-inference)",
    layer="engine-start",
    summary=(
        "Every pod of a multi-host vLLM group sets TPU_MULTIHOST_BACKEND=ray: tpu-inference chooses its executor "
        "from it (without it, one host's executor, whatever --distributed-executor-backend says)."
    ),
    source=(
        "vllm-project/tpu-inference tpu_inference/platforms/tpu_platform.py (check_and_update_config: "
        "TPU_MULTIHOST_BACKEND 'ray' -> RayDistributedExecutor, empty -> 'uni'); tpu_inference/envs.py"
    ),
    subject="manifest",
    kinds=("LeaderWorkerSet",),
)
def _multihost_env(objects: list[dict[str, Any]], ctx: Any) -> Iterator[Finding]:
    for obj in objects:
        if int(obj["spec"]["leaderWorkerTemplate"].get("size", 1)) < 2:
            continue
        for path, template in pod_templates(obj):
            for cpath, c in containers(template.get("spec") or {}):
                if "vllm" not in str(c.get("image", "")):
                    continue
                env = {e.get("name"): e.get("value") for e in c.get("env") or []}
                if env.get("TPU_MULTIHOST_BACKEND") != "ray":
                    yield Finding(
                        f"{where(obj)}: {path}.spec.{cpath}.env.TPU_MULTIHOST_BACKEND",
                        env.get("TPU_MULTIHOST_BACKEND"),
                        "must be ray on every pod of a multi-host group",
                    )


# vllm/entrypoints/serve/middleware/authenticate.py: the API key guards these path prefixes only.
GUARDED = ("/v1", "/v2", "/inference", "/cohere")


@rule(
    id="vllm.probes-open-paths",
    system="vLLM / kubelet",
    layer="pod-start",
    summary=(
        "A vLLM server with an API key is probed on paths the key does not guard (/health): a probe of /v1 "
        "gets 401 and the kubelet restarts a healthy server."
    ),
    source="vllm/entrypoints/serve/middleware/authenticate.py (GUARDED_PREFIX = /v1, /v2, /inference, /cohere)",
    subject="manifest",
)
def _open_probes(objects: list[dict[str, Any]], ctx: Any) -> Iterator[Finding]:
    for obj, path, _spec, c in _vllm_containers(objects):
        if not any(e.get("name") == "VLLM_API_KEY" for e in c.get("env") or []):
            continue
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            probe_path = str(((c.get(kind) or {}).get("httpGet") or {}).get("path", ""))
            if probe_path.startswith(GUARDED):
                yield Finding(
                    f"{where(obj)}: {path}.{kind}.httpGet.path", probe_path, "behind the API key: use /health"
                )


@rule(
    id="vllm.context-fits-model",
    system="vLLM",
    layer="engine-start",
    summary="--max-model-len is at most the model's own context (max_position_embeddings of its config).",
    source=(
        "vllm/config/model.py (get_and_verify_max_len: 'User-specified max_model_len ... is greater than the "
        "derived max_model_len'); the models' config.json (infra/catalogue/models.py)"
    ),
    subject="environment",
)
def _context(env: Environment) -> Iterator[Finding]:
    for name, d, _slice in _deployments(env):
        arch = MODELS.get(d.model.catalogue_name)
        if arch is not None and arch.hf is not None and d.max_model_len > arch.hf.max_position_embeddings:
            yield Finding(
                f"serving.{name}.max_model_len",
                d.max_model_len,
                f"{d.model.name} takes at most {arch.hf.max_position_embeddings} positions",
            )


# tpu-inference's TPU platform refuses every other connector at start; of these, the offload ones keep the KV
# cache in the host's memory for one server (kv_both), the others move it from a prefill to a decode server.
TPU_KV_CONNECTORS = ("TPUConnector", "TPUConnectorHMA", "TPUOffloadConnector", "RaidenOffloadConnector")
# The worker counts an offload connector's staging buffer against HBM only when the module path is exactly this.
KV_OFFLOAD_MODULES = {
    "TPUOffloadConnector": "tpu_inference.offload.tpu_offload_connector",
    "RaidenOffloadConnector": "tpu_inference.offload.raiden_offload_connector",
}


@rule(
    id="vllm.kv-connector-on-tpu",
    system="vLLM on TPU (tpu-inference)",
    layer="engine-start",
    summary=(
        "A --kv-transfer-config is a JSON object naming a KV connector the TPU platform accepts; on one server "
        "(kv_both) an offload connector (the prefill/decode ones need a producer and a consumer server: "
        "disaggregated serving stays with JetStream here), with the module path the TPU worker compares "
        "(another path loads the same class but leaves its staging buffer out of the HBM budget)."
    ),
    source=(
        f"{TPU_INFERENCE} @ b8692ff0 tpu_inference/platforms/tpu_platform.py (check_and_update_config: "
        "'Unsupported kv_connector ... for the TPU platform'); tpu_inference/worker/tpu_worker.py "
        "(determine_available_memory: is_offload_connector); examples/offload/gke, examples/disagg"
    ),
    subject="environment",
)
def _kv_connector(env: Environment) -> Iterator[Finding]:
    for name, d, _slice in _deployments(env):
        for i, arg in enumerate(d.extra_args):
            if vllm_args.flag(arg) != "--kv-transfer-config":
                continue
            field = f"serving.{name}.extra_args[{i}]"
            try:
                config = json.loads(arg.split("=", 1)[1]) if "=" in arg else None
            except json.JSONDecodeError as err:
                config, why = None, f"not JSON: {err}"
            else:
                why = "not a JSON object"
            if not isinstance(config, dict):
                yield Finding(field, arg, f"--kv-transfer-config={{...}}: {why}")
                continue
            connector, role = config.get("kv_connector"), config.get("kv_role")
            module = config.get("kv_connector_module_path")
            if connector not in TPU_KV_CONNECTORS:
                yield Finding(
                    f"{field}.kv_connector", connector, f"the TPU platform accepts {', '.join(TPU_KV_CONNECTORS)}"
                )
            elif connector not in KV_OFFLOAD_MODULES or role != "kv_both":
                yield Finding(
                    f"{field}.kv_role",
                    f"{connector} {role}",
                    "one server takes an offload connector as kv_both "
                    f"({', '.join(KV_OFFLOAD_MODULES)}); prefill/decode is JetStream's disaggregated deployment",
                )
            elif module != KV_OFFLOAD_MODULES[connector]:
                yield Finding(
                    f"{field}.kv_connector_module_path", module, f"{connector} needs {KV_OFFLOAD_MODULES[connector]}"
                )


# Deployment fields the platform turns into `vllm serve` flags (vllm_args.platform_args).
_FIELD_OF_FLAG = {
    "--max-model-len": "max_model_len",
    "--max-num-batched-tokens": "max_num_batched_tokens",
    "--max-num-seqs": "max_num_seqs",
    "--tensor-parallel-size": "tensor_parallel_size",
    "--pipeline-parallel-size": "pipeline_parallel_size",
    "--model": "model_path",
    "--served-model-name": "model.name",
}


def _arg_fields(env: Environment, name: str, d: VllmServing) -> list[tuple[str, str]]:
    """(field path, argument) of every `vllm serve` argument of deployment `name`: an extra_args entry at its
    index, a platform argument at the deployment field it comes from."""
    fields = [
        (f"serving.{name}" + (f".{_FIELD_OF_FLAG[f]}" if (f := vllm_args.flag(a)) in _FIELD_OF_FLAG else ""), a)
        for a in vllm_args.platform_args(env, name)
    ]
    return fields + [(f"serving.{name}.extra_args[{i}]", a) for i, a in enumerate(d.extra_args)]


# `vllm serve` options that move the server off plain HTTP on its TCP port, where the chart's probes (httpGet,
# scheme HTTP, port http), the Service and the Inference Gateway reach it.
UNREACHABLE_FLAGS = {
    "--ssl-certfile": "serves HTTPS",
    "--ssl-keyfile": "serves HTTPS",
    "--ssl-ca-certs": "asks clients for certificates",
    "--ssl-cert-reqs": "asks clients for certificates",
    "--uds": "listens on a Unix socket instead of its port",
}


@rule(
    id="vllm.served-where-probes-reach",
    system="vLLM / kubelet / Inference Gateway",
    layer="pod-start",
    summary=(
        "A vLLM deployment serves plain HTTP on its port: TLS options (--ssl-*) or a Unix socket (--uds) leave "
        "the chart's HTTP probes failing (the kubelet restarts the server forever) and the Service and the "
        "Inference Gateway unable to reach it. TLS ends at the gateway's load balancer."
    ),
    source=(
        f"vLLM {vllm_args.VLLM_VERSION} `vllm serve` options --ssl-keyfile, --ssl-certfile, --ssl-ca-certs, "
        "--ssl-cert-reqs, --uds (workloads/serving/vllm-serve-flags.txt); workloads/charts/vllm-tpu/templates/"
        "_helpers.tpl (httpGet probes on port http); https://kubernetes.io/docs/tasks/configure-pod-container/"
        "configure-liveness-readiness-startup-probes/ (httpGet scheme defaults to HTTP)"
    ),
    subject="environment",
)
def _reachable(env: Environment) -> Iterator[Finding]:
    for name, i, arg, flag in _extra_flags(env):
        if flag in UNREACHABLE_FLAGS:
            yield Finding(
                f"serving.{name}.extra_args[{i}]",
                arg,
                f"{flag} {UNREACHABLE_FLAGS[flag]}: the chart's HTTP probes, its Service and the gateway cannot "
                "reach the server; remove it (TLS ends at the gateway)",
            )


def _extra_flags(env: Environment) -> Iterator[tuple[str, int, str, str]]:
    """(deployment, index, argument, flag) of every extra_args entry of the vLLM deployments."""
    for name, d, _slice in _deployments(env):
        for i, arg in enumerate(d.extra_args):
            yield name, i, arg, vllm_args.flag(arg)


@rule(
    id="vllm.args-valid",
    system="vLLM",
    layer="engine-start",
    summary=(
        "Every `vllm serve` argument of a deployment is one vLLM's parser and config take: a boolean flag alone "
        "(no value), an int or float that converts, one of an option's choices, JSON that parses, a value inside "
        "its config field's bounds (--gpu-memory-utilization in (0, 1]), and the cross-field checks of vLLM's "
        "config (--max-num-seqs <= --max-num-batched-tokens; with chunked prefill off, --max-num-batched-tokens >= "
        "--max-model-len); held at load from a description generated from the "
        "pinned vLLM, so `make plan` needs no vLLM environment."
    ),
    source=vllm_args.OPTIONS_SOURCE
    + " (make vllm-options; vllm/engine/arg_utils.py, vllm/config/cache.py, vllm/config/scheduler.py "
    "verify_max_model_len)",
    subject="environment",
)
def _args_valid(env: Environment) -> Iterator[Finding]:
    for name, d, _slice in _deployments(env):
        fields = _arg_fields(env, name, d)
        for field, arg in fields:
            flag, _, value = arg.partition("=")
            why = vllm_args.value_problem(flag, value if "=" in arg else None)
            if why:
                yield Finding(field, arg, why)
        last = {vllm_args.flag(a): (f, a) for f, a in fields}  # argparse keeps the last of a flag
        for flag, why in vllm_args.cross_problems([a for _, a in fields]):
            field, arg = last.get(flag, (f"serving.{name}", flag))
            yield Finding(field, arg, why)
        # vllm/config/scheduler.py verify_max_model_len: without chunked prefill a prompt is prefilled in one
        # batch, so the batch must hold the longest sequence.
        switches = [vllm_args.flag(a) for _, a in fields if vllm_args.flag(a).endswith("-enable-chunked-prefill")]
        values = {vllm_args.flag(a): a.partition("=")[2] for _, a in fields if "=" in a}
        tokens, length = values.get("--max-num-batched-tokens", ""), values.get("--max-model-len", "")
        chunked_off = bool(switches) and switches[-1] == "--no-enable-chunked-prefill"
        if chunked_off and tokens.isdigit() and length.isdigit() and int(tokens) < int(length):
            field, arg = last["--max-num-batched-tokens"]
            yield Finding(
                field,
                arg,
                f"below --max-model-len={length} with chunked prefill off (--no-enable-chunked-prefill): vLLM "
                "refuses to start (max_num_batched_tokens is smaller than max_model_len); raise it, or keep "
                "chunked prefill on",
            )


# `vllm serve` options whose value is a credential: written in the arguments, it lands in the Helm release and so
# in Terraform state in clear text (and --api-key overrides the Secret-backed key the chart sets).
SECRET_FLAGS = {
    "--api-key": "the server's API key: set serving.<key>.api_key_secret (a Kubernetes Secret) instead",
    "--hf-token": "a Hugging Face token: the weights stream from the environment's bucket; give the flag alone to "
    "read HF_TOKEN from the pod's environment",
}


@rule(
    id="vllm.no-secrets-in-args",
    system="vLLM / Terraform state",
    layer="apply",
    summary=(
        "No credential is written into a deployment's `vllm serve` arguments (--api-key, --hf-token with a value): "
        "the arguments are Helm values, kept in Terraform state in clear text, and an --api-key there overrides "
        "the Secret-backed key (VLLM_API_KEY from api_key_secret)."
    ),
    source=(
        "https://developer.hashicorp.com/terraform/language/state/sensitive-data; vllm/entrypoints/openai/cli_args.py "
        "(--api-key, else VLLM_API_KEY); vllm/engine/arg_utils.py (--hf-token: a value, or alone for HF_TOKEN)"
    ),
    subject="environment",
)
def _no_secrets(env: Environment) -> Iterator[Finding]:
    for name, i, arg, flag in _extra_flags(env):
        if flag in SECRET_FLAGS and (flag == "--api-key" or "=" in arg):
            yield Finding(f"serving.{name}.extra_args[{i}]", f"{flag}=<redacted>", SECRET_FLAGS[flag])


CHART_SCHEMA = Path(vllm_args.__file__).resolve().parent.parent / "charts" / "vllm-tpu" / "values.schema.json"


def chart_args_pattern() -> str | None:
    """The pattern the vllm-tpu chart's values schema gives each of `args`, or None."""
    schema = json.loads(CHART_SCHEMA.read_text())
    pattern = ((schema.get("properties") or {}).get("args") or {}).get("items", {}).get("pattern")
    return str(pattern) if pattern else None


@rule(
    id="vllm.args-fit-the-chart",
    system="Helm (chart vllm-tpu)",
    layer="apply",
    summary=(
        "Every `vllm serve` argument matches the pattern the vllm-tpu chart's values schema gives `args`: Helm "
        "refuses the release otherwise (a bare boolean flag, when the schema demands --flag=value)."
    ),
    source="workloads/charts/vllm-tpu/values.schema.json (properties.args.items.pattern)",
    subject="environment",
)
def _args_fit_chart(env: Environment) -> Iterator[Finding]:
    pattern = chart_args_pattern()
    if not pattern:
        return
    for name, d, _slice in _deployments(env):
        for field, arg in _arg_fields(env, name, d):
            if not re.search(pattern, arg):
                yield Finding(field, arg, f"the vllm-tpu chart's values schema takes only arguments matching {pattern}")


def _vllm_deployments(env: Environment) -> Iterator[tuple[tuple[str, str], VllmServing, Slice]]:
    """(field path, deployment, its TPU slice) of every vLLM deployment on a TPU slice of the environment."""
    for key, d in env.serving.items():
        if isinstance(d, VllmServing) and d.slice in env.slices and env.slices[d.slice].slice.kind == "tpu":
            yield ("serving", key), d, env.slices[d.slice].slice


@rule(
    id="vllm.parallelism-covers-the-slice",
    system="vLLM on TPU (tpu-inference)",
    layer="engine-start",
    summary=(
        "tensor_parallel_size x pipeline_parallel_size is the slice's chips: a server uses every chip of its "
        "group (default: tensor over each host's chips, pipeline over its hosts)."
    ),
    source=(
        "https://docs.vllm.ai/en/latest/serving/parallelism_scaling.html (the world size is tensor x pipeline); "
        f"{TPU_INFERENCE} support matrix (multi-host: pipeline over hosts)"
    ),
    subject="environment",
)
def _parallelism(env: Environment) -> Iterator[Finding]:
    for at, d, slice_ in _vllm_deployments(env):
        tp = d.tensor_parallel_size or slice_.chips_per_host
        pp = d.pipeline_parallel_size or slice_.hosts
        if tp * pp != slice_.chips:
            yield Finding(
                (*at, "tensor_parallel_size"),
                tp,
                f"tensor x pipeline parallelism ({tp} x {pp}) must be the slice's {slice_.chips} chips "
                f"({slice_.name}: {slice_.hosts} hosts x {slice_.chips_per_host})",
            )


@rule(
    id="gke.tpu.multi-host-server-per-slice",
    system="GKE TPU slices",
    layer="pod-start",
    summary=(
        "A multi-host vLLM server is a LeaderWorkerSet group on a whole slice, and a multi-host slice is a node pool "
        "of its own that GKE adds no node to: the slice's count is the most servers (replicas, or autoscaling.max)."
    ),
    source=(
        "https://cloud.google.com/kubernetes-engine/docs/concepts/tpus (a multi-host TPU slice node pool is atomic: "
        "no node is added to it; more slices are more node pools)"
    ),
    subject="environment",
)
def _server_per_slice(env: Environment) -> Iterator[Finding]:
    for at, d, slice_ in _vllm_deployments(env):
        if not slice_.multi_host:
            continue
        servers, field = (d.autoscaling.max, ("autoscaling", "max")) if d.autoscaling else (d.replicas, ("replicas",))
        count = env.slices[d.slice].count
        if servers != count:
            yield Finding(
                (*at, *field),
                servers,
                f"each server takes a whole {slice_.name} slice, a node pool of its own, and slices.{d.slice} "
                f"has count {count} (one pool per slice): set slices.{d.slice}.count to {servers}",
            )
