"""Training fits the slice it is given: `make plan` lists per environment the recipes that run on its training
slice, and refuses an environment whose named recipe (training.recipe) does not run there."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from infra.catalogue.accelerators import tpu_slice
from infra.config import ConfigError, Environment, environments_dir
from infra.synth.load import load_environment
from scripts.recipes import main as recipes_main
from workloads.trainer.compiled import Compiled, args_key, load_table, recipes_on
from workloads.trainer.recipes import load_recipes

TRAIN = "  train:\n    accelerator: v6e\n    topology: 4x4\n"


def _smaller_slice(tmp_path: Path, topology: str = "2x4", recipe: str | None = None) -> Path:
    """dev.yaml with its training slice shrunk to `topology` (and another training.recipe), under tmp_path."""
    text = (environments_dir() / "dev.yaml").read_text()
    assert TRAIN in text and "  recipe: llama3-8b\n" in text
    text = text.replace(TRAIN, TRAIN.replace("4x4", topology))
    if recipe is not None:
        text = text.replace("  recipe: llama3-8b\n", f"  recipe: {recipe}\n")
    path = tmp_path / "environments" / "dev.yaml"
    path.parent.mkdir()
    path.write_text(text)
    return path


def test_a_smaller_training_slice_is_refused_naming_the_recipes_that_run_there_and_how_to_make_one(
    tmp_path: Path,
) -> None:
    path = _smaller_slice(tmp_path)
    with pytest.raises(ConfigError) as refused:
        load_environment(path)
    (line,) = [p for p in refused.value.problems if "training.recipe" in p]
    assert str(path) in str(refused.value)
    assert "training.recipe: 'llama3-8b': does not run on training.slice 'train' (v6e-8, topology 2x4)" in line
    assert "tuned for v6e 4x4 only" in line
    assert "recipes that run there: canary (any slice, a small model), maxtext-tiny (any slice, a small model)" in line
    assert "add a recipe for v6e 2x4 to workloads/trainer/recipes.yaml" in line
    assert "`make compile-recipes`" in line and "compiled.yaml" in line
    assert "rule maxtext.recipe-runs-on-training-slice" in line


def test_an_unknown_recipe_is_refused_with_the_recipes_there_are(tmp_path: Path) -> None:
    path = _smaller_slice(tmp_path, "4x4", recipe="llama3-70b")
    with pytest.raises(ConfigError) as refused:
        load_environment(path)
    assert any(
        "training.recipe: 'llama3-70b': no such recipe in workloads/trainer/recipes.yaml; recipes: canary, llama3-8b"
        in p
        for p in refused.value.problems
    ), refused.value.problems


def test_a_smaller_slice_with_a_recipe_that_runs_there_loads_and_the_list_says_none_is_compiled_for_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _smaller_slice(tmp_path, recipe="maxtext-tiny")
    env = load_environment(path)
    assert env.training and env.training.recipe == "maxtext-tiny"
    assert recipes_main(["--environments", str(path.parent), "--env", "dev"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "dev: training.slice train (v6e-8, topology 2x4), training.recipe maxtext-tiny"
    assert "  * maxtext-tiny: runs (maxtext, for any slice: a small model, not compiled)" in out
    assert "    llama3-8b: does not run: tuned for v6e 4x4 only" in out
    assert out[-1].startswith("  no compiled recipe for this shape: to make one, add a recipe for v6e 2x4")


def test_the_plan_lists_each_environments_recipes_with_the_compilers_figures(
    envs: dict[str, Environment], capsys: pytest.CaptureFixture[str]
) -> None:
    assert recipes_main([]) == 0
    out = capsys.readouterr().out
    table = load_table()
    for name, env in envs.items():
        if env.training is None:
            continue
        assert f"{name}: training.slice {env.training.slice} " in out
        for fit in recipes_on(env.slices[env.training.slice].slice):
            assert fit.line() in out
    entry = table["llama3-8b"]
    assert (
        f"  * llama3-8b: runs: {entry.per_chip_gib:.2f} GiB per chip of {entry.hbm_per_chip_gib:.2f} GiB HBM, "
        f"headroom {entry.headroom_gib:.2f} GiB (compiled.yaml)"
    ) in out


def test_the_json_list_gives_each_recipes_verdict_and_the_compilers_figures(
    envs: dict[str, Environment], capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    assert recipes_main(["--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert set(listed) == set(envs)
    dev = listed["dev"]
    slice_ = {"key": "train", "name": "v6e-16", "topology": "4x4", "count": 1}
    assert (dev["slice"], dev["recipe"]) == (slice_, "llama3-8b")
    verdicts = {r["recipe"]: r for r in dev["recipes"]}
    entry = load_table()["llama3-8b"]
    assert (verdicts["llama3-8b"]["runs"], verdicts["llama3-8b"]["per_chip_gib"]) == (True, entry.per_chip_gib)
    assert verdicts["llama3-8b-ironwood"] == {
        "recipe": "llama3-8b-ironwood",
        "engine": "maxtext",
        "runs": False,
        "why_not": "tuned for tpu7x 2x2x2 only",
        "per_chip_gib": None,
        "hbm_per_chip_gib": None,
        "headroom_gib": None,
        "cross_slice_gb_per_step": None,
    }
    assert verdicts["llama3-8b"]["cross_slice_gb_per_step"] == 0  # one slice: nothing crosses the network
    # The same verdicts as the lines a person reads.
    for fit in recipes_on(envs["dev"].slices["train"].slice):
        assert verdicts[fit.recipe]["runs"] is fit.runs


def test_a_recipe_for_a_new_shape_runs_once_compiled_and_not_when_the_compiler_says_it_is_too_large() -> None:
    small = tpu_slice("v6e", "2x4")
    base = load_recipes()["llama3-8b"]
    recipe = base.model_copy(update={"name": "llama3-8b-v6e-8", "topology": "2x4", "ici": base.ici.model_copy(
        update={"fsdp": 8})})  # fmt: skip
    recipes = {recipe.name: recipe}
    assert recipes_on(small, recipes, {})[0].why.startswith("the compiler has not checked these arguments")
    compiled = Compiled(
        key=args_key(recipe, small),
        maxtext="0",
        slice="v6e-8 (2x4)",
        compile_topology="v6e-8",
        fits=True,
        per_chip_gib=30.0,
        hbm_per_chip_gib=31.25,
        headroom_gib=1.25,
        compile_seconds=1.0,
    )
    (fit,) = recipes_on(small, recipes, {recipe.name: compiled})
    assert fit.runs and fit.line().endswith("30.00 GiB per chip of 31.25 GiB HBM, headroom 1.25 GiB (compiled.yaml)")
    too_large = replace(compiled, fits=False, per_chip_gib=40.0, headroom_gib=-8.75, error="CompileTimeHbmOom")
    (fit,) = recipes_on(small, recipes, {recipe.name: too_large})
    assert not fit.runs and "needs 40.00 GiB per chip, more than the 31.25 GiB" in fit.why


def test_the_plan_review_shows_the_recipes_of_the_training_slice(
    stacks: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    from infra.review import write_reviews

    stack_dir = tmp_path / "stacks" / "platform-dev"
    stack_dir.mkdir(parents=True)
    (stack_dir / "cdk.tf.json").write_text(json.dumps(stacks["dev"]))
    write_reviews(tmp_path)
    text = (tmp_path / "review" / "dev.md").read_text()
    section = text[text.index("## Training recipes on its slice") :]
    assert "dev: training.slice train (v6e-16, topology 4x4), training.recipe llama3-8b" in section
    assert "  * llama3-8b: runs: " in section


def test_make_train_runs_the_environments_named_recipe_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    from workloads.trainer.__main__ import main

    assert main(["args", "--env", "dev"]) == 0
    plan = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert plan["recipe"] == "llama3-8b" and plan["run_name"] == "llama3-8b-dev"
