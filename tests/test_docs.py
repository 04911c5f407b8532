"""The docs stay true: a short README that links every topic page, and every make target, environment
variable and exit code documented in exactly one place (docs/reference.md)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from infra.settings import SETTINGS
from tests.helpers import REPO

DOCS = REPO / "docs"
REFERENCE = (DOCS / "reference.md").read_text()
PAGES = {p.name: p.read_text() for p in [REPO / "README.md", *sorted(DOCS.glob("*.md"))]}


def _rows(first_cell: str) -> dict[str, int]:
    """In how many table rows of each page the first cell starts with `first_cell` (or one of its `/`-separated
    or comma-separated parts does)."""
    found = {}
    for name, text in PAGES.items():
        count = sum(
            1
            for line in text.splitlines()
            if line.startswith("|")
            and any(part.strip().startswith(first_cell) for part in re.split(r" / |, ", line.split("|")[1]))
        )
        if count:
            found[name] = count
    return found


def test_the_readme_is_short_and_links_every_topic_page() -> None:
    readme = PAGES["README.md"]
    assert len(readme.splitlines()) <= 200
    assert "make plan" in readme and "make test" in readme
    for page in sorted(DOCS.glob("*.md")):
        assert f"(docs/{page.name})" in readme, f"README does not link docs/{page.name}"


def test_every_make_target_is_documented_once_in_the_reference() -> None:
    targets = re.findall(r"^([a-z0-9-]+):.*## ", (REPO / "Makefile").read_text(), re.M)
    assert len(targets) >= 25
    for target in targets:
        rows = [_rows(f"`make {target}{end}") for end in ("`", " ")]
        assert {k: sum(r.get(k, 0) for r in rows) for r in rows for k in r} == {"reference.md": 1}, target


def test_every_environment_variable_the_code_reads_is_documented_once() -> None:
    read = set()
    for part in ("infra", "workloads", "scripts"):
        for path in (REPO / part).rglob("*.py"):
            read |= set(re.findall(r"os\.environ(?:\.get\(|\[)\"([A-Z_]+)\"", path.read_text()))
    read |= {s.name for s in SETTINGS}  # the PLATFORM_* ones, read through infra/settings (tests/test_settings.py)
    assert {"PLATFORM_TODAY", "PLATFORM_ENVIRONMENTS_DIR", "CDKTF_OUTDIR"} <= read
    for name in sorted(read):
        assert _rows(f"`{name}`") == {"reference.md": 1}, name


def test_every_entry_point_has_its_exit_codes_documented_once() -> None:
    entry_points = _entry_points()
    assert len(entry_points) >= 14
    for module in sorted(entry_points):
        assert _rows(f"`python -m {module}`") == {"reference.md": 1}, module


def test_links_between_pages_resolve() -> None:
    for name, text in PAGES.items():
        base = REPO if name == "README.md" else DOCS
        for target in re.findall(r"\]\(([^)#:]+\.md)\)", text):
            assert (base / target).exists(), f"{name} links {target}"


# Not our command lines: vLLM's own (`vllm serve`), run with .venv-vllm's Python by scripts/vllm_cpu/local.py
# and served through in tests/test_vllm.py.
NOT_OURS = {"scripts.vllm_cpu.cli"}


def _entry_points() -> list[str]:
    found = set()
    for part in ("infra", "workloads", "scripts"):
        for path in (REPO / part).rglob("*.py"):
            module = ".".join(path.relative_to(REPO).with_suffix("").parts)
            if path.name == "__main__.py":
                found.add(module.removesuffix(".__main__"))
            elif 'if __name__ == "__main__"' in path.read_text():
                found.add(module.removesuffix(".__init__"))
    return sorted(found - NOT_OURS)


@pytest.mark.parametrize("module", _entry_points())
def test_every_entry_point_answers_help(module: str) -> None:
    """One command-line manner: the standard argument parser, `--help`, exit 0, its own name in the usage."""
    done = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-1500:]
    assert done.stdout.startswith(f"usage: python -m {module}"), done.stdout[:200]
    # What it does, said whole: the description (the paragraph after the usage) ends a sentence, not cut mid-way
    # (`platform plan --help` once ended "...write the").
    paragraphs = done.stdout.split("\n\n")
    described = next((p for p in paragraphs[1:] if not p.startswith(("options:", "positional arguments:"))), "")
    assert described.rstrip().endswith((".", ":", ")", "`", "]", ">")), described[-200:]
