"""Rewrite an environment file's release pins, keeping its comments and order, all or nothing."""

from __future__ import annotations

import difflib
import io
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from ruamel.yaml import YAML

from infra.config import ConfigError
from infra.config.loading import environment_files
from infra.synth.load import load_all, load_environment


def _yaml() -> YAML:
    yaml = YAML()  # round-trip: comments, key order and quoting survive
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    return yaml


def updated_text(path: Path, pins: Mapping[str, Mapping[str, str]]) -> str:
    """The file's text with `release.<section>.<name>` set for every pin in `pins`."""
    yaml = _yaml()
    data = yaml.load(path.read_text())
    release = data.setdefault("release", {})
    for section, values in pins.items():
        if release.get(section) is None or release.get(section) == {}:
            release[section] = {}
        for name, value in values.items():
            release[section][name] = value
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()


def diff(path: Path, old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), str(path), str(path)))


def validate(path: Path, text: str) -> None:
    """Raise ConfigError unless `text` loads as a valid environment of `path`'s name and holds together with the
    other environments of its folder, as `make plan` holds them (nothing is written). The refusal names `path`, not
    the scratch copy it was read from."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for other in environment_files(path.parent):  # regular files of environments' names only
            if other.name != path.name:
                shutil.copy(other, folder / other.name)
        (folder / path.name).write_text(text)
        try:
            load_environment(folder / path.name)
            load_all(folder)
        except ConfigError as err:
            # The file at fault, by its own name (another environment's file breaks the whole folder's load).
            where = path.parent / err.path.relative_to(folder) if err.path.is_relative_to(folder) else err.path
            raise ConfigError(where, [p.replace(str(folder), str(path.parent)) for p in err.problems]) from None


def write_validated(path: Path, text: str) -> None:
    """Replace `path` with `text` only if it loads as a valid environment of the same name: atomically (a new file
    renamed over the old), and through a link into the file it names (the link stays a link)."""
    validate(path, text)  # raises ConfigError; the original is untouched
    target = path.resolve()
    staging = None
    try:
        fd, staging = tempfile.mkstemp(prefix=f".{target.name}-", dir=target.parent)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        if target.exists():
            shutil.copymode(target, staging)
        else:  # a new file: as `open` would make it (mkstemp's is the owner's alone)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(staging, 0o666 & ~umask)
        os.replace(staging, target)
    except OSError as err:
        if staging is not None:
            Path(staging).unlink(missing_ok=True)
        raise ConfigError(target, [f"cannot write it: {err.strerror} (the file is as it was)"]) from None
