"""The compiler's table (compiled.yaml) is the recipes' memory fit check, and it must be current."""

from __future__ import annotations

from dataclasses import replace

import pytest

from infra.catalogue.accelerators import tpu_slice
from workloads.trainer.compiled import (
    args_key,
    compile_argv,
    compiled_recipes,
    fit_problem,
    load_table,
    maxtext_version,
    parse_compile_output,
    recipe_slice,
)
from workloads.trainer.maxtext import maxtext_args
from workloads.trainer.recipes import Ici, RecipeError, get_recipe


def test_compiled_yaml_was_regenerated_for_every_recipes_current_arguments() -> None:
    table = load_table()
    recipes = compiled_recipes()
    assert {r.name for r in recipes} == set(table), "run `make compile-recipes` and commit compiled.yaml"
    for recipe in recipes:
        entry = table[recipe.name]
        assert entry.key == args_key(recipe, recipe_slice(recipe)), (  # type: ignore[arg-type]
            f"{recipe.name}: its arguments changed since compiled.yaml was written; run `make compile-recipes`"
        )
        assert entry.maxtext == maxtext_version()
        assert entry.fits and entry.headroom_gib > 0


def test_the_compile_uses_exactly_the_arguments_of_a_cluster_run_plus_the_topology() -> None:
    recipe = get_recipe("llama3-8b")
    slice_ = tpu_slice("v6e", "4x4")
    cluster = maxtext_args(recipe, slice_, run_name="llama3-8b", base_output_directory="/tmp/maxtext-compile")
    assert compile_argv(recipe, slice_) == [*cluster, "compile_topology=v6e-16", "compile_topology_num_slices=1"]


def test_a_recipe_whose_arguments_changed_is_refused_until_it_is_compiled_again() -> None:
    """A run plan (`make train`) asks the compiler's table; resolving a recipe's mesh reads no file."""
    from workloads.trainer.__main__ import _fitting_mesh

    recipe = get_recipe("llama3-8b").model_copy(update={"per_device_batch_size": 4})
    assert recipe.mesh_for(tpu_slice("v6e", "4x4")) == {"data": 1, "fsdp": 16, "tensor": 1}
    with pytest.raises(RecipeError, match="the compiler has not checked these arguments"):
        _fitting_mesh(recipe, tpu_slice("v6e", "4x4"))


def test_a_recipe_the_compiler_found_too_large_is_refused_with_the_compilers_numbers() -> None:
    recipe = get_recipe("llama3-8b")
    table = load_table()
    table["llama3-8b"] = replace(
        table["llama3-8b"], fits=False, per_chip_gib=40.93, error="CompileTimeHbmOom: used 40.93G of 31.25G hbm"
    )
    problem = fit_problem(recipe, tpu_slice("v6e", "4x4"), table)
    assert problem and "needs 40.93 GiB per chip, more than the 31.25 GiB" in problem
    assert "CompileTimeHbmOom" in problem


def test_the_fast_filter_still_refuses_weights_that_cannot_fit_before_any_table_lookup() -> None:
    recipe = get_recipe("llama3-8b").model_copy(
        update={"accelerator": None, "topology": None, "params_billion": 70.0, "ici": Ici(fsdp=-1)}
    )
    with pytest.raises(RecipeError, match="bytes each"):
        recipe.check_fits(tpu_slice("v5e", "4x8"))


def test_parse_compile_output_reads_memory_analysis_and_hbm_oom() -> None:
    gib = 1024**3
    stats = (
        "Memory analysis: CompiledMemoryStats(generated_code_size_in_bytes=1000, argument_size_in_bytes="
        f"{10 * gib}, output_size_in_bytes={10 * gib}, alias_size_in_bytes={10 * gib}, temp_size_in_bytes={gib // 2}, "
        "host_generated_code_size_in_bytes=0, host_argument_size_in_bytes=0)"
    )
    assert parse_compile_output(stats) == (10.5, None, None)
    oom = "RESOURCE_EXHAUSTED: CompileTimeHbmOom: Ran out of memory in memory space hbm. Used 40.93G of 31.25G hbm."
    per_chip, capacity, error = parse_compile_output(oom)
    assert (round(per_chip, 2), capacity) == (40.93, 31.25)
    assert error and error.startswith("CompileTimeHbmOom")
    newer = (
        "RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: Ran out of memory on HBM, the total memory required for "
        "HLO temporaries (63.54G) exceeds available HBM (15.75G). HLO module: jit_train_step."
    )
    per_chip, capacity, error = parse_compile_output(newer)
    assert (round(per_chip, 2), capacity) == (63.54, 15.75)
    assert error == "CompileTimeHbmOom: HLO temporaries need 63.54G of 15.75G HBM"
    with pytest.raises(RuntimeError, match="neither its memory analysis"):
        parse_compile_output("Traceback: something else")


def test_check_compiles_jobs_at_once_and_reports_in_the_recipes_order(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--check --jobs 2`: two train_compile processes at a time (each mostly one core), the results in the recipes'
    order, a difference from compiled.yaml still fails the check."""
    import json
    import threading
    import time

    from workloads.trainer import compiled

    table = load_table()
    running, most = [0], [0]
    lock = threading.Lock()

    def fake(recipe: object) -> compiled.Compiled:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.2)
        with lock:
            running[0] -= 1
        name = recipe.name  # type: ignore[attr-defined]
        return table[name] if name != "llama3-8b" else replace(table[name], per_chip_gib=table[name].per_chip_gib + 1)

    monkeypatch.setattr(compiled, "compile_recipe", fake)
    code = compiled.main(["--check", "--jobs", "2"])
    out, err = capsys.readouterr()
    assert most[0] == 2
    assert list(json.loads(out.splitlines()[-1])) == [r.name for r in compiled_recipes()]
    assert code == 1 and "llama3-8b: compiled.yaml says" in err
