"""Docker builds of the platform's own images: every image a build pulls (each Dockerfile's
`FROM` that is not an earlier stage, and BuildKit's `# syntax` frontend) is pinned by digest, unless
infra/catalogue/upstream.py BASE_AWAITING_DIGEST says why no digest could be recorded for it yet.

A tag is moved by its publisher (a Docker Official Image tag is rebuilt whenever its base or packages change), so two
builds of one commit can start from different bases; a digest names one image for good. Docker's own guidance: "pin
the image version to a specific digest" (https://docs.docker.com/build/building/best-practices/#pin-base-image-versions).
The Dockerfiles and the images they build: images/images.yaml (infra/catalogue/images.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from infra.catalogue.images import JOBS, base_images, catalogue_images
from infra.catalogue.upstream import BASE_AWAITING_DIGEST
from infra.config.serving import CanaryServing, JetStreamServing, VllmServing
from infra.rules import Finding, rule
from infra.rules.binary_authorization import by_digest

if TYPE_CHECKING:
    from infra.config import Environment


@rule(
    id="docker.base-images-pinned-by-digest",
    system="Docker builds",
    layer="apply",
    summary=(
        "Every image the build of a released image pulls (FROM, and the `# syntax` frontend) is pinned by digest, "
        "unless infra/catalogue/upstream.py BASE_AWAITING_DIGEST says why no digest is recorded for it yet."
    ),
    source=(
        "https://docs.docker.com/build/building/best-practices/#pin-base-image-versions (pin the image version to a "
        "specific digest); https://docs.docker.com/reference/dockerfile/#syntax"
    ),
    subject="environment",
)
def _bases(env: Environment) -> Iterator[Finding]:
    released = set(env.release.images)
    for base, users in sorted(base_images().items()):
        if by_digest(base) or base in BASE_AWAITING_DIGEST:
            continue
        for user in users:
            name, _, dockerfile = user.partition(" (")
            if name in released:
                yield Finding(
                    ("release", "images", name),
                    base,
                    f"{dockerfile.rstrip(')')} builds from {base} by tag: pin it by digest (image:tag@sha256:...; "
                    "`make image-digests` resolves a tag where its registry is reachable), or name it in "
                    "infra/catalogue/upstream.py BASE_AWAITING_DIGEST with why",
                )


def _image_fields(env: Environment) -> Iterator[tuple[tuple[str | int, ...], str, str]]:
    """(field path, release image name, the job it must run) of every environment field that takes an image."""
    if env.training is not None:
        yield ("training", "image"), env.training.image, "ray-trainer"
    for section in ("batch", "slurm", "vertex"):
        job = getattr(getattr(env, section), "training", None)
        if job is not None:
            yield (section, "training", "image"), job.image, "gpu-trainer"
    for key, d in env.serving.items():
        if isinstance(d, CanaryServing):
            yield ("serving", key, "image"), d.image, "canary-server"
        elif isinstance(d, VllmServing):
            yield ("serving", key, "image"), d.image, "vllm-server"
        elif isinstance(d, JetStreamServing) and d.conversion is not None:
            yield ("serving", key, "conversion", "image"), d.conversion.image, "checkpoint-converter"


@rule(
    id="docker.image-runs-the-job",
    system="Docker builds",
    layer="pod-start",
    summary=(
        "A field that takes a release image takes one whose entry point runs that job: images/images.yaml says "
        "what each image runs (`runs`), and every release image is an entry there (the trainer's image given to a "
        "server starts the trainer, which exits, and the pod restarts for ever)."
    ),
    source=(
        "images/images.yaml (each entry's Dockerfile, stage and `runs`); "
        "https://docs.docker.com/reference/dockerfile/#entrypoint (an image runs its own entry point)"
    ),
    subject="environment",
)
def _image_runs_the_job(env: Environment) -> Iterator[Finding]:
    catalogue = catalogue_images()
    for name in env.release.images:
        if name not in catalogue:
            yield Finding(
                ("release", "images", name),
                name,
                f"not an image of images/images.yaml ({', '.join(catalogue)}): `make image` builds only those, and "
                "only an entry says which job its image runs; add an entry with `dockerfile` and `runs`",
            )
    for where, name, job in _image_fields(env):
        image = catalogue.get(name)
        if image is None or image.runs == job:
            continue  # an image not released is refused with the references; one outside the catalogue, above
        fits = [n for n, i in catalogue.items() if i.runs == job]
        yield Finding(
            where,
            name,
            f"release.images.{name} is built from {image.built_from} and runs {JOBS[image.runs]}; this field takes "
            f"an image that runs {JOBS[job]}: {', '.join(fits) or '(none in images/images.yaml)'}",
        )
