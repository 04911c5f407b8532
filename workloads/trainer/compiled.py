"""What the compiler says about each MaxText recipe: per-chip memory of its training step on its slice.

`python -m workloads.trainer.compiled` (`make compile-recipes`, in the engine
environment) compiles every maxtext recipe that names a slice shape ahead of
time for that TPU slice on the CPU, with MaxText's own `train_compile` and
exactly the arguments `maxtext_args` generates (plus the compile topology),
and prints per recipe the slice, the per-chip memory, the HBM per chip, the
headroom and the compile time. `--write` records them in `compiled.yaml`,
keyed by a hash of the arguments and the MaxText version; `--check` compiles
again and compares with the table.

The table is the recipes' memory fit check (`fit_problem`, used by
`Recipe.check_fits`): a recipe whose arguments changed since the table was
written, or that the compiler found too large, is refused.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from infra.catalogue.accelerators import Slice, tpu_slice
from workloads.trainer.recipes import Recipe, RecipeError, load_recipes

if TYPE_CHECKING:
    from infra.config import Environment

COMPILED_FILE = Path(__file__).with_name("compiled.yaml")
ENGINE_LOCK = Path(__file__).with_name("requirements-maxtext.lock")
COMPILE_MODULE = "maxtext.trainers.pre_train.train_compile"
# Fixed run name and output directory for the compile: neither changes the compiled step.
COMPILE_OUTPUT = "/tmp/maxtext-compile"
GIB = 1024**3
# train_compile's full output per recipe, for a closer look.
LOG_DIR = Path(".cache/compile")
# HBM per chip as the TPU compiler counts it (its CompileTimeHbmOom messages
# report these capacities); other generations: the nominal size.
# TPU7x: per JAX device (one TensorCore): libtpu 0.0.50's CompileTimeHbmOom for tpu7x-16 reports 94.74G.
COMPILER_HBM_GIB = {"v6e": 31.25, "v5e": 15.75, "tpu7x": 94.74}


def maxtext_version(lock: Path = ENGINE_LOCK) -> str:
    """The MaxText version pinned in the engine lock."""
    found = re.search(r"^maxtext(?:\[[^\]]*\])?==(\S+)", lock.read_text(), re.M)
    if not found:
        raise RuntimeError(f"{lock}: no maxtext pin")
    return found.group(1)


def compile_topology(slice_: Slice) -> str:
    """MaxText's name of the slice (`compile_topology=`): v6e-16 for a v6e 4x4, tpu7x-16 for a 2x2x2 (TensorCores)."""
    return f"{slice_.accelerator.name}-{slice_.chips * slice_.accelerator.cores_per_chip}"


def hbm_gib_per_chip(slice_: Slice) -> float:
    return COMPILER_HBM_GIB.get(slice_.accelerator.name, slice_.accelerator.hbm_gb * 1e9 / GIB)


def slices_label(slice_: Slice, count: int) -> str:
    """`v6e-16 (4x4)`, or `2 x v6e-16 (4x4)` for a multislice recipe (the table's `slice`)."""
    return f"{slice_.name} ({slice_.topology})" if count == 1 else f"{count} x {slice_.name} ({slice_.topology})"


def slices_phrase(slice_: Slice, count: int) -> str:
    """`v6e-16, topology 4x4`, or `2 slices v6e-16, topology 4x4`: the training slice as the recipe lines name it."""
    return f"{f'{count} slices ' if count > 1 else ''}{slice_.name}, topology {slice_.topology}"


def recipe_slice(recipe: Recipe) -> Slice | None:
    """The slice a recipe is tuned for, or None (a recipe for any slice is not compiled)."""
    if recipe.engine != "maxtext" or not (recipe.accelerator and recipe.topology):
        return None
    return tpu_slice(recipe.accelerator, recipe.topology)


def compile_argv(recipe: Recipe, slice_: Slice, slices: int | None = None) -> list[str]:
    """`train_compile`'s arguments: the recipe's `maxtext_args` (no fit check) on `slices` of its slices (default:
    its own count; an elastic recipe's fewer, `Recipe.slice_counts`), plus the compile topology."""
    from workloads.trainer.maxtext import build_args

    count = slices or recipe.slices
    args = build_args(
        recipe,
        recipe.mesh_for_devices(slice_.devices),
        run_name=recipe.name,
        base_output_directory=COMPILE_OUTPUT,
        slices=count,
    )
    return [*args, f"compile_topology={compile_topology(slice_)}", f"compile_topology_num_slices={count}"]


