"""The MaxText engine: arguments from a recipe and a slice, and the training entry.

MaxText (the `maxtext` package, pinned in workloads/trainer/requirements-maxtext.lock)
is installed in the trainer image and the local engine environment (`make
engine`); it is imported inside the worker, never at module import.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from infra.catalogue.accelerators import Slice
from workloads.trainer.recipes import Recipe, RecipeError

# MaxText's base config as MaxText's own documentation names it; MaxText
# resolves `src/maxtext/configs/...` against its installed package
# (maxtext.configs.pyconfig.resolve_config_path), and `resolve_config_path`
# below does the same in the worker, so the arguments do not depend on where
# the package is installed.
MAXTEXT_BASE_CONFIG = "src/maxtext/configs/base.yml"
_CONFIG_PREFIX = "src/maxtext/configs/"

# MaxText's goodput settings (configs/base.yml "Goodput parameters"; maxtext/common/goodput.py).
GOODPUT_ARGS = ("enable_goodput_recording=true", "monitor_goodput=true", "goodput_upload_interval_seconds=30")

# The training entry point (maxtext/trainers/pre_train/train.py in the pinned release).
TRAIN_MODULE = "maxtext.trainers.pre_train.train"


def _value(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def maxtext_args(
    recipe: Recipe,
    slice_: Slice | int,
    *,
    run_name: str,
    base_output_directory: str,
    steps: int | None = None,
    config_path: str = MAXTEXT_BASE_CONFIG,
    slices: int = 1,
    goodput: bool = False,
    on_slices: int | None = None,
) -> list[str]:
    """MaxText's argv (after the program name) for `recipe` on `slice_` (`slices` of them: the recipe's own count;
    `on_slices`: an elastic run's attempt on fewer of them, one of `Recipe.slice_counts`).

    `slice_` is a platform slice, or the number of local CPU devices (the
    offline runs: the same arguments, with the mesh sized to those devices and
    no HBM check). `run_name` must be stable across restarts: MaxText resumes
    from the latest checkpoint under `<base_output_directory>/<run_name>`.
    """
    if recipe.engine != "maxtext":
        raise RecipeError(f"recipe {recipe.name!r} is for the {recipe.engine} engine, not maxtext")
    if not base_output_directory.startswith(("gs://", "/")):
        raise RecipeError(f"base_output_directory {base_output_directory!r} must be a gs:// URL or an absolute path")
    if recipe.dataset_type != "synthetic" and not recipe.dataset_path:
        raise RecipeError(f"recipe {recipe.name!r}: dataset_type {recipe.dataset_type!r} needs a dataset_path")
    mesh = recipe.mesh_for_devices(slice_) if isinstance(slice_, int) else recipe.mesh_for(slice_, slices)
    if on_slices is not None and on_slices not in recipe.slice_counts:
        raise RecipeError(f"recipe {recipe.name!r} runs on {list(recipe.slice_counts)} slices, not {on_slices}")
    args = build_args(
        recipe,
        mesh,
        run_name=run_name,
        base_output_directory=base_output_directory,
        steps=steps,
        config_path=config_path,
        slices=on_slices,
    )
    # Goodput: recorded (Cloud Logging, goodput_<run_name>) and uploaded to Cloud Monitoring by worker 0, with
    # the badput breakdown; not part of the compiled step (the compile table's arguments leave it out).
    return [*args, *GOODPUT_ARGS] if goodput else args


def local_tier_args(every_steps: int, bucket_every_steps: int, directory: str) -> list[str]:
    """MaxText's multi-tier checkpointing (configs/base.yml, "Multi-tier checkpointing", @ 0.2.5): saves to
    `directory` (the RAM disk GKE's add-on mounts) every `every_steps`, the add-on's replicator copying each to a
    peer and every `bucket_every_steps` to the bucket; a restart restores the newest save of any tier."""
    return [
        "enable_multi_tier_checkpointing=true",
        f"local_checkpoint_directory={directory}",
        f"local_checkpoint_period={every_steps}",
        f"multi_tier_checkpointing_backup_interval_steps={bucket_every_steps}",
    ]


def jobset_host(plan: dict[str, Any]) -> None:
    """One host of a JobSet run (training.launcher: jobset): MaxText's own trainer with the plan's arguments, in this
    process. MaxText starts JAX's distributed runtime (from the TPU's metadata, and across slices the MEGASCALE
    variables the JobSet sets)."""
    from maxtext.trainers.pre_train.train import main  # only in the trainer image and the engine environment

    argv = list(plan["maxtext_args"])
    main([TRAIN_MODULE, resolve_config_path(argv[0]), *argv[1:]])


def build_args(
    recipe: Recipe,
    mesh: dict[str, int],
    *,
    run_name: str,
    base_output_directory: str,
    steps: int | None = None,
    config_path: str = MAXTEXT_BASE_CONFIG,
    slices: int | None = None,
) -> list[str]:
    """The argv of `maxtext_args` for a resolved mesh, without the fit checks (the compile table uses it), on
    `slices` slices (default: the recipe's own count; fewer: an elastic recipe's attempt on the slices left)."""
    if not recipe.model_name:
        raise RecipeError(f"recipe {recipe.name!r} names no model_name")
    args: dict[str, str | int | float | bool] = {
        "run_name": run_name,
        "base_output_directory": base_output_directory,
        "model_name": recipe.model_name,
        "per_device_batch_size": recipe.per_device_batch_size,
        "max_target_length": recipe.max_target_length,
        "steps": steps or recipe.steps,
        "dataset_type": recipe.dataset_type,
        "enable_checkpointing": True,
        "async_checkpointing": True,
        "checkpoint_period": recipe.checkpoint_period,
        "ici_data_parallelism": mesh["data"],
        "ici_fsdp_parallelism": mesh["fsdp"],
        "ici_tensor_parallelism": mesh["tensor"],
    }
    count = slices or recipe.slices
    if count > 1:
        # Across slices: pure data parallelism, the gradients' one all-reduce per step over the data-center
        # network (MaxText's multislice setting; each slice keeps its ici mesh).
        args["dcn_data_parallelism"] = count
    if recipe.dataset_path:
        args["dataset_path"] = recipe.dataset_path
    if recipe.remat_policy:
        args["remat_policy"] = recipe.remat_policy
    if recipe.attention:
        args["attention"] = recipe.attention
    clash = sorted(set(recipe.flags) & set(args))
    if clash:
        raise RecipeError(f"recipe {recipe.name!r}: flags {clash} are set by the recipe's own fields")
    args.update(recipe.flags)
    return [config_path, *(f"{key}={_value(value)}" for key, value in args.items())]


def resolve_config_path(path: str) -> str:
    """`src/maxtext/configs/<file>` as a file of the installed `maxtext` package; any other path as is."""
    if not path.startswith(_CONFIG_PREFIX):
        return path
    from importlib.resources import files

    resolved = Path(str(files("maxtext"))) / "configs" / path.removeprefix(_CONFIG_PREFIX)
    if not resolved.is_file():
        raise FileNotFoundError(f"{path}: no {resolved} in the installed maxtext package")
    return str(resolved)


def checkpoint_steps(checkpoint_dir: str | Path) -> list[int]:
    """The steps MaxText has finished checkpoints for under `<base_output_directory>/<run_name>/checkpoints`."""
    root = Path(checkpoint_dir)
    if not root.is_dir():
        return []
    # Orbax writes `<step>.orbax-checkpoint-tmp-*` while saving and renames it when done.
    return sorted(int(p.name) for p in root.iterdir() if p.name.isdigit())


def _kill_self_after_checkpoint(checkpoint_dir: str, step: int, marker: Path) -> None:
    """Test hook: SIGKILL this worker once the checkpoint of `step` exists, the first time only."""
    if marker.exists():
        return

    def watch() -> None:
        while step not in checkpoint_steps(checkpoint_dir):
            time.sleep(0.2)
        marker.write_text(f"killed after checkpoint {step}\n")
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, daemon=True).start()


def attempt_argv(config: dict[str, Any]) -> list[str]:
    """The argv of this attempt: `config["argv"]` on all the slices; on an elastic run's fewer slices (the count
    Ray Train's JAX backend gives each worker, MEGASCALE_NUM_SLICES), `config["argv_by_slices"]` for that count."""
    announced = os.environ.get("MEGASCALE_NUM_SLICES")
    by_slices = config.get("argv_by_slices") or {}
    if announced is None or announced not in by_slices:
        if announced is not None and by_slices and int(announced) < min(map(int, by_slices)):
            raise RecipeError(f"this attempt runs {announced} slices; the run's arguments are for {sorted(by_slices)}")
        return list(config["argv"])
    return list(by_slices[announced])


