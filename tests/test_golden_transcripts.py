"""The runbook commands' transcripts, kept as files (tests/golden/<name>.txt) and held to what the commands print now,
as xpk keeps each command's dry run: a change in what a person reads is a reviewed diff, and the docs show these files
rather than restating them (docs/operations.md). `make snapshots` (UPDATE_SNAPSHOTS=1) rewrites them.

Each runs through the `platform` entry point in this process on a copy of the shipped environments (dev's images
built, as after `make images ENV=dev`), its folder's path written `<environments>`."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from infra.config import ENVIRONMENTS_DIR, PLACEHOLDER_DIGEST
from scripts.cli import main as platform_main
from tests.helpers import REPO
from tests.in_process import run_main

GOLDEN = REPO / "tests" / "golden"
BUILT = "sha256:" + "ab" * 32
TRANSCRIPTS = {
    "pin": ["pin", "--dry-run", "dev", "release.images.trainer",
            f"us-east5-docker.pkg.dev/acme-ml-platform-dev/ml-platform/trainer@sha256:{'cd' * 32}"],
    "pin-unknown-image": ["pin", "--dry-run", "dev", "release.images.trainr", f"sha256:{'cd' * 32}"],
    "blue-green-start": ["blue-green", "--dry-run", "--topology", "4x8", "--", "dev", "train"],
    "blue-green-finish-first": ["blue-green", "--dry-run", "--finish", "--", "dev", "train"],
    "promote": ["promote", "--dry-run", "dev", "prod"],
    "new-env": ["new-env", "--from=prod", "--project=acme-ml-staging", "--project-number=123456789012",
                "--region=us-central1", "--", "staging"],
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(TRANSCRIPTS))
def test_a_runbook_command_prints_its_kept_transcript(name: str, tmp_path: Path) -> None:
    folder = tmp_path / "environments"
    shutil.copytree(ENVIRONMENTS_DIR, folder)
    dev = folder / "dev.yaml"
    dev.write_text(dev.read_text().replace(PLACEHOLDER_DIGEST, BUILT))
    done = run_main(
        platform_main, TRANSCRIPTS[name], env={**os.environ, "PLATFORM_ENVIRONMENTS_DIR": str(folder)}, cwd=REPO
    )
    said = f"$ platform {' '.join(TRANSCRIPTS[name])}\n{done.stdout}{done.stderr}exit {done.returncode}\n"
    said = said.replace(str(folder), "<environments>")
    golden = GOLDEN / f"{name}.txt"
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(said)
    assert golden.is_file(), f"{golden}: no transcript kept; make snapshots writes it"
    assert said == golden.read_text(), f"{name}: the transcript changed; review it, then make snapshots"
