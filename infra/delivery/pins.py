"""Day-two pins of an environment's release: set one (`make pin`), or put one back to its previous value
(`make rollback`), with a dry run that shows the change and writes nothing.

A pin is one field of `release`: a controller's chart version (`release.controllers.<name>`), a local chart's
version (`release.charts.<name>`) or an image digest (`release.images.<name>`). The file is rewritten with its
comments and order kept and validated with the whole folder before it is written (infra/delivery/release_file.py),
so a version the platform does not know (no CRDs recorded in infra/charts/crds.yaml, no webhook rules) is
refused with the versions it knows. The previous value is the file's own history: the last commit in which the
field held another value (`git log` of the file), so a rollback needs no record of its own and undoes the last
change of that field, whoever made it.
"""

from __future__ import annotations

import difflib
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from infra.catalogue.controllers import CONTROLLERS
from infra.config.loading import not_one_of
from infra.delivery.images import load_catalogue
from infra.delivery.release_file import diff, updated_text, validate, write_validated

SECTIONS = ("controllers", "charts", "images")


class PinError(ValueError):
    """A pin that cannot be set or rolled back; nothing was written."""


@dataclass(frozen=True)
class PinChange:
    path: Path
    field: str  # release.<section>.<name>
    old: str | None
    new: str
    old_text: str
    new_text: str

    @property
    def diff(self) -> str:
        return diff(self.path, self.old_text, self.new_text)


def parse_field(text: str) -> tuple[str, str]:
    """(section, name) of `release.<section>.<name>` (or `<section>.<name>`)."""
    parts = text.removeprefix("release.").split(".")
    if len(parts) != 2 or parts[0] not in SECTIONS or not parts[1]:
        close = difflib.get_close_matches(parts[0], SECTIONS, n=1) if len(parts) == 2 and parts[1] else []
        raise PinError(
            f"FIELD={text!r}: a release pin, release.<section>.<name> with section one of {', '.join(SECTIONS)} "
            "(release.controllers.lws, release.images.trainer)"
            + (f"; did you mean 'release.{close[0]}.{parts[1]}'?" if close else "")
        )
    return parts[0], parts[1]


class _Malformed(ValueError):
    """Text that is not an environment's shape where a pin lives (YAML, a mapping, `release.<section>` a mapping)."""


def _pin_in(text: str, section: str, name: str) -> str | None:
    """The value of `release.<section>.<name>` in an environment file's text (None where unset); _Malformed where
    the text is not YAML or not shaped as an environment is at that path, so nothing reads past a broken file."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise _Malformed(str(err).splitlines()[0]) from None
    if not isinstance(data, dict):  # an empty file, a list, a scalar: no environment at all
        raise _Malformed("the file holds no mapping of fields")
    for at in ("release", f"release.{section}"):
        data = data.get(at.rpartition(".")[2])
        if data is None:
            return None
        if not isinstance(data, dict):
            raise _Malformed(f"{at} is not a mapping")
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise _Malformed(f"release.{section}.{name} is not a version or digest")
    return str(value)


def _pinned(text: str, section: str) -> list[str]:
    """The names `release.<section>` of a loaded environment file's text pins."""
    release = (yaml.safe_load(text) or {}).get("release") or {}
    return [str(k) for k in (release.get(section) or {})]


def _current(path: Path, text: str, section: str, name: str) -> str | None:
    """The pin's value now; a file that cannot hold it is refused as its load refuses it (the file, the field)."""
    try:
        return _pin_in(text, section, name)
    except _Malformed as err:
        validate(path, text)  # ConfigError naming the field; if the loader passes it, the shape check still stands
        raise PinError(f"{path}: {err}; nothing was read past it") from None


def _known(section: str, name: str, value: str) -> None:
    """Refuse, before any file is touched, a controller version the platform does not know, saying how one is
    added (the YAML would be refused too, naming only the file)."""
    if section != "controllers":
        return
    if name not in CONTROLLERS:
        raise PinError(f"release.controllers.{name}: not a controller the platform knows: {', '.join(CONTROLLERS)}")
    known = CONTROLLERS[name].versions
    if value not in known:
        raise PinError(
            f"VERSION={value!r}: release.controllers.{name} takes a version the platform knows: {', '.join(known)}. "
            f"A new one is added to infra/catalogue/controllers.py with its CRDs recorded in "
            f"infra/charts/crds.yaml (`make crds` fetches and checks them) and its webhooks' rules in "
            f"infra/rules/; then `make pin ENV=<env> FIELD=release.controllers.{name} VALUE={value}`"
        )


def plan_pin(path: Path, field: str, value: str) -> PinChange:
    """The change that sets `field` to `value` in environment file `path`, validated with its folder."""
    section, name = parse_field(field)
    _known(section, name, value)
    old_text = path.read_text()
    old = _current(path, old_text, section, name)
    built = load_catalogue() if old is None and section == "images" else {}
    if old is None and section == "images" and name not in built:
        # An image the environment does not pin and images/images.yaml does not build: a misspelt name, which would
        # have been added as a new pin (a chart's name is held by the load: release.charts, workloads/charts).
        known = sorted({*_pinned(old_text, section), *built})
        raise PinError(
            not_one_of("FIELD", f"release.images.{name}", [f"release.images.{n}" for n in known], "the images",
                       why="no image of that name (images/images.yaml)")
        )  # fmt: skip
    new_text = updated_text(path, {section: {name: value}})
    validate(path, new_text)  # ConfigError: the file, the field, the value, what is allowed
    return PinChange(path, f"release.{section}.{name}", old, value, old_text, new_text)


def previous_value(path: Path, section: str, name: str) -> tuple[str, str]:
    """(value, commit) of the field before its current value: the newest commit of the file's history whose
    field differs from what the file holds now."""
    now = _current(path, path.read_text(), section, name)
    folder = path.resolve().parent
    log = subprocess.run(
        ["git", "log", "--format=%H", "--", path.name], cwd=folder, capture_output=True, text=True, check=False
    )
    if log.returncode:
        raise PinError(f"{path}: no git history to roll back from ({log.stderr.strip() or 'git log failed'})")
    for commit in log.stdout.split():
        shown = subprocess.run(
            ["git", "show", f"{commit}:./{path.name}"], cwd=folder, capture_output=True, text=True, check=False
        )
        if shown.returncode:
            continue
        try:
            value = _pin_in(shown.stdout, section, name)
        except _Malformed:
            continue  # a version of the file that never loaded holds no value to go back to
        if value is not None and value != now:
            return value, commit
    raise PinError(
        f"release.{section}.{name}: {now!r} is the only value {path.name}'s history has; nothing to roll back to"
    )


def plan_rollback(path: Path, field: str) -> tuple[PinChange, str]:
    """The change that puts `field` back to its previous value, and the commit that value comes from."""
    section, name = parse_field(field)
    value, commit = previous_value(path, section, name)
    return plan_pin(path, f"release.{section}.{name}", value), commit


def apply(change: PinChange) -> None:
    write_validated(change.path, change.new_text)