def args_key(recipe: Recipe, slice_: Slice, version: str | None = None, slices: int | None = None) -> str:
    """Hash of the compile arguments and the MaxText version: the table entry is valid while it matches."""
    payload = {"maxtext": version or maxtext_version(), "argv": compile_argv(recipe, slice_, slices)}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def table_name(recipe: Recipe, slices: int | None = None) -> str:
    """A recipe's entry in compiled.yaml: its name on its own slice count, `<name>@<n>` on `n` of an elastic
    recipe's fewer slices."""
    return recipe.name if slices in (None, recipe.slices) else f"{recipe.name}@{slices}"


@dataclass(frozen=True)
class Compiled:
    """One recipe's compile result on its slice."""

    key: str
    maxtext: str
    slice: str
    compile_topology: str
    fits: bool
    per_chip_gib: float
    hbm_per_chip_gib: float
    headroom_gib: float
    compile_seconds: float
    error: str | None = None

    def summary(self, recipe: str) -> str:
        verdict = "fits" if self.fits else "DOES NOT FIT"
        return (
            f"{recipe}: {self.slice}, compile_topology={self.compile_topology}: "
            f"{self.per_chip_gib:.2f} GiB per chip of {self.hbm_per_chip_gib:.2f} GiB HBM, "
            f"headroom {self.headroom_gib:.2f} GiB, "
            f"compiled in {self.compile_seconds:.0f} s: {verdict}"
        )


def load_table(path: Path = COMPILED_FILE) -> dict[str, Compiled]:
    raw = yaml.safe_load(path.read_text()) if path.exists() else None
    return {name: Compiled(**entry) for name, entry in (raw or {}).items()}


def write_table(table: dict[str, Compiled], path: Path = COMPILED_FILE) -> None:
    header = (
        "# Written by `make compile-recipes` (python -m workloads.trainer.compiled --write): each maxtext\n"
        "# recipe compiled ahead of time for its slice by MaxText's train_compile on the CPU. `key` hashes\n"
        "# the compile arguments and the MaxText version; a recipe whose key no longer matches is refused\n"
        "# until this file is regenerated. Sizes in GiB per chip.\n"
    )
    body = {name: asdict(entry) for name, entry in sorted(table.items())}
    path.write_text(header + yaml.safe_dump(body, sort_keys=False))


def fit_problem(
    recipe: Recipe, slice_: Slice, table: dict[str, Compiled] | None = None, slices: int | None = None
) -> str | None:
    """Why `recipe` must not run on `slice_` (on `slices` of them: default, its own count) according to the
    compiler's table, or None."""
    target = recipe_slice(recipe)
    if target is None or (target.accelerator.name, target.topology) != (slice_.accelerator.name, slice_.topology):
        return None
    name = table_name(recipe, slices)
    entry = (load_table() if table is None else table).get(name)
    key = args_key(recipe, target, slices=slices)
    if entry is None or entry.key != key:
        return (
            f"the compiler has not checked these arguments (compiled.yaml has "
            f"{'no entry' if entry is None else 'key ' + entry.key} for {name}, the arguments hash to {key}); "
            "run `make compile-recipes` in the engine environment and commit compiled.yaml"
        )
    if not entry.fits:
        return (
            f"the compiler needs {entry.per_chip_gib:.2f} GiB per chip, more than the "
            f"{entry.hbm_per_chip_gib:.2f} GiB of HBM of a {entry.slice} chip ({entry.error or 'out of HBM'})"
        )
    return None


def elastic_problem(
    recipe: Recipe | None,
    slice_: Slice,
    count: int,
    min_slices: int,
    table: dict[str, Compiled] | None = None,
    slice_key: str = "<key>",
) -> str | None:
    """Why `recipe` on `count` slices of `slice_` cannot go down to `min_slices` when slices are lost, or None: the
    range must be within the slices, and a compiled recipe must run (and be compiled) on every count of it (None: a
    recipe named later, at `make train`, which checks it then)."""
    if count < 2:
        return f"elastic slices need a training slice of several (slices.{slice_key}.count 2 or more); it has 1"
    if not 1 <= min_slices < count:
        return f"allowed: from 1 to {count - 1} (the training slice's count {count} less one)"
    if recipe is None or recipe_slice(recipe) is None:
        return None  # the canary (or a recipe named at `make train`): any count, its mesh built at each attempt
    runs_on = recipe.slice_counts
    if min_slices not in runs_on:
        fewest = runs_on.start
        return (
            f"recipe {recipe.name!r} runs on {fewest if fewest == recipe.slices else f'{fewest} to {recipe.slices}'}"
            f" slice{'s' * (recipe.slices > 1)} only (its min_slices in workloads/trainer/recipes.yaml); allowed "
            f"here: {f'from {fewest} to {count - 1}' if fewest < count else 'none'}; or give the recipe "
            f"`min_slices: {min_slices}` and run `make compile-recipes`"
        )
    for n in range(min_slices, count):
        problem = fit_problem(recipe, slice_, table, slices=n)
        if problem:
            return f"on {n} slice{'s' * (n > 1)}: {problem}"
    return None


