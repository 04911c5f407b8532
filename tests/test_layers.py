"""The layer contract of `make lint` holds today, and fails on a wrong-way import."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(root / "pyproject.toml")],
        cwd=root,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )


def test_the_layers_point_one_way() -> None:
    done = _lint(REPO)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "Contracts: 3 kept, 0 broken." in done.stdout


def test_config_calling_the_rules_breaks_the_contract(tmp_path: Path) -> None:
    """The slip the contract exists for: the config layer running the rules "to be helpful"."""
    for part in ("infra", "workloads", "scripts"):
        shutil.copytree(REPO / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__", "charts"))
    shutil.copytree(
        REPO / "workloads" / "charts",
        tmp_path / "workloads" / "charts",
        ignore=shutil.ignore_patterns("*.yaml", "templates", "ci"),
    )
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    base = tmp_path / "infra" / "config" / "base.py"
    base.write_text(base.read_text() + "\nfrom infra.rules import RULES  # noqa\n")
    done = _lint(tmp_path)
    assert done.returncode != 0
    assert "infra.config is not allowed to import infra.rules" in done.stdout
    assert "infra.config.base -> infra.rules" in done.stdout
