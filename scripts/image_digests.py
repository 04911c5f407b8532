"""`make image-digests`: resolve each upstream image still pinned by tag alone (infra/catalogue/upstream.py
AWAITING_DIGEST: images the cluster runs; BASE_AWAITING_DIGEST: base images of the platform's own builds) to
`image:tag@sha256:...`, by asking its registry (the OCI distribution API, anonymously, as
`docker pull` of a public image does). Prints one line per image; what could not be reached says so. Nothing is
written: a digest goes into the catalogue by a reviewed edit, with where it came from.

Exit codes: 0 every image resolved, 1 some could not be (offline, or the registry refused).
"""

from __future__ import annotations

import json
import re
import sys
import urllib.error
import urllib.request

from scripts.parser import ArgumentParser

ACCEPT = ", ".join(
    [
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ]
)


def split(image: str) -> tuple[str, str, str]:
    """(registry host, repository, tag) of an image reference; Docker Hub's short names expanded."""
    name, _, tag = image.rpartition(":")
    host, _, path = name.partition("/")
    if "." not in host and ":" not in host:  # docker.io short name: ubuntu -> library/ubuntu
        host, path = "registry-1.docker.io", name if "/" in name else f"library/{name}"
    return host, path, tag


def _token(challenge: str) -> str | None:
    """An anonymous bearer token from a `WWW-Authenticate: Bearer realm=...,service=...,scope=...` challenge."""
    fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
    if "realm" not in fields:
        return None
    query = "&".join(f"{k}={v}" for k, v in fields.items() if k in ("service", "scope"))
    with urllib.request.urlopen(f"{fields['realm']}?{query}", timeout=20) as resp:
        body = json.load(resp)
    return body.get("token") or body.get("access_token")


def resolve(image: str) -> str:
    host, path, tag = split(image)
    url = f"https://{host}/v2/{path}/manifests/{tag}"
    headers = {"Accept": ACCEPT}
    for _ in range(2):
        request = urllib.request.Request(url, method="HEAD", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=20) as resp:
                digest = resp.headers.get("Docker-Content-Digest")
                if not digest:
                    raise RuntimeError("the registry sent no Docker-Content-Digest")
                return f"{image}@{digest}"
        except urllib.error.HTTPError as err:
            token = _token(err.headers.get("WWW-Authenticate", "")) if err.code == 401 else None
            if not token:
                raise
            headers["Authorization"] = f"Bearer {token}"
    raise RuntimeError("the registry refused an anonymous token")


def main(argv: list[str] | None = None) -> int:

    ArgumentParser(
        prog="python -m scripts.image_digests",
        description=(
            "Resolve each upstream image pinned by tag alone (AWAITING_DIGEST, BASE_AWAITING_DIGEST) to its digest."
        ),
        epilog="Exit codes: 0 every image resolved, 1 some could not be (offline, or the registry refused).",
    ).parse_args(argv)
    from infra.catalogue.upstream import AWAITING_DIGEST, BASE_AWAITING_DIGEST

    failed = 0
    for image in sorted({*AWAITING_DIGEST, *BASE_AWAITING_DIGEST}):
        try:
            print(resolve(image))
        except Exception as err:  # offline, refused, or not found: say which image and why
            failed += 1
            print(f"{image}: not resolved: {err}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
