"""Synthesis as users run it: `python -m infra`, the fast provider import, the HCL exit path."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.in_process import run_main


def _run_app_here(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`python -m infra` (infra.synth.app.main) in this process, as the child would run it (tests/in_process.py)."""
    from infra.synth.app import main

    return run_main(main, [], env={**os.environ, **env}, cwd=tmp_path)


def test_a_synth_imports_only_the_binding_modules_the_constructs_use(synth_dir: Path) -> None:
    """The binding has some 1,800 submodules; a synth loads those the constructs name (`google("<submodule>")`),
    each with its private helpers, and the package's own few: the bound grows with what the code uses, not a fixed
    count (a new resource type of the bootstrap stack passed the old one of 60)."""
    import re

    used = {
        m for path in (REPO / "infra").rglob("*.py") for m in re.findall(r'google\("([a-z_]+)"\)', path.read_text())
    }
    loaded = [m for m in sys.modules if m.startswith("cdktn_provider_google.")]
    assert 5 < len(loaded) <= 2 * len(used) + 6, (len(loaded), len(used))


def test_bad_topology_fails_synth_naming_field_value_and_valid_topologies_and_writes_nothing(tmp_path: Path) -> None:
    envdir = tmp_path / "environments"
    shutil.copytree(REPO / "infra" / "environments", envdir)
    dev = envdir / "dev.yaml"
    dev.write_text(dev.read_text().replace("topology: 4x4", "topology: 3x3"))
    previous = tmp_path / "cdktf.out" / "stacks" / "platform-dev"
    previous.mkdir(parents=True)
    (previous / "cdk.tf.json").write_text("{}")

    result = _run_app_here(tmp_path, PLATFORM_ENVIRONMENTS_DIR=str(envdir))

    assert result.returncode == 2
    assert "slices.train.topology: '3x3'" in result.stderr
    assert "2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16" in result.stderr
    assert str(dev) in result.stderr
    assert (previous / "cdk.tf.json").read_text() == "{}", "the previous synth output was touched"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cdktf.out", "environments"]


def test_synth_replaces_the_output_directory_whole(tmp_path: Path, synth_dir: Path) -> None:
    stale = tmp_path / "cdktf.out" / "stacks" / "platform-gone"
    stale.mkdir(parents=True)
    review = tmp_path / "cdktf.out" / "review"
    review.mkdir()
    (review / "dev.md").write_text("kept")
    result = _run_app_here(tmp_path, PLATFORM_ENVS="dev")
    assert result.returncode == 0, result.stderr
    # What was made is said on stderr: a target that synthesizes first and prints JSON (`make cost JSON=1`) keeps
    # its standard output for the JSON.
    assert result.stdout == "" and "synthesized platform-dev" in result.stderr
    stacks = sorted(p.name for p in (tmp_path / "cdktf.out" / "stacks").iterdir())
    assert stacks == ["platform-dev"]
    assert (review / "dev.md").read_text() == "kept"
    # The bootstrap stacks beside, under this run's working directory (the jsii runtime, started elsewhere by this
    # test process, resolved the relative cdktf.out/bootstrap against its own: the repository's, or nothing there).
    assert (tmp_path / "cdktf.out" / "bootstrap" / "stacks" / "bootstrap-dev" / "cdk.tf.json").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "staging directories left behind"


@pytest.mark.slow
def test_hcl_export_through_the_pinned_cdktf_cli(tmp_path: Path) -> None:
    cli = REPO / "node_modules" / ".bin" / "cdktf"
    if not cli.exists():
        pytest.fail("node_modules is missing: `make test` installs it (make node)")
    out = tmp_path / "hcl"
    result = subprocess.run(
        [str(cli), "synth", "--hcl", "--output", str(out)],
        cwd=REPO,
        env={**os.environ, "CHECKPOINT_DISABLE": "1", "PLATFORM_ENVS": "dev"},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    hcl = (out / "stacks" / "platform-dev" / "cdk.tf").read_text()
    assert 'resource "google_container_node_pool"' in hcl
    assert 'tpu_topology = "4x4"' in hcl
    assert 'backend "gcs"' in hcl