@dataclass(frozen=True)
class SliceFit:
    """Whether one recipe runs on a slice, why not, and the compiler's figures where it was compiled for it."""

    recipe: str
    engine: str
    runs: bool
    why: str = ""
    compiled: Compiled | None = None
    # GB each slice sends over the data-center network per step (Recipe.cross_slice_gb_per_step); 0 on one slice.
    cross_slice_gb: float = 0.0

    def line(self) -> str:
        """`llama3-8b: runs: 28.21 GiB per chip of 31.25 GiB HBM, headroom 3.04 GiB (compiled.yaml)`, or why not."""
        if not self.runs:
            return f"{self.recipe}: does not run: {self.why}"
        if self.compiled is None:
            return f"{self.recipe}: runs ({self.engine}, for any slice: a small model, not compiled)"
        c = self.compiled
        across = (
            f"; across slices about {self.cross_slice_gb:.1f} GB per slice per step (the gradients' all-reduce)"
            if self.cross_slice_gb
            else ""
        )
        return (
            f"{self.recipe}: runs: {c.per_chip_gib:.2f} GiB per chip of {c.hbm_per_chip_gib:.2f} GiB HBM, "
            f"headroom {c.headroom_gib:.2f} GiB (compiled.yaml){across}"
        )


def recipes_on(
    slice_: Slice,
    recipes: dict[str, Recipe] | None = None,
    table: dict[str, Compiled] | None = None,
    count: int = 1,
) -> list[SliceFit]:
    """Every recipe of `recipes` (recipes.yaml) on `count` slices of `slice_`'s shape: whether it runs there, by
    the same checks as a run (`Recipe.check_fits`: its shape and slice count, its parallelism, the weights' first
    filter; then the compiler's table)."""
    recipes = load_recipes() if recipes is None else recipes
    table = load_table() if table is None else table
    fits = []
    for name, recipe in sorted(recipes.items()):
        target = recipe_slice(recipe)
        entry = table.get(name) if target is not None else None
        try:
            recipe.check_fits(slice_, count)
        except RecipeError as err:
            if recipe.accelerator and (recipe.accelerator, recipe.topology) != (
                slice_.accelerator.name,
                slice_.topology,
            ):
                why = f"tuned for {recipe.accelerator} {recipe.topology} only"
            elif recipe.accelerator and recipe.slices != count:
                why = f"tuned for {recipe.slices} slice{'s' * (recipe.slices > 1)}"
            else:
                why = str(err).split(": ", 1)[-1]
            fits.append(SliceFit(name, recipe.engine, False, why))
            continue
        problem = fit_problem(recipe, slice_, table)
        across = recipe.cross_slice_gb_per_step
        fits.append(SliceFit(name, recipe.engine, problem is None, problem or "", entry, across))
    return fits


def how_to_add(slice_: Slice, count: int = 1) -> str:
    """What to do when no recipe runs on `count` slices of `slice_` (docs/training.md, "A recipe for a new shape")."""
    slices = f", slices: {count}" if count > 1 else ""
    return (
        f"add a recipe for {slice_.accelerator.name} {slice_.topology} to workloads/trainer/recipes.yaml "
        f"(accelerator: {slice_.accelerator.name}, topology: {slice_.topology}{slices}, ici parallelism whose "
        f"product is the slice's {slice_.devices} devices), run `make compile-recipes` and commit "
        "workloads/trainer/compiled.yaml (docs/training.md: a recipe for a new shape)"
    )


def environment_recipes(env: Environment) -> list[str]:
    """Which recipes run on `env`'s training slice: a heading line, then one line per recipe, the one it names
    marked `*` (`make plan`'s recipes step, the plan review); empty without a Ray training cluster on TPU."""
    training = env.training
    if training is None or training.slice not in env.slices:
        return []
    slice_, count = env.slices[training.slice].slice, env.slices[training.slice].count
    if slice_.kind != "tpu":
        return []
    named = training.recipe
    head = (
        f"{env.name}: training.slice {training.slice} ({slices_phrase(slice_, count)}), "
        f"training.recipe {named or '(none: make train needs RECIPE=)'}"
    )
    fits = recipes_on(slice_, count=count)
    out = [head, *(f"  {'*' if f.recipe == named else ' '} {f.line()}" for f in fits)]
    if not any(f.runs and f.compiled is not None for f in fits):
        out.append(f"  no compiled recipe for this shape: to make one, {how_to_add(slice_, count)}")
    return out


