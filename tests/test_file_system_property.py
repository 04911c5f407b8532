"""Property: whatever the environments folder holds beside the environment files (links, named pipes, devices,
folders, broken links, loops, odd and executable-looking names, an editor's lock file) and whatever a command then
does with it (a pin, a dry run, a new environment, a listing), the command takes the folder or refuses naming the
entry at fault, with exit code 2: never a traceback, a hang (a pipe or /dev/zero read), a name run as a command, or
a file other than the command's own target changed.

Settings: 80 examples per run, derandomized (the same every run: a failure reproduces, CI cannot pass by luck), each
in this process (tests/in_process.py) under a 60-s alarm, so a read that never ends fails the example instead of the
suite. A read-only folder is a separate test: root, who runs the suite, writes anywhere, so it runs as nobody
(tests/unit/delivery/test_release_file.py)."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from infra.config import ENVIRONMENTS_DIR
from scripts.cli import main as platform_main
from tests.in_process import run_main

DIGEST = "sha256:" + "a" * 64
# {what: the command line} of the commands that read the folder; {env} is an environment's name.
COMMANDS = {
    "pin --dry-run": ["pin", "--dry-run", "dev", "release.images.trainer", f"europe-docker.pkg.dev/x/y/z@{DIGEST}"],
    "pin": ["pin", "dev", "release.controllers.lws", "0.7.0"],
    "recipes": ["recipes", "--env=dev"],
    "new-env": ["new-env", "--from=dev", "--project=acme-staging", "--project-number=123456789012",
                "--region=us-east5", "--", "staging"],
}  # fmt: skip
# Names an entry may have: an environment's, another environment's to be, an editor's files, a suffix in another
# case, names that are commands to a shell ({marker}: a file that exists only if one ran), a look-alike.
NAMES = [
    "staging.yaml", "prod.yaml", "dev.yaml", ".#dev.yaml", "dev.yaml~", ".dev.yaml.swp", "dev.YAML", "prod.yml",
    "$(touch {marker}).yaml", "`touch {marker}`.yaml", "a b.yaml", "st\u0430ging.yaml", "-rf.yaml", "line\nbreak.yaml",
    "x" * 200 + ".yaml", "*.yaml",
]  # fmt: skip
KINDS = ["copy of dev", "link to dev", "link to /dev/zero", "broken link", "link to itself", "named pipe", "folder",
         "empty file", "bytes that are not text", "a list", "the folder itself"]  # fmt: skip


def _make(folder: Path, name: str, kind: str) -> None:
    """Put an entry of `kind` at `folder / name` (replacing one that is there: dev.yaml as a pipe is a case too)."""
    path = folder / name
    source = (ENVIRONMENTS_DIR / "dev.yaml").read_text()
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    if kind == "copy of dev":
        path.write_text(source)
    elif kind == "link to dev":
        aside = folder.parent / "aside-dev.yaml"
        aside.write_text(source)
        path.symlink_to(aside)
    elif kind == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "broken link":
        path.symlink_to(folder / "nothing-here.yaml")
    elif kind == "link to itself":
        path.symlink_to(path)
    elif kind == "named pipe":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "empty file":
        path.write_bytes(b"")
    elif kind == "bytes that are not text":
        path.write_bytes(bytes(range(256)))
    elif kind == "a list":
        path.write_text("- dev\n- prod\n")
    elif kind == "the folder itself":
        path.symlink_to(folder)


def _state(folder: Path) -> dict[str, object]:
    """Every entry of `folder` as it is, read without following a link or opening anything but a regular file."""
    out: dict[str, object] = {}
    for entry in sorted(os.listdir(folder)):
        info = os.lstat(folder / entry)
        if stat.S_ISREG(info.st_mode):
            out[entry] = hashlib.sha256((folder / entry).read_bytes()).hexdigest()
        elif stat.S_ISLNK(info.st_mode):
            out[entry] = ("link", os.readlink(folder / entry))
        else:
            out[entry] = stat.S_IFMT(info.st_mode)
    return out


class Hang(Exception):
    pass


@contextmanager
def _at_most(seconds: int) -> Iterator[None]:
    def hang(signum: int, frame: object) -> None:
        raise Hang(f"no answer in {seconds} s")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


entries = st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from(KINDS)), min_size=1, max_size=3)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("file-system")


@settings(
    max_examples=80,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(command=st.sampled_from(sorted(COMMANDS)), added=entries)
def test_any_entry_of_the_folder_is_taken_or_refused_by_name_never_run_read_forever_or_lost(
    command: str, added: list[tuple[str, str]], scratch: Path
) -> None:
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    folder = scratch / "environments"
    shutil.copytree(ENVIRONMENTS_DIR, folder)
    marker = scratch / "ran"
    names = []
    for name, kind in added:
        name = name.format(marker=marker) if "{marker}" in name else name
        if "/" in name:  # a marker's path: a name with a slash is no file name; the shell words stay in it
            name = name.replace(str(marker), "ran")
        _make(folder, name, kind)
        names.append(name)
    before = _state(folder)
    argv = COMMANDS[command]
    with _at_most(60):
        done = run_main(platform_main, argv, env={**os.environ, "PLATFORM_ENVIRONMENTS_DIR": str(folder)}, cwd=scratch)
    said = done.stdout + done.stderr
    event(f"{command}: exit {done.returncode}")
    assert "Traceback" not in said, said[-3000:]
    assert not marker.exists() and not (scratch / "ran").exists(), "a file's name ran as a command"
    assert done.returncode in (0, 2), (command, added, done.returncode, said[-2000:])
    after = _state(folder)
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    # What the command may write, only when it succeeds: the pin's file, the new environment's; a regular file
    # each (a pin through a link writes the link's target, and the link stays as it was).
    target = {"pin": "dev.yaml", "new-env": "staging.yaml"}.get(command)
    assert changed <= ({target} if done.returncode == 0 and target else set()), (command, added, said[-2000:])
    assert all(isinstance(after[k], str) and isinstance(before.get(k, ""), str) for k in changed), (command, added)
    if done.returncode == 2:
        shown = [n for n in [*names, "dev.yaml"] if n in done.stderr or repr(n) in done.stderr]
        assert shown, (command, added, done.stderr[-2000:])
