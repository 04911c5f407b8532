"""What the loader reads of the environments folder: regular files of environments' names, checked before any is
opened (review round 4: a named pipe hung every load, a link to /dev/zero read until memory ran out, an editor's
lock file `.#dev.yaml` stopped every load, and `staging.YAML` was silently left out)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from infra.config import ConfigError
from infra.config.loading import environment_files, parse_environment
from infra.synth.load import load_all


def _refused(folder: Path) -> str:
    with pytest.raises(ConfigError) as err:
        load_all(folder)
    return str(err.value)


def test_a_named_pipe_is_refused_by_name_and_nothing_waits_on_it(folder: Path) -> None:
    os.mkfifo(folder / "staging.yaml")
    assert "staging.yaml: a named pipe, not a regular file" in _refused(folder)
    with pytest.raises(ConfigError, match="a named pipe, not a regular file"):
        parse_environment(folder / "staging.yaml")


def test_a_link_to_a_device_is_refused_before_it_is_read(folder: Path) -> None:
    (folder / "staging.yaml").symlink_to("/dev/zero")
    assert "staging.yaml: a device, not a regular file" in _refused(folder)


def test_a_broken_link_and_a_folder_are_refused(folder: Path) -> None:
    (folder / "staging.yaml").symlink_to(folder / "gone.yaml")
    (folder / "qa.yaml").mkdir()
    said = _refused(folder)
    assert "staging.yaml: cannot read it: No such file or directory (a broken link?)" in said
    assert "qa.yaml: a folder, not a regular file" in said


def test_an_upper_case_suffix_is_refused_not_left_out(folder: Path) -> None:
    shutil.copy(folder / "dev.yaml", folder / "staging.YAML")
    assert "staging.YAML: environment files end in .yaml; rename it to staging.yaml" in _refused(folder)


def test_an_editors_lock_and_swap_files_are_passed_over(folder: Path) -> None:
    (folder / ".#dev.yaml").symlink_to("root@host.4242:1700000000")
    (folder / ".dev.yaml.swp").write_bytes(b"\0" * 10)
    assert [p.name for p in environment_files(folder)] == ["dev.yaml", "prod.yaml"]
    assert sorted(load_all(folder)) == ["dev", "prod"]


def test_a_link_to_a_regular_file_is_an_environment(folder: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "kept" / "prod.yaml"
    elsewhere.parent.mkdir()
    (folder / "prod.yaml").rename(elsewhere)
    (folder / "prod.yaml").symlink_to(elsewhere)
    assert sorted(load_all(folder)) == ["dev", "prod"]


@pytest.mark.parametrize(
    ("typed", "meant"),
    [("\uff14x\uff14", "4x4"), ("\u56dbx\u56db", "4x4"), ("\uff12x\uff14", "2x4"), ("v6\u0435", "v6e")],
)
def test_the_look_alike_hint_names_the_value_meant(typed: str, meant: str) -> None:
    """Fullwidth digits are their ASCII digits, a CJK numeral its value (review round 4: the hint named the first
    allowed value of the same length, 2x2, for a fullwidth 4x4)."""
    from infra.config.base import lookalike

    hint = lookalike(typed, ["2x2", "2x4", "4x4", "v5e", "v6e"])
    assert hint is not None and hint.startswith(f"{meant!r} written with look-alike characters"), hint
