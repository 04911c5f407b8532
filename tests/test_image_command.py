"""`make image` and `make images`: a dry run refuses what the build refuses (uncommitted changes), and the five
images are built by one command and pinned by one write of the environment file, or not at all."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

import scripts.image
from infra.delivery import images
from infra.delivery.images import build_all, load_catalogue, plan_build
from infra.synth.load import load_environment
from tests.helpers import REPO

DIGESTS = {name: "sha256:" + f"{i + 1:02x}" * 32 for i, name in enumerate(sorted(load_catalogue()))}


@pytest.fixture
def environments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "environments"
    shutil.copytree(REPO / "infra" / "environments", directory)
    monkeypatch.setenv("PLATFORM_ENVIRONMENTS_DIR", str(directory))
    monkeypatch.setattr(scripts.image, "docker_answers", lambda: False)
    return directory


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args], cwd=repo, check=True,
        capture_output=True,
    )  # fmt: skip


def test_a_dry_run_refuses_a_working_tree_with_uncommitted_changes(
    tmp_path: Path, environments: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The build tags the image with the commit and refuses a tree that is not that commit; its dry run did not."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "Dockerfile").write_text("FROM scratch\n")
    _git(repo, "add", "Dockerfile")
    _git(repo, "commit", "-q", "-m", "first")
    (repo / "Dockerfile").write_text("FROM scratch\nLABEL changed=yes\n")
    monkeypatch.setattr(images, "REPO", repo)
    monkeypatch.chdir(repo)
    assert scripts.image.main(["trainer", "dev", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "1 uncommitted change(s) (Dockerfile); an image is tagged with its commit: commit first" in err
    assert "a dry run refuses what the build would" in err
    _git(repo, "commit", "-q", "-am", "second")
    assert scripts.image.main(["trainer", "dev", "--dry-run"]) == 0
    assert "# would pin in" in capsys.readouterr().out


def test_images_dry_run_prints_every_image_of_the_catalogue(
    environments: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(scripts.image, "uncommitted", lambda: [])
    before = (environments / "dev.yaml").read_text()
    assert scripts.image.main(["--all", "dev", "--dry-run"]) == 0
    out = capsys.readouterr().out
    pinned = [line.split("release.images.")[1].split(":")[0] for line in out.splitlines() if "# would pin" in line]
    assert pinned == sorted(load_catalogue()) and len(pinned) == 5
    assert (environments / "dev.yaml").read_text() == before
    assert scripts.image.main(["dev", "--dry-run"]) == 2  # a name is needed without --all


class FakeBuilds:
    """Stands in for docker/gcloud: records each command; the digest command answers the image's digest; the
    build of `fail` exits 1."""

    def __init__(self, fail: str | None = None) -> None:
        self.fail = fail
        self.commands: list[list[str]] = []

    def __call__(self, command: Sequence[str]) -> str:
        self.commands.append(list(command))
        # Cloud Build's submit names its image in the build's config file.
        config = [Path(c.removeprefix("--config=")).read_text() for c in command if c.startswith("--config=")]
        name = next(n for n in DIGESTS if any(f"/{n}:" in c for c in [*command, *config]))
        if self.fail == name and command[:2] == ["gcloud", "builds"]:
            raise subprocess.CalledProcessError(1, list(command))
        return DIGESTS[name] + "\n" if "describe" in command else ""


def _plans(environments: Path) -> list[images.ImageBuild]:
    return [
        plan_build(name, "dev", commit="0123456789ab", use_docker=False, environments=environments)
        for name in sorted(load_catalogue())
    ]


def test_every_image_is_pinned_in_one_write(environments: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writes: list[str] = []
    real = images.write_validated
    monkeypatch.setattr(images, "write_validated", lambda path, text: (writes.append(text), real(path, text)))
    pins, change = build_all(_plans(environments), run=FakeBuilds(), dry_run=False)
    assert len(writes) == 1
    dev = load_environment(environments / "dev.yaml")
    assert dev.placeholder_images() == []
    for name, digest in DIGESTS.items():
        assert dev.release.images[name] == f"us-east5-docker.pkg.dev/acme-ml-platform-dev/ml-platform/{name}@{digest}"
        assert pins[name] == dev.release.images[name] and f"+    {name}: {pins[name]}" in change


def test_a_failed_third_build_leaves_the_environment_file_as_it_was(environments: Path) -> None:
    before = (environments / "dev.yaml").read_text()
    third = sorted(load_catalogue())[2]
    builds = FakeBuilds(fail=third)
    with pytest.raises(subprocess.CalledProcessError):
        build_all(_plans(environments), run=builds, dry_run=False)
    assert (environments / "dev.yaml").read_text() == before
    built = [c for c in builds.commands if c[:2] == ["gcloud", "builds"]]
    assert len(built) == 3  # the first two built and pushed, the third refused, the rest never started
    assert not any(p.name.startswith(".dev.yaml") for p in environments.iterdir())


def test_the_command_says_a_failed_build_pinned_nothing(
    environments: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(scripts.image, "uncommitted", lambda: [])
    monkeypatch.setattr(scripts.image, "git_commit", lambda: "0123456789ab")
    monkeypatch.setattr(scripts.image, "_run", FakeBuilds(fail=sorted(load_catalogue())[2]))
    before = (environments / "dev.yaml").read_text()
    assert scripts.image.main(["--all", "dev"]) == 1
    assert "nothing was pinned (the images built before it are pushed, not pinned)" in capsys.readouterr().err
    assert (environments / "dev.yaml").read_text() == before
