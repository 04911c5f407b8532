"""Files pinned by sha256 (upstream CRD schemas, Cluster Toolkit's module interfaces): whether a directory holds
them, the first look-up directory that does, and a fetch that verifies every file before it replaces anything.

`pins` maps each file's path (relative to the directory) to its sha256; `sources` maps it to (download URL,
sha256). The callers (infra/charts/crds.py, infra/slurm/interfaces.py) own their pin files, their look-up
order and their error messages.
"""

from __future__ import annotations

import hashlib
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path


class FetchFailed(OSError):
    """A pinned file could not be downloaded (no network, a proxy, the host refused); nothing was changed."""


def local_copy(variable: str, directories: Sequence[Path], pin_file: Path) -> str:
    """How to do without the download: where a copy of the pinned files is looked for, and the variable that
    names another directory (each file at its pinned path, checked against its sha256 in `pin_file`)."""
    where = " or ".join(str(d) for d in directories)
    return (
        f"without network access, copy the pinned files (the paths and sha256 of {pin_file}) from a machine that "
        f"has them into {where}, or set {variable}=<a directory holding them>"
    )


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def problems(directory: Path, pins: Mapping[str, str]) -> list[str]:
    """What keeps `directory` from holding every pinned file with its checksum (empty: it does)."""
    if not directory.is_dir():
        return [f"{directory}: no such directory"]
    found = []
    for name, sha in pins.items():
        path = directory / name
        if not path.is_file():
            found.append(f"{path}: missing")
        elif (digest := sha256(path)) != sha:
            found.append(f"{path}: sha256 {digest} is not the pinned {sha}")
    return found


def first_complete(candidates: Iterable[Path], pins: Mapping[str, str]) -> tuple[Path | None, list[str]]:
    """The first candidate directory that holds every pinned file, or None and the first problems of each."""
    report: list[str] = []
    for directory in candidates:
        found = problems(directory, pins)
        if not found:
            return directory, []
        report += found[:3]
    return None, report


def fetch(target: Path, sources: Mapping[str, tuple[str, str]], pin_file: Path, *, offline: str = "") -> None:
    """Download every file into `target`: all verified against its sha256 (`pin_file` is named in a mismatch),
    then swapped in whole; on any failure `target` is left as it was. A download that fails raises FetchFailed
    naming the URL, the reason and `offline` (what to do without network access: `local_copy`)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}-") as tmp:
        staging = Path(tmp) / "files"
        staging.mkdir()
        for name, (url, sha) in sources.items():
            try:
                with urllib.request.urlopen(url, timeout=60) as response:
                    data = response.read()
            except (urllib.error.URLError, OSError) as err:
                reason = getattr(err, "reason", None) or err
                raise FetchFailed(f"{url}: {reason}" + (f"; {offline}" if offline else "")) from err
            digest = hashlib.sha256(data).hexdigest()
            if digest != sha:
                raise ValueError(f"{url}: sha256 {digest} is not the pinned {sha} ({pin_file})")
            out = staging / name
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data)
        if target.exists():
            target.rename(Path(tmp) / "old")  # removed with the temporary directory
        staging.rename(target)
