"""The Makefile is the interface: every target is listed by `make help` with one line."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.helpers import REPO


def test_make_help_lists_every_target() -> None:
    makefile = (REPO / "Makefile").read_text()
    phony = set(re.search(r"^\.PHONY: (.+)$", makefile, re.M).group(1).split())  # type: ignore[union-attr]
    listed = subprocess.run(["make", "-s", "help"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    shown = set(re.findall(r"make (\S+)", listed))
    assert phony == shown


def test_make_destroy_without_confirm_refuses_before_installing_or_synthesizing(tmp_path: Path) -> None:
    """With a venv and node modules that do not exist yet, `make destroy` without CONFIRM would have to create them
    first if its prerequisites ran: nothing is built, nothing is synthesized, and the refusal says what to type."""
    fresh = [f"VENV={tmp_path / 'venv'}", f"NODE_STAMP={tmp_path / 'node' / '.installed'}", f"OUT={tmp_path / 'out'}"]
    planned = subprocess.run(
        ["make", "-n", "destroy", "ENV=dev", *fresh], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    assert "-m venv" not in planned and "npm ci" not in planned and "scripts.slurm" not in planned, planned
    done = subprocess.run(["make", "-s", "destroy", "ENV=dev", *fresh], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 2
    assert "platform-dev: destroy refused; nothing was changed: pass CONFIRM=platform-dev" in done.stderr
    assert list(tmp_path.iterdir()) == []
    # A wrong name is no confirmation either.
    wrong = subprocess.run(
        ["make", "-s", "destroy", "ENV=dev", "CONFIRM=platform-prod", *fresh], cwd=REPO, capture_output=True, text=True
    )
    assert wrong.returncode == 2 and "pass CONFIRM=platform-dev" in wrong.stderr
    assert list(tmp_path.iterdir()) == []


def test_make_plan_passes_env_only_when_given_on_the_command_line() -> None:
    """`make plan` plans every environment (ENV's default, dev, is not a choice); `make plan ENV=prod` plans prod."""

    def planned(*args: str) -> str:
        out = subprocess.run(["make", "-n", "-s", "plan", *args], cwd=REPO, capture_output=True, text=True, check=True)
        return next(line for line in out.stdout.splitlines() if "platform plan" in line)

    assert "--env" not in planned()
    assert planned("ENV=prod").endswith("--env prod")
