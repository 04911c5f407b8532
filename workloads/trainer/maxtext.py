"""The MaxText engine: arguments from a recipe and a slice, and the training entry.

MaxText is installed only in the trainer image (a pinned commit, see the
Dockerfile); it is imported inside the worker, never at module import.
"""

from __future__ import annotations

from typing import Any

from infra.accelerators import Slice
from workloads.trainer.recipes import Recipe, RecipeError

# Where the trainer image puts MaxText's base config (see workloads/trainer/Dockerfile).
MAXTEXT_BASE_CONFIG = "/opt/maxtext/src/MaxText/configs/base.yml"


def _value(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def maxtext_args(
    recipe: Recipe,
    slice_: Slice,
    *,
    run_name: str,
    base_output_directory: str,
    steps: int | None = None,
    config_path: str = MAXTEXT_BASE_CONFIG,
) -> list[str]:
    """MaxText's argv (after the program name) for `recipe` on `slice_`.

    `run_name` must be stable across restarts: MaxText resumes from the latest
    checkpoint under `<base_output_directory>/<run_name>`.
    """
    if recipe.engine != "maxtext":
        raise RecipeError(f"recipe {recipe.name!r} is for the {recipe.engine} engine, not maxtext")
    if not recipe.model_name:
        raise RecipeError(f"recipe {recipe.name!r} names no model_name")
    if not base_output_directory.startswith(("gs://", "/")):
        raise RecipeError(f"base_output_directory {base_output_directory!r} must be a gs:// URL or an absolute path")
    if recipe.dataset_type != "synthetic" and not recipe.dataset_path:
        raise RecipeError(f"recipe {recipe.name!r}: dataset_type {recipe.dataset_type!r} needs a dataset_path")
    mesh = recipe.mesh_for(slice_)
    args = {
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


def maxtext_loop(config: dict[str, Any]) -> None:
    """`train_loop_per_worker` of the maxtext engine: MaxText's own training entry."""
    from MaxText.train import main  # only in the trainer image

    main(["MaxText.train", *config["argv"]])
