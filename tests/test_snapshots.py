"""One normalized snapshot per environment, so any infrastructure change shows as a readable diff.

Update with `make snapshots` and review the diff like any other code change.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ENVIRONMENT_NAMES

SNAPSHOTS = Path(__file__).parent / "snapshots"


def normalize(node: Any) -> Any:
    """Drop cdktf's `//` metadata (construct paths) and sort keys: only what Terraform sees remains."""
    if isinstance(node, dict):
        return {k: normalize(v) for k, v in sorted(node.items()) if k != "//"}
    if isinstance(node, list):
        return [normalize(v) for v in node]
    return node


def render(stack: dict[str, Any]) -> str:
    return json.dumps(normalize(stack), indent=2, sort_keys=True) + "\n"


@pytest.mark.parametrize("env", ENVIRONMENT_NAMES)
def test_stack_matches_its_snapshot(env: str, stacks: dict[str, dict[str, Any]]) -> None:
    path = SNAPSHOTS / f"platform-{env}.json"
    current = render(stacks[env])
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        path.write_text(current)
    assert path.exists(), f"{path} is missing; run `make snapshots`"
    assert current == path.read_text(), f"platform-{env} changed; review `git diff` after `make snapshots`"
