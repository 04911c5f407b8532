"""Training on this machine's CPU through Ray Train's `JaxTrainer`, as `make train-local` runs it: the canary
(`run_local`, on one or several slices of CPU workers, elastic with `min_slices`) or MaxText's own loop
(`run_local_maxtext`, in the engine environment)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from workloads.trainer.progress import StepProgress, say
from workloads.trainer.recipes import get_recipe


def run_local(
    *,
    steps: int,
    checkpoint_dir: str,
    workers: int,
    devices_per_worker: int,
    mesh: dict[str, int],
    max_failures: int = 1,
    fail_at_step: int | None = None,
    checkpoint_every: int = 1,
    slices: int = 1,
    local_checkpoint_dir: str | None = None,
    local_every: int = 1,
    lose_host_at_step: int | None = None,
    compile_delay_s: float = 0.0,
    min_slices: int | None = None,
    lose_slice_at_step: int | None = None,
    slice_back_after_s: float | None = None,
) -> dict[str, Any]:
    """Train the canary `steps` more steps on local CPU workers; return the run's summary. `slices`: the workers
    split into that many slices of `mesh` each, data parallel across them (a multislice job); with
    `local_checkpoint_dir`, Orbax's emergency checkpointing keeps a local tier there every `local_every` steps.
    `min_slices`: elastic, on a local cluster with a node per slice: a slice lost (its node removed once step
    `lose_slice_at_step` is saved) shrinks the run to the slices left, which resume from the bucket's newest
    checkpoint; a node added back `slice_back_after_s` later grows it again (`_elastic_run`), while the attempt on
    the slices left waits after 2 steps (so the growth does not race the run's end)."""
    from workloads.trainer.canary.train import METRICS_FILE, CanaryConfig, latest_step
    from workloads.trainer.launcher import Placement, build_trainer, canary_loop, local_ray, local_ray_slices
    from workloads.trainer.mesh import mesh_shape

    ckpt = Path(checkpoint_dir).absolute()
    ckpt.mkdir(parents=True, exist_ok=True)
    local = str(Path(local_checkpoint_dir).absolute()) if local_checkpoint_dir else None
    start = latest_step(ckpt, local)
    config = CanaryConfig(
        checkpoint_dir=str(ckpt),
        end_step=start + steps,
        mesh=mesh,
        slices=slices,
        min_slices=min_slices,
        fail_at_step=fail_at_step,
        checkpoint_every=checkpoint_every,
        local_checkpoint_dir=local,
        local_every=local_every,
        lose_host_at_step=lose_host_at_step,
        compile_delay_s=compile_delay_s,
        # The slice given back: the attempt on the slices left trains 2 steps, then waits for the run to grow.
        hold_fewer_after=2 if slice_back_after_s is not None else None,
    )
    elastic = min_slices is not None and min_slices < slices
    if elastic and local:
        raise ValueError(
            "an elastic run resumes from the bucket's checkpoints on the slices left; Orbax's local tier "
            "(--local-checkpoint-dir) restores only onto the slice count that saved it"
        )
    placement = Placement(
        cpu_workers=workers,
        devices_per_cpu_worker=devices_per_worker,
        slices=slices,
        min_slices=min_slices,
        resize_every_s=ELASTIC_RESIZE_LOCAL_S,
    )
    mesh_shape(placement.devices // slices, **mesh)  # a mesh that does not fit fails here, not in a worker
    started = time.monotonic()
    # JAX's persistent compilation cache beside the checkpoints (the workers inherit the variable through Ray): a
    # rerun, and a worker group Ray restarts after a failure, load the compiled step instead of compiling it again.
    # JAX_COMPILATION_CACHE_DIR, when set, wins.
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(ckpt / "jax-compilation-cache"))
    across = f" in {slices} slices" if slices > 1 else ""
    say(f"starting a local Ray instance for {workers} CPU workers x {devices_per_worker} devices{across}", started)
    cluster = local_ray_slices(slices, placement.per_slice) if elastic else None
    if cluster is None:
        local_ray(num_cpus=workers)
    trainer = build_trainer(
        canary_loop,
        config.to_dict(),
        placement=placement,
        run_name="canary-local",
        storage_path=str(ckpt / "ray"),
        max_failures=max_failures,
    )
    say(f"training the canary, steps {start + 1}-{config.end_step} (the first one compiles)", started)
    with StepProgress(lambda: [ckpt / METRICS_FILE], last_step=config.end_step):
        if elastic:
            _elastic_run(
                trainer, cluster, placement.per_slice, ckpt / METRICS_FILE, lose_slice_at_step, slice_back_after_s,
                started,
            )  # fmt: skip
        else:
            trainer.fit()
    return _finished(ckpt, start, config.end_step, workers, started)


def _finished(ckpt: Path, start: int, end_step: int, workers: int, started: float) -> dict[str, Any]:
    """What a local canary run says when it ends, and its summary: its steps, losses, goodput and badput."""
    from workloads.trainer.canary.train import METRICS_FILE, SUMMARY_FILE, read_metrics
    from workloads.trainer.goodput import goodput, read_records

    say(f"done: checkpoints in {ckpt}", started)
    measured = goodput(read_records(ckpt / METRICS_FILE))
    say(f"{measured.line()} (every run in {ckpt / METRICS_FILE})", started)
    say(
        f"next: make plot CKPT_DIR={ckpt} (loss, step time, goodput), make serve-local CKPT_DIR={ckpt}, or "
        f"make train-local STEPS=<more> CKPT_DIR={ckpt} to resume",
        started,
    )
    records = read_metrics(ckpt)
    last = json.loads((ckpt / SUMMARY_FILE).read_text())
    missing = [s for s in range(start + 1, end_step + 1) if s not in records]
    if missing:
        raise RuntimeError(f"steps {missing} were never completed")
    return {
        **last,
        "start_step": start,
        "end_step": end_step,
        "loss_first": records[start + 1]["loss"],
        "loss_last": records[end_step]["loss"],
        "workers": workers,
        "goodput": round(measured.final, 3),
        "badput_s": {cause: round(seconds, 2) for cause, seconds in measured.badput.items()},
    }


# How often a local elastic run looks for slices that came back (Ray's default, 60 s, is a cluster's).
ELASTIC_RESIZE_LOCAL_S = 2.0


def _elastic_run(
    trainer: Any,
    cluster: Any,
    per_slice: int,
    metrics: Path,
    lose_at: int | None,
    back_after_s: float | None,
    started: float,
) -> None:
    """`trainer.fit()` on a local cluster with a node per slice, losing one (its node removed once step `lose_at`
    is saved: its `saved` line in `metrics`) and giving one back `back_after_s` after the attempt on the slices
    left has trained a step.
    Nodes come and go on this thread (Ray's Cluster installs signal handlers), so the fit runs on another."""
    import threading

    failed: list[BaseException] = []

    def fit() -> None:
        try:
            trainer.fit()
        except BaseException as err:  # re-raised on this thread
            failed.append(err)

    running = threading.Thread(target=fit, name="fit")
    running.start()
    if lose_at is not None:
        while running.is_alive() and not any(r.get("saved", 0) >= lose_at for r in _records(metrics)):
            time.sleep(0.5)
        if running.is_alive():
            say(f"losing a slice after step {lose_at}: its node removed", started)
            cluster.remove_node(_a_slice_node(cluster))
            if back_after_s is not None:
                while running.is_alive() and not _trained_on_fewer(metrics):
                    time.sleep(0.5)
                running.join(timeout=back_after_s)
                if running.is_alive():
                    say("the slice back: a node added", started)
                    cluster.add_node(num_cpus=per_slice)
    running.join()
    import ray

    ray.shutdown()  # before the nodes go: Ray refuses to remove the node this driver is connected to
    cluster.shutdown()
    if failed:
        raise failed[0]


def _a_slice_node(cluster: Any) -> Any:
    """A slice's node this driver is not connected to (on one machine, `ray.init` may pick any node's raylet)."""
    import ray

    mine = ray._private.worker.global_worker.node._raylet_socket_name
    return next(n for n in cluster.worker_nodes if n._raylet_socket_name != mine)


def _records(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError):
        return []


def _trained_on_fewer(metrics: Path) -> bool:
    """Whether an attempt on fewer slices than the first has started and trained a step since."""
    from workloads.trainer.goodput import ATTEMPTS_FILE

    starts = [r for r in _records(metrics.with_name(ATTEMPTS_FILE)) if r.get("event") == "start"]
    fewer = [r for r in starts if r.get("slices", 0) < starts[0].get("slices", 0)]
    return bool(fewer) and any(r.get("time", 0) > fewer[-1]["time"] for r in _records(metrics))


def run_local_maxtext(
    *,
    recipe_name: str,
    steps: int,
    checkpoint_dir: str,
    workers: int,
    devices_per_worker: int,
    max_failures: int = 1,
    kill_after_checkpoint: int | None = None,
) -> dict[str, Any]:
    """Train `recipe_name` `steps` more steps with MaxText's own loop on local CPU workers; return a summary.

    The arguments are `maxtext_args` for the recipe with the mesh sized to the
    local devices, exactly as on a slice; only a local metrics file per worker
    process is added (MaxText writes each step's loss there) to report the
    losses and, after a restart, the step each attempt resumed from.
    """
    from workloads.trainer.launcher import Placement, build_trainer, local_ray
    from workloads.trainer.maxtext import checkpoint_steps, maxtext_args, maxtext_loop, read_attempts

    recipe = get_recipe(recipe_name)
    placement = Placement(cpu_workers=workers, devices_per_cpu_worker=devices_per_worker)
    base = Path(checkpoint_dir).absolute()
    run_name = f"{recipe.name}-local"
    checkpoints = base / run_name / "checkpoints"
    done = checkpoint_steps(checkpoints)
    start = done[-1] + 1 if done else 0
    end = start + steps  # MaxText trains steps [start, end) and checkpoints the last one
    argv = maxtext_args(recipe, placement.devices, run_name=run_name, base_output_directory=str(base), steps=end)
    metrics_dir = base / f"{run_name}-metrics" / f"from-{start:06d}"
    shutil.rmtree(metrics_dir, ignore_errors=True)
    metrics_dir.mkdir(parents=True)
    loop_config: dict[str, Any] = {"argv": argv, "checkpoint_dir": str(checkpoints), "metrics_dir": str(metrics_dir)}
    if kill_after_checkpoint is not None:
        marker = metrics_dir / "killed"
        loop_config["kill_after_checkpoint"] = {"step": kill_after_checkpoint, "marker": str(marker)}
    started = time.monotonic()
    say(f"starting a local Ray instance for {workers} CPU workers x {devices_per_worker} devices", started)
    local_ray(num_cpus=workers)
    trainer = build_trainer(
        maxtext_loop,
        loop_config,
        placement=placement,
        run_name=run_name,
        storage_path=str(base / "ray"),
        max_failures=max_failures,
    )
    say(
        f"training {recipe.name} with MaxText, steps {start}-{end - 1} (importing MaxText and compiling first)", started
    )
    with StepProgress(lambda: sorted(metrics_dir.glob("rank0-pid*.jsonl")), last_step=end - 1):
        result = trainer.fit()
    say(f"done: checkpoints in {checkpoints}", started)
    if result.error:
        raise RuntimeError(f"MaxText run failed: {result.error}")
    attempts = read_attempts(metrics_dir)
    losses = {step: loss for attempt in attempts for step, loss in attempt.items()}
    missing = [s for s in range(start, end) if s not in losses]
    if missing:
        raise RuntimeError(f"steps {missing} were never completed")
    if end - 1 not in checkpoint_steps(checkpoints):
        raise RuntimeError(f"no checkpoint of the last step {end - 1} under {checkpoints}")
    return {
        "engine": "maxtext",
        "recipe": recipe.name,
        "start_step": start,
        "end_step": end - 1,
        "loss_first": losses[start],
        "loss_last": losses[end - 1],
        "attempts": [{"first_step": min(a), "last_step": max(a)} for a in attempts],
        "checkpoint_dir": str(checkpoints),
        "checkpoints": checkpoint_steps(checkpoints),
        "workers": workers,
        "devices": placement.devices,
        "maxtext_args": argv,
    }