def environment_recipes_json(env: Environment) -> dict[str, Any] | None:
    """What `environment_recipes` says, for machines: the training slice, the recipe it names, and every recipe's
    verdict with the compiler's figures where there are some; None without a Ray training cluster on TPU."""
    training = env.training
    if training is None or training.slice not in env.slices or env.slices[training.slice].slice.kind != "tpu":
        return None
    slice_, count = env.slices[training.slice].slice, env.slices[training.slice].count
    return {
        "environment": env.name,
        "slice": {"key": training.slice, "name": slice_.name, "topology": slice_.topology, "count": count},
        "recipe": training.recipe,
        "recipes": [
            {
                "recipe": f.recipe,
                "engine": f.engine,
                "runs": f.runs,
                "why_not": f.why or None,
                "per_chip_gib": f.compiled.per_chip_gib if f.compiled else None,
                "hbm_per_chip_gib": f.compiled.hbm_per_chip_gib if f.compiled else None,
                "headroom_gib": f.compiled.headroom_gib if f.compiled else None,
                "cross_slice_gb_per_step": f.cross_slice_gb if f.runs else None,
            }
            for f in recipes_on(slice_, count=count)
        ],
    }


_SIZE = r"([\d.]+)\s*([KMGT]i?B?|[KMGT]?)"


def _gib(number: str, unit: str) -> float:
    scale = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}[unit[:1]]
    return float(number) * scale / GIB


def parse_compile_output(output: str) -> tuple[float, float | None, str | None]:
    """(per-chip GiB, the compiler's HBM capacity in GiB if it said, error) from train_compile's output."""
    # XLA's two phrasings: "Used 40.93G of 31.25G hbm" and (libtpu 0.0.50) "CompileTimeHbmOom: ... the
    # total memory required for HLO temporaries (63.54G) exceeds available HBM (15.75G)".
    oom = re.search(rf"Used {_SIZE} of {_SIZE} hbm", output) or re.search(
        rf"required for ([\w ]+?) \({_SIZE}\) exceeds available HBM \({_SIZE}\)", output
    )
    if oom:
        kind = "CompileTimeHbmOom" if "CompileTimeHbmOom" in output else "RESOURCE_EXHAUSTED"
        used, capacity = oom.groups()[-4:-2], oom.groups()[-2:]
        what = f"{oom.group(1)} " if len(oom.groups()) == 5 else ""
        detail = f"{kind}: {what}need {''.join(used)} of {''.join(capacity)} HBM"
        exceeded = re.search(rf"Exceeded hbm capacity by {_SIZE}", output)
        if exceeded:
            detail += f", exceeded by {exceeded.group(1)}{exceeded.group(2)}"
        return _gib(*used), _gib(*capacity), detail
    stats = re.search(r"Memory analysis: CompiledMemoryStats\((.*?)\)", output)
    if not stats:
        tail = "\n".join(output.strip().splitlines()[-15:])
        raise RuntimeError(f"train_compile printed neither its memory analysis nor an HBM OOM:\n{tail}")
    fields = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", stats.group(1))}
    # The device memory of one step, as MaxText's own print_compiled_memory_stats adds it up.
    total = (
        fields["argument_size_in_bytes"]
        + fields["output_size_in_bytes"]
        + fields["temp_size_in_bytes"]
        - fields["alias_size_in_bytes"]
    )
    return total / GIB, None, None


def compile_recipe(recipe: Recipe, slices: int | None = None, *, python: str = sys.executable) -> Compiled:
    """Compile `recipe` for its slice (`slices` of them: default, its own count) with train_compile in a fresh
    process; the result."""
    from workloads.trainer.maxtext import resolve_config_path

    slice_ = recipe_slice(recipe)
    if slice_ is None:
        raise RecipeError(f"recipe {recipe.name!r} names no slice shape to compile for")
    argv = compile_argv(recipe, slice_, slices)
    argv[0] = resolve_config_path(argv[0])
    started = time.monotonic()
    result = subprocess.run(
        [python, "-m", COMPILE_MODULE, *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    seconds = time.monotonic() - started
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    (LOG_DIR / f"{table_name(recipe, slices)}.log").write_text(result.stdout + result.stderr)
    per_chip, capacity, error = parse_compile_output(result.stdout + result.stderr)
    if result.returncode != 0 and error is None:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-20:])
        raise RuntimeError(f"train_compile failed for {recipe.name} (exit {result.returncode}):\n{tail}")
    hbm = capacity or hbm_gib_per_chip(slice_)
    return Compiled(
        key=args_key(recipe, slice_, slices=slices),
        maxtext=maxtext_version(),
        slice=slices_label(slice_, slices or recipe.slices),
        compile_topology=compile_topology(slice_),
        fits=error is None and per_chip <= hbm,
        per_chip_gib=round(per_chip, 2),
        hbm_per_chip_gib=round(hbm, 2),
        headroom_gib=round(hbm - per_chip, 2),
        compile_seconds=round(seconds, 1),
        error=error,
    )


