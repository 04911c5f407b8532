"""Upstream files generated scripts source, pinned by commit and sha256 (`pinned-files.yaml`): the real file where it
has been fetched, else a stand-in generated from the checked-in record of what the real file requires and exports.

    python -m scripts.shell fetch    download every pinned file into .cache/pinned-scripts (checksums verified)

Look-up: $PLATFORM_PINNED_SCRIPTS_DIR, else .cache/pinned-scripts. A file there with another checksum is refused,
never used. Limitation: CI and the machines this was written on reach package registries, not GitHub, so the real
file is absent there and scripts run against the stand-in; `record_problems` (tests/test_shell.py) holds the record
to the real file wherever `make pinned-scripts` could fetch it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from infra import settings
from workloads import pinned_files

HERE = Path(__file__).resolve().parent
PINS = HERE / "pinned-files.yaml"
REPO = HERE.parents[1]
FETCHED = REPO / ".cache" / "pinned-scripts"


@dataclass(frozen=True)
class PinnedFile:
    key: str
    repository: str
    tag: str
    commit: str
    path: str
    sha256: str
    record: dict[str, Any]

    @property
    def name(self) -> str:
        """Its path under the pinned-scripts directory: <owner>/<repository>/<path>."""
        return f"{self.repository}/{self.path}"

    @property
    def url(self) -> str:
        return f"https://raw.githubusercontent.com/{self.repository}/{self.commit}/{self.path}"

    @property
    def cites(self) -> str:
        return f"{self.repository} @ {self.tag} ({self.commit[:12]}) {self.path}, sha256 {self.sha256[:12]}"


@cache
def pinned() -> dict[str, PinnedFile]:
    data = yaml.safe_load(PINS.read_text())["files"]
    return {key: PinnedFile(key=key, **spec) for key, spec in data.items()}


def directory() -> Path:
    return settings.PINNED_SCRIPTS_DIR.path() or FETCHED


class PinnedFileMismatch(ValueError):
    """A pinned file is present with another checksum: never used."""


def real(key: str) -> Path | None:
    """The fetched real file of `key`, verified; None where it has not been fetched."""
    spec = pinned()[key]
    path = directory() / spec.name
    if not path.is_file():
        return None
    digest = pinned_files.sha256(path)
    if digest != spec.sha256:
        raise PinnedFileMismatch(f"{path}: sha256 {digest} is not the pinned {spec.sha256} ({PINS})")
    return path


def standin(key: str) -> str:
    """A stand-in for `key` generated from its record: it stops where the real file stops (a required variable
    unset; under set -u an unguarded one unset) and exports what the real file exports."""
    spec = pinned()[key]
    record = spec.record
    lines = [
        f"# STAND-IN for {spec.cites}.",
        "# The real file is not on this machine (`make pinned-scripts` fetches it where GitHub is reachable); this is",
        "# generated from infra/shell/pinned-files.yaml, the record of what it requires, reads and exports.",
    ]
    if record.get("shell") == "bash":
        lines.append('[[ -n "${BASH_VERSION:-}" ]]  # the real file uses [[ ]]: sourced by sh, it fails')
    lines += [f': "${{{name}:?Must set {name}}}"' for name in record.get("required", [])]
    lines += [f': "${{{name}}}"  # expanded without a default in the real file' for name in record.get("unguarded", [])]
    lines += [f"ls {path} >/dev/null" for path in record.get("reads", [])]
    lines += ["gpu_nics=eth1,eth2,eth3,eth4,eth5,eth6,eth7,eth8", "host_nic=eth0"]
    lines += [f'export {name}="{value}"' for name, value in record.get("exports", {}).items()]
    return "\n".join(lines) + "\n"


def content(key: str) -> tuple[str, str]:
    """(text, which one: 'real <path>' or 'stand-in') of `key` on this machine."""
    path = real(key)
    if path is not None:
        return path.read_text(), f"real {path}"
    return standin(key), "stand-in (record in infra/shell/pinned-files.yaml)"


_EXPORT = re.compile(r"^export (\w+)=(.*)$", re.M)
_REQUIRED = re.compile(r'^: "\$\{(\w+):\?', re.M)
_REFERENCE = re.compile(r"\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)")
_ASSIGNED = re.compile(r"^\s*(?:local\s+|export\s+)?(\w+)=|\bfor (\w+) in", re.M)


def record_of(text: str) -> dict[str, Any]:
    """What a profile requires, expands unguarded and exports, read from its text (the record's fields): a name
    is unguarded where a line expands it (without a default) before any line assigns it."""
    required = sorted(set(_REQUIRED.findall(text)))
    assigned: set[str] = {"BASH_REMATCH", *required}
    unguarded: set[str] = set()
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        unguarded |= {a or b for a, b in _REFERENCE.findall(line)} - assigned
        assigned |= {a or b for a, b in _ASSIGNED.findall(line)}
    exports = {name: value.strip('"') for name, value in _EXPORT.findall(text)}
    return {"required": required, "unguarded": sorted(unguarded), "exports": exports}


def record_problems(key: str, text: str) -> list[str]:
    """Where the checked-in record of `key` differs from the real file's text (empty: it does not)."""
    record = pinned()[key].record
    found = record_of(text)
    problems = []
    for field in ("required", "unguarded"):
        if sorted(record.get(field, [])) != found[field]:
            problems.append(f"{field}: the record says {sorted(record.get(field, []))}, the file {found[field]}")
    if record.get("exports", {}) != found["exports"]:
        problems.append(f"exports: the record says {record.get('exports')}, the file {found['exports']}")
    return problems


def fetch(target: Path | None = None) -> int:
    """Download every pinned file into `target` (.cache/pinned-scripts), all verified, or nothing changed. Returns
    how many."""
    files = pinned()
    offline = pinned_files.local_copy(settings.PINNED_SCRIPTS_DIR.name, [FETCHED], PINS)
    pinned_files.fetch(target or FETCHED, {f.name: (f.url, f.sha256) for f in files.values()}, PINS, offline=offline)
    return len(files)
