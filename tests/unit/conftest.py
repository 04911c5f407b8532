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