def compiled_recipes(recipes: dict[str, Recipe] | None = None) -> list[Recipe]:
    """The recipes the table covers: every maxtext recipe that names its slice shape."""
    return [r for r in (recipes or load_recipes()).values() if recipe_slice(r) is not None]


def compiles(recipes: list[Recipe]) -> list[tuple[str, Recipe, int | None]]:
    """The table's entries for `recipes`: (its name, the recipe, the slice count) for each recipe on its own count
    (None), then on each fewer count it runs on elastic (`Recipe.slice_counts`)."""
    return [
        (table_name(r, n), r, None if n == r.slices else n)
        for r in recipes
        for n in sorted(r.slice_counts, reverse=True)
    ]


def compare(fresh: Compiled, recorded: Compiled | None, *, tolerance_gib: float = 0.05) -> str | None:
    """Why a fresh compile disagrees with the table, or None."""
    if recorded is None:
        return "not in compiled.yaml"
    if recorded.key != fresh.key:
        return f"compiled.yaml has key {recorded.key}, the arguments hash to {fresh.key}"
    if recorded.fits != fresh.fits or abs(recorded.per_chip_gib - fresh.per_chip_gib) > tolerance_gib:
        return f"compiled.yaml says {recorded.per_chip_gib} GiB per chip, the compiler now {fresh.per_chip_gib}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads.trainer.compiled", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "recipes",
        nargs="*",
        help="default: every maxtext recipe with a slice shape, on each slice count it runs on (`<name>@<n>`: one)",
    )
    parser.add_argument("--recipes-file", type=Path, default=None, help="compile another file's recipes (no table)")
    parser.add_argument(
        "--jobs",
        type=int,
        default=max(1, (os.cpu_count() or 2) // 2),
        help="compiles at once (default: one per two cores: a train_compile keeps about two busy, 193%% measured)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="record the results in compiled.yaml")
    mode.add_argument("--check", action="store_true", help="fail when a result differs from compiled.yaml")
    args = parser.parse_args(argv)
    if args.recipes_file and (args.write or args.check):
        parser.error("--recipes-file only prints: compiled.yaml is for recipes.yaml")
    jobs = compiles(compiled_recipes(load_recipes(args.recipes_file) if args.recipes_file else None))
    if args.recipes:
        # A recipe's name compiles each of its counts; `<name>@<n>` one of them.
        unknown = sorted(set(args.recipes) - {n for name, r, _ in jobs for n in (name, r.name)})
        if unknown:
            parser.error(f"not compilable recipes: {unknown}; compilable: {[name for name, _, _ in jobs]}")
        jobs = [job for job in jobs if job[0] in args.recipes or job[1].name in args.recipes]
    table = load_table()
    written = dict(table) if args.recipes else {}  # a full run drops recipes that no longer exist
    problems = []
    results: dict[str, Any] = {}
    started = time.monotonic()

    def compile_one(numbered: tuple[int, tuple[str, Recipe, int | None]]) -> Compiled:
        i, (name, recipe, slices) = numbered
        target = recipe_slice(recipe)
        print(
            f"compile: {name} ({i}/{len(jobs)}) for {target.name if target else '?'} "
            f"({time.monotonic() - started:.0f} s so far)",
            file=sys.stderr,
            flush=True,
        )
        fresh = compile_recipe(recipe, slices)
        print(fresh.summary(name), flush=True)
        return fresh

    # Each compile is a process of its own (train_compile, about two cores busy): --jobs of them at once.
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        compiled = list(pool.map(compile_one, enumerate(jobs, 1)))
    for (name, _, _), fresh in zip(jobs, compiled, strict=True):
        results[name] = asdict(fresh)
        if args.check and (why := compare(fresh, table.get(name))):
            problems.append(f"{name}: {why}")
        written[name] = fresh
    if args.write:
        write_table(written)
    print(json.dumps(results))
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
