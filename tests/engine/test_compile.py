"""Every maxtext recipe compiled for its slice on the CPU agrees with the committed table."""

from __future__ import annotations

import pytest

from tests.engine.helpers import REPO, run_json
from workloads.trainer.compiled import Compiled, compiled_recipes, compiles, fit_problem, load_table, recipe_slice
from workloads.trainer.recipes import load_recipes

pytestmark = pytest.mark.engine


def test_every_recipe_compiles_for_its_slice_as_compiled_yaml_records() -> None:
    """And an elastic recipe on each fewer slice count it runs on (`<name>@<n>`)."""
    fresh = run_json("workloads.trainer.compiled", "--check", timeout=1800)
    table = load_table()
    assert set(fresh) == {name for name, _, _ in compiles(compiled_recipes())}
    for name, result in fresh.items():
        assert result["key"] == table[name].key
        assert result["fits"], f"{name}: {result}"
        assert abs(result["per_chip_gib"] - table[name].per_chip_gib) <= 0.05


def test_an_oversized_recipe_is_refused_with_the_compilers_numbers() -> None:
    """Llama 3.1 70B, fsdp 32 on v5e-32: the compiler fails fast with CompileTimeHbmOom."""
    fixture = REPO / "tests/fixtures/recipes/oversized.yaml"
    fresh = run_json("workloads.trainer.compiled", "--recipes-file", str(fixture))["llama3.1-70b-v5e-32"]
    assert not fresh["fits"]
    assert fresh["error"].startswith("CompileTimeHbmOom")
    assert fresh["hbm_per_chip_gib"] == 15.75 and fresh["per_chip_gib"] > fresh["hbm_per_chip_gib"]
    recipe = load_recipes(fixture)["llama3.1-70b-v5e-32"]
    slice_ = recipe_slice(recipe)
    assert slice_ is not None
    problem = fit_problem(recipe, slice_, {recipe.name: Compiled(**fresh)})
    assert problem and f"needs {fresh['per_chip_gib']:.2f} GiB per chip, more than the 15.75 GiB" in problem
