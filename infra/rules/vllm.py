"""vLLM on TPU (vllm-tpu / tpu-inference): what makes a server restart forever or lose its compiled programs."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from infra.catalogue.accelerators import Slice
from infra.catalogue.models import MODELS
from infra.config.serving import VllmServing
from infra.rules import Finding, containers, pod_templates, probe_budget, rule, where
from infra.rules.manifest_subject import at_most, autoscaled
from infra.serving import cold_start, vllm_args

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
    for name, d, slice_ in deployments(env):
        arch = MODELS.get(d.model.catalogue_name)
        tp, _ = vllm_args.parallelism(d, slice_)
        if arch is not None and arch.query_heads % tp:
            yield Finding(
                f"serving.{name}.slice",
                d.slice,
                f"{arch.query_heads} heads are not divisible by tensor parallelism {tp}",
            )


def deployments(env: Environment) -> Iterator[tuple[str, VllmServing, Slice]]:
    """(key, deployment, its slice) of every vLLM deployment whose slice the environment declares."""
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
    for name, d, slice_ in deployments(env):
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
    for name, d, _slice in deployments(env):
        arch = MODELS.get(d.model.catalogue_name)
        if arch is not None and arch.hf is not None and d.max_model_len > arch.hf.max_position_embeddings:
            yield Finding(
                f"serving.{name}.max_model_len",
                d.max_model_len,
                f"{d.model.name} takes at most {arch.hf.max_position_embeddings} positions",
            )


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


@rule(
    id="vllm.adapters-fit-the-slice",
    system="vLLM",
    layer="engine-start",
    summary=(
        "A vLLM deployment's LoRA adapters fit beside its model: the weights, the KV cache budget and a slot per "
        "adapter at --max-lora-rank on every LoRA layer (in bfloat16) within the slice's HBM."
    ),
    source=(
        "vllm-project/vllm vllm/lora/layers/base_linear.py create_lora_weights (per slot an A of max_lora_rank x "
        "input and a B of output x max_lora_rank on each slice of a LoRA layer, allocated at start); "
        "vllm/config/lora.py (max_loras, max_lora_rank); the models' config.json (infra/catalogue/models.py)"
    ),
    subject="environment",
)
def _adapters_fit(env: Environment) -> Iterator[Finding]:
    for name, d, slice_ in deployments(env):
        slots = vllm_args.lora_slots_gb(d)
        if slots is None or d.model.need_gb + slots <= slice_.hbm_gb:
            continue
        yield Finding(
            f"serving.{name}.adapters",
            [a.name for a in d.adapters],
            f"{len(d.adapters)} adapter slot(s) at rank {d.max_lora_rank} take {slots:.1f} GB beside "
            f"{d.model.weights_gb:g} GB of weights and {d.model.kv_cache_gb:g} GB of KV cache: "
            f"{d.model.need_gb + slots:.1f} GB, more than the {slice_.hbm_gb} GB of HBM of slice {d.slice!r}; "
            "serve fewer adapters at once, lower their rank or the KV cache, or use a larger slice",
        )


@rule(
    id="vllm.scale-to-zero",
    system="vLLM / Inference Gateway / HPA",
    layer="platform",
    summary=(
        "A deployment scales to zero (autoscaling.min 0) only where a request can wait for a first server and that "
        "wait is known: a vLLM deployment behind the gateway (its endpoint picker's flow control queues requests "
        "while no server runs, and the queue's length is what scales it up), whose model has a measured cold start "
        "on its slice (infra/catalogue/cold_starts.py) within autoscaling.cold_start_budget_s."
    ),
    source=(
        "kubernetes.io/blog/2026/09/02/kubernetes-v1-37-hpa-scale-to-zero-beta ('Kubernetes Services do not buffer "
        "requests while no Pods are ready'; from zero the HPA needs an Object or External metric); "
        "kubernetes-sigs/gateway-api-inference-extension @ v1.5.0: pkg/epp/framework/plugins/flowcontrol/"
        "saturationdetector/utilization/detector.go (no endpoints: saturation 1.0, requests held), "
        "pkg/epp/metrics/metrics.go (inference_extension_flow_control_queue_size by inference_pool), "
        "apix/config/v1alpha1/endpointpickerconfig_types.go (featureGates flowControl, defaultRequestTTL)"
    ),
    subject="environment",
)
def _scale_to_zero(env: Environment) -> Iterator[Finding]:
    for name, d in env.serving.items():
        scaling = getattr(d, "autoscaling", None)
        if scaling is None or scaling.min > 0:
            continue
        at = f"serving.{name}.autoscaling.min"
        if not isinstance(d, VllmServing):
            yield Finding(at, 0, f"scale to zero is offered for vLLM behind the gateway; engine {d.engine!r} is not")
            continue
        if not d.gateway:
            yield Finding(
                at,
                0,
                "nothing holds a request while no server runs (a Service does not buffer): set "
                f"serving.{name}.gateway: true (the endpoint picker's flow control queues it)",
            )
        warm = cold_start.vllm_warm_up(env, d)
        slice_name = env.slices[d.slice].slice.name
        if warm.measured is None:
            yield Finding(
                at,
                0,
                f"{d.model.catalogue_name} has no measured cold start on {slice_name} (infra/catalogue/"
                "cold_starts.py: read one with make status JSON=1 on a cluster that runs it)",
            )
        elif (wait := cold_start.FROM_ZERO_LAG_S + warm.seconds) > (scaling.cold_start_budget_s or 0):
            yield Finding(
                f"serving.{name}.autoscaling.cold_start_budget_s",
                scaling.cold_start_budget_s,
                f"the first request waits {wait} s: {cold_start.FROM_ZERO_LAG_S} s for the autoscaler to see it, "
                f"then {d.model.catalogue_name} on {slice_name} takes {warm.seconds} s from node to ready "
                f"({warm.basis}); more than the budget",
            )
