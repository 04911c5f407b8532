"""The pinned upstream CRD schemas: where they are, that they are the pinned files, and `make crds` to fetch them.

    python -m infra.charts.crds fetch    download every pinned file into .cache/crds (checksums verified)
    python -m infra.charts.crds where    print the directory in use, or fail naming what is missing

Look-up order: $PLATFORM_CRDS_DIR, .cache/crds (what `make crds` wrote), ../shared/crds beside the
checkout. A directory counts only when it holds every required pinned file with its pinned checksum; an
optional file (`optional: true`) is taken from any of those directories that holds it with its checksum, and
`missing_optional()` names those found nowhere.
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path

import yaml

from infra import settings
from workloads import pinned_files

REPO = Path(__file__).resolve().parents[2]
CHARTS = REPO / "workloads" / "charts"
PINS = Path(__file__).resolve().parent / "crds.yaml"
FETCHED = REPO / ".cache" / "crds"
SHARED = REPO.parent / "shared" / "crds"


class CrdsMissing(FileNotFoundError):
    """No directory holds the pinned CRD schemas."""


@cache
def all_pins() -> dict[str, tuple[str, str, bool]]:
    """{file name: (download URL, sha256, optional)} of every pinned schema."""
    data = yaml.safe_load(PINS.read_text())
    out = {}
    for name, pin in data["files"].items():
        src = data["sources"][pin["source"]]
        url = f"https://github.com/{src['repository']}/raw/{src['commit']}/{src['directory']}/{name}"
        out[name] = (url, pin["sha256"], bool(pin.get("optional")))
    return out


def pins() -> dict[str, tuple[str, str]]:
    """{file name: (download URL, sha256)} of every required pinned schema."""
    return {name: (url, sha) for name, (url, sha, optional) in all_pins().items() if not optional}


def optional_found() -> dict[str, Path]:
    """Each optional pinned schema found with its checksum in a look-up directory, by file name."""
    found = {}
    for name, (_, sha, optional) in all_pins().items():
        if not optional:
            continue
        for directory in candidates():
            path = directory / name
            if path.is_file() and pinned_files.sha256(path) == sha:
                found[name] = path
                break
    return found


def missing_optional() -> list[str]:
    return sorted(name for name, (_, _, optional) in all_pins().items() if optional and name not in optional_found())


def problems(directory: Path) -> list[str]:
    """What keeps `directory` from being the pinned schemas (empty: it is)."""
    return pinned_files.problems(directory, {name: sha for name, (_, sha) in pins().items()})


def candidates() -> list[Path]:
    env = settings.CRDS_DIR.path()
    return [env] if env else [FETCHED, SHARED]


def locate() -> Path:
    """The directory of the pinned schemas, or CrdsMissing saying what is wrong and how to get them."""
    found, report = pinned_files.first_complete(candidates(), {name: sha for name, (_, sha) in pins().items()})
    if found is None:
        raise CrdsMissing(
            "the pinned upstream CRD schemas are not available (`make crds` fetches them; "
            + pinned_files.local_copy("PLATFORM_CRDS_DIR", [FETCHED, SHARED], PINS)
            + "): "
            + "; ".join(report)
        )
    return found


def available() -> bool:
    try:
        locate()
    except CrdsMissing:
        return False
    return True


def fetch(target: Path | None = None) -> list[str]:
    """Download every pinned file (the optional ones too) into `target` (.cache/crds) atomically: all verified,
    or nothing changed."""
    sources = {name: (url, sha) for name, (url, sha, _) in all_pins().items()}
    offline = pinned_files.local_copy("PLATFORM_CRDS_DIR", [FETCHED, SHARED], PINS)
    pinned_files.fetch(target or FETCHED, sources, PINS, offline=offline)
    return sorted(all_pins())


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m infra.charts.crds",
        description="The pinned upstream CRD schemas: fetch them, or say where they are.",
        epilog="Exit codes: 0 done, 1 a download or checksum failed (fetch) or no directory holds them (where).",
    )
    parser.add_argument("command", choices=["fetch", "where"])
    if parser.parse_args(argv).command == "fetch":
        try:
            names = fetch()
        except (OSError, ValueError) as err:
            print(f"error: fetching the pinned CRD schemas failed: {err}", file=sys.stderr)
            return 1
        print(f"{len(names)} pinned CRD schemas in {FETCHED}")
        return 0
    try:
        print(locate())
    except CrdsMissing as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
