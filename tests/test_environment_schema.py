"""docs/environment.schema.json: the environment file's JSON Schema for editors, generated from the model (`make
snapshots` rewrites it), which every shipped environment file names and passes, and which refuses what the model
refuses field by field."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from infra.config import ENVIRONMENTS_DIR
from infra.config.environment import SCHEMA_ID, json_schema
from tests.helpers import REPO

SCHEMA = REPO / SCHEMA_ID
FILES = [*sorted(ENVIRONMENTS_DIR.glob("*.yaml")), REPO / "docs" / "examples" / "multislice" / "dev.yaml"]


def _errors(data: Any) -> list[str]:
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    return [f"{'.'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(data)]


def test_the_environment_schema_snapshot_is_the_models() -> None:
    current = json.dumps(json_schema(), indent=1, sort_keys=True) + "\n"
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        SCHEMA.write_text(current)
    assert SCHEMA.read_text() == current, "docs/environment.schema.json is not the model's: run `make snapshots`"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_shipped_environment_file_names_the_schema_and_passes_it(path: Path) -> None:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# yaml-language-server: $schema=")
    named = (path.parent / first.split("$schema=", 1)[1]).resolve()
    assert named == SCHEMA.resolve(), f"{path}: the schema line points at {named}"
    assert _errors(yaml.safe_load(path.read_text())) == []


@pytest.mark.parametrize(
    ("edit", "where"),
    [
        (lambda d: d.update(projet="typo"), ""),  # an unknown key
        (lambda d: d["slices"]["train"].update(count="two"), "slices.train.count"),
        (lambda d: d.update(region="US East"), "region"),
        (lambda d: d.pop("project"), ""),
    ],
    ids=["unknown key", "a count that is no number", "a region of the wrong form", "a required field missing"],
)
def test_the_schema_refuses_what_the_model_refuses_field_by_field(edit: Any, where: str) -> None:
    from infra.config import Environment

    data = yaml.safe_load((ENVIRONMENTS_DIR / "dev.yaml").read_text())
    bad = copy.deepcopy(data)
    edit(bad)
    errors = _errors(bad)
    assert errors and any(e.startswith(f"{where}: ") for e in errors), errors
    with pytest.raises(ValueError):
        Environment.model_validate(bad)


def test_an_editor_shows_what_each_top_level_section_and_slice_field_is_for() -> None:
    """A field's docstring in the model is its description in the schema (what a YAML language server shows on
    hover): every section of the file, and every field of a slice, the file's most edited part."""
    schema = json_schema()
    bare = [name for name, field in schema["properties"].items() if not field.get("description")]
    assert bare == [], f"top-level fields without a description: {bare}"
    slice_fields = schema["$defs"]["SliceSpec"]["properties"]
    assert [name for name, field in slice_fields.items() if not field.get("description")] == []
    assert "ordered list of tiers" in slice_fields["capacity"]["description"]
