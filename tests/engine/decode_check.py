"""Prefill one fixed prompt with MaxText's serving engine (MaxEngine, what JetStream runs); print its logits.

`python -m tests.engine.decode_check <MaxText key=value flags...>` loads the
checkpoint the flags name (`load_parameters_path`, with `quantization=int8
checkpoint_is_quantized=true` for an int8 one) with `MaxEngine.load_params`,
exactly as the server does, and runs the engine's prefill forward
(`_nnx_run_model` in prefill mode, what `MaxEngine.prefill` runs). The public
`prefill` itself returns JetStream's `ResultTokens`, and JetStream is not in
the engine environment (its last PyPI release pulls TensorFlow and seqio):
MaxText's stand-in for it is not a JAX type.
"""

from __future__ import annotations

import json
import sys

PROMPT = [1, 5, 9, 17, 33, 65, 129, 200]


def main(flags: list[str]) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax.core.spmd import logical_axis_rules
    from maxtext.common.common_types import MODEL_MODE_PREFILL
    from maxtext.configs import pyconfig
    from maxtext.inference.maxengine import maxengine

    from workloads.trainer.maxtext import MAXTEXT_BASE_CONFIG, resolve_config_path

    config = pyconfig.initialize(["decode_check", resolve_config_path(MAXTEXT_BASE_CONFIG), *flags])
    engine = maxengine.MaxEngine(config)
    params = engine.load_params(rng=jax.random.PRNGKey(0))
    length = config.max_prefill_predict_length
    tokens = jnp.array([PROMPT + [0] * (length - len(PROMPT))], dtype=jnp.int32)
    positions = jnp.arange(length, dtype=jnp.int32)[None, :]
    segments = (positions < len(PROMPT)).astype(jnp.int32)
    with engine._mesh, logical_axis_rules(config.logical_axis_rules):
        logits, _ = engine._nnx_run_model(
            params,
            engine._nnx_init_cache_dict(mode=MODEL_MODE_PREFILL),
            tokens,
            positions,
            decoder_segment_ids=segments,
            model_mode=MODEL_MODE_PREFILL,
            true_length=len(PROMPT),
        )
    logits = np.asarray(logits[0, len(PROMPT) - 1], dtype=np.float32)
    print(json.dumps({"logits": logits.tolist()}))


if __name__ == "__main__":
    main(sys.argv[1:])
