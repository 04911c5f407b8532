"""What a failure costs a training job: how many restarts it gets, where each restart restores from, and the most
work it can lose (`make plan`'s review, "Surviving a failure").

The figures come from the environment's `resilience` blocks and the recipe: its checkpoint period, the state a
checkpoint holds (`Recipe.checkpoint_gb`, per host of the slice) and the step time at the recipe's published
throughput (`Recipe.step_seconds`); where a recipe publishes none, the loss is given in steps only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workloads.trainer.recipes import Recipe, named_recipe

if TYPE_CHECKING:
    from infra.config import Environment
    from infra.config.training import Resilience


# MaxText saves asynchronously (async_checkpointing): a save still being written when the job fails is not complete,
# and the restart takes the one before it.
_ASYNC = ", more if a save was still being written"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _steps(steps: int, recipe: Recipe | None) -> str:
    """`steps` steps, with their time where the recipe publishes a step time."""
    step = recipe.step_seconds if recipe else None
    if step is None:
        return f"{steps} steps"
    return f"{steps} steps ({_duration(steps * step)} at {recipe.tokens_per_second_per_chip:,.0f} tokens/s/chip)"  # type: ignore[union-attr]


def _restarts(resilience: Resilience, by: str) -> str:
    codes = resilience.exit_codes
    on = f" on exit codes {_code_ranges(codes)} (any other fails it at once)" if codes else ""
    return f"up to {resilience.max_restarts} restarts{on}, {by}"


def _code_ranges(codes: list[int]) -> str:
    runs: list[list[int]] = []
    for code in codes:
        if runs and code == runs[-1][-1] + 1:
            runs[-1].append(code)
        else:
            runs.append([code])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def _expected(period: int, recipe: Recipe) -> str:
    """The expected time one failure costs: half a checkpoint period redone on average, and the restart."""
    redo = _steps(period // 2, recipe) if period >= 2 else "no step"
    return (
        f"  expected cost of one failure: {redo} redone on average, plus the restart: start-up, the restore and "
        "the step's compilation, which goodput measures on every run (badput startup, checkpoint, compilation)"
    )


def ray_training_lines(env: Environment) -> list[str]:
    """The Ray training cluster's recovery: restarts, the checkpoint a host saves, the most work lost, what a restart
    reads."""
    training = env.training
    if training is None or training.slice not in env.slices:
        return []
    spec = env.slices[training.slice]
    slice_ = spec.slice
    resilience = training.resilience
    recipe = named_recipe(training.recipe)
    by = (
        "each of every slice's Job from the newest save of any tier (JobSet failurePolicy)"
        if training.launcher == "jobset"
        else "each of the worker group from the newest complete checkpoint (Ray Train FailureConfig; a node's "
        "preemption counts apart, unbounded)"
    )
    launcher = "JobSet" if training.launcher == "jobset" else "Ray"
    head = (
        f"training ({launcher}, slice {training.slice}: {spec.count} x {slice_.name}), recipe "
        f"{training.recipe or '(none)'}: " + _restarts(resilience, by)
    )
    lines = [head]
    if recipe is None or recipe.engine != "maxtext":
        lines.append("  the checkpoint period and size are the recipe's: `make train RECIPE=` names one")
        return lines
    per_host = recipe.checkpoint_gb_per_host(slice_)
    lines.append(
        f"  state: {recipe.checkpoint_gb:.1f} GB a checkpoint ({recipe.params_billion} B parameters, weights and "
        f"AdamW's two moments), {per_host:.1f} GB per host ({slice_.hosts} hosts a slice)"
    )
    tier = resilience.local_tier if training.launcher == "jobset" else None
    if tier is None:
        bucket = f"gs://{env.bucket_name(training.bucket)}"
        lines.append(f"  checkpoints: {bucket} every {recipe.checkpoint_period} steps (MaxText checkpoint_period)")
        lines.append(f"  most work a failure can lose: {_steps(recipe.checkpoint_period, recipe)}{_ASYNC}")
        lines.append(f"  a restart reads {per_host:.1f} GB per host from the bucket")
        lines.append(_expected(recipe.checkpoint_period, recipe))
        return [*lines, *_slice_lost(env, recipe)]
    backups = f"gs://{env.bucket_name(tier.bucket)}"
    lines += [
        f"  tiers (GKE multi-tier checkpointing): each host's RAM disk ({tier.ram_disk}) every {tier.every_steps} "
        f"steps, copied to a peer host of another slice; {backups} every {tier.bucket_every_steps} steps",
        f"  most work a failure can lose: {_steps(tier.every_steps, recipe)}{_ASYNC}; "
        f"{_steps(tier.bucket_every_steps, recipe)} where every copy of a save in the cluster is lost",
        f"  a restart reads {per_host:.1f} GB per host from its own RAM disk, else a peer's, else the bucket",
        _expected(tier.every_steps, recipe),
    ]
    return [*lines, *_slice_lost(env, recipe, redo_period=tier.every_steps)]


def _slice_lost(env: Environment, recipe: Recipe, redo_period: int | None = None) -> list[str]:
    """What losing one of several slices costs in each mode: restart (a fixed count: the run waits for the slice,
    the others idle and paid for) and elastic (training.resilience.min_slices: the slices left go on); the
    in-cluster checkpoint tiers are a JobSet run's (training.launcher: jobset): its restart redoes half of
    `redo_period`, the RAM disk's, from a peer's copy of the lost slice's saves (docs/training.md)."""
    training = env.training
    assert training is not None
    spec = env.slices[training.slice]
    count, fewest = spec.count, training.resilience.min_slices
    if count < 2:
        return []
    node = env.node_price(training.slice).usd_per_hour
    slice_hour = None if node is None else spec.slice.hosts * node
    left = count - 1

    def slices(n: int) -> str:
        return f"{n} slice{'s' * (n > 1)}"

    def redone(n: int) -> str:
        """Half a checkpoint period redone on `n` slices, with its price where the recipe publishes a step time."""
        half = (redo_period or recipe.checkpoint_period) // 2
        seconds = half * recipe.step_seconds if recipe.step_seconds else None
        paid = "" if seconds is None or slice_hour is None else f", {n * slice_hour * seconds / 3600:,.2f} USD"
        return f"{_steps(half, recipe)} redone on average on {slices(n)}{paid}"

    waits, goes = ("waits", "goes") if left == 1 else ("wait", "go")
    idle = "" if slice_hour is None else f" ({left * slice_hour:,.2f} USD an hour)"
    mode = f"elastic, down to {slices(fewest)}" if fewest else f"restart, a fixed {slices(count)}"
    elastic = (
        f"the {slices(left)} left {goes} on at once: {redone(left)}, plus a restart there (start-up, the restore, "
        f"the step compiled for {slices(left)}), then {left}/{count} of the throughput until the slice is back; "
        "nothing waits idle"
        if fewest
        else "off (training.resilience.min_slices unset)"
    )
    return [
        f"  one of the {count} slices lost (training.resilience.min_slices: {mode}):",
        f"    restart: the {slices(left)} left {waits} idle and paid for{idle} until the lost one is back (GKE "
        f"recreates its nodes), then {redone(count)}, plus the restart",
        f"    elastic: {elastic}",
        "    local and peer checkpoint tiers: "
        + (
            "the lost slice's saves are on its peers' RAM disks: the restart restores from them, not the bucket"
            if redo_period
            else "a JobSet run's (training.launcher: jobset, resilience.local_tier); each mode here resumes from "
            "the bucket"
        ),
    ]


def gpu_training_lines(env: Environment) -> list[str]:
    """The GPU JobSet training's recovery: restarts, exit codes, checkpoints every step."""
    batch = env.batch
    if batch is None or batch.training is None:
        return []
    training = batch.training
    return [
        f"batch.training (JobSet, slice {training.slice}): "
        + _restarts(training.resilience, "each of every Job from the newest checkpoint (JobSet failurePolicy)"),
        f"  checkpoints: gs://{env.bucket_name(training.bucket)} every step (the canary trainer); most work a "
        "failure can lose: 1 step",
    ]


def recovery_lines(env: Environment) -> list[str]:
    """Every training job's recovery, for the review."""
    return [*ray_training_lines(env), *gpu_training_lines(env)]
