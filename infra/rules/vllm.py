"""vLLM on TPU (vllm-tpu / tpu-inference): what makes a server restart forever or lose its compiled programs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from infra.models import MODELS
from infra.rules import Finding, containers, pod_templates, probe_budget, rule, where

if TYPE_CHECKING:
    from infra.config import Environment

CACHE_ENV = "VLLM_XLA_CACHE_PATH"
# A cold start: the weights through FUSE plus compiling every program from nothing. tpu-inference PR #3408
# (2026-08) measured about 30 minutes cold for a 70B model and raised its cold-start timeout to 2400 s;
# vllm PR #7533: 10-30 minutes first run. Twice the measured compile leaves room for the load.
COLD_START_S = 3600
TPU_INFERENCE = "vllm-project/tpu-inference"
GKE_VLLM_GUIDE = "https://cloud.google.com/kubernetes-engine/docs/tutorials/serve-vllm-tpu"


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
        "writable cache path has one writer: one replica, replaced with Recreate."
    ),
    source=(
        f"{TPU_INFERENCE} tpu_inference/runner/compilation_manager.py (jax_compilation_cache_dir = "
        f"{CACHE_ENV}); {GKE_VLLM_GUIDE} (replicas sharing {CACHE_ENV}: 'RuntimeError: filesystem error: cannot "
        "create directories')"
    ),
    subject="manifest",
)
def _vllm_cache(objects: list[dict[str, Any]], ctx: Any) -> Iterator[Finding]:
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
        replicas = int((obj.get("spec") or {}).get("replicas", 1))
        strategy = ((obj.get("spec") or {}).get("strategy") or {}).get("type", "RollingUpdate")
        if writable and replicas > 1:
            yield Finding(f"{where(obj)}: spec.replicas", replicas, "more than one writer of the same cache path")
        if writable and obj.get("kind") == "Deployment" and strategy != "Recreate":
            yield Finding(
                f"{where(obj)}: spec.strategy.type",
                strategy,
                "must be Recreate: a rolling update runs the old and the new pod, two writers",
            )


@rule(
    id="vllm.tensor-parallel-divides-heads",
    system="vLLM",
    layer="engine-start",
    summary="--tensor-parallel-size divides the model's attention heads.",
    source=(
        "vllm-project/vllm vllm/config (verify_with_parallel_config): 'Total number of attention heads must be "
        "divisible by tensor parallel size'"
    ),
    subject="environment",
)
def _vllm_heads(env: Environment) -> Iterator[Finding]:
    for name, d in env.serving.items():
        if d.engine != "vllm":
            continue
        arch = MODELS.get(d.model.name)
        chips = env.slices[d.slice].slice.chips
        if arch is not None and arch.query_heads % chips:
            yield Finding(
                f"serving.{name}.slice", d.slice, f"{arch.query_heads} heads are not divisible by {chips} chips"
            )
