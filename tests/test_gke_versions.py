"""GKE's calendar: a pinned minor out of support fails `make plan` naming the date and the source, 60 days
before it warns, and the calendar itself is refreshed before it goes stale."""

from __future__ import annotations

import shutil
import subprocess
import sys
from datetime import date, timedelta
from pathlib import Path

import pytest

from infra.catalogue import gke_versions as gv
from tests.helpers import REPO


def test_the_calendar_was_checked_within_the_last_120_days() -> None:
    """Channels drop minors on published dates: re-read the release schedule and update
    infra/catalogue/gke_versions.py."""
    age = (date.today() - gv.TABLE_CHECKED).days
    assert age <= 120, f"infra/catalogue/gke_versions.py was last checked {age} days ago: re-read {gv.SCHEDULE}"


def test_every_minor_a_channel_offers_has_its_support_dates_or_is_newer_than_all_of_them() -> None:
    newest = max(gv.MINORS, key=gv.version_key)
    for channel, minors in gv.CHANNELS.items():
        for minor in minors:
            assert minor in gv.MINORS or gv.version_key(minor) > gv.version_key(newest), (channel, minor)
    for minor, info in gv.MINORS.items():
        assert info.end_of_standard < info.end_of_extended, minor


@pytest.mark.parametrize(
    ("pinned", "minimum", "meets"),
    [
        ("1.35", "1.34.0-gke.2201000", True),
        ("1.34", "1.34.0-gke.2201000", True),  # GKE resolves the minor to a patch it offers now
        ("1.34.0-gke.2100000", "1.34.0-gke.2201000", False),
        ("1.33", "1.34.0-gke.2201000", False),
        ("1.31.1-gke.1146000", "1.31.2-gke.1115000", False),
        ("1.35.7-gke.1222000", "1.29", True),
    ],
)
def test_a_pin_meets_a_feature_minimum(pinned: str, minimum: str, meets: bool) -> None:
    assert gv.meets(pinned, minimum) is meets


def _rules(environments: Path, synth_dir: Path, day: date) -> subprocess.CompletedProcess[str]:
    """`make plan`'s rules step on these environments, on the day `day`."""
    return subprocess.run(
        [sys.executable, "-m", "scripts.rules", str(synth_dir / "stacks")],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PLATFORM_ENVIRONMENTS_DIR": str(environments), "PLATFORM_TODAY": str(day)},
    )


@pytest.fixture
def environments(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "infra" / "environments", tmp_path / "environments")
    return tmp_path / "environments"


def test_make_plan_fails_on_a_minor_past_its_end_of_support_naming_the_date_and_source(
    environments: Path, synth_dir: Path
) -> None:
    end = gv.MINORS["1.35"].end_of_standard
    done = _rules(environments, synth_dir, end)
    assert done.returncode == 1
    assert f"cluster.min_master_version: '1.35': GKE 1.35 left standard support on {end}" in done.stderr
    assert f"({gv.SCHEDULE})" in done.stderr and "dev.yaml" in done.stderr and "prod.yaml" in done.stderr


@pytest.mark.slow
def test_make_plan_warns_within_60_days_of_the_end_of_support(environments: Path, synth_dir: Path) -> None:
    end = gv.MINORS["1.35"].end_of_standard
    done = _rules(environments, synth_dir, end - timedelta(days=60))
    assert done.returncode == 0, done.stderr
    # The file read (PLATFORM_ENVIRONMENTS_DIR's), not infra/environments/ whatever was read.
    assert (
        f"warning: {environments / 'dev.yaml'}: cluster.min_master_version: '1.35': GKE 1.35 leaves standard "
        f"support on {end}, in 60 days"
    ) in done.stderr
    quiet = _rules(environments, synth_dir, end - timedelta(days=61))
    assert quiet.returncode == 0 and "warning" not in quiet.stderr


def test_the_extended_channel_keeps_a_minor_until_its_end_of_extended_support(
    environments: Path, synth_dir: Path
) -> None:
    dev = environments / "dev.yaml"
    dev.write_text(dev.read_text().replace("release_channel: REGULAR", "release_channel: EXTENDED"))
    after_standard = gv.MINORS["1.35"].end_of_standard + timedelta(days=1)
    assert "dev.yaml" not in _rules(environments, synth_dir, after_standard).stderr
    assert "GKE 1.35 left extended support" in _rules(environments, synth_dir, gv.MINORS["1.35"].end_of_extended).stderr
