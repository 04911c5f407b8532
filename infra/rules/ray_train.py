"""Ray Train: what its failure handling takes (the TPU training's restarts)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from infra.rules import Finding, rule

if TYPE_CHECKING:
    from infra.config import Environment

RAY_FAILURE_CONFIG = (
    "ray-project/ray python/ray/train/v2/api/config.py FailureConfig @ ray-2.60.0 ('max_failures: Tries to "
    "recover a run from training worker errors at least this many times'; node preemptions are counted apart, "
    "max_preemption_failures, unbounded by default); "
    "https://docs.ray.io/en/latest/train/user-guides/fault-tolerance.html"
)


@rule(
    id="ray-train.restarts-on-any-worker-error",
    system="Ray Train",
    layer="engine-start",
    summary=(
        "The Ray training's resilience names no exit codes: Ray Train restarts the worker group on any worker "
        "error, up to FailureConfig max_failures (resilience.max_restarts), and takes no list of codes."
    ),
    source=RAY_FAILURE_CONFIG,
    subject="environment",
)
def _no_exit_codes(env: Environment) -> Iterator[Finding]:
    if env.training is not None and env.training.launcher == "ray" and env.training.resilience.retry_exit_codes:
        yield Finding(
            "training.resilience.retry_exit_codes",
            list(env.training.resilience.retry_exit_codes),
            "Ray Train restarts the worker group on any worker error (up to resilience.max_restarts) and cannot "
            "tell exit codes apart: leave retry_exit_codes out here, or launch with a JobSet (training.launcher: "
            "jobset, or batch.training), which takes them",
        )


RAY_ELASTIC = (
    "ray-project/ray python/ray/train/v2/api/config.py ScalingConfig @ ray-2.60.0 (num_workers (min, max): an "
    "elastic worker group, resized between them; TPU workers in whole slices); MaxText train_compile "
    "(compile_topology_num_slices) for the recipe's per-chip memory on each count"
)


@rule(
    id="ray-train.elastic-range",
    system="Ray Train",
    layer="engine-start",
    summary=(
        "training.resilience.min_slices is within the training slice's count (1 to count - 1, on a slice of several), "
        "and the recipe runs on every count of the range: its own min_slices reaches it and each count is compiled "
        "(compiled.yaml <recipe>@<n>), so the slices left hold the step."
    ),
    source=RAY_ELASTIC,
    subject="environment",
)
def _elastic_range(env: Environment) -> Iterator[Finding]:
    from workloads.trainer.compiled import elastic_problem
    from workloads.trainer.recipes import named_recipe

    training = env.training
    if training is None or training.resilience.min_slices is None or training.slice not in env.slices:
        return
    spec = env.slices[training.slice]
    recipe = named_recipe(training.recipe)
    problem = elastic_problem(recipe, spec.slice, spec.count, training.resilience.min_slices, slice_key=training.slice)
    if problem:
        yield Finding("training.resilience.min_slices", training.resilience.min_slices, problem)
