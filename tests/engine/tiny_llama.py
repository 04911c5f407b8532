"""A tiny random Llama for the conversion tests, and a runner that makes MaxText's converters accept it.

MaxText's converters know each model's Hugging Face shape from a built-in
table (`HF_MODEL_CONFIGS`); the runner puts the tiny shape under the real
model's name for the one process it runs, so the command lines stay the ones
the chart runs: `python -m tests.engine.tiny_llama <module> <args...>` runs
`python -m <module> <args...>`.
"""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import numpy as np

MODEL_NAME = "llama3.1-8b"
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, MLP, LAYERS, VOCAB = 128, 4, 4, 32, 256, 2, 256
# MaxText's side of the same shape (override_model_config lets them replace llama3.1-8b's).
MAXTEXT_OVERRIDES = (
    "override_model_config=true",
    f"base_emb_dim={HIDDEN}",
    f"base_num_query_heads={HEADS}",
    f"base_num_kv_heads={KV_HEADS}",
    f"head_dim={HEAD_DIM}",
    f"base_mlp_dim={MLP}",
    f"base_num_decoder_layers={LAYERS}",
    f"vocab_size={VOCAB}",
    "max_target_length=64",
    "max_prefill_predict_length=16",
)


def hf_config() -> dict:
    from maxtext.checkpoint_conversion.utils.hf_model_configs import HF_MODEL_CONFIGS

    config = HF_MODEL_CONFIGS[MODEL_NAME].to_dict()
    config.update(
        hidden_size=HIDDEN, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM,
        intermediate_size=MLP, num_hidden_layers=LAYERS, vocab_size=VOCAB, torch_dtype="float32",
    )  # fmt: skip
    return config


def write_hf_checkpoint(directory: Path, seed: int = 0) -> Path:
    """config.json and model.safetensors of a random Llama of the tiny shape."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    tensors = {
        "model.embed_tokens.weight": w(VOCAB, HIDDEN),
        "model.norm.weight": np.ones(HIDDEN, np.float32),
        "lm_head.weight": w(VOCAB, HIDDEN),
    }
    for i in range(LAYERS):
        p = f"model.layers.{i}"
        tensors |= {
            f"{p}.self_attn.q_proj.weight": w(HEADS * HEAD_DIM, HIDDEN),
            f"{p}.self_attn.k_proj.weight": w(KV_HEADS * HEAD_DIM, HIDDEN),
            f"{p}.self_attn.v_proj.weight": w(KV_HEADS * HEAD_DIM, HIDDEN),
            f"{p}.self_attn.o_proj.weight": w(HIDDEN, HEADS * HEAD_DIM),
            f"{p}.mlp.gate_proj.weight": w(MLP, HIDDEN),
            f"{p}.mlp.up_proj.weight": w(MLP, HIDDEN),
            f"{p}.mlp.down_proj.weight": w(HIDDEN, MLP),
            f"{p}.input_layernorm.weight": np.ones(HIDDEN, np.float32),
            f"{p}.post_attention_layernorm.weight": np.ones(HIDDEN, np.float32),
        }
    directory.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    (directory / "config.json").write_text(json.dumps(hf_config()))
    return directory


def main(argv: list[str]) -> None:
    from maxtext.checkpoint_conversion.utils import hf_model_configs
    from transformers import LlamaConfig

    hf_model_configs.HF_MODEL_CONFIGS[MODEL_NAME] = LlamaConfig(**hf_config())
    module, *args = argv
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
