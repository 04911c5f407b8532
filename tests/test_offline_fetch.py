"""Without network access, the first `make plan` (and `make crds`, `make pinned-scripts`) says where a local copy
of the pinned upstream files goes and which variable names another directory, instead of a bare URL error.

Each fetch is pointed at a file:// URL that does not exist (a download that fails without any network) and at
a target under tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

import scripts.shell
import scripts.slurm
from infra.charts import crds
from infra.shell import pinned as pinned_scripts
from infra.slurm import interfaces


def _nowhere(tmp_path: Path) -> str:
    return f"file://{tmp_path / 'unreachable' / 'upstream'}"


def test_cluster_toolkits_failed_fetch_names_the_local_copy_and_platform_ctk_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`make plan` runs `make cluster-toolkit`: `platform slurm where || platform slurm fetch`."""
    monkeypatch.setattr(interfaces, "url", lambda name: f"{_nowhere(tmp_path)}/{name}")
    monkeypatch.setattr(interfaces, "FETCHED", tmp_path / "cache" / "cluster-toolkit")
    assert scripts.slurm.main(["fetch"]) == 1
    err = capsys.readouterr().err
    assert f"{_nowhere(tmp_path)}/" in err
    assert f"into {tmp_path / 'cache' / 'cluster-toolkit'} or {interfaces.SHARED}" in err
    assert "or set PLATFORM_CTK_DIR=<a directory holding them>" in err and str(interfaces.PINS) in err
    assert not (tmp_path / "cache" / "cluster-toolkit").exists()


def test_missing_interfaces_name_platform_ctk_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLATFORM_CTK_DIR", str(tmp_path / "empty"))
    with pytest.raises(interfaces.InterfacesMissing, match="or set PLATFORM_CTK_DIR=<a directory holding them>"):
        interfaces.locate()


def test_the_crds_failed_fetch_names_platform_crds_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(crds, "all_pins", lambda: {"a.yaml": (f"{_nowhere(tmp_path)}/a.yaml", "0" * 64, False)})
    monkeypatch.setattr(crds, "FETCHED", tmp_path / "cache" / "crds")
    assert crds.main(["fetch"]) == 1
    err = capsys.readouterr().err
    assert f"{_nowhere(tmp_path)}/a.yaml" in err
    assert f"into {tmp_path / 'cache' / 'crds'} or {crds.SHARED}, or set PLATFORM_CRDS_DIR=" in err
    assert not (tmp_path / "cache" / "crds").exists()


def test_missing_crds_name_platform_crds_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rules step reports CRDs it cannot find with this message (scripts/rules.py's CEL summary)."""
    monkeypatch.setenv("PLATFORM_CRDS_DIR", str(tmp_path / "empty"))
    with pytest.raises(crds.CrdsMissing, match="or set PLATFORM_CRDS_DIR=<a directory holding them>"):
        crds.locate()


def test_the_pinned_scripts_failed_fetch_names_platform_pinned_scripts_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(pinned_scripts, "FETCHED", tmp_path / "cache" / "pinned-scripts")
    monkeypatch.setattr(pinned_scripts.PinnedFile, "url", property(lambda f: f"{_nowhere(tmp_path)}/{f.path}"))
    assert scripts.shell.main(["fetch"]) == 1
    err = capsys.readouterr().err
    assert f"into {tmp_path / 'cache' / 'pinned-scripts'}, or set PLATFORM_PINNED_SCRIPTS_DIR=" in err
    assert not (tmp_path / "cache" / "pinned-scripts").exists()
