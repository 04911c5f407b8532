"""Byte-level text batches, a pure function of (seed, step) so a resumed run sees the same stream."""

from __future__ import annotations

import numpy as np

# A small built-in corpus, so the canary needs no download: enough structure
# for the loss to fall within a few steps, small enough to learn on a CPU.
_TEXT = """\
A slice is healthy when every host sees every other host, when the chips
agree on one mesh, when a checkpoint written by one run is read by the next,
and when the loss falls as it should. The canary trains a small decoder on
the same mesh axes as the real model: data, fsdp and tensor. It reports its
loss, its tokens per second, its FLOP/s per device and its MFU against the
peak of the chip, so a slow or broken slice is found before a long run.
"""


def corpus() -> np.ndarray:
    """The built-in corpus as bytes (token ids 0-255)."""
    return np.frombuffer(_TEXT.encode() * 8, dtype=np.uint8)


def batch(step: int, *, seed: int, global_batch: int, seq_len: int, text: np.ndarray | None = None) -> np.ndarray:
    """The global batch for `step`: [global_batch, seq_len + 1] token ids (inputs and shifted labels)."""
    text = corpus() if text is None else text
    rng = np.random.default_rng((seed, step))
    starts = rng.integers(0, len(text) - seq_len - 1, size=global_batch)
    return np.stack([text[s : s + seq_len + 1] for s in starts]).astype(np.int32)
