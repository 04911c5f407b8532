"""Builders the unit tests share."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers import REPO


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A copy of the shipped environments folder the test may change."""
    out = tmp_path / "environments"
    shutil.copytree(REPO / "infra" / "environments", out)
    return out


@pytest.fixture
def shown(monkeypatch: pytest.MonkeyPatch) -> dict:
    """scripts/apply.py's Terraform, stood in: every call succeeds and `show -json` prints this plan (a plan with no
    change until the test fills it in)."""
    import json

    from scripts import apply

    plan: dict = {"format_version": "1.2", "resource_changes": []}

    def tf(stack_dir: Path, *args: str, stdout: object = None) -> int:
        if args[0] == "show":
            stdout.write(json.dumps(plan))  # type: ignore[attr-defined]
        return 0

    monkeypatch.setattr(apply, "_tf", tf)
    return plan
