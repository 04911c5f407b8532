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
class ModelArch:
    query_heads: int
    kv_heads: int
    # The tokenizer inside MaxText's tree (JetStream-MaxText image) this model's vocabulary needs.
    tokenizer: str
    # The MaxText config file the model is served with (the GKE tutorial's where it has one).
    serving_config: str = "MaxText/configs/base.yml"


MODELS: dict[str, ModelArch] = {
    # MaxText names (JetStream).
    "llama2-7b": ModelArch(32, 32, MAXTEXT_DEFAULT_TOKENIZER),
    "llama2-70b": ModelArch(64, 8, MAXTEXT_DEFAULT_TOKENIZER),
    "llama3-8b": ModelArch(32, 8, LLAMA3_TOKENIZER),
    "llama3.1-8b": ModelArch(32, 8, LLAMA3_TOKENIZER),
    "llama3.1-70b": ModelArch(64, 8, LLAMA3_TOKENIZER),
    # The GKE JetStream + Pathways tutorial serves 405B with MaxText's 405B inference config.
    "llama3.1-405b": ModelArch(128, 8, LLAMA3_TOKENIZER, "MaxText/configs/v5e/inference/llama3_405b_v5e-64.yml"),
    # Hugging Face names (vLLM).
    "meta-llama/Llama-3.3-70B-Instruct": ModelArch(64, 8, LLAMA3_TOKENIZER),
    "meta-llama/Llama-3.1-8B-Instruct": ModelArch(32, 8, LLAMA3_TOKENIZER),
}


def conversion_memory_gib(parameters_b: float) -> int:
    """Memory a conversion requests: twice the bf16 weights (2 bytes each), plus 16 GiB.

    The int8 step (maxtext.utils.layerwise_quantization) holds the bf16 model and builds a second
    full-precision one while it quantizes; measured only on tiny checkpoints here, not at 405B.
    """
    return int(parameters_b * 2 * 2) + 16
