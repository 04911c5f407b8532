"""Property: whatever edit is made to a real environment file (a value of another type, a number at or
past a limit, a string of any characters, a key deleted, a key written twice, a line dropped or doubled, stray
characters), loading every environment either succeeds or refuses cleanly with a `ConfigError` naming the file:
never a traceback. A refused value is named: a problem names its field (or the field that refers to it, saying
the edited one) and shows the value where it is a single one. Load only (no synth), so 150 examples stay within
seconds; derandomized, so every run tries the same ones and a failure reproduces. `make plan` leaving cdktf.out
unchanged on a refusal is held by tests/test_bad_environments.py, for every class."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infra.config import ENVIRONMENTS_DIR, ConfigError
from infra.config.findings import field_path
from infra.synth.load import load_all

FILES = {name: (ENVIRONMENTS_DIR / f"{name}.yaml").read_text() for name in ("dev", "prod")}
DATA = {name: yaml.safe_load(text) for name, text in FILES.items()}


def _paths(node: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [at] if at else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*at, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _paths(value, (*at, i))
    return found


PATHS = {name: _paths(data) for name, data in DATA.items()}

numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, -1, 7, 63, 64, 1000, 1001, 65536, 2**31, 2**63]),
    st.floats(allow_nan=True, allow_infinity=True),
)
strings = st.one_of(
    st.text(max_size=80),
    st.sampled_from(
        [
            "",
            " ",
            "gs://bucket/path",
            "10.0.0.1",
            "::1/128",
            "0.0.0.0/0",
            "kube-system",
            "default",
            "--api-key=x",
            "--enable-prefix-caching",
            "1.30",
            "010",
            "yes",
            "null",
            "~",
            "a" * 300,
            "us-central1-ai1a",
            "\u0430bc",
        ]
    ),
)
values = st.recursive(
    st.one_of(st.none(), st.booleans(), numbers, strings),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=10), inner, max_size=3)),
    max_leaves=6,
)


def _set(data: Any, path: tuple[Any, ...], value: Any, delete: bool = False) -> None:
    parent = data
    for part in path[:-1]:
        parent = parent[part]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value


@dataclass(frozen=True)
class Edit:
    """One edit of one real environment file: its new text, and for a value replaced, where and by what."""

    name: str
    text: str
    path: tuple[Any, ...] | None = None
    value: Any = None


@st.composite
def edits(draw: st.DrawFn) -> Edit:
    """One structural or textual edit of one real environment file."""
    name = draw(st.sampled_from(sorted(FILES)))
    kind = draw(st.sampled_from(["value", "delete", "duplicate key", "drop line", "double line", "insert text"]))
    text = FILES[name]
    if kind in ("value", "delete"):
        data = yaml.safe_load(text)  # a fresh copy
        path = draw(st.sampled_from(PATHS[name]))
        value = draw(values) if kind == "value" else None
        _set(data, path, value, delete=kind == "delete")
        dumped = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
        return Edit(name, dumped, path, value) if kind == "value" else Edit(name, dumped)
    lines = text.splitlines(keepends=True)
    i = draw(st.integers(min_value=0, max_value=len(lines) - 1))
    if kind == "drop line":
        return Edit(name, "".join([*lines[:i], *lines[i + 1 :]]))
    if kind in ("double line", "duplicate key"):
        # A line written twice: in a mapping, a key written twice.
        return Edit(name, "".join([*lines[: i + 1], lines[i], *lines[i + 1 :]]))
    at = draw(st.integers(min_value=0, max_value=len(text)))
    junk = draw(st.one_of(strings, st.sampled_from(["\n", ": ", "- ", "&a ", "*a", "{", "[", "'", '"', "\t", "#"])))
    return Edit(name, text[:at] + junk + text[at:])


def _assert_names_the_value(edit: Edit, problems: list[str]) -> None:
    """A refusal of a replaced value names its field (the first two parts of its path: the section and the entry,
    as the field itself or in the message of the field that refers to it) and, a single value but null, shows it."""
    assert edit.path is not None
    section = field_path(edit.path[:2])
    named = [p for p in problems if section in p]
    assert named, (field_path(edit.path), edit.value, problems[:5])
    if edit.value is not None and not isinstance(edit.value, (dict, list)):
        shown = (repr(edit.value)[:100], str(edit.value)[:100])
        assert any(s in p for p in named for s in shown), (field_path(edit.path), edit.value, named[:5])


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(edit=edits())
def test_any_edit_is_loaded_or_refused_cleanly_never_a_traceback(edit: Edit, tmp_path: Path) -> None:
    name, text = edit.name, edit.text
    environments = tmp_path / f"envs-{abs(hash(text))}"
    environments.mkdir()
    for other in FILES:
        shutil.copy(ENVIRONMENTS_DIR / f"{other}.yaml", environments / f"{other}.yaml")
    (environments / f"{name}.yaml").write_text(text, encoding="utf-8", errors="surrogateescape")
    try:
        envs = load_all(environments)
    except ConfigError as err:
        message = str(err)
        assert err.problems, message
        assert f"{name}.yaml" in message, message
        assert all(isinstance(p, str) and p for p in err.problems)
        if edit.path is not None:
            _assert_names_the_value(edit, err.problems)
    else:
        assert set(envs) == set(FILES)
    shutil.rmtree(environments)
