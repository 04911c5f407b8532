"""The three Terraform providers the stacks use, built from their upstream sources into a provider mirror.

Each provider's tarball (infra/catalogue/terraform_engine.py: version, commit, digest) is checked first, against
the digest pinned here and the SHA256SUMS beside it; then unpacked into a temporary folder and built with `go build`
(its Go dependencies through the module proxy, its go.sum checking each). The binary lands in a filesystem mirror,
`<mirror>/<host>/hashicorp/<type>/<version>/linux_amd64/terraform-provider-<type>_v<version>`, the layout
Terraform and OpenTofu read for providers that do not come from a registry, under both engines' registry hosts. A
stamp beside the binary records what built it (the tarball's digest, the Go version, the flags): a warm build finds
it and runs no compiler. Nothing is half-written: a failed or killed build leaves the mirror as it was.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from infra import settings
from infra.catalogue.terraform_engine import PROVIDERS, REGISTRY_HOSTS, ProviderSource
from infra.engine.build import BuildError, go_version

REPO = Path(__file__).resolve().parents[2]
README = "../shared/vendor/terraform-providers/README.md"


def sources_dir() -> Path:
    """Where the providers' tarballs are: $PLATFORM_PROVIDER_SOURCES, else the shared folder beside the checkout."""
    return settings.PROVIDER_SOURCES.path() or (REPO.parent / "shared" / "vendor" / "terraform-providers")


def mirror_dir() -> Path:
    return settings.PROVIDER_MIRROR.path() or (Path.home() / ".cache" / "platform" / "terraform-providers")


def os_arch() -> str:
    machine = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine(), platform.machine())
    return f"{sys.platform}_{machine}"


def binary_path(provider: ProviderSource, host: str = REGISTRY_HOSTS[0], mirror: Path | None = None) -> Path:
    folder = (mirror or mirror_dir()) / host / provider.namespace / provider.type / provider.version / os_arch()
    return folder / provider.binary


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify(provider: ProviderSource, folder: Path | None = None) -> Path:
    """The provider's tarball, checked: present, its digest the one pinned, and the one its SHA256SUMS lists."""
    folder = folder or sources_dir()
    tarball = folder / provider.tarball
    if not folder.is_dir():
        raise BuildError(
            f"{folder}: no such folder: the providers' sources are built from {README} (a checkout with shared/ "
            "beside it), or from the folder PLATFORM_PROVIDER_SOURCES names; nothing was built"
        )
    if not tarball.is_file():
        raise BuildError(
            f"{tarball}: missing: {provider.type} {provider.version} is built from this tarball "
            f"(`git archive v{provider.version}` of hashicorp/terraform-provider-{provider.type}, {README}); "
            "nothing was built"
        )
    found = _sha256(tarball)
    if found != provider.sha256:
        raise BuildError(
            f"{tarball}: sha256 {found} is not the pinned {provider.sha256} "
            f"(infra/catalogue/terraform_engine.py, commit {provider.commit}): refused, nothing was built; "
            "restore the tarball from the shared folder"
        )
    sums = folder / "SHA256SUMS"
    listed = {}
    if sums.is_file():
        for line in sums.read_text().splitlines():
            digest, _, name = line.strip().partition("  ")
            listed[name.strip()] = digest
    if listed.get(provider.tarball) != found:
        raise BuildError(
            f"{sums}: lists {listed.get(provider.tarball) or 'nothing'} for {provider.tarball}, whose sha256 is "
            f"{found}: refused, nothing was built"
        )
    return tarball


def _stamp(provider: ProviderSource) -> str:
    return f"{provider.sha256} {go_version()} {' '.join(_ldflags(provider))}\n"


def _ldflags(provider: ProviderSource) -> list[str]:
    """As the providers' release builds link them (goreleaser: `-s -w`, no symbol table or DWARF: a smaller binary
    and a shorter link), with the version stamped where the provider has a place for it."""
    flags = "-s -w"
    if provider.version_package:
        flags += f" -X {provider.version_package}.ProviderVersion={provider.version}"
    return ["-ldflags", flags]


def cached(provider: ProviderSource, mirror: Path | None = None) -> bool:
    target = binary_path(provider, mirror=mirror)
    stamp = target.with_name(".stamp")
    return all(binary_path(provider, h, mirror).is_file() for h in REGISTRY_HOSTS) and (
        stamp.is_file() and stamp.read_text() == _stamp(provider)
    )


def build(provider: ProviderSource, *, mirror: Path | None = None, sources: Path | None = None) -> Path:
    """The provider's binary in the mirror: cached, or built now from its verified tarball. Says which, and how
    long a build took."""
    mirror = mirror or mirror_dir()
    target = binary_path(provider, mirror=mirror)
    if cached(provider, mirror):
        print(f"build: provider {provider.type} {provider.version}: cached ({target})", file=sys.stderr)
        return target
    tarball = verify(provider, sources)
    started = time.monotonic()
    print(
        f"build: provider {provider.type} {provider.version}: go build from {tarball.name} ...",
        file=sys.stderr,
        flush=True,
    )
    mirror.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".build-{provider.type}-", dir=mirror) as tmp:
        source = Path(tmp) / "src"
        source.mkdir()
        with tarfile.open(tarball) as archive:
            archive.extractall(source, filter="data")
        done = subprocess.run(
            ["go", "build", "-mod=readonly", "-trimpath", *_ldflags(provider), "-o", str(Path(tmp) / "out"), "."],
            cwd=source,
            capture_output=True,
            text=True,
            env={**os.environ, "GOFLAGS": "-buildvcs=false", "GOTOOLCHAIN": "local"},
            check=False,
        )
        if done.returncode:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise BuildError(
                f"provider {provider.type} {provider.version}: go build failed (from {tarball}); the mirror "
                f"{mirror} is unchanged:\n{tail}"
            )
        built = Path(tmp) / "out"
        built.chmod(0o755)
        for host in REGISTRY_HOSTS:
            path = binary_path(provider, host, mirror)
            path.parent.mkdir(parents=True, exist_ok=True)
            staged = path.with_name(f".{path.name}.new")
            staged.unlink(missing_ok=True)
            try:
                os.link(built, staged)  # one file under both hosts (the google provider is 180 MB)
            except OSError:
                shutil.copy2(built, staged)
            os.replace(staged, path)
        target.with_name(".stamp").write_text(_stamp(provider))
    print(
        f"build: provider {provider.type} {provider.version}: built in {time.monotonic() - started:.0f} s ({target})",
        file=sys.stderr,
    )
    return target


# Seconds each provider's first build took on two quiet cores (.ci/run on a new machine, 2026-12-03).
FIRST_BUILD_S = {"google": 188, "kubernetes": 87, "helm": 65}


def build_all(names: list[str] | None = None) -> dict[str, Path]:
    unknown = sorted(set(names or []) - set(PROVIDERS))
    if unknown:
        raise BuildError(f"unknown provider(s) {', '.join(unknown)}; known: {', '.join(PROVIDERS)}")
    from infra.engine.build import expect

    expect([n for n in names or list(PROVIDERS) if not cached(PROVIDERS[n])], FIRST_BUILD_S, "Terraform provider(s)")
    return {name: build(PROVIDERS[name]) for name in names or list(PROVIDERS)}
