"""Property: whatever value a person gives a command's argument (ENV, FROM, TO, IMAGE, NAME, PROJECT,
PROJECT_NUMBER, REGION, STEPS, ENGINE), through the `platform` entry point the make targets call, the command either
takes it or refuses it naming the argument and showing the value, with exit code 2 and never a traceback; the
environment files and cdktf.out are left as they were. Values a command would take are not run here (a deploy, a
build, a training run): the strategy keeps to the refused ones and says so.

Settings: 200 examples per run, derandomized (the same examples every run, so CI cannot pass by luck and a failure
reproduces), each run in this process (tests/in_process.py)."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from infra.config import ENVIRONMENTS_DIR
from infra.delivery.images import load_catalogue
from infra.synth.load import load_all
from scripts.cli import main as platform_main
from tests.helpers import REPO
from tests.in_process import run_main
from workloads.trainer.__main__ import main as trainer_main

ENVIRONMENTS = ("dev", "prod")


@dataclass(frozen=True)
class Slot:
    """One argument of one command: how the value goes into the command line, the names a refusal may call it by
    (the make variable, the flag), and which values the command would take and then run something long (a deploy, a
    build, a training run: left out). Where taking a value is cheap (new-env writes a file), it is taken here."""

    main: Callable[[list[str]], int]
    argv: Callable[[str], list[str]]
    names: tuple[str, ...]
    takes: Callable[[str], bool]


# Values go in as a caller passes any value: an option as `--flag=<value>`, positionals after `--` (else a value
# starting with "-" is an option to argparse, as to every command line; the make targets refuse those themselves:
# tests/test_bad_environments.py).
NEW_ENV = {"NAME": "staging", "FROM": "dev", "PROJECT": "acme-staging", "PROJECT_NUMBER": "123456789012",
           "REGION": "us-east5"}  # fmt: skip


def _new_env(argument: str) -> Callable[[str], list[str]]:
    def argv(value: str) -> list[str]:
        given = {**NEW_ENV, argument: value}
        options = {"from": "FROM", "project": "PROJECT", "project-number": "PROJECT_NUMBER", "region": "REGION"}
        return ["new-env", *(f"--{flag}={given[key]}" for flag, key in options.items()), "--", given["NAME"]]

    return argv


def _an_environment(value: str) -> bool:
    return value in ENVIRONMENTS


SLOTS: dict[str, Slot] = {
    "logs ENV": Slot(platform_main, lambda v: ["logs", f"--env={v}"], ("ENV", "--env"), _an_environment),
    "recipes ENV": Slot(platform_main, lambda v: ["recipes", f"--env={v}"], ("ENV", "--env"),
                        lambda v: v in ("", *ENVIRONMENTS)),
    "deploy ENV": Slot(platform_main, lambda v: ["deploy", "--dry-run", "--", v], ("ENV",), _an_environment),
    "promote FROM": Slot(platform_main, lambda v: ["promote", "--dry-run", "--", v, "prod"], ("FROM",),
                         _an_environment),
    "promote TO": Slot(platform_main, lambda v: ["promote", "--dry-run", "--", "dev", v], ("TO",), _an_environment),
    "image IMAGE": Slot(platform_main, lambda v: ["image", "--dry-run", "--", v, "dev"], ("IMAGE",),
                        lambda v: v in load_catalogue()),
    "image ENV": Slot(platform_main, lambda v: ["image", "--dry-run", "--", "trainer", v], ("ENV",), _an_environment),
    "new-env NAME": Slot(platform_main, _new_env("NAME"), ("NAME",), lambda v: False),
    "new-env FROM": Slot(platform_main, _new_env("FROM"), ("FROM",), _an_environment),
    "new-env PROJECT": Slot(platform_main, _new_env("PROJECT"), ("PROJECT",), lambda v: False),
    "new-env PROJECT_NUMBER": Slot(platform_main, _new_env("PROJECT_NUMBER"), ("PROJECT_NUMBER",), lambda v: False),
    "new-env REGION": Slot(platform_main, _new_env("REGION"), ("REGION",), lambda v: False),
    "train-local STEPS": Slot(trainer_main, lambda v: ["local", f"--steps={v}"], ("STEPS", "--steps"),
                              lambda v: v.strip().isascii() and v.strip().isdigit() and int(v) >= 1),
    "train-local ENGINE": Slot(trainer_main, lambda v: ["local", f"--engine={v}", "--steps=0"], ("ENGINE", "--engine"),
                               lambda v: v in ("canary", "maxtext")),
}  # fmt: skip

values = st.one_of(
    st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=40),
    st.sampled_from(
        [
            "", " ", "-h", "--help", "-", "dev ", " dev", "Dev", "DEV", "dev;ls", "$(id)", "`id`", "a b", "*",
            "../../images/images", "dev.yaml", "infra/environments/dev.yaml", "/etc/passwd", "dve", "prd",
            "pr\u043ed", "platform-dev", "0", "-1", "1e3", "4.5", "\u0661\u0662", "0x10", "10_000", "trainer ",
            "trainer-gpu;", "staging\n", "a" * 40, "us-east5-a", "projects/p", "123", "12345678901234567890123",
        ]
    ),
)  # fmt: skip


def _digest(*folders: Path) -> str:
    """What a run could have changed in `folders`: every file's path, size and bytes."""
    h = hashlib.sha256()
    for folder in folders:
        for path in sorted(folder.rglob("*")) if folder.exists() else []:
            if path.is_file():
                h.update(str(path).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("arguments")


@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(slot=st.sampled_from(sorted(SLOTS)), value=values)
def test_any_argument_is_taken_or_refused_by_name_never_a_traceback(slot: str, value: str, scratch: Path) -> None:
    spec = SLOTS[slot]
    assume(not spec.takes(value))
    environments = scratch / "environments"
    shutil.rmtree(environments, ignore_errors=True)
    shutil.copytree(ENVIRONMENTS_DIR, environments)
    before = _digest(environments, REPO / "cdktf.out")
    done = run_main(
        spec.main,
        spec.argv(value),
        env={**os.environ, "PLATFORM_ENVIRONMENTS_DIR": str(environments), "STEPS": ""},
        cwd=REPO,
    )
    said = done.stdout + done.stderr
    assert "Traceback" not in said, said[-3000:]
    if done.returncode == 0 and slot.startswith("new-env"):  # taken: the new file is there and loads
        assert load_all(environments).keys() == {*ENVIRONMENTS, "staging" if slot != "new-env NAME" else value}
        return
    assert done.returncode == 2, (slot, value, done.returncode, said[-2000:])
    assert any(name in done.stderr for name in spec.names), (slot, value, done.stderr[-2000:])
    assert repr(value) in done.stderr or (value and value in done.stderr), (slot, value, done.stderr[-2000:])
    assert _digest(environments, REPO / "cdktf.out") == before, (slot, value)
