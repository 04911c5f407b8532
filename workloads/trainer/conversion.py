"""The checkpoint conversion for JetStream: one place for its command lines.

The jetstream-pathways chart's conversion Job runs `conversion_script(...)`
(the stack passes it as the `commands` value) and the engine tests run the
same commands on tiny random checkpoints (tests/engine/test_conversion.py).

Steps, with the MaxText of workloads/trainer/requirements-maxtext.lock:

1. To an unscanned bf16 MaxText checkpoint at `<output>/bf16/0/items`:
   - Hugging Face format (safetensors + config.json):
     `maxtext.checkpoint_conversion.to_maxtext` (no PyTorch needed);
   - Meta format (consolidated.*.pth):
     `maxtext.checkpoint_conversion.standalone_scripts.llama_ckpt_conversion_inference_only`
     (reads the .pth files with PyTorch: the converter image's extra).
2. For int8: `maxtext.utils.layerwise_quantization` quantizes it into
   `<output>/int8` (an NNX serve-mode checkpoint, what MaxEngine loads with
   `checkpoint_is_quantized=true`). MaxText 0.2.5's older
   `load_and_quantize_checkpoint` exits 0 without writing anything (its NNX
   `load_params` never saves), so it is not used.
3. `python -m workloads.trainer.conversion verify <dir>...` fails loudly when a
   step's output is missing.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Literal

from workloads.trainer.maxtext import MAXTEXT_BASE_CONFIG

SourceFormat = Literal["meta", "hf"]
TO_MAXTEXT = "maxtext.checkpoint_conversion.to_maxtext"
META_TO_MAXTEXT = "maxtext.checkpoint_conversion.standalone_scripts.llama_ckpt_conversion_inference_only"
QUANTIZE = "maxtext.utils.layerwise_quantization"
# Conversion runs on CPU, as one process.
_CPU = ["hardware=cpu", "skip_jax_distributed_system=true"]


def conversion_commands(
    *,
    source_format: SourceFormat,
    source: str,
    output: str,
    model_name: str,
    model_size: str | None = None,
    precision: Literal["bf16", "int8"],
    python: str = "python3",
    model_overrides: tuple[str, ...] = (),
) -> list[list[str]]:
    """The conversion's commands, each an argv.

    `model_size` is the Meta converter's model key (e.g. `llama3.1-405b`),
    `model_name` MaxText's. `model_overrides` (`key=value` MaxText flags) are
    for the tests' tiny models only.
    """
    bf16 = f"{output}/bf16"
    if source_format == "hf":
        convert = [
            python, "-m", TO_MAXTEXT, MAXTEXT_BASE_CONFIG, f"model_name={model_name}",
            f"base_output_directory={bf16}", f"hf_model_path={source}", "scan_layers=false",
            "weight_dtype=bfloat16", *_CPU, *model_overrides,
        ]  # fmt: skip
    else:
        convert = [
            python, "-m", META_TO_MAXTEXT, "--base-model-path", source,
            "--maxtext-model-path", bf16, "--model-size", model_size or model_name,
        ]  # fmt: skip
    commands = [convert, [python, "-m", "workloads.trainer.conversion", "verify", f"{bf16}/0/items"]]
    if precision == "int8":
        commands += [
            [
                python, "-m", QUANTIZE, MAXTEXT_BASE_CONFIG, f"model_name={model_name}",
                f"load_parameters_path={bf16}/0/items", f"save_quantized_params_path={output}/int8",
                "quantization=int8", "checkpoint_is_quantized=false", "scan_layers=false",
                "weight_dtype=bfloat16", "async_checkpointing=false", "per_device_batch_size=1",
                "checkpoint_storage_use_ocdbt=false", "checkpoint_storage_use_zarr3=false",
                *_CPU, *model_overrides,
            ],
            [python, "-m", "workloads.trainer.conversion", "verify", f"{output}/int8"],
        ]  # fmt: skip
    return commands


def conversion_script(**kwargs: object) -> str:
    """`conversion_commands(**kwargs)` as one bash script that stops at the first failure."""
    lines = ["set -euo pipefail"]
    lines += [" \\\n    ".join(_argv_chunks(argv)) for argv in conversion_commands(**kwargs)]  # type: ignore[arg-type]
    return "\n".join(lines) + "\n"


def _argv_chunks(argv: list[str]) -> list[str]:
    """The argv quoted: program and module on the first line, then one argument (or `--flag value`) per line."""
    head = 3 if len(argv) > 2 and argv[1] == "-m" else 1
    chunks, rest = [shlex.join(argv[:head])], argv[head:]
    while rest:
        take = 2 if rest[0].startswith("--") and "=" not in rest[0] and len(rest) > 1 else 1
        chunks.append(shlex.join(rest[:take]))
        rest = rest[take:]
    return chunks


def verify(paths: list[str]) -> list[str]:
    """The paths (local or gs://) that do not exist or are empty."""
    from etils import epath  # MaxText's own path library: local and gs:// alike

    missing = []
    for text in paths:
        path = epath.Path(text)
        if not path.exists() or (path.is_dir() and not any(path.iterdir())):
            missing.append(text)
    return missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workloads.trainer.conversion", description=__doc__.split("\n\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("verify", help="fail unless every path exists and is not empty")
    check.add_argument("paths", nargs="+")
    args = parser.parse_args(argv)
    missing = verify(args.paths)
    for path in missing:
        print(f"error: conversion output {path} is missing or empty", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
