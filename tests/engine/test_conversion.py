"""The conversion commands the jetstream-pathways chart runs, on a tiny random Hugging Face Llama.

The chart's Job runs `conversion_script(...)`; here the same commands run one
by one (MaxText's modules through `tests.engine.tiny_llama`, which only
teaches the converters the tiny shape under the real model's name). The bf16
result must load and train with MaxText, and the int8 result must load into
MaxText's serving engine and predict like the bf16 one.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.engine.helpers import REPO
from tests.engine.tiny_llama import MAXTEXT_OVERRIDES, MODEL_NAME, write_hf_checkpoint
from workloads.trainer.conversion import conversion_commands, conversion_script

pytestmark = pytest.mark.engine

CPU = ["hardware=cpu", "skip_jax_distributed_system=true", "scan_layers=false", "per_device_batch_size=1"]


def _run(argv: list[str], timeout: int = 900) -> tuple[str, float]:
    started = time.monotonic()
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{argv[:4]}...:\n{(result.stdout + result.stderr)[-4000:]}"
    return result.stdout, time.monotonic() - started


def _logits(*flags: str) -> np.ndarray:
    out, _ = _run([sys.executable, "-m", "tests.engine.decode_check", *CPU, *MAXTEXT_OVERRIDES, *flags])
    return np.array(json.loads(out.strip().splitlines()[-1])["logits"])


def test_hf_checkpoint_converts_to_bf16_that_trains_and_int8_that_serves_like_it(tmp_path: Path) -> None:
    source = write_hf_checkpoint(tmp_path / "hf")
    output = tmp_path / "maxtext"
    kwargs = dict(
        source_format="hf", source=str(source), output=str(output), model_name=MODEL_NAME, precision="int8",
        python=sys.executable, model_overrides=MAXTEXT_OVERRIDES,
    )  # fmt: skip
    commands = conversion_commands(**kwargs)  # type: ignore[arg-type]
    assert [c[2] for c in commands] == [
        "maxtext.checkpoint_conversion.to_maxtext",
        "workloads.trainer.conversion",
        "maxtext.utils.layerwise_quantization",
        "workloads.trainer.conversion",
    ]
    assert conversion_script(**kwargs).count(sys.executable) == len(commands)
    seconds = {}
    for argv in commands:
        if argv[2].startswith("maxtext."):
            argv = [argv[0], "-m", "tests.engine.tiny_llama", *argv[2:]]
        _, seconds[argv[2 if argv[2] != "tests.engine.tiny_llama" else 3]] = _run(argv)
    print(json.dumps({"conversion_seconds": seconds}))
    assert (output / "bf16" / "0" / "items").is_dir() and (output / "int8").is_dir()

    # The bf16 checkpoint loads into MaxText's training loop and trains.
    metrics = tmp_path / "metrics.jsonl"
    _run([
        sys.executable, "-m", "maxtext.trainers.pre_train.train", "src/maxtext/configs/base.yml",
        f"model_name={MODEL_NAME}", *MAXTEXT_OVERRIDES, *CPU, f"load_parameters_path={output}/bf16/0/items",
        f"base_output_directory={tmp_path}/train", "run_name=converted", "steps=2", "dataset_type=synthetic",
        "enable_checkpointing=false", f"metrics_file={metrics}", "attention=dot_product",
    ])  # fmt: skip
    losses = [json.loads(line)["learning/loss"] for line in metrics.read_text().splitlines()]
    assert len(losses) == 2 and all(np.isfinite(losses))

    # Both load into the serving engine; int8 predicts as bf16 does, within quantization error.
    bf16 = _logits(f"model_name={MODEL_NAME}", f"load_parameters_path={output}/bf16/0/items")
    int8 = _logits(
        f"model_name={MODEL_NAME}", f"load_parameters_path={output}/int8", "quantization=int8",
        "checkpoint_is_quantized=true",
    )  # fmt: skip
    assert bf16.shape == int8.shape and bf16.std() > 0
    assert np.corrcoef(bf16, int8)[0, 1] > 0.95
    assert not np.allclose(bf16, int8)  # really quantized, not the bf16 weights again


def test_a_conversion_step_that_writes_nothing_fails_loudly(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "workloads.trainer.conversion", "verify", str(tmp_path / "int8")],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 1
    assert "int8 is missing or empty" in result.stderr
