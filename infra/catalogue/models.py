"""What the platform knows of the models it serves: attention shape, tokenizer, the engine config they need.

The figures are each model's published architecture, as MaxText's model
configs (`configs/models/<name>.yml`: `base_num_query_heads`,
`base_num_kv_heads`) and the Hugging Face `config.json` files state them.
The serving rules (infra/rules/maxtext.py, vllm.py) use them: tensor parallelism
must divide the KV heads, and a Llama 3 model needs the Llama 3 tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass

# MaxText's default tokenizer (base.yml `tokenizer_path`): Llama 2's SentencePiece model.
MAXTEXT_DEFAULT_TOKENIZER = "assets/tokenizer.llama2"
LLAMA3_TOKENIZER = "assets/tokenizer_llama3.tiktoken"


@dataclass(frozen=True)
class HfShape:
    """The rest of a Hugging Face model's `config.json` an engine's own checks read (vLLM's engine config: the
    context length, the layers a pipeline stage takes), as the model's published config states it."""

    architecture: str
    hidden_size: int
    intermediate_size: int
    layers: int
    vocab_size: int
    max_position_embeddings: int
    rope_theta: float


@dataclass(frozen=True)
class ModelArch:
    query_heads: int
    kv_heads: int
    # The tokenizer inside MaxText's tree (JetStream-MaxText image) this model's vocabulary needs.
    tokenizer: str
    # The MaxText config file the model is served with (the GKE tutorial's where it has one).
    serving_config: str = "MaxText/configs/base.yml"
    hf: HfShape | None = None
    # Parameters, in billions, as the model's Hugging Face page gives its size (the safetensors index's total).
    parameters_b: float = 0.0

    def hf_config(self) -> dict[str, object]:
        """The model's `config.json` without weights: what vLLM checks an engine's arguments against."""
        assert self.hf is not None
        return {
            "architectures": [self.hf.architecture],
            "model_type": "llama",
            "hidden_size": self.hf.hidden_size,
            "intermediate_size": self.hf.intermediate_size,
            "num_hidden_layers": self.hf.layers,
            "num_attention_heads": self.query_heads,
            "num_key_value_heads": self.kv_heads,
            "vocab_size": self.hf.vocab_size,
            "max_position_embeddings": self.hf.max_position_embeddings,
            "rope_theta": self.hf.rope_theta,
            "rms_norm_eps": 1e-05,
            "torch_dtype": "bfloat16",
            "tie_word_embeddings": False,
        }


# meta-llama/Llama-3.3-70B-Instruct and Llama-3.1-8B-Instruct config.json (Hugging Face).
_LLAMA3_70B = HfShape("LlamaForCausalLM", 8192, 28672, 80, 128256, 131072, 500000.0)
_LLAMA3_8B = HfShape("LlamaForCausalLM", 4096, 14336, 32, 128256, 131072, 500000.0)


MODELS: dict[str, ModelArch] = {
    # MaxText names (JetStream).
    "llama2-7b": ModelArch(32, 32, MAXTEXT_DEFAULT_TOKENIZER, parameters_b=6.74),
    "llama2-70b": ModelArch(64, 8, MAXTEXT_DEFAULT_TOKENIZER, parameters_b=68.98),
    "llama3-8b": ModelArch(32, 8, LLAMA3_TOKENIZER, parameters_b=8.03),
    "llama3.1-8b": ModelArch(32, 8, LLAMA3_TOKENIZER, parameters_b=8.03),
    "llama3.1-70b": ModelArch(64, 8, LLAMA3_TOKENIZER, parameters_b=70.55),
    # The GKE JetStream + Pathways tutorial serves 405B with MaxText's 405B inference config.
    "llama3.1-405b": ModelArch(
        128, 8, LLAMA3_TOKENIZER, "MaxText/configs/v5e/inference/llama3_405b_v5e-64.yml", parameters_b=405.85
    ),
    # Hugging Face names (vLLM).
    "meta-llama/Llama-3.3-70B-Instruct": ModelArch(64, 8, LLAMA3_TOKENIZER, hf=_LLAMA3_70B, parameters_b=70.55),
    "meta-llama/Llama-3.1-70B-Instruct": ModelArch(64, 8, LLAMA3_TOKENIZER, hf=_LLAMA3_70B, parameters_b=70.55),
    "meta-llama/Llama-3.1-8B-Instruct": ModelArch(32, 8, LLAMA3_TOKENIZER, hf=_LLAMA3_8B, parameters_b=8.03),
}
# How far a declared `parameters_b` may be from the catalogue's (rounding: 70 for 70.55, 405 for 405.85).
PARAMETERS_TOLERANCE = 0.10


def maxtext_names() -> list[str]:
    """The models MaxText (JetStream) knows by name; the others are Hugging Face's (vLLM)."""
    return sorted(m for m in MODELS if "/" not in m)


def conversion_memory_gib(parameters_b: float) -> int:
    """Memory a conversion requests: twice the bf16 weights (2 bytes each), plus 16 GiB.

    The int8 step (maxtext.utils.layerwise_quantization) holds the bf16 model and builds a second
    full-precision one while it quantizes; measured only on tiny checkpoints here, not at 405B.
    """
    return int(parameters_b * 2 * 2) + 16
