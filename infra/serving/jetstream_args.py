"""JetStream-MaxText server arguments, as the GKE JetStream + Pathways tutorial passes them.

Light on purpose: the environment rules (infra/rules, run whenever an environment loads, also inside
the images) compute them, so nothing here may import cdktf.
"""

from __future__ import annotations

import math

from infra.catalogue.models import MODELS
from infra.config import Environment, JetStreamServing


def checkpoint_dir(d: JetStreamServing) -> str:
    """Where the converted checkpoint is read from, inside the bucket."""
    return f"{d.checkpoint_path}/int8" if d.model.precision == "int8" else f"{d.checkpoint_path}/bf16/0/items"


def maxtext_serving_args(env: Environment, d: JetStreamServing) -> list[str]:
    """JetStream-MaxText server arguments, as the GKE JetStream + Pathways tutorial passes them.

    Parallelism over one slice's chips: tensor parallelism takes the largest
    share of the chips that divides the model's KV heads (Llama 3.1 405B and
    Llama 2 70B have 8), the rest goes to autoregressive parallelism. On a
    v6e 4x4 that is the tutorial's ici_tensor_parallelism=8 x
    ici_autoregressive_parallelism=2. The model's own config file and
    tokenizer come from `infra/catalogue/models.py`.
    """
    first = env.slices[d.slice_keys[0]].slice
    arch = MODELS[d.model.catalogue_name]
    tensor = math.gcd(arch.kv_heads, first.chips)
    args = [
        arch.serving_config,
        f"model_name={d.model.catalogue_name}",
        f"tokenizer_path={arch.tokenizer}",
        f"load_parameters_path=gs://{env.bucket_name(d.bucket)}/{checkpoint_dir(d)}",
        f"max_prefill_predict_length={d.max_prefill_length}",
        f"max_target_length={d.max_target_length}",
        f"per_device_batch_size={d.per_device_batch_size}",
        "ici_fsdp_parallelism=1",
        f"ici_autoregressive_parallelism={first.chips // tensor}",
        f"ici_tensor_parallelism={tensor}",
        "scan_layers=false",
        "weight_dtype=bfloat16",
        "async_checkpointing=false",
        "steps=1",
        "enable_single_controller=true",
        "enable_model_warmup=true",
    ]
    if d.model.precision == "int8":
        args += ["quantization=int8", "quantize_kvcache=true", "checkpoint_is_quantized=true"]
    if d.slice is None:
        args += ["inference_server=ExperimentalMaxtextDisaggregatedServer_8", "stack_prefill_result_cache=True"]
    return args
