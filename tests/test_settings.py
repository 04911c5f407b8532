"""The PLATFORM_* variables are read through one object (infra/settings), documented from it, and a value that does
not parse is refused naming the variable, the value and what is allowed."""

from __future__ import annotations

import re
import types

import pytest

from infra import settings
from scripts import cli
from tests.helpers import REPO

# A read of a PLATFORM_* variable from the environment (a write, `env["PLATFORM_ENVS"] = ...`, is not one).
READ = re.compile(r"""(environ\.get\(|getenv\(|environ\[)\s*["']PLATFORM_[A-Z_]+["']\s*(?!\]\s*=[^=])""")


def test_the_reference_lists_every_setting_as_declared() -> None:
    text = (REPO / "docs" / "reference.md").read_text()
    begin, end = text.index("<!-- settings:begin"), text.index("<!-- settings:end -->")
    shown = text[text.index("\n", begin) + 1 : end].rstrip("\n")
    assert shown == settings.table(), (
        "docs/reference.md: paste the output of python -c 'from infra.settings import table; print(table())'"
    )
    assert len({s.name for s in settings.SETTINGS}) == len(settings.SETTINGS) >= 20


def test_no_code_reads_a_platform_variable_but_the_settings() -> None:
    readers = [
        f"{path.relative_to(REPO)}:{number}"
        for folder in ("infra", "scripts", "workloads")
        for path in sorted((REPO / folder).rglob("*.py"))
        if "settings" not in path.parts
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if READ.search(line)
    ]
    assert readers == []


def test_the_scan_finds_a_read_and_passes_a_write() -> None:
    assert READ.search('x = os.environ.get("PLATFORM_ENVS")')
    assert READ.search('x = os.environ["PLATFORM_TODAY"]')
    assert not READ.search('env["PLATFORM_ENVS"] = name')


@pytest.mark.parametrize("value", ["abc", "-5", "nan", "inf", "15m"])
def test_a_number_of_seconds_that_does_not_parse_is_refused_naming_it(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLATFORM_API_WAIT", value)
    with pytest.raises(settings.SettingError) as err:
        settings.API_WAIT.seconds()
    assert str(err.value) == f"PLATFORM_API_WAIT={value!r}: not a number of seconds; 0 or more (default 600)"


def test_unset_or_empty_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLATFORM_TEARDOWN_POLL", "")
    monkeypatch.delenv("PLATFORM_GCLOUD", raising=False)
    assert settings.TEARDOWN_POLL.seconds() == 20.0
    monkeypatch.setenv("PLATFORM_TEARDOWN_POLL", "0")  # the tests' stand-ins: no wait between two lists
    assert settings.TEARDOWN_POLL.seconds() == 0.0
    assert settings.GCLOUD.command() == ["gcloud"]
    monkeypatch.setenv("PLATFORM_GCLOUD", "python3 stand_in.py --quiet")
    assert settings.GCLOUD.command() == ["python3", "stand_in.py", "--quiet"]
    monkeypatch.setenv("PLATFORM_ENVS", "dev,,prod")
    assert settings.ENVS.names() == ["dev", "prod"]


def test_a_command_stops_with_the_settings_error_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Any command that reads a bad value: exit 2 and one line (before, `float()` raised a ValueError traceback)."""

    def main(argv: list[str]) -> int:
        return int(settings.TEARDOWN_TIMEOUT.seconds())

    monkeypatch.setenv("PLATFORM_TEARDOWN_TIMEOUT", "15m")
    monkeypatch.setattr(cli.importlib, "import_module", lambda name: types.SimpleNamespace(main=main))
    assert cli.run("destroy", []) == 2
    assert capsys.readouterr().err == (
        "error: PLATFORM_TEARDOWN_TIMEOUT='15m': not a number of seconds; 0 or more (default 900)\n"
    )
