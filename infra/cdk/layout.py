"""Where the synthesis puts each stack (cdktf's layout, which CDK Terrain keeps): `<outdir>/stacks/<stack>/cdk.tf.json`,
the stack of environment `<env>` named `platform-<env>`. Every reader and writer of a synthesized folder asks here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

STACKS = "stacks"
STACK_FILE = "cdk.tf.json"


def stack_name(env: str) -> str:
    return f"platform-{env}"


def stack_dir(outdir: Path, stack: str) -> Path:
    return outdir / STACKS / stack


def stack_file(outdir: Path, stack: str) -> Path:
    return stack_dir(outdir, stack) / STACK_FILE


def stack_files(outdir: Path, pattern: str = "*") -> list[Path]:
    """Every synthesized stack's file under `outdir` (those whose stack name matches `pattern`), by name."""
    return sorted((outdir / STACKS).glob(f"{pattern}/{STACK_FILE}"))


def read_stack(outdir: Path, stack: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(stack_file(outdir, stack).read_text())
    return loaded


def read_stacks(outdir: Path) -> dict[str, dict[str, Any]]:
    """Every synthesized stack under `outdir`, by name."""
    return {path.parent.name: json.loads(path.read_text()) for path in stack_files(outdir)}
