"""The trainer's command line.

  local   train through JaxTrainer on a private local Ray instance (CPU): the canary,
          or MaxText's own loop on a tiny recipe (--engine maxtext, in the engine environment)
  run     inside the cluster: train the plan `submit` sent (--plan, the JSON `args` prints: the recipe, the
          slice's shape, the mesh, MaxText's arguments); it reads no environment file, its image holds none
  args    print what `run` does for a recipe on an environment's slice (default: training.slice)
  submit  submit `run`, with its plan, to the Ray cluster's job API
  jobset  one process of a JobSet (GPU slices on GKE): join the JAX process group, train the canary
  slurm   one task of a Slurm job step: the same, its place in the group read from Slurm's environment
  vertex  one replica of a Vertex AI custom job: the same, from its CLUSTER_SPEC
  gce     one VM of a Compute Engine group: the same, from the group's hosts (PLATFORM_HOSTS)

Every command prints one JSON object as its last line of output.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
import time
from typing import Any

from infra.catalogue.accelerators import Slice
from infra.config import ConfigError, Environment, environment_file, parse_environment
from infra.config.base import did_you_mean
from workloads.constants import CHECKPOINT_MOUNT, DEFAULT_LOCAL_CKPT, MTC_MOUNT
from workloads.logs import configure
from workloads.trainer.discovery import ORCHESTRATORS, DiscoveryError, ProcessGroup, discover, from_jobset
from workloads.trainer.local import run_local, run_local_maxtext
from workloads.trainer.recipes import Recipe, RecipeError, get_recipe

LOG = logging.getLogger("workloads.trainer")


def _env(name: str) -> Environment:
    """The environment called `name` (in the environments folder: PLATFORM_ENVIRONMENTS_DIR), held to its model.
    The rules of the real systems held it at plan (`make plan` runs them over every file); `args` and `submit` read
    it on the machine that submits, never in the cluster."""
    return parse_environment(environment_file(name))


def run_process(group: ProcessGroup, *, steps: int, checkpoint_dir: str, mesh: dict[str, int]) -> dict[str, Any]:
    """One process of a multi-node job: join the JAX process group, train the canary to step `steps`.

    Every orchestrator says where the process stands its own way (`workloads.trainer.discovery`); from there
    the run is the same. `steps` is the run's last step, so a restarted job resumes from the latest checkpoint
    towards the same end. On CPU (JAX_PLATFORMS=cpu, used by the tests) the group's collectives go over gloo.
    """
    import jax

    from workloads.trainer.canary.train import CanaryConfig, train

    LOG.info(
        "process group",
        extra={
            "orchestrator": group.orchestrator,
            "coordinator": group.coordinator,
            "processes": group.processes,
            "process_id": group.process_id,
        },
    )
    if group.processes > 1:
        if os.environ.get("JAX_PLATFORMS") == "cpu":
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(group.coordinator, group.processes, group.process_id)
    try:
        summary = train(CanaryConfig(checkpoint_dir=checkpoint_dir, end_step=steps, mesh=mesh))
    finally:
        if group.processes > 1:
            jax.distributed.shutdown()
    return {
        **summary,
        "process_id": group.process_id,
        "processes": group.processes,
        "orchestrator": group.orchestrator,
    }


def _steps_arg(value: str) -> int:
    """--steps (make's STEPS=): a whole number of steps, at least 1."""
    try:
        steps = int(value)
    except ValueError:
        steps = 0
    if steps < 1 or str(steps) != value.strip():
        raise argparse.ArgumentTypeError(f"STEPS={value!r} (--steps): a whole number of steps, at least 1")
    return steps


def _slices_arg(value: str) -> int:
    """--slices (make's SLICES=): a whole number of slices, at least 1."""
    slices = int(value) if value.strip().isdigit() else 0
    if slices < 1:
        raise argparse.ArgumentTypeError(f"SLICES={value!r} (--slices): a whole number of slices, at least 1")
    return slices


def _min_slices_arg(value: str) -> int | None:
    """An elastic run's fewest slices; empty (make's MIN_SLICES unset) for a fixed count."""
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of slices (1 or more, at most --slices)")
    return int(value)


def _mesh_arg(text: str) -> dict[str, int]:
    sizes = dict(data=1, fsdp=-1, tensor=1)
    for part in filter(None, text.split(",")):
        key, _, value = part.partition("=")
        if key not in sizes:
            raise argparse.ArgumentTypeError(f"unknown mesh axis {key!r}; axes: data, fsdp, tensor")
        sizes[key] = int(value)
    return sizes


def _default_mesh(devices_per_slice: int) -> dict[str, int]:
    """A local run's mesh on each slice: tensor 2 where the devices split evenly, fsdp the rest (two workers of two
    devices: fsdp 2 x tensor 2 on one slice, tensor 2 on each of two)."""
    return {"data": 1, "fsdp": -1, "tensor": 2 if devices_per_slice % 2 == 0 else 1}


def _fitting_mesh(recipe: Recipe, slice_: Slice, count: int = 1) -> dict[str, int]:
    """The recipe's mesh on one of `count` slices, once the compiler's table (compiled.yaml) says it fits there."""
    from workloads.trainer.compiled import fit_problem

    mesh = recipe.mesh_for(slice_, count)
    problem = fit_problem(recipe, slice_)
    if problem:
        raise RecipeError(f"recipe {recipe.name!r} on slice {slice_.name}: {problem}")
    return mesh


def cluster_plan(args: argparse.Namespace) -> dict[str, Any]:
    """What `run` does for a recipe on an environment's slice (no Ray, no MaxText needed)."""
    from workloads.trainer.launcher import Placement
    from workloads.trainer.maxtext import local_tier_args, maxtext_args

    env = _env(args.env)
    if args.recipe is None:
        if env.training is None or env.training.recipe is None:
            raise RecipeError(f"environment {env.name!r} names no training.recipe; give --recipe (RECIPE=)")
        args.recipe = env.training.recipe
    if args.slice is None:
        if env.training is None:
            raise RecipeError(f"environment {env.name!r} has no training cluster (training:); give --slice (SLICE=)")
        args.slice = env.training.slice
    if args.slice not in env.slices:
        like = did_you_mean(args.slice, env.slices)
        raise RecipeError(
            f"environment {env.name!r} has no slice {args.slice!r}; slices: {', '.join(env.slices)}"
            + (f"; {like}" if like else "")
        )
    slice_, count = env.slices[args.slice].slice, env.slices[args.slice].count
    recipe = get_recipe(args.recipe)
    run_name = args.run_name or f"{recipe.name}-{env.name}"
    min_slices = _min_slices(env, args.slice, recipe)
    plan: dict[str, Any] = {
        "recipe": recipe.name,
        "engine": recipe.engine,
        "environment": env.name,
        "slice": slice_.name,
        "slices": count,
        # The slice's shape, so `run` in the cluster needs no environment file (its image holds none): a reshape or
        # a blue/green needs no image rebuild.
        "shape": {
            "accelerator": slice_.accelerator.name,
            "topology": slice_.topology,
            "nodes": slice_.hosts,
            "machine_type": slice_.machine_type,
        },
        "run_name": run_name,
        "min_slices": min_slices,
        "scaling_config": Placement(slice=slice_, slices=count, min_slices=min_slices).scaling_config_kwargs(),
        "mesh": _fitting_mesh(recipe, slice_, count),
        "storage_path": f"{CHECKPOINT_MOUNT}/ray",
        "max_failures": args.max_failures if args.max_failures is not None else _max_failures(env),
    }
    launcher = env.training.launcher if env.training is not None and env.training.slice == args.slice else "ray"
    plan["launcher"] = launcher
    if launcher == "jobset" and recipe.engine != "maxtext":
        raise RecipeError(
            f"environment {env.name!r} launches runs as JobSets (training.launcher: jobset), which run MaxText's own "
            f"trainer: recipe {recipe.name!r} is for the {recipe.engine} engine"
        )
    if recipe.engine == "maxtext":
        output = f"gs://{env.bucket_name(args.bucket)}/maxtext"
        goodput = env.training is not None and env.training.goodput

        def args_on(n: int | None = None) -> list[str]:
            return maxtext_args(
                recipe, slice_, run_name=run_name, base_output_directory=output, slices=count, goodput=goodput,
                on_slices=n,
            )  # fmt: skip

        plan["maxtext_args"] = args_on()
        tier = env.training.resilience.local_tier if env.training is not None and launcher == "jobset" else None
        if tier is not None:
            plan["maxtext_args"] += local_tier_args(tier.every_steps, tier.bucket_every_steps, MTC_MOUNT)
        if min_slices is not None:
            # An elastic run's attempt on fewer slices: MaxText's arguments for that count (dcn_data_parallelism).
            plan["maxtext_args_by_slices"] = {str(n): args_on(n) for n in range(min_slices, count)}
    return plan


def _min_slices(env: Environment, slice_key: str, recipe: Recipe) -> int | None:
    """The environment's elastic range for a run on its training slice (training.resilience.min_slices), checked
    against the recipe `make train` runs (another slice, or none set: a fixed count)."""
    from workloads.trainer.compiled import elastic_problem

    training = env.training
    if training is None or training.slice != slice_key or training.resilience.min_slices is None:
        return None
    spec = env.slices[slice_key]
    problem = elastic_problem(recipe, spec.slice, spec.count, training.resilience.min_slices, slice_key=slice_key)
    if problem:
        raise RecipeError(
            f"environment {env.name!r}: training.resilience.min_slices {training.resilience.min_slices} with recipe "
            f"{recipe.name!r}: {problem}"
        )
    return training.resilience.min_slices


def _max_failures(env: Environment) -> int:
    return env.training.resilience.max_restarts if env.training else 3


def _slice_of(shape: dict[str, Any]) -> Slice:
    """The slice a plan's shape names (what `args` printed and `submit` sent)."""
    from infra.catalogue.accelerators import gpu_slice, lookup, tpu_slice

    if lookup(shape["accelerator"]).kind == "gpu":
        return gpu_slice(shape["accelerator"], shape["nodes"], shape["machine_type"])
    return tpu_slice(shape["accelerator"], shape["topology"], shape["machine_type"])


def prepared(plan: dict[str, Any]) -> tuple[Slice, Any, dict[str, Any]]:
    """(the slice, the training loop, its configuration) of a plan `submit` sent: from the plan alone, no
    environment file."""
    from workloads.trainer.canary.train import CanaryConfig, latest_step
    from workloads.trainer.launcher import canary_loop
    from workloads.trainer.maxtext import maxtext_loop

    slice_, count = _slice_of(plan["shape"]), plan["slices"]
    recipe = get_recipe(plan["recipe"])
    if recipe.engine == "maxtext":
        return (
            slice_,
            maxtext_loop,
            {"argv": plan["maxtext_args"], "argv_by_slices": plan.get("maxtext_args_by_slices")},
        )
    ckpt = f"{CHECKPOINT_MOUNT}/canary/{plan['run_name']}"
    config = CanaryConfig(
        checkpoint_dir=ckpt,
        end_step=latest_step(ckpt) + recipe.steps,
        global_batch=recipe.per_device_batch_size * slice_.devices * count,
        seq_len=recipe.max_target_length,
        mesh=plan["mesh"],
        slices=count,
        min_slices=plan.get("min_slices"),
        checkpoint_every=recipe.checkpoint_period,
        peak_tflops_per_device=slice_.accelerator.peak_bf16_tflops / slice_.accelerator.devices_per_chip,
    )
    return slice_, canary_loop, config.to_dict()


def _plan_arg(text: str) -> dict[str, Any]:
    """--plan: the JSON `args` prints and `submit` sends."""
    try:
        plan = json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"--plan: not JSON ({err})") from err
    missing = [k for k in ("recipe", "shape", "slices", "run_name", "mesh", "storage_path", "max_failures") if
               k not in plan] if isinstance(plan, dict) else ["(an object)"]  # fmt: skip
    if missing:
        raise argparse.ArgumentTypeError(f"--plan: missing {', '.join(missing)} (give what `args` prints)")
    return plan


