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
        # Not the charts themselves (workloads/charts/<chart>/: templates and values, no Python).
        skip = shutil.ignore_patterns("__pycache__", *(["charts"] if part == "workloads" else []))
        shutil.copytree(REPO / part, tmp_path / part, ignore=skip)
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    base = tmp_path / "infra" / "config" / "base.py"
    base.write_text(base.read_text() + "\nfrom infra.rules import RULES  # noqa\n")
    done = _lint(tmp_path)
    assert done.returncode != 0
    assert "infra.config is not allowed to import infra.rules" in done.stdout
    assert "infra.config.base -> infra.rules" in done.stdout


MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 100


def sizes(root: Path) -> tuple[list[str], list[str]]:
    """The modules of infra/, scripts/ and workloads/ over MAX_MODULE_LINES lines, and their functions over
    MAX_FUNCTION_LINES, as `path (lines)` and `path:function (lines)`."""
    import ast

    modules, functions = [], []
    for folder in ("infra", "scripts", "workloads"):
        for path in sorted((root / folder).rglob("*.py")):
            if {"imports", "node_modules", ".gen"} & set(path.parts):
                continue
            text = path.read_text()
            where = path.relative_to(root)
            if (n := len(text.splitlines())) > MAX_MODULE_LINES:
                modules.append(f"{where} ({n})")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        functions.append(f"{where}:{node.name} ({length})")
    return modules, functions


def test_no_module_over_600_lines_and_no_function_over_100() -> None:
    """A module that grows past 600 lines holds two concerns, a function past 100 several steps: split them (the
    rules by the system they hold, a construct by the blocks it builds)."""
    modules, functions = sizes(REPO)
    assert modules == [], modules
    assert functions == [], functions


def test_the_size_check_finds_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "infra").mkdir()
    (tmp_path / "infra" / "long.py").write_text(f"def long() -> None:\n{body}\n")
    assert sizes(tmp_path) == ([], ["infra/long.py:long (101)"])
