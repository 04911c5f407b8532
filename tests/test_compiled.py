"""The compiler's table (compiled.yaml) is the recipes' memory fit check, and it must be current."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from infra.catalogue.accelerators import tpu_slice
from workloads.trainer.compiled import (
    args_key,
    compile_argv,
    compiled_recipes,
    compiles,
    fit_problem,
    load_table,
    maxtext_version,
    parse_compile_output,
    recipe_slice,
)
from workloads.trainer.maxtext import maxtext_args
from workloads.trainer.recipes import Ici, RecipeError, get_recipe, load_recipes


def test_compiled_yaml_was_regenerated_for_every_recipes_current_arguments() -> None:
    """Every recipe on its own slice count, and an elastic one on each fewer count it runs on (`<name>@<n>`)."""
    table = load_table()
    jobs = compiles(compiled_recipes())
    assert {name for name, _, _ in jobs} == set(table), "run `make compile-recipes` and commit compiled.yaml"
    assert "llama3-8b-2-slices@1" in table
    for name, recipe, slices in jobs:
        entry = table[name]
        assert entry.key == args_key(recipe, recipe_slice(recipe), slices=slices), (  # type: ignore[arg-type]
            f"{name}: its arguments changed since compiled.yaml was written; run `make compile-recipes`"
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

    def fake(recipe: object, slices: int | None = None) -> compiled.Compiled:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.2)
        with lock:
            running[0] -= 1
        name = compiled.table_name(recipe, slices)  # type: ignore[arg-type]
        return table[name] if name != "llama3-8b" else replace(table[name], per_chip_gib=table[name].per_chip_gib + 1)

    monkeypatch.setattr(compiled, "compile_recipe", fake)
    code = compiled.main(["--check", "--jobs", "2"])
    out, err = capsys.readouterr()
    assert most[0] == 2
    assert list(json.loads(out.splitlines()[-1])) == [name for name, _, _ in compiles(compiled_recipes())]
    assert code == 1 and "llama3-8b: compiled.yaml says" in err


def test_an_elastic_recipe_is_compiled_for_each_count_with_that_counts_data_parallelism(tmp_path: Path) -> None:
    """On one of its two slices the recipe is the one-slice step (no dcn axis) at the same batch per chip, and the
    compiler's figure for it is its own (28.35 GiB a chip on one slice against 24.07 on two): every count is
    compiled, not assumed."""
    recipe = get_recipe("llama3-8b-2-slices")
    v6e = tpu_slice("v6e", "4x4")
    assert list(recipe.slice_counts) == [1, 2]
    assert [(name, n) for name, r, n in compiles([recipe])] == [
        ("llama3-8b-2-slices", None),
        ("llama3-8b-2-slices@1", 1),
    ]
    two, one = compile_argv(recipe, v6e), compile_argv(recipe, v6e, slices=1)
    assert "dcn_data_parallelism=2" in two and "compile_topology_num_slices=2" in two
    assert not any(a.startswith("dcn_") for a in one) and one[-1] == "compile_topology_num_slices=1"
    assert {a for a in two if "batch" in a} == {a for a in one if "batch" in a} == {"per_device_batch_size=2"}
    table = load_table()
    assert (table["llama3-8b-2-slices"].per_chip_gib, table["llama3-8b-2-slices@1"].per_chip_gib) == (24.07, 28.35)
    del table["llama3-8b-2-slices@1"]
    assert fit_problem(recipe, v6e, table) is None
    problem = fit_problem(recipe, v6e, table, slices=1)
    assert problem and "compiled.yaml has no entry for llama3-8b-2-slices@1" in problem
    bad = tmp_path / "recipes.yaml"
    bad.write_text(yaml.safe_dump({"wide": {**recipe.model_dump(exclude={"name"}), "min_slices": 3}}))
    with pytest.raises(RecipeError, match=r"recipe 'wide': min_slices 3: from 1 to the recipe's slices \(2\)"):
        load_recipes(bad)
