"""`make pin` and `make rollback`: a controller pin bumped and rolled back with the commands, an image digest rolled
back, a version the platform does not know refused with the way to add one; dry runs write nothing."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from infra.catalogue import controllers
from infra.config import ENVIRONMENTS_DIR
from infra.synth.load import load_environment
from scripts.cli import main as platform
from tests.helpers import REPO
from tests.in_process import run_main


def _commit(folder: Path, message: str) -> None:
    subprocess.run(["git", "add", "-A"], cwd=folder, check=True)
    subprocess.run(
        ["git", "-c", "user.email=ci@example.com", "-c", "user.name=ci", "commit", "-qm", message],
        cwd=folder,
        check=True,
    )


@pytest.fixture
def environments(tmp_path: Path) -> Path:
    """A copy of the environment files in a repository of their own, committed once."""
    folder = tmp_path / "environments"
    shutil.copytree(ENVIRONMENTS_DIR, folder)
    subprocess.run(["git", "init", "-q"], cwd=folder, check=True)
    _commit(folder, "the environments")
    return folder


def _run(environments: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return run_main(platform, list(argv), env={**os.environ, "PLATFORM_ENVIRONMENTS_DIR": str(environments)}, cwd=REPO)


def test_a_controller_pin_is_bumped_and_rolled_back_with_the_commands(
    environments: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 0.8.0 is the version after the pin (its controller is built beside 0.7.0: infra/engine/go/lws-0.8.0),
    # known in this test only.
    lws = controllers.CONTROLLERS["lws"]
    monkeypatch.setitem(controllers.CONTROLLERS, "lws", dataclasses.replace(lws, versions=("0.7.0", "0.8.0")))
    dev = environments / "dev.yaml"
    before = dev.read_text()
    dry = _run(environments, "pin", "--dry-run", "dev", "release.controllers.lws", "0.8.0")
    assert dry.returncode == 0, dry.stderr
    assert "-    lws: 0.7.0\n+    lws: 0.8.0" in dry.stdout and f"dry run: {dev} not written" in dry.stdout
    assert dev.read_text() == before
    done = _run(environments, "pin", "dev", "release.controllers.lws", "0.8.0")
    assert done.returncode == 0, done.stderr
    assert f"{dev}: release.controllers.lws '0.7.0' -> '0.8.0'; next: make plan" in done.stdout
    assert load_environment(dev).release.controllers["lws"] == "0.8.0"
    changed = [line for line in before.splitlines() if line not in dev.read_text().splitlines()]
    assert changed == ["    lws: 0.7.0"], "only the pin moved; comments and order kept"
    _commit(environments, "lws 0.8.0")
    back = _run(environments, "rollback", "dev", "release.controllers.lws")
    assert back.returncode == 0, back.stderr
    assert "release.controllers.lws: back to '0.7.0', its value before '0.8.0' (commit " in back.stdout
    assert dev.read_text() == before
    again = _run(environments, "pin", "dev", "release.controllers.lws", "0.7.0")
    assert again.returncode == 0 and "already '0.7.0'; nothing to change" in again.stdout


def test_an_image_rollback_takes_the_previous_digest_of_the_files_history(environments: Path) -> None:
    dev = environments / "dev.yaml"
    trainer = load_environment(dev).release.images["trainer"]
    built = [trainer.rsplit("@", 1)[0] + "@sha256:" + c * 64 for c in "12"]
    for digest in built:
        assert _run(environments, "pin", "dev", "release.images.trainer", digest).returncode == 0
        _commit(environments, digest)
    back = _run(environments, "rollback", "--dry-run", "dev", "release.images.trainer")
    assert back.returncode == 0 and f"back to {built[0]!r}, its value before {built[1]!r}" in back.stdout
    assert load_environment(dev).release.images["trainer"] == built[1], "a dry run writes nothing"
    assert _run(environments, "rollback", "dev", "release.images.trainer").returncode == 0
    assert load_environment(dev).release.images["trainer"] == built[0]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["pin", "dev", "release.controllers.lws", "0.9.0"],
            "VERSION='0.9.0': release.controllers.lws takes a version the platform knows: 0.7.0. A new one is added "
            "to infra/catalogue/controllers.py with its CRDs recorded in infra/charts/crds.yaml",
        ),
        (["pin", "dev", "release.nodes.x", "1"], "FIELD='release.nodes.x': a release pin, release.<section>.<name>"),
        (["pin", "dev", "release.images.trainer", "trainer:v1"], "release.images.trainer: 'trainer:v1': not pinned"),
        (["rollback", "dev", "release.controllers.jobset"], "'0.12.0' is the only value dev.yaml's history has"),
        (["pin", "dve", "release.controllers.lws", "0.7.0"], "ENV='dve': not one; the environments here: dev, prod"),
        (
            ["pin", "dev", "release.images.trainr", "sha256:" + "a" * 64],
            "FIELD='release.images.trainr': no image of that name (images/images.yaml); the images: "
            "release.images.checkpoint-converter,",
        ),
        (["pin", "dev", "release.images.trainr", "x"], "did you mean 'release.images.trainer'?"),
        (["pin", "dev", "release.chart.ray-training", "0.7.0"], "did you mean 'release.charts.ray-training'?"),
    ],
)
def test_a_pin_that_cannot_be_set_is_refused_and_nothing_is_written(
    environments: Path, argv: list[str], said: str
) -> None:
    before = {p.name: p.read_text() for p in environments.glob("*.yaml")}
    done = _run(environments, *argv)
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert "nothing was written" in done.stderr and "Traceback" not in done.stderr
    assert {p.name: p.read_text() for p in environments.glob("*.yaml")} == before


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("release: [\n", "not valid YAML"),
        ("", "(top level)"),
        ("- a\n", "(top level): a list: the file must hold a mapping of fields"),
        ("release: 5\n", "release: 5: Input should be a valid dictionary"),
        ("release: {images: [1]}\n", "release.images: [1]: Input should be a valid dictionary"),
    ],
)
@pytest.mark.parametrize("command", ["pin", "rollback"])
def test_a_file_that_is_not_an_environment_is_refused_by_its_field_before_a_pin_reads_it(
    environments: Path, text: str, said: str, command: str
) -> None:
    """The file is loaded as the platform loads it before anything reads a pin from it (a list, a number or a
    broken document was a traceback of the YAML reader)."""
    dev = environments / "dev.yaml"
    dev.write_text(text)
    value = ["sha256:" + "a" * 64] if command == "pin" else []
    done = _run(environments, command, "dev", "release.images.trainer", *value)
    assert done.returncode == 2 and said in done.stderr and str(dev) in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "nothing was written" in done.stderr
    assert dev.read_text() == text


def test_a_rollback_passes_over_versions_of_the_file_that_never_loaded(environments: Path) -> None:
    """A commit whose file was broken YAML or another shape holds no value to go back to: the rollback takes the
    one before it (the history was read unchecked: a traceback)."""
    dev = environments / "dev.yaml"
    good = dev.read_text()
    trainer = load_environment(dev).release.images["trainer"]
    for broken in ("release: [\n", "release:\n  images: [1, 2]\n", "- a list\n"):
        dev.write_text(broken)
        _commit(environments, "broken")
    newer = trainer.rsplit("@", 1)[0] + "@sha256:" + "3" * 64
    dev.write_text(good.replace(trainer, newer))
    _commit(environments, "mended, at a newer digest")
    back = _run(environments, "rollback", "dev", "release.images.trainer")
    assert back.returncode == 0, back.stderr
    assert load_environment(dev).release.images["trainer"] == trainer
