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

from infra.catalogue.images import base_images
from infra.catalogue.upstream import BASE_AWAITING_DIGEST
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
