"""The canary's training loop. Runs the same in a plain process and inside a Ray Train worker."""

from __future__ import annotations

import json
import logging
import os
import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from workloads.trainer.canary import data
from workloads.trainer.canary.model import ModelConfig
from workloads.trainer.goodput import ATTEMPTS_FILE

LOG = logging.getLogger("workloads.trainer.canary")
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "last_run.json"
# The model's shape, next to its checkpoints, so a server builds the same model.
MODEL_FILE = "model.json"


@dataclass(frozen=True)
class CanaryConfig:
    """Everything one canary run needs; travels to Ray workers as a dict."""

    checkpoint_dir: str
    end_step: int
    model: ModelConfig = field(default_factory=ModelConfig)
    global_batch: int = 16
    seq_len: int = 128
    learning_rate: float = 3e-3
    warmup_steps: int = 2
    checkpoint_every: int = 1
    # Orbax's emergency checkpointing (on several slices): every process also saves its part of the state every
    # `local_every` steps under `<local_checkpoint_dir>/process-<index>` (a host's RAM disk on a cluster); a restart
    # restores from the newest complete checkpoint of either tier, a local one broadcast from a slice that has it.
    local_checkpoint_dir: str | None = None
    local_every: int = 1
    # One slice's mesh; `slices` of them split the data axis (workloads/trainer/mesh.py).
    mesh: dict[str, int] = field(default_factory=lambda: {"data": 1, "fsdp": -1, "tensor": 1})
    slices: int = 1
    # Elastic: an attempt may run on as few as this many slices (Ray Train sizes the worker group to the slices
    # whose hosts are up, and each worker learns the count from MEGASCALE_NUM_SLICES); the global batch stays, so
    # every step is the same math on any count.
    min_slices: int | None = None
    seed: int = 0
    peak_tflops_per_device: float | None = None
    # Fault injection for tests: the last process (on several slices: every process of the last slice, a lost
    # slice) exits hard once, right after the checkpoint of this step is written (a marker file makes it once): a
    # crash at `fail_at_step`; at `lose_host_at_step` a lost host, whose local checkpoints go with it (its RAM disk).
    fail_at_step: int | None = None
    lose_host_at_step: int | None = None
    # ... and the last process starts compiling its step this many seconds after the others (a slow host).
    compile_delay_s: float = 0.0
    # ... and an attempt on fewer slices than `slices` (elastic), once it has trained this many steps, waits to be
    # stopped (the run growing back when its slice returns), at most HOLD_S, instead of racing it to the end.
    hold_fewer_after: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> CanaryConfig:
        return cls(**{**raw, "model": ModelConfig(**raw["model"])})


def _lost(process: int, processes: int, slices: int) -> bool:
    """Whether fault injection stops `process`: the last process, or on several slices the last slice's."""
    return process >= processes - (processes // slices if slices > 1 else 1)


# How long a process waits for the others to compile the step (a slow host, a busy CI machine) before it fails.
COMPILED_BARRIER_TIMEOUT_S = 600


def _all_compiled() -> None:
    """Wait until every process of the job has compiled the step. The step's first cross-host collective sets up
    its communicator with a fixed 30 s deadline (XLA's Gloo key-value store on CPU), so a process that loads its
    step from the compilation cache must not run it while another still compiles; the coordination service's
    barrier waits with a deadline of its own. One process: nothing to wait for."""
    import orbax.checkpoint as ocp

    ocp.multihost.get_barrier_sync_fn()(key="canary-step-compiled", timeout_ms=COMPILED_BARRIER_TIMEOUT_S * 1000)


def _path_of(keys: tuple[Any, ...]) -> str:
    parts = []
    for k in keys:
        parts.append(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))))
    return "/".join(parts)


def _emergency_manager(config: CanaryConfig, mesh: Any, target: Any, persistent: Path) -> Any:
    """Orbax's emergency CheckpointManager: the persistent tier (the bucket) every `checkpoint_every` steps, written by
    the first slice; the local tier every `local_every` steps, written by the others, each process to its own
    folder. The mesh's first axis (data, the slices stacked on it) tells replicas apart."""
    import jax
    from absl import flags
    from orbax.checkpoint import multihost
    from orbax.checkpoint.experimental.emergency import checkpoint_manager as emergency

    # Orbax's emergency restore reads absl flags of its own (as MaxText's runs, which parse theirs); their
    # defaults are what this trainer wants.
    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    multihost.initialize_runtime_to_distributed_ids()
    multihost.initialize_distributed_to_device_ids()
    assert config.local_checkpoint_dir is not None
    local = Path(config.local_checkpoint_dir).absolute() / f"process-{jax.process_index()}"
    local.mkdir(parents=True, exist_ok=True)
    return emergency.CheckpointManager(
        local,
        persistent,
        global_mesh=mesh,
        abstract_state=target,
        options=emergency.CheckpointManagerOptions(
            local=emergency.LocalCheckpointOptions(save_interval_steps=config.local_every, max_to_keep=2),
            persistent=emergency.PersistentCheckpointOptions(
                save_interval_steps=config.checkpoint_every, max_to_keep=2
            ),
            enable_async_checkpointing=False,
        ),
    )


