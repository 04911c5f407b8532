"""The files a Slurm cluster's hosts get, kept as files (shell, udev, enroot and apt configuration) so editors,
ShellCheck and diffs see them as they run; `fill` puts in the few values an environment decides, written
`@NAME@` in the file."""

from __future__ import annotations

from pathlib import Path

from infra.derive import templates

HERE = Path(__file__).resolve().parent


def fill(name: str, **values: str) -> str:
    """The file `name` (relative to this folder), filled (infra.derive.templates)."""
    return templates.fill(HERE / name, **values)
