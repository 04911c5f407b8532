"""Build an image from the catalogue (`images/images.yaml`), push it, pin its digest.

With a Docker engine that answers, the build runs locally; otherwise it is
submitted to Cloud Build. The tag is the git commit; the pushed digest is
written to the environment's `release.images.<name>`.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from infra.config import ENVIRONMENTS_DIR, Environment
from infra.config.loading import not_one_of
from infra.delivery.release_file import diff, updated_text, write_validated
from infra.synth.load import load_named

REPO = Path(__file__).resolve().parents[2]
CATALOGUE = REPO / "images" / "images.yaml"
DIGEST_PLACEHOLDER = "<digest of the pushed image>"


class ImageError(ValueError):
    """An image that cannot be built as asked; nothing was run or written."""


@dataclass(frozen=True)
class ImageBuild:
    name: str
    env: Environment
    env_path: Path
    image: str  # <registry>/<name>:<git commit>
    engine: str  # docker | cloud-build
    commands: list[list[str]]
    digest_command: list[str]
    cloudbuild: dict[str, Any] | None

    def pin(self, digest: str) -> str:
        return f"{self.image.rsplit(':', 1)[0]}@{digest}"


def load_catalogue(path: Path = CATALOGUE) -> dict[str, dict[str, Any]]:
    return yaml.safe_load(path.read_text()) or {}


def check_image_name(name: str, catalogue: dict[str, dict[str, Any]]) -> None:
    """ImageError naming IMAGE unless `name` is an entry of the catalogue."""
    if name not in catalogue:
        raise ImageError(not_one_of("IMAGE", name, catalogue, f"the images of {CATALOGUE.relative_to(REPO)}"))


def docker_answers() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def uncommitted(repo: Path | None = None) -> list[str]:
    """The working tree's uncommitted changes (`git status --porcelain` lines): an image is tagged with the commit,
    so a build of a tree that is not that commit is refused, its dry run too."""
    out = subprocess.run(["git", "status", "--porcelain"], cwd=repo or REPO, capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def git_commit() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def plan_build(
    name: str, env_name: str, *, commit: str, use_docker: bool, environments: Path = ENVIRONMENTS_DIR
) -> ImageBuild:
    catalogue = load_catalogue()
    check_image_name(name, catalogue)
    entry = catalogue[name]
    env_path = environments / f"{env_name}.yaml"
    env = load_named(env_name, environments)
    image = f"{env.registry_url}/{name}:{commit}"
    build_args = [f"--build-arg={k}={v}" for k, v in sorted((entry.get("build_args") or {}).items())]
    if entry.get("target"):
        build_args += ["--target", entry["target"]]  # one stage of a multi-stage Dockerfile
    dockerfile, context = entry["dockerfile"], entry.get("context", ".")
    if use_docker:
        commands = [
            ["docker", "build", "--file", dockerfile, *build_args, "--tag", image, context],
            ["docker", "push", image],
        ]
        digest_command = ["docker", "inspect", "--format={{index .RepoDigests 0}}", image]
        return ImageBuild(name, env, env_path, image, "docker", commands, digest_command, None)
    cloudbuild = {
        "steps": [
            {
                "name": "gcr.io/cloud-builders/docker",
                "args": ["build", "--file", dockerfile, *build_args, "--tag", image, "."],
                # BuildKit honours the Dockerfiles' `# syntax` line; they also build without it
                # (tests/test_images.py holds them to the classic builder's WORKDIR ownership).
                "env": ["DOCKER_BUILDKIT=1"],
            }
        ],
        "images": [image],
        # The environment's builder, not the project's default build account: it writes
        # this registry and its logs only (infra/constructs/builds.py). A user-specified account's logs go to Cloud
        # Logging (https://cloud.google.com/build/docs/securing-builds/configure-user-specified-service-accounts).
        "serviceAccount": f"projects/{env.project}/serviceAccounts/{env.build_service_account}",
        # VERIFIED: Cloud Build generates and uploads the image's build provenance, or fails the build
        # (BuildOptions.VerifyOption; https://cloud.google.com/build/docs/securing-builds/view-build-provenance).
        "options": {"logging": "CLOUD_LOGGING_ONLY", "requestedVerifyOption": "VERIFIED"},
    }
    commands = [
        [
            "gcloud",
            "builds",
            "submit",
            context,
            f"--project={env.project}",
            f"--region={env.region}",
            "--config=<cloudbuild.yaml>",
            # The sources go to the stack's staging bucket, which the builder may read (the default
            # <project>_cloudbuild bucket is not the stack's, and the builder has no grant there).
            f"--gcs-source-staging-dir=gs://{env.build_staging_bucket}/source",
        ]
    ]
    digest_command = [
        "gcloud", "artifacts", "docker", "images", "describe", image, f"--project={env.project}",
        "--format=value(image_summary.digest)",
    ]  # fmt: skip
    return ImageBuild(name, env, env_path, image, "cloud-build", commands, digest_command, cloudbuild)


def _built(plan: ImageBuild, run: Callable[[Sequence[str]], str]) -> str:
    """Run one build and push; the pushed image's pin (`<registry>/<name>@sha256:...`)."""
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "cloudbuild.yaml"
        if plan.cloudbuild is not None:
            config.write_text(json.dumps(plan.cloudbuild))
        for command in plan.commands:
            run([c.replace("<cloudbuild.yaml>", str(config)) for c in command])
        # Both forms end in the digest: `<repo>@sha256:...` (docker) or `sha256:...` (gcloud).
        digest = "sha256:" + run(plan.digest_command).strip().rsplit("sha256:", 1)[-1]
    return plan.pin(digest)


def build(plan: ImageBuild, *, run: Callable[[Sequence[str]], str], dry_run: bool) -> tuple[str, str]:
    """Run the build (unless `dry_run`); return (pin, diff of the environment file)."""
    pins, change = build_all([plan], run=run, dry_run=dry_run)
    return pins[plan.name], change


def build_all(
    plans: Sequence[ImageBuild], *, run: Callable[[Sequence[str]], str], dry_run: bool
) -> tuple[dict[str, str], str]:
    """Build and push every image of `plans` (one environment's) in turn, then pin all their digests in the
    environment file in one validated write; return (pins, diff). A failed build raises before anything is
    written: the images pushed before it are in the registry, the file is as it was. `dry_run` runs nothing."""
    paths = {plan.env_path for plan in plans}
    if len(paths) != 1:
        raise ImageError(f"one environment file at a time; these builds pin into {sorted(map(str, paths))}")
    if dry_run:
        return {plan.name: plan.pin(DIGEST_PLACEHOLDER) for plan in plans}, ""
    pins = {plan.name: _built(plan, run) for plan in plans}
    (env_path,) = paths
    old = env_path.read_text()
    new = updated_text(env_path, {"images": pins})
    write_validated(env_path, new)
    return pins, diff(env_path, old, new)