def _announced_slices(config: CanaryConfig) -> int:
    """The slices this attempt runs on: in a multislice job each worker learns the count as JAX does on TPU
    (MEGASCALE_NUM_SLICES); an elastic run's attempt runs on the slices it was given, within its range."""
    announced = int(os.environ.get("MEGASCALE_NUM_SLICES", config.slices))
    fewest = config.min_slices or config.slices
    if not fewest <= announced <= config.slices:
        allowed = f"{fewest} to {config.slices}" if fewest < config.slices else str(config.slices)
        raise ValueError(f"the job runs {announced} slices (MEGASCALE_NUM_SLICES), the config {allowed}")
    return announced


def train(config: CanaryConfig, report: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Train from the latest checkpoint in `config.checkpoint_dir` up to `config.end_step`.

    Returns the run's summary (identical on every process). Process 0 appends
    one JSON line per step to `<checkpoint_dir>/metrics.jsonl`.
    """
    began_at = time.time()  # this attempt's startup begins (imports, the mesh, the restore)
    import jax
    import jax.numpy as jnp
    import optax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from workloads.trainer.canary.model import Decoder
    from workloads.trainer.mesh import AXES, BATCH_SPEC, multislice_devices, param_spec

    devices = jax.devices()
    announced = _announced_slices(config)
    hold_after = config.hold_fewer_after if announced < config.slices else None
    config = replace(config, slices=announced)
    grid = multislice_devices(devices, config.slices, **config.mesh)
    mesh = Mesh(grid, AXES)
    model = Decoder(config.model)
    schedule = optax.linear_schedule(0.0, config.learning_rate, max(config.warmup_steps, 1))
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, weight_decay=0.01))

    def init(rng: jax.Array) -> dict[str, Any]:
        params = model.init(rng, jnp.zeros((1, config.seq_len), jnp.int32))["params"]
        return {"params": params, "opt_state": tx.init(params), "step": jnp.zeros((), jnp.int32)}

    abstract = jax.eval_shape(init, jax.random.key(config.seed))

    def sharding_of(keys: tuple[Any, ...], leaf: Any) -> NamedSharding:
        spec = () if leaf.ndim == 0 else param_spec(_path_of(keys))
        return NamedSharding(mesh, PartitionSpec(*spec))

    shardings = jax.tree_util.tree_map_with_path(sharding_of, abstract)
    batch_sharding = NamedSharding(mesh, PartitionSpec(*BATCH_SPEC))
    replicated = NamedSharding(mesh, PartitionSpec())

    checkpoint_dir = Path(config.checkpoint_dir).absolute()
    target = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings)
    manager = _checkpoint_manager(config, mesh, target, checkpoint_dir / "state")
    start = int(manager.latest_step() or 0)
    if start:
        state = _restore(config, manager, start, target)
    else:
        state = jax.jit(init, out_shardings=shardings)(jax.random.key(config.seed))

    step_fn = _step_function(model, tx, (shardings, batch_sharding), (shardings, replicated))
    text = data.corpus()
    is_writer = jax.process_index() == 0
    metrics_path = checkpoint_dir / METRICS_FILE
    if is_writer:
        _write_start(config, checkpoint_dir, began_at, start)
    step_times: list[float] = []
    losses: list[float] = []
    compiled = None
    for step in range(start, config.end_step):
        host = data.batch(step, seed=config.seed, global_batch=config.global_batch, seq_len=config.seq_len, text=text)
        tokens = jax.make_array_from_callback(host.shape, batch_sharding, host.__getitem__)
        began = time.perf_counter()
        if compiled is None:  # this attempt's first step: compiled (or loaded from the cache) here
            # A slow compiler on one host, at the run's first compile (a resumed attempt loads it from the cache).
            if config.compile_delay_s and start == 0 and _lost(jax.process_index(), jax.process_count(), 1):
                time.sleep(config.compile_delay_s)
            compiled = step_fn.lower(state, tokens).compile()
            _all_compiled()
        state, loss_value = compiled(state, tokens)
        loss = float(loss_value)  # waits for the step
        elapsed = time.perf_counter() - began
        done = step + 1
        step_times.append(elapsed)
        losses.append(loss)
        # `time`: when the step ended, seconds since the epoch; the run's goodput is read from these
        # (workloads/trainer/goodput.py). Written before the step's checkpoint: a worker stopped after the save
        # (Ray's elastic resize, a lost host) would otherwise leave a saved step, which no attempt trains again,
        # with no record.
        record = {"step": done, "loss": loss, "step_time_s": elapsed, "time": round(time.time(), 3)}
        if is_writer:
            _write_step(metrics_path, record, config.end_step)
        saved = _save(config, manager, state, done)
        if saved > 0.001:
            record = {**record, "checkpoint_s": round(saved, 3), "time": round(time.time(), 3)}
            if is_writer:
                _write_saved(metrics_path, record)
        if report is not None:
            report(record)
        if done in (config.fail_at_step, config.lose_host_at_step):
            _fail_once(config, done, checkpoint_dir, jax.process_index(), jax.process_count())
        if hold_after is not None and done - start == hold_after:
            time.sleep(HOLD_S)  # stopped by the resize; else trains on
    manager.wait_until_finished()
    manager.close()

    summary = _summary(config, start, losses, step_times, checkpoint_dir, len(devices), grid.shape)
    if is_writer:
        (checkpoint_dir / SUMMARY_FILE).write_text(json.dumps(summary) + "\n")
    return summary


def _summary(
    config: CanaryConfig,
    start: int,
    losses: list[float],
    step_times: list[float],
    checkpoint_dir: Path,
    devices: int,
    shape: tuple[int, ...],
) -> dict[str, Any]:
    """The run's summary: its steps, first and last loss, speed, devices, processes, mesh and slices."""
    import jax

    from workloads.trainer.mesh import AXES

    return {
        "start_step": start,
        "end_step": config.end_step,
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "checkpoint_dir": str(checkpoint_dir),
        **_speed(config, step_times, devices),
        "devices": devices,
        "processes": jax.process_count(),
        "mesh": dict(zip(AXES, shape, strict=True)),
        "slices": config.slices,
        "params": config.model.param_count(),
    }


def _step_function(model: Any, tx: Any, in_shardings: tuple[Any, Any], out_shardings: tuple[Any, Any]) -> Any:
    """One training step (next-token cross entropy, the optimizer's update), jitted with the state donated."""
    import jax
    import optax

    def loss_fn(params: Any, tokens: jax.Array) -> jax.Array:
        logits = model.apply({"params": params}, tokens[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    def train_step(state: dict[str, Any], tokens: jax.Array) -> tuple[dict[str, Any], jax.Array]:
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], tokens)
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        return {"params": params, "opt_state": opt_state, "step": state["step"] + 1}, loss

    return jax.jit(train_step, in_shardings=in_shardings, out_shardings=out_shardings, donate_argnums=0)


def _checkpoint_manager(config: CanaryConfig, mesh: Any, target: Any, directory: Path) -> Any:
    """The run's checkpoint manager: Orbax's emergency (multi-tier) one where a local tier is configured, else the
    plain one on the bucket, keeping the last two steps."""
    import orbax.checkpoint as ocp

    if config.local_checkpoint_dir:
        return _emergency_manager(config, mesh, target, directory)
    return ocp.CheckpointManager(
        directory, options=ocp.CheckpointManagerOptions(max_to_keep=2, enable_async_checkpointing=False)
    )


def _restore(config: CanaryConfig, manager: Any, step: int, target: Any) -> Any:
    """The state saved at `step`, sharded as `target`."""
    import orbax.checkpoint as ocp

    if config.local_checkpoint_dir:
        return manager.restore(step).state
    return manager.restore(step, args=ocp.args.StandardRestore(target))


def _save(config: CanaryConfig, manager: Any, state: Any, done: int) -> float:
    """Saves the state after step `done` where the run's interval says so: the seconds it took."""
    import orbax.checkpoint as ocp

    saving = time.perf_counter()
    if config.local_checkpoint_dir:  # the manager saves each tier on its own interval
        # The run's last step goes to both tiers, as the plain manager keeps its last step.
        manager.save(done, args=ocp.args.Composite(state=ocp.args.PyTreeSave(state)), force=done == config.end_step)
        manager.wait_until_finished()
    elif done % config.checkpoint_every == 0 or done == config.end_step:
        manager.save(done, args=ocp.args.StandardSave(state))
    return time.perf_counter() - saving


# How long an attempt on fewer slices waits to be stopped for the run to grow back (CanaryConfig.hold_fewer_after).
HOLD_S = 300.0


def _write_start(config: CanaryConfig, checkpoint_dir: Path, began_at: float, start: int) -> None:
    """The model's shape beside its checkpoints, and when this attempt started, for its startup time
    (workloads/trainer/goodput.py)."""
    (checkpoint_dir / MODEL_FILE).write_text(json.dumps(asdict(config.model), sort_keys=True) + "\n")
    with (checkpoint_dir / ATTEMPTS_FILE).open("a") as f:
        start_event = {"event": "start", "time": round(began_at, 3), "start_step": start, "slices": config.slices}
        f.write(json.dumps(start_event) + "\n")


def _write_step(metrics_path: Path, record: dict[str, Any], end_step: int) -> None:
    """The step's line in metrics.jsonl, and in the job's log."""
    with metrics_path.open("a") as f:
        f.write(json.dumps(record) + "\n")
    # In a job, one JSON line per step (workloads/logs.py): Cloud Logging's jsonPayload.step, .loss.
    # (Not `time`: Cloud Logging takes a payload's `time` as the entry's timestamp, in its own formats.)
    LOG.info("step", extra={**{k: v for k, v in record.items() if k != "time"}, "end_step": end_step})


def _write_saved(metrics_path: Path, record: dict[str, Any]) -> None:
    """The step's checkpoint: `{"saved": step, "checkpoint_s", "time"}` in metrics.jsonl (goodput.read_records
    folds it into the step's record), and in the job's log."""
    saved = {"saved": record["step"], "checkpoint_s": record["checkpoint_s"], "time": record["time"]}
    with metrics_path.open("a") as f:
        f.write(json.dumps(saved) + "\n")
    LOG.info("checkpoint", extra={"step": record["step"], "checkpoint_s": record["checkpoint_s"]})


def _fail_once(config: CanaryConfig, done: int, checkpoint_dir: Path, process: int, processes: int) -> None:
    """The injected failure (config.fail_at_step, lose_host_at_step): the processes of the lost slice exit once,
    leaving a marker so the restarted attempt goes on; a lost host's local checkpoints are lost with it."""
    if not _lost(process, processes, config.slices):
        return
    marker = checkpoint_dir / f".failed-at-{done}{f'-process-{process}' * (config.slices > 1)}"
    if marker.exists():
        return
    marker.touch()
    if done == config.lose_host_at_step and config.local_checkpoint_dir:
        shutil.rmtree(Path(config.local_checkpoint_dir) / f"process-{process}")
    os._exit(17)


def _speed(config: CanaryConfig, step_times: list[float], devices: int) -> dict[str, Any]:
    """Tokens per second, the median step time, TFLOP/s per device and the MFU of an attempt's steps (the first step
    of a process includes compilation, so it counts only when it is the only one)."""
    tokens_per_step = config.global_batch * config.seq_len
    flops_per_step = config.model.flops_per_token(config.seq_len) * tokens_per_step
    steady = step_times[1:] or step_times
    step_time = statistics.median(steady) if steady else float("nan")
    tflops_per_device = flops_per_step / step_time / devices / 1e12 if steady else float("nan")
    peak = config.peak_tflops_per_device
    return {
        "tokens_per_s": tokens_per_step / step_time if steady else None,
        "step_time_s": step_time,
        "tflops_per_device": tflops_per_device,
        "mfu": tflops_per_device / peak if peak else None,
    }


def read_metrics(checkpoint_dir: str | Path) -> dict[int, dict[str, Any]]:
    """Per-step records of every run in `checkpoint_dir`; a step redone after a failure keeps its last record."""
    path = Path(checkpoint_dir) / METRICS_FILE
    if not path.exists():
        return {}
    records: dict[int, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if "step" in record:  # not a checkpoint's line (`saved`)
            records[record["step"]] = record
    return records


def latest_step(checkpoint_dir: str | Path, local_checkpoint_dir: str | Path | None = None) -> int:
    """The step of the newest complete checkpoint, 0 if none (no JAX needed): in the bucket's folder, or in any
    process's local folder (emergency checkpointing)."""
    folders = [Path(checkpoint_dir) / "state"]
    if local_checkpoint_dir is not None:
        folders += sorted(Path(local_checkpoint_dir).glob("process-*"))
    steps = [int(p.name) for f in folders if f.exists() for p in f.iterdir() if p.is_dir() and p.name.isdigit()]
    return max(steps, default=0)