def maxtext_loop(config: dict[str, Any]) -> None:
    """`train_loop_per_worker` of the maxtext engine: MaxText's own training entry.

    `config["argv"]` is `maxtext_args(...)` (an elastic run's `argv_by_slices` those for its fewer counts: each
    attempt takes its count's, `attempt_argv`). Local runs add `metrics_dir`:
    each worker process has MaxText write its per-step metrics to its own
    file there (`rank<r>-pid<p>.jsonl`), so every attempt of a restarted run
    is one file. `kill_after_checkpoint` (tests only): worker 0 kills itself
    once that step's checkpoint exists, the first time, so Ray's
    FailureConfig restarts the group and MaxText resumes from its latest
    checkpoint.
    """
    import ray.train
    from maxtext.trainers.pre_train.train import main  # only in the engine environment

    rank = ray.train.get_context().get_world_rank()
    argv = attempt_argv(config)
    argv = [resolve_config_path(argv[0]), *argv[1:]]
    if config.get("metrics_dir"):
        argv.append(f"metrics_file={config['metrics_dir']}/rank{rank}-pid{os.getpid()}.jsonl")
    kill = config.get("kill_after_checkpoint")
    if kill and rank == 0:
        _kill_self_after_checkpoint(config["checkpoint_dir"], kill["step"], Path(kill["marker"]))
    main([TRAIN_MODULE, *argv])


def read_attempts(metrics_dir: str | Path) -> list[dict[int, float]]:
    """Worker 0's losses by step, one dict per attempt (process), oldest first."""
    files = sorted(Path(metrics_dir).glob("rank0-pid*.jsonl"), key=lambda p: p.stat().st_mtime)
    attempts = []
    for path in files:
        losses = {}
        for line in path.read_text().splitlines():
            record = json.loads(line)
            losses[int(record["step"])] = float(record["learning/loss"])
        if losses:
            attempts.append(losses)
    return attempts
