"""The Go programs the platform builds (the local cluster's, OpenTofu), from their Go modules at pinned versions,
cached.

Each folder of `infra/engine/go/` is one Go module (its go.mod pins the upstream module, its go.sum every
checksum) that names the programs it builds: the `tool` lines of its go.mod, and each `package main` folder of its
own (etcd). A build goes to `<cache>/<component>-<digest>/`, the digest being of the module's files and the Go
version, so a fresh clone on the same machine finds it (warm: no compiler runs); Go's own build and module caches
(GOCACHE, GOMODCACHE) make a rebuild after a change cheap too. `<cache>` is $PLATFORM_GO_BIN_CACHE, else
~/.cache/platform/go-bin.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from infra import settings

MODULES = Path(__file__).resolve().parent / "go"


class BuildError(RuntimeError):
    """A Go build failed: the component and the compiler's last lines."""


@dataclass(frozen=True)
class Component:
    """One Go module of infra/engine/go and the programs it builds."""

    name: str
    folder: Path

    @property
    def packages(self) -> list[str]:
        """The import paths of its programs: its go.mod's `tool` lines, then its own `package main` folders."""
        text = (self.folder / "go.mod").read_text()
        tools = re.findall(r"^tool\s+([^\s(]\S*)", text, re.M)
        for block in re.findall(r"^tool\s*\((.*?)\)", text, re.M | re.S):
            tools += [line.split("//")[0].strip() for line in block.splitlines() if line.split("//")[0].strip()]
        own = sorted(f"./{p.parent.name}" for p in self.folder.glob("*/main.go"))
        return [*tools, *own]

    @property
    def programs(self) -> list[str]:
        """The file name of each program: the last element of its import path."""
        return [p.rstrip("/").rsplit("/", 1)[-1] for p in self.packages]

    def ldflags(self) -> list[str]:
        """The module's own `// ldflags:` line, else what Kubernetes' own build stamps into its programs
        (hack/lib/version.sh): the version of the k8s.io/kubernetes module go.mod requires, so the API server
        reports v1.35.4 and not v0.0.0-master (a controller that parses the server's version refuses that one)."""
        text = (self.folder / "go.mod").read_text()
        # A module's own stamps, in a `// ldflags: ...` line of its go.mod (OpenTofu's release build: version.dev=no).
        own = re.search(r"^// ldflags: (.+)$", text, re.M)
        if own:
            return ["-ldflags", own.group(1).strip()]
        found = re.search(r"^(?:require)?\s*k8s\.io/kubernetes (v(\d+)\.(\d+)\.\d+)\b", text, re.M)
        if not found:
            return []
        version, major, minor = found.groups()
        flags = []
        for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
            flags += [
                f"-X {package}.{k}={v}"
                for k, v in (
                    ("gitVersion", version),
                    ("gitMajor", major),
                    ("gitMinor", minor),
                    ("gitTreeState", "clean"),
                )
            ]
        return ["-ldflags", " ".join(flags)]

    def digest(self) -> str:
        """What decides the build: every file of the module folder and the Go version."""
        h = hashlib.sha256(go_version().encode() + " ".join(self.ldflags()).encode())
        for path in sorted(self.folder.rglob("*")):
            if path.is_file():
                h.update(str(path.relative_to(self.folder)).encode() + b"\0" + path.read_bytes())
        return h.hexdigest()[:16]


def components() -> dict[str, Component]:
    return {p.name: Component(p.name, p) for p in sorted(MODULES.iterdir()) if (p / "go.mod").is_file()}


@cache
def go_version() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildError("the local cluster is built from Go modules: no `go` on PATH (Go 1.26 or later)")
    return subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout.strip()


def cache_dir() -> Path:
    configured = settings.GO_BIN_CACHE.path()
    if configured:
        return configured
    return Path.home() / ".cache" / "platform" / "go-bin"


def _target(component: Component) -> Path:
    return cache_dir() / f"{component.name}-{component.digest()}"


def is_cached(name: str) -> bool:
    """Whether the named component's programs are built for its module as it is now (no Go: not built)."""
    component = components()[name]
    try:
        target = _target(component)
    except BuildError:
        return False
    return all((target / program).is_file() for program in component.programs)


def build(component: Component, *, log: Path | None = None) -> Path:
    """The folder holding the component's programs: cached, or built now (atomically: a failed or killed build
    leaves nothing half-written behind). Says which, and how long a build took."""
    target = _target(component)
    if all((target / program).is_file() for program in component.programs):
        print(f"build: {component.name}: cached ({target})", file=sys.stderr)
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    print(f"build: {component.name}: go build {' '.join(component.packages)} ...", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix=f".{component.name}-", dir=target.parent) as tmp:
        # -mod=readonly: go.sum must already hold every checksum (a build never rewrites the pins).
        done = subprocess.run(
            ["go", "build", "-mod=readonly", "-trimpath", *component.ldflags(), "-o", tmp + "/", *component.packages],
            cwd=component.folder,
            capture_output=True,
            text=True,
            env={**os.environ, "GOFLAGS": "-buildvcs=false", "GOTOOLCHAIN": "local"},
            check=False,
        )
        if log is not None:
            log.write_text(done.stdout + done.stderr)
        if done.returncode:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise BuildError(f"{component.name}: go build failed (in {component.folder}):\n{tail}")
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
    target.chmod(0o755)
    print(f"build: {component.name}: built in {time.monotonic() - started:.0f} s ({target})", file=sys.stderr)
    return target


# Seconds each component's first build took on two quiet cores with empty Go caches, module downloads included
# (.ci/run on a new machine, 2026-12-03; docs/development.md; Kueue's at v0.19.2, 2026-12-04, its modules downloaded):
# what a first build says to expect.
FIRST_BUILD_S = {
    "helm": 168, "jobset": 145, "kube": 351, "kuberay": 88, "kueue": 174, "kwok": 65, "lws": 72, "lws-0.8.0": 77,
    "opentofu": 174,
}  # fmt: skip


def expect(names: list[str], first_build_s: dict[str, int], what: str) -> None:
    """Say up front what is about to be built and about how long it takes (nothing when everything is cached)."""
    if names:
        minutes = sum(first_build_s.get(n, 120) for n in names) / 60
        print(
            f"build: {len(names)} {what} to build from source ({', '.join(names)}): about {minutes:.0f} min on two "
            "cores the first time, cached after (more while the Go modules download on a slow network)",
            file=sys.stderr,
            flush=True,
        )


def build_all(names: list[str] | None = None) -> dict[str, Path]:
    """program name -> path, for every component (or those named), each built or taken from the cache."""
    found = components()
    unknown = sorted(set(names or []) - set(found))
    if unknown:
        raise BuildError(f"unknown component(s) {', '.join(unknown)}; known: {', '.join(found)}")
    expect([n for n in names or list(found) if not is_cached(n)], FIRST_BUILD_S, "Go program group(s)")
    programs: dict[str, Path] = {}
    for name in names or list(found):
        folder = build(found[name])
        programs.update({program: folder / program for program in found[name].programs})
    return programs
