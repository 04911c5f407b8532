"""`platform` (scripts/cli.py): the commands' exit codes reach the caller, where `make` turns each into 2."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from scripts import cli
from tests.helpers import REPO

PLATFORM = Path(sys.executable).with_name("platform")

# A plan that destroys the protected models bucket: the review's gate blocks it (exit 3).
BLOCKED_PLAN = {
    "format_version": "1.2",
    "terraform_version": "1.12.2",
    "resource_changes": [
        {
            "address": "google_storage_bucket.models",
            "mode": "managed",
            "type": "google_storage_bucket",
            "name": "models",
            "change": {"actions": ["delete"], "before": {"name": "models"}, "after": None, "after_unknown": {}},
        }
    ],
}


def test_a_blocked_review_exits_3_through_the_console_entry_point(tmp_path: Path) -> None:
    plan = tmp_path / "platform-dev.json"
    plan.write_text(json.dumps(BLOCKED_PLAN))
    assert cli.main(["review", "--plan", str(plan)]) == 3
    done = subprocess.run([str(PLATFORM), "review", "--plan", str(plan)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert "BLOCKING: delete google_storage_bucket.models" in done.stderr


def test_usage_errors_and_help_keep_their_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["no-such-command"]) == 2
    assert "invalid choice: 'no-such-command'" in capsys.readouterr().err
    assert cli.main([]) == 2
    assert cli.main(["--help"]) == 0
    assert "vertex-submit" in capsys.readouterr().out
    # A command's own usage error (argparse, exit 2) and its --help (0) come back as codes, not as SystemExit.
    assert cli.main(["promote"]) == 2
    assert cli.main(["promote", "--help"]) == 0


def test_the_console_entry_point_is_declared_and_installed() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {"platform": "scripts.cli:main"}
    done = subprocess.run([str(PLATFORM), "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("usage: platform "), done.stdout[:200]


def test_the_make_targets_run_the_commands_through_the_console_entry_point() -> None:
    """No recipe runs one of platform's modules with `python -m`: every make target reaches the same code, and a
    caller that needs the exit code runs the same command line without make."""
    makefile = (REPO / "Makefile").read_text()
    modules = {c.module.removesuffix(".__main__") for c in cli.COMMANDS.values()}
    # (The engine's recipes run the trainer with the Debian 13 root's own Python, where no console script is.)
    direct = [
        line
        for line in makefile.splitlines()
        if any(re.search(rf"-m {m}\b", line) for m in modules) and not line.startswith("\t$(ENGINE_RUN) ")
    ]
    assert direct == []
    dry = subprocess.run(
        ["make", "-n", "-s", "review", "PLAN=plan.json"], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert '.venv/bin/platform review --plan "$PLAN"' in dry.stdout


def test_make_turns_the_blocked_review_into_2_which_is_why_ci_calls_platform(tmp_path: Path) -> None:
    """What docs/reference.md says about make's exit codes holds: the same blocked review through make is 2.
    The workflows that branch on a code call .venv/bin/platform."""
    plan = tmp_path / "platform-dev.json"
    plan.write_text(json.dumps(BLOCKED_PLAN))
    # -o: the venv is taken as it is (this test must not install anything into the checkout).
    done = subprocess.run(
        ["make", "-s", "-o", ".venv/.installed", "review", f"PLAN={plan}"], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 2, done.stderr
    workflows = "".join(p.read_text() for p in (REPO / ".github" / "workflows").glob("*.yml"))
    assert "make plan BASE=" not in workflows
    assert ".venv/bin/platform plan --base" in workflows


@pytest.mark.parametrize(
    ("offline", "says"),
    [
        ("3", "The plan review's gate blocks a change"),
        ("1", "A policy check or a rule refused the plan"),
        ("2", "The plan could not be made (exit 2)"),
    ],
)
def test_the_pull_request_check_says_which_code_the_plan_gave(offline: str, says: str) -> None:
    """The plan step's own code reaches the workflow (it runs .venv/bin/platform), and the failing step says what
    it means."""
    job = yaml.safe_load((REPO / ".github" / "workflows" / "pull-request.yml").read_text())["jobs"]["plan-review"]
    step = next(s for s in job["steps"] if s.get("name") == "Fail when something blocks")
    done = subprocess.run(
        ["bash", "-e", "-c", step["run"]], env={"OFFLINE": offline, "REAL": "", "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 1
    assert says in done.stdout and done.stdout.count("\n") == 2, done.stdout


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["plna"], "invalid choice: 'plna' (choose from "),
        (
            ["promote", "dev", "prod", "--dry-rn"],
            "unrecognized arguments: --dry-rn; did you mean --dry-run for --dry-rn?",
        ),
        (["deploy-local", "dev", "--destory"], "did you mean --destroy for --destory?"),
        (["logs", "--evn", "dev"], "did you mean --env for --evn?"),
    ],
)
def test_a_mistyped_command_or_flag_gets_the_closest_one(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert said in err, err
    if argv == ["plna"]:
        assert err.rstrip().endswith("did you mean 'plan'?")


def test_bash_completes_commands_flags_and_the_names_each_argument_takes(tmp_path: Path) -> None:
    """The completion script, sourced in a real bash, answers tabs as a person types them: the commands, a
    command's flags (read from its --help), and the environments, images or shells its arguments take."""
    script = subprocess.run(
        [sys.executable, "-m", "scripts.cli", "completion", "bash"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (tmp_path / "completion.bash").write_text(script)
    typed = [
        "platform dep", "platform promote d", "platform promote dev p", "platform image tr",
        "platform image trainer ''", "platform logs --env ''", "platform logs --j", "platform completion z",
    ]  # fmt: skip
    probe = "\n".join(
        [
            f'platform() {{ {sys.executable} -m scripts.cli "$@"; }}',
            f"source {tmp_path / 'completion.bash'}",
            't() { COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=(); _platform; '
            'echo "${COMPREPLY[*]}"; }',
            *(f"t {line}" for line in typed),
        ]
    )
    done = subprocess.run(["bash", "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "deploy deploy-infra deploy-local",
        "dev",
        "prod",
        "trainer trainer-gpu",
        "dev prod",
        "dev prod",
        "--json",
        "zsh",
    ]


def test_a_file_name_that_holds_a_command_is_no_environment_and_a_tab_runs_nothing(tmp_path: Path) -> None:
    """A file named `$(touch ran).yaml` in the environments folder (review round 4: pressing Tab after `platform
    deploy` ran its command, through compgen -W's expansion): it is offered to no completion, expands at no tab,
    and the loader refuses it by name before it reads anything."""
    from infra.config import ConfigError
    from infra.config.loading import environment_files

    folder = tmp_path / "environments"
    shutil.copytree(REPO / "infra" / "environments", folder)
    (folder / "$(touch ran).yaml").write_text((folder / "dev.yaml").read_text())
    (folder / ".#dev.yaml").symlink_to("root@host.1234")  # an editor's lock file: passed over
    command = [sys.executable, "-m", "scripts.cli", "completion", "bash"]
    script = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=True).stdout
    (tmp_path / "completion.bash").write_text(script)
    probe = "\n".join(
        [
            f'platform() {{ PLATFORM_ENVIRONMENTS_DIR={folder} {sys.executable} -m scripts.cli "$@"; }}',
            f"source {tmp_path / 'completion.bash'}",
            'COMP_WORDS=(platform deploy ""); COMP_CWORD=2; COMPREPLY=(); _platform; echo "${COMPREPLY[*]}"',
            'COMP_WORDS=(platform deploy "\\$"); COMP_CWORD=2; COMPREPLY=(); _platform; echo "${COMPREPLY[*]}"',
        ]
    )
    done = subprocess.run(["bash", "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["dev prod", ""]
    assert not (tmp_path / "ran").exists() and not (REPO / "ran").exists(), "a tab ran the file name's command"
    with pytest.raises(ConfigError, match=r"'\$\(touch ran\)\.yaml': '\$\(touch ran\)' is no environment's name"):
        environment_files(folder)
