"""What the engine tests share: the repository's root and running a module for its JSON answer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def run_json(*args: str, timeout: int = 900) -> dict[str, Any]:
    """Run `python -m <args>` in the repository root; its last output line as JSON (or fail with its output)."""
    result = subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)
    tail = (result.stdout + result.stderr)[-4000:]
    assert result.returncode == 0, tail
    # The last JSON line: Ray's raylet may still print a notice after it.
    last = next(line for line in reversed(result.stdout.splitlines()) if line.startswith("{"))
    return json.loads(last)