def _run_in_cluster(args: argparse.Namespace) -> dict[str, Any]:
    plan = args.plan
    if plan.get("launcher") == "jobset":
        from workloads.trainer.maxtext import jobset_host

        jobset_host(plan)  # this host's part of the run; MaxText raises on a failure, and the JobSet restarts the run
        return {**plan, "error": None}

    import ray

    from workloads.trainer.launcher import Placement, build_trainer

    slice_, loop, loop_config = prepared(plan)
    ray.init()
    trainer = build_trainer(
        loop,
        loop_config,
        placement=Placement(slice=slice_, slices=plan["slices"], min_slices=plan.get("min_slices")),
        run_name=plan["run_name"],
        storage_path=plan["storage_path"],
        max_failures=plan["max_failures"],
    )
    result = trainer.fit()
    return {**plan, "error": str(result.error) if result.error else None}


def run_command(plan: dict[str, Any]) -> list[str]:
    """The command that trains `plan` in the cluster (a JobSet pod's, or a RayJob's entrypoint). The run carries its
    plan: the image holds no environment file."""
    return ["python", "-m", "workloads.trainer", "run", "--plan", json.dumps(plan, sort_keys=True)]


def run_entrypoint(plan: dict[str, Any]) -> str:
    """run_command as one shell line (Ray's job API takes a string)."""
    return shlex.join(run_command(plan))


