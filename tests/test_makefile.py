"""The Makefile is the interface: every target is listed by `make help` with one line."""

from __future__ import annotations

import re
import subprocess

from tests.conftest import REPO


def test_make_help_lists_every_target() -> None:
    makefile = (REPO / "Makefile").read_text()
    phony = set(re.search(r"^\.PHONY: (.+)$", makefile, re.M).group(1).split())  # type: ignore[union-attr]
    listed = subprocess.run(["make", "-s", "help"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    shown = set(re.findall(r"make (\S+)", listed))
    assert phony == shown
