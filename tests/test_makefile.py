"""The Makefile is the interface: every target is listed by `make help` with one line."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers import REPO


def test_make_help_lists_every_target_under_its_task() -> None:
    makefile = (REPO / "Makefile").read_text()
    phony = set(re.search(r"^\.PHONY: (.+)$", makefile, re.M).group(1).split())  # type: ignore[union-attr]
    done = subprocess.run(["make", "-s", "help"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr  # a target no group names fails the listing
    listed = done.stdout
    shown = re.findall(r"^  make (\S+)", listed, re.M)
    assert set(shown) == phony and len(shown) == len(phony)
    assert "\nStart here:\n  make help " in listed and "\nOther:" not in listed
    # Descriptions are wrapped, never cut: every word of each `## ` line is shown.
    for target, text in re.findall(r"^([a-zA-Z0-9_-]+):.*?## (.+)$", makefile, re.M):
        assert " ".join(text.split()) in " ".join(listed.split()), target


def test_make_destroy_without_confirm_refuses_before_installing_or_synthesizing(tmp_path: Path) -> None:
    """With a venv and node modules that do not exist yet, `make destroy` without CONFIRM would have to create them
    first if its prerequisites ran: nothing is built, nothing is synthesized, and the refusal says what to type."""
    fresh = [f"VENV={tmp_path / 'venv'}", f"NODE_STAMP={tmp_path / 'node' / '.installed'}", f"OUT={tmp_path / 'out'}"]
    planned = subprocess.run(
        ["make", "-n", "destroy", "ENV=dev", *fresh], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    assert "-m venv" not in planned and "npm ci" not in planned and "scripts.slurm" not in planned, planned
    done = subprocess.run(["make", "-s", "destroy", "ENV=dev", *fresh], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 2
    assert "platform-dev: destroy refused; nothing was changed: pass CONFIRM=platform-dev" in done.stderr
    assert list(tmp_path.iterdir()) == []
    # A wrong name is no confirmation either.
    wrong = subprocess.run(
        ["make", "-s", "destroy", "ENV=dev", "CONFIRM=platform-prod", *fresh], cwd=REPO, capture_output=True, text=True
    )
    assert wrong.returncode == 2 and "pass CONFIRM=platform-dev" in wrong.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("target", ["deploy", "deploy-infra", "destroy"])
def test_a_deploy_dry_run_installs_no_cdktf_cli(target: str, tmp_path: Path) -> None:
    """A dry run prints the cdktf commands and runs none, so it does not install node modules first (a new user's
    `make deploy DRY_RUN=1` sat in `npm ci`); the real one does."""
    fresh = [f"NODE_STAMP={tmp_path / 'node' / '.installed'}", "ENV=dev", "CONFIRM=platform-dev"]

    def planned(*args: str) -> str:
        return subprocess.run(["make", "-n", target, *fresh, *args], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout  # fmt: skip

    assert "npm ci" not in planned("DRY_RUN=1")
    assert "npm ci" in planned()


def test_make_plan_passes_env_only_when_given_on_the_command_line() -> None:
    """`make plan` plans every environment (ENV's default, dev, is not a choice); `make plan ENV=prod` plans prod."""

    def planned(*args: str) -> str:
        out = subprocess.run(["make", "-n", "-s", "plan", *args], cwd=REPO, capture_output=True, text=True, check=True)
        return next(line for line in out.stdout.splitlines() if "platform plan" in line)

    assert "--env" not in planned()
    assert planned("ENV=prod").endswith("--env prod")


def test_a_target_no_group_names_fails_the_listing(tmp_path: Path) -> None:
    makefile = tmp_path / "Makefile"
    makefile.write_text("plan: ## Plan\n\t@true\n\nbrand-new: ## A target nobody filed\n\t@true\n")
    done = subprocess.run(
        ["python3", str(REPO / "scripts" / "make_help.py"), str(makefile)], capture_output=True, text=True
    )
    assert done.returncode == 1 and "file brand-new under a group of GROUPS" in done.stderr
    assert "\nOther:\n  make brand-new" in done.stdout


def test_what_make_installs_is_checked_against_its_hashes() -> None:
    """The venvs the deploy workflows install (with the deployer's credentials live) take nothing a lock does not
    name with its hash: uv through pip --require-hashes, then every package through uv --require-hashes."""
    makefile = (REPO / "Makefile").read_text()
    installs = re.findall(r"^\t\$\(BIN\)/(?:pip install|uv pip sync) .*$", makefile, re.M)
    assert installs and all("--require-hashes" in line for line in installs), installs
    uv_pin = re.search(r"^UV_VERSION := (\S+)$", makefile, re.M)
    assert uv_pin and f"uv=={uv_pin.group(1)} \\" in (REPO / "scripts/requirements-uv.lock").read_text()
    for lock in ("requirements.lock", "requirements-policy.lock", "scripts/requirements-uv.lock"):
        text = (REPO / lock).read_text()
        # Every pinned requirement is followed by at least one hash of its files.
        blocks = re.split(r"\n(?=[A-Za-z0-9_.-]+==)", text)
        pinned = [b for b in blocks if re.match(r"[A-Za-z0-9_.-]+==", b)]
        assert len(pinned) > 0, lock
        unhashed = [b.split()[0] for b in pinned if "--hash=sha256:" not in b]
        assert unhashed == [], f"{lock}: {unhashed[:5]}"


# A value that would run `touch <marker>` if any layer (make, the shell) took it for code: a make function, a
# quote that ends the shell word, a backtick and a command substitution.
def _payloads(marker: Path) -> str:
    return f"x'$(shell touch {marker}-make)`touch {marker}-tick`$$(touch {marker}-sub)'\"; touch {marker}-semi; \""


@pytest.mark.parametrize(
    ("target", "args"),
    [
        ("pin", ["ENV=dev", "FIELD=release.images.trainer", "VALUE={}", "DRY_RUN=1"]),
        ("pin", ["ENV=dev", "FIELD={}", "VALUE=x", "DRY_RUN=1"]),
        ("rollback", ["ENV=dev", "FIELD={}", "DRY_RUN=1"]),
        ("blue-green", ["ENV=dev", "SLICE={}", "DRY_RUN=1"]),
        ("plan", ["BASE_REF={}"]),
        ("vm-up", ["ENV=dev", "GROUP={}", "DRY_RUN=1"]),
    ],
)
def test_a_typed_value_reaches_the_command_as_data_and_runs_nothing(
    tmp_path: Path, target: str, args: list[str]
) -> None:
    """Before the fix, a quote or backtick in VALUE, FIELD, SLICE, BASE_REF ... ran a shell command before the
    platform saw the value (the Makefile put it between single quotes), and a make function in it ran too. Now the
    command refuses the value, naming it, and nothing else happens."""
    marker = tmp_path / "ran"
    payload = _payloads(marker)
    done = subprocess.run(
        ["make", "-s", target, *(a.format(payload) for a in args)], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode != 0
    assert list(tmp_path.iterdir()) == [], "a typed value ran as code"
    assert "touch" in done.stderr and "error" in done.stderr.lower(), done.stderr[-2000:]


def _data_vars() -> dict[str, str]:
    """{make variable a person types a value into: the first target whose recipe reads it}: DATA_VARS, and where each
    reaches a command."""
    text = (REPO / "Makefile").read_text()
    listed = re.search(r"^DATA_VARS := (.*?)\n\$\(foreach", text, re.S | re.M)
    assert listed, "the Makefile lists the variables it passes as data (DATA_VARS)"
    targets: dict[str, str] = {}
    target = ""
    for line in text.splitlines():
        head = re.match(r"^([A-Za-z0-9_.-]+):(?!=)", line)
        target = head.group(1) if head else target
        for name in listed.group(1).replace("\\\n", " ").split():
            if line.startswith("\t") and f'"$${name}"' in line:
                targets.setdefault(name, target)
    return targets


def test_every_typed_variable_reaches_its_command_as_one_quoted_word_and_no_make_function_runs(
    tmp_path: Path,
) -> None:
    """Every variable of DATA_VARS, in a recipe that reads it (make -n: the command line as the shell gets it), is
    the shell's "$NAME" (its value never spliced into the line), and a make function in the value runs nothing.
    Where a recipe put one between single quotes, a quote in it ended the word and the rest ran."""
    targets = _data_vars()
    listed = re.search(r"^DATA_VARS := (.*?)\n\$\(foreach", (REPO / "Makefile").read_text(), re.S | re.M)
    assert listed
    names = listed.group(1).replace("\\\n", " ").split()
    assert set(targets) == set(names) - {"TESTS"}, "each typed variable is read by some recipe as a quoted word"
    marker = tmp_path / "ran"
    payload = _payloads(marker)
    for name, target in sorted(targets.items()):
        done = subprocess.run(
            ["make", "-n", target, f"{name}={payload}", "ENV=dev"], cwd=REPO, capture_output=True, text=True
        )
        assert list(tmp_path.iterdir()) == [], f"{name}: a make function in the value ran"
        lines = [line for line in done.stdout.splitlines() if f'"${name}"' in line]
        assert lines, (name, target, done.stdout[-2000:], done.stderr[-2000:])
        assert not [line for line in done.stdout.splitlines() if "touch " in line], (name, "the value was spliced")


def test_ci_refuses_to_start_without_room_on_the_disk_naming_the_folder_and_what_it_has(tmp_path: Path) -> None:
    """A full disk failed a CI run 85 s in, inside uv ("No space left on device" extracting libtpu). The entry point
    refuses before it installs or runs anything, naming the folder, the free space and the setting."""
    marker = tmp_path / "started"
    make = tmp_path / "make"  # first on PATH: any step the entry point starts leaves the marker
    make.write_text(f"#!/bin/sh\ntouch {marker}\n")
    make.chmod(0o755)
    done = subprocess.run(
        [str(REPO / ".ci/run")],
        env={"PATH": f"{tmp_path}:/usr/bin:/bin", "HOME": str(tmp_path), "CI_FREE_GB": "1000000000"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert re.match(
        r"ci: \d+ GB free on /\S* \(holding \.\); a run needs about 1000000000 GB there \(CI_FREE_GB\)\.\n"
        r"ci: nothing was started; free some space there and run again\.\n$",
        done.stderr,
    ), done.stderr
    assert done.stdout == "" and not marker.exists()