def _submit(args: argparse.Namespace) -> dict[str, Any]:
    from ray.job_submission import JobSubmissionClient

    plan = cluster_plan(args)  # refuse a bad recipe before anything is sent
    entrypoint = run_entrypoint(plan)
    client = JobSubmissionClient(args.address)
    job_id = client.submit_job(entrypoint=entrypoint, submission_id=args.submission_id)
    return {**plan, "entrypoint": entrypoint, "job_id": job_id, "address": args.address}


def parser() -> argparse.ArgumentParser:
    """The commands: `local` (JaxTrainer on local CPU workers), `run`, `args` and `submit` (a recipe on a slice),
    and one per orchestrator's process (`jobset`, `slurm`, `vertex`, `gce`: the canary)."""
    parser = argparse.ArgumentParser(
        prog="python -m workloads.trainer", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    local = sub.add_parser("local", help="train on local CPU workers through JaxTrainer (canary or maxtext)")
    local.add_argument("--engine", choices=("canary", "maxtext"), default="canary")
    local.add_argument("--recipe", default="maxtext-tiny", help="the maxtext engine's recipe (a small one)")
    local.add_argument("--kill-after-checkpoint", type=int, default=None, help=argparse.SUPPRESS)
    # A string default goes through `type` like a given value, so STEPS=abc is refused as the argument is.
    local.add_argument("--steps", type=_steps_arg, default=os.environ.get("STEPS") or "4", help="(make: STEPS=)")
    local.add_argument("--checkpoint-dir", default=os.environ.get("CKPT_DIR") or DEFAULT_LOCAL_CKPT)
    local.add_argument("--workers", type=int, default=2)
    local.add_argument("--devices-per-worker", type=int, default=2)
    local.add_argument(
        "--slices",
        type=_slices_arg,
        default=os.environ.get("SLICES") or "1",
        help="split the workers into this many slices, data parallel across them (make: SLICES=)",
    )
    local.add_argument(
        "--mesh",
        type=_mesh_arg,
        default=None,
        help="each slice's axis sizes, e.g. data=1,fsdp=2,tensor=2 (one may be -1: fill; default: tensor 2 where a "
        "slice has an even number of devices, fsdp the rest)",
    )
    local.add_argument("--max-failures", type=int, default=1)
    local.add_argument("--checkpoint-every", type=int, default=1, help="steps between checkpoints (and the last)")
    local.add_argument("--fail-at-step", type=int, default=None, help=argparse.SUPPRESS)
    local.add_argument(
        "--local-checkpoint-dir",
        default=None,
        help="on several slices, Orbax's emergency checkpointing: a local tier here (a RAM disk on a cluster)",
    )
    local.add_argument("--local-every", type=int, default=1, help="steps between local checkpoints")
    local.add_argument("--lose-host-at-step", type=int, default=None, help=argparse.SUPPRESS)
    local.add_argument("--compile-delay-s", type=float, default=0.0, help=argparse.SUPPRESS)
    local.add_argument(
        "--min-slices",
        type=_min_slices_arg,
        default=None,
        help="elastic: go on with as few as this many slices when a slice is lost, and grow back when it returns "
        "(a local node per slice; make: MIN_SLICES=)",
    )
    local.add_argument("--lose-slice-at-step", type=int, default=None, help=argparse.SUPPRESS)
    local.add_argument("--slice-back-after-s", type=float, default=None, help=argparse.SUPPRESS)
    run = sub.add_parser("run", help="train a recipe on a slice (inside the cluster): the plan `submit` sends")
    run.add_argument("--plan", type=_plan_arg, required=True, help="the JSON `args` prints")
    for name, helptext in (
        ("args", "print what `run` would do, MaxText arguments included"),
        ("submit", "submit `run` to the Ray job API"),
    ):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("--env", required=True)
        p.add_argument("--recipe", default=None, help="default: the environment's training.recipe")
        p.add_argument("--slice", default=None, help="the environment's slice key (default: training.slice)")
        p.add_argument("--bucket", default="checkpoints", help="the environment's checkpoint bucket key")
        p.add_argument("--run-name", default=None, help="stable across restarts; default <recipe>-<env>")
        p.add_argument(
            "--max-failures", type=int, default=None, help="default: the environment's training.max_failures"
        )
        if name == "submit":
            p.add_argument("--address", default=os.environ.get("RAY_ADDRESS", "http://127.0.0.1:8265"))
            p.add_argument("--submission-id", default=None)
    for name, helptext in (
        ("jobset", "one process of a multi-node JobSet (its index from JOB_COMPLETION_INDEX): train the canary"),
        ("slurm", "one task of a Slurm job step (SLURM_PROCID, SLURM_NTASKS, SLURM_STEP_NODELIST): train the canary"),
        ("vertex", "one replica of a Vertex AI custom job (CLUSTER_SPEC): train the canary"),
        ("gce", "one VM of a Compute Engine group (PLATFORM_HOSTS, its hostname): train the canary"),
    ):
        p = sub.add_parser(name, help=helptext)
        if name == "jobset":
            p.add_argument("--coordinator", required=True, help="host:port of process 0")
            p.add_argument("--processes", type=int, required=True)
            p.add_argument("--process-id", type=int, default=None, help="default: JOB_COMPLETION_INDEX")
        p.add_argument("--steps", type=int, required=True, help="the run's last step (a restart resumes towards it)")
        p.add_argument("--checkpoint-dir", required=True)
        p.add_argument("--mesh", type=_mesh_arg, default=_mesh_arg("data=1,fsdp=-1,tensor=1"))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser_ = parser()
    args = parser_.parse_args(argv)
    in_cluster = args.command in ("run", *ORCHESTRATORS)
    if in_cluster:
        # In the cluster: one JSON line per event, as Cloud Logging reads them.
        configure()
        LOG.info("trainer starting", extra={"command": args.command, "argv": sys.argv[1:]})
    started = time.monotonic()
    try:
        if args.command in ORCHESTRATORS:
            if args.command == "jobset" and args.process_id is not None:
                group = ProcessGroup(args.coordinator, args.processes, args.process_id, "jobset")
            elif args.command == "jobset":
                group = from_jobset(os.environ, coordinator=args.coordinator, processes=args.processes)
            else:
                group = discover(args.command, os.environ)
            out = run_process(group, steps=args.steps, checkpoint_dir=args.checkpoint_dir, mesh=args.mesh)
        elif args.command == "local":
            if args.steps < 1:
                parser_.error(f"--steps must be at least 1, got {args.steps}")
            if args.engine == "maxtext":
                out = run_local_maxtext(
                    recipe_name=args.recipe,
                    steps=args.steps,
                    checkpoint_dir=args.checkpoint_dir,
                    workers=args.workers,
                    devices_per_worker=args.devices_per_worker,
                    max_failures=args.max_failures,
                    kill_after_checkpoint=args.kill_after_checkpoint,
                )
            else:
                out = run_local(
                    steps=args.steps,
                    checkpoint_dir=args.checkpoint_dir,
                    workers=args.workers,
                    devices_per_worker=args.devices_per_worker,
                    mesh=args.mesh or _default_mesh(args.workers * args.devices_per_worker // args.slices),
                    max_failures=args.max_failures,
                    fail_at_step=args.fail_at_step,
                    checkpoint_every=args.checkpoint_every,
                    slices=args.slices,
                    local_checkpoint_dir=args.local_checkpoint_dir,
                    local_every=args.local_every,
                    lose_host_at_step=args.lose_host_at_step,
                    compile_delay_s=args.compile_delay_s,
                    min_slices=args.min_slices,
                    lose_slice_at_step=args.lose_slice_at_step,
                    slice_back_after_s=args.slice_back_after_s,
                )
        elif args.command == "args":
            out = cluster_plan(args)
        elif args.command == "run":
            out = _run_in_cluster(args)
        else:
            out = _submit(args)
    except (ConfigError, RecipeError, DiscoveryError, ValueError) as err:
        if in_cluster:
            LOG.error("trainer refused", extra={"error": str(err)})
        print(f"error: {err}", file=sys.stderr)
        return 2
    if in_cluster:
        LOG.info("trainer done", extra={"seconds": round(time.monotonic() - started, 1), "result": out})
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
