"""The pinned upstream CRD schemas: found only when complete and unchanged, fetched all-or-nothing, and
never silently missing in CI."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from infra.charts import crds
from tests.helpers import REPO


def test_ci_has_the_pinned_schemas() -> None:
    """In CI a missing schema fails the run (strict validation would otherwise be skipped)."""
    if os.environ.get("CI") != "true":
        pytest.skip("checked where CI=true; locally `make crds` fetches the schemas")
    crds.locate()  # raises CrdsMissing naming each missing file and `make crds`


def _copy_pinned(tmp_path: Path) -> Path:
    source = crds.locate()
    target = tmp_path / "crds"
    shutil.copytree(source, target)
    return target


@pytest.mark.skipif(not crds.available(), reason="pinned upstream CRD schemas not available: run `make crds`")
def test_a_changed_or_missing_schema_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = _copy_pinned(tmp_path)
    assert crds.problems(target) == []
    (target / "ray.io_rayjobs.yaml").unlink()
    with (target / "jobset.x-k8s.io_jobsets.yaml").open("a") as f:
        f.write("# edited\n")
    found = crds.problems(target)
    assert any(p.endswith("ray.io_rayjobs.yaml: missing") for p in found)
    assert any("jobset.x-k8s.io_jobsets.yaml: sha256" in p and "is not the pinned" in p for p in found)
    monkeypatch.setenv("PLATFORM_CRDS_DIR", str(target))
    with pytest.raises(crds.CrdsMissing, match="`make crds` fetches them"):
        crds.locate()


def test_make_test_fails_in_ci_without_the_schemas(tmp_path: Path) -> None:
    """With the schemas moved away and CI=true, strict chart validation fails instead of skipping."""
    env = {**os.environ, "CI": "true", "PLATFORM_CRDS_DIR": str(tmp_path / "none")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_crds.py::test_ci_has_the_pinned_schemas",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1, done.stdout[-2000:]
    assert "CrdsMissing" in done.stdout and "make crds" in done.stdout


@pytest.mark.skipif(not crds.available(), reason="pinned upstream CRD schemas not available: run `make crds`")
def test_fetch_verifies_every_checksum_and_changes_nothing_on_a_bad_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = crds.locate()
    # The required schemas, from the shared copy instead of their URLs (the optional ones are not there).
    pinned = {name: (f"file://{source / name}", sha, False) for name, (_, sha) in crds.pins().items()}
    monkeypatch.setattr(crds, "all_pins", lambda: pinned)
    target = tmp_path / "fetched"
    assert crds.fetch(target) == sorted(pinned)
    assert crds.problems(target) == []
    bad = dict(pinned)
    name = "kueue.x-k8s.io_localqueues.yaml"
    bad[name] = (pinned[name][0], hashlib.sha256(b"other").hexdigest(), False)
    monkeypatch.setattr(crds, "all_pins", lambda: bad)
    with pytest.raises(ValueError, match="is not the pinned"):
        crds.fetch(target)
    monkeypatch.setattr(crds, "all_pins", lambda: pinned)
    assert crds.problems(target) == [], "a failed fetch leaves the previous schemas as they were"
