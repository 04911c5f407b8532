"""Every maxtext recipe compiled for its slice on the CPU agrees with the committed table."""

from __future__ import annotations

import pytest

from tests.engine.conftest import run_json
from workloads.trainer.compiled import compiled_recipes, load_table

pytestmark = pytest.mark.engine


def test_every_recipe_compiles_for_its_slice_as_compiled_yaml_records() -> None:
    fresh = run_json("workloads.trainer.compiled", "--check", timeout=1800)
    table = load_table()
    assert set(fresh) == {r.name for r in compiled_recipes()}
    for name, result in fresh.items():
        assert result["key"] == table[name].key
        assert result["fits"], f"{name}: {result}"
        assert abs(result["per_chip_gib"] - table[name].per_chip_gib) <= 0.05
