"""Put the pinned packer and gcluster on a runner's PATH (without them `scripts/deploy.py`
would refuse `gcluster deploy` after the platform stack is applied).

  python -m scripts.tools install [--dest DIR]
      each tool whose pinned version is not on PATH already: Packer PACKER_VERSION from releases.hashicorp.com
      (its zip checked against HashiCorp's SHA256SUMS for that release), gcluster built from Cluster Toolkit's
      pinned commit (CLUSTER_TOOLKIT: clone, check out that commit, `make gcluster` as the toolkit's README
      builds it, with the runner's Go). DIR (default $RUNNER_TEMP/platform-tools) is added to $GITHUB_PATH.
  python -m scripts.tools check
      exit 0 when both are on PATH at the pinned version, 2 with what differs.

Terraform comes from hashicorp/setup-terraform at TERRAFORM_VERSION. Only a real runner with network shows the
download and the build; the tests run the workflows with stand-ins already on PATH (the install is then a no-op
that says so).

Packer's sha256 comes from HashiCorp's SHA256SUMS of the same release over TLS (its GPG signature is not checked
here). Pin the zip's own sha256 into PACKER_LINUX_AMD64_SHA256 once it has been read from a real download.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from pathlib import Path

from infra.catalogue.cluster_toolkit import CLUSTER_TOOLKIT, PACKER_VERSION
from scripts.parser import ArgumentParser

PACKER_BASE = f"https://releases.hashicorp.com/packer/{PACKER_VERSION}"
PACKER_ZIP = f"packer_{PACKER_VERSION}_linux_amd64.zip"
# Not recorded yet (nothing here reaches releases.hashicorp.com); None: checked against the release's SHA256SUMS.
PACKER_LINUX_AMD64_SHA256: str | None = None


def _version(tool: str, pattern: str, path: str | None = None) -> str | None:
    found = shutil.which(tool, path=path)
    if found is None:
        return None
    done = subprocess.run([found, "version"], capture_output=True, text=True, check=False)
    match = re.search(pattern, done.stdout + done.stderr)
    return match.group(1) if match else None


def packer_found(path: str | None = None) -> str | None:
    return _version("packer", r"v?([0-9]+\.[0-9]+\.[0-9]+)", path)


def terraform_found(path: str | None = None) -> str | None:
    """The version of the Terraform on `path` (default: PATH): `terraform version -json`'s terraform_version, or
    the first version its text names ('Terraform v1.12.2'; an out-of-date one also names the latest release after
    it, which must not be taken for its own)."""
    found = shutil.which("terraform", path=path)
    if found is None:
        return None
    done = subprocess.run([found, "version", "-json"], capture_output=True, text=True, check=False)
    try:
        version = json.loads(done.stdout).get("terraform_version")
    except (json.JSONDecodeError, AttributeError):
        version = None
    if isinstance(version, str):
        return version
    match = re.search(r"v?([0-9]+\.[0-9]+\.[0-9]+)", done.stdout + done.stderr)
    return match.group(1) if match else None


def gcluster_found(path: str | None = None, command: list[str] | None = None) -> str | None:
    """The commit gcluster was built from (`gcluster --version` prints 'Built from: <branch>, commit: <sha>';
    a release build prints its tag instead). `command` runs another gcluster than the one on `path`."""
    if command is None:
        found = shutil.which("gcluster", path=path)
        if found is None:
            return None
        command = [found]
    try:
        done = subprocess.run([*command, "--version"], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        return None
    text = done.stdout + done.stderr
    commit = re.search(r"commit: ([0-9a-f]{40})", text)
    if commit:
        return commit.group(1)
    tag = re.search(r"(v[0-9]+\.[0-9]+\.[0-9]+)", text)
    return tag.group(1) if tag else None


def problems(path: str | None = None) -> list[str]:
    """What differs from the pins on `path` (default: PATH)."""
    found = []
    packer, gcluster = packer_found(path), gcluster_found(path)
    if packer != PACKER_VERSION:
        found.append(f"packer {packer or '(none on PATH)'}: the platform pins {PACKER_VERSION}")
    if gcluster not in (CLUSTER_TOOLKIT.commit, CLUSTER_TOOLKIT.tag):
        found.append(
            f"gcluster {gcluster or '(none on PATH)'}: the platform pins Cluster Toolkit "
            f"{CLUSTER_TOOLKIT.tag} ({CLUSTER_TOOLKIT.commit})"
        )
    return found


def _download(url: str, dest: Path) -> None:
    print(f"downloading {url}", flush=True)
    with urllib.request.urlopen(url, timeout=120) as response, dest.open("wb") as out:
        shutil.copyfileobj(response, out)


def install_packer(dest: Path, work: Path) -> None:
    zip_path = work / PACKER_ZIP
    _download(f"{PACKER_BASE}/{PACKER_ZIP}", zip_path)
    expected = PACKER_LINUX_AMD64_SHA256
    if expected is None:
        sums = work / "SHA256SUMS"
        _download(f"{PACKER_BASE}/packer_{PACKER_VERSION}_SHA256SUMS", sums)
        lines = [ln.split() for ln in sums.read_text().splitlines()]
        expected = next(h for h, name in lines if name == PACKER_ZIP)
    actual = hashlib.sha256(zip_path.read_bytes()).hexdigest()
    if actual != expected:
        raise SystemExit(f"error: {PACKER_ZIP}: sha256 {actual}, expected {expected}")
    with zipfile.ZipFile(zip_path) as archive:
        archive.extract("packer", dest)
    (dest / "packer").chmod(0o755)


def install_gcluster(dest: Path, work: Path) -> None:
    source = work / "cluster-toolkit"
    url = f"https://github.com/{CLUSTER_TOOLKIT.repository}.git"
    subprocess.run(["git", "clone", "--quiet", "--branch", CLUSTER_TOOLKIT.tag, url, str(source)], check=True)
    head = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    if head.stdout.strip() != CLUSTER_TOOLKIT.commit:
        raise SystemExit(f"error: {CLUSTER_TOOLKIT.tag} is {head.stdout.strip()}, pinned {CLUSTER_TOOLKIT.commit}")
    subprocess.run(["make", "gcluster"], cwd=source, check=True)
    shutil.copy2(source / "gcluster", dest / "gcluster")


def install(dest: Path) -> int:
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        if packer_found() == PACKER_VERSION:
            print(f"packer {PACKER_VERSION} already on PATH")
        else:
            install_packer(dest, Path(tmp))
        if gcluster_found() in (CLUSTER_TOOLKIT.commit, CLUSTER_TOOLKIT.tag):
            print(f"gcluster {CLUSTER_TOOLKIT.tag} already on PATH")
        else:
            install_gcluster(dest, Path(tmp))
    github_path = os.environ.get("GITHUB_PATH")
    if github_path:
        with open(github_path, "a", encoding="utf-8") as handle:
            handle.write(f"{dest}\n")
    # What later steps will find: the tools' folder first, then the PATH this step has.
    left = problems(os.pathsep.join([str(dest), os.environ.get("PATH") or os.defpath]))
    for line in left:
        print(f"error: {line}", file=sys.stderr)
    return 2 if left else 0


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m scripts.tools", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["install", "check"])
    parser.add_argument("--dest", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.action == "check":
        left = problems()
        for line in left:
            print(f"error: {line}", file=sys.stderr)
        return 2 if left else 0
    dest = args.dest or Path(os.environ.get("RUNNER_TEMP") or tempfile.gettempdir()) / "platform-tools"
    return install(dest)


if __name__ == "__main__":
    sys.exit(main())
