"""Build Ray Train's `JaxTrainer` from a `Slice` (on TPU/GPU) or for local CPU workers.

On a slice, the scaling config is the slice's own (`Slice.ray_scaling_config`):
one worker per host, the slice's topology and accelerator type, all chips of
a host per worker, SPREAD placement; on N slices, N times the workers, and
Ray Train reserves N whole slices and gives each worker its MEGASCALE_*
settings (ray/train/v2/jax/config.py). Locally, N CPU workers each see several
XLA host devices and join one JAX process group (gloo collectives), as the
hosts of a TPU slice do, so the mesh is really sharded across processes; with
`slices`, the workers are split into that many groups, each told its slice as
Ray tells a TPU worker (MEGASCALE_NUM_SLICES, MEGASCALE_SLICE_ID).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from infra.catalogue.accelerators import Slice
from workloads.constants import TPU_WORKER_ENV


def _init_cpu_process_group(coordinator: str, num_processes: int, process_id: int) -> None:
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator, num_processes, process_id)


def _set_slice(num_slices: int, slice_id: int) -> None:
    """What Ray Train's JAX backend sets on each worker of a multislice TPU job (its slice and the count)."""
    os.environ["MEGASCALE_NUM_SLICES"] = str(num_slices)
    os.environ["MEGASCALE_SLICE_ID"] = str(slice_id)


def _shutdown_process_group() -> None:
    import jax

    jax.distributed.shutdown()


def _cpu_jax_config(per_slice: int | None = None) -> Any:
    """A JaxConfig whose backend forms one JAX process group over CPU workers, in slices of `per_slice` workers
    (None: one slice); an elastic run's worker group holds as many whole slices as Ray gave it, and each worker
    is told the count of this attempt.

    Ray's own JAX backend does this only for TPU and GPU workers; off an
    accelerator it would leave every worker an independent replica.
    """
    import ray
    from ray.train._internal.utils import get_address_and_port
    from ray.train.backend import Backend
    from ray.train.v2.jax import JaxConfig

    class _CpuBackend(Backend):
        def on_start(self, worker_group: Any, backend_config: Any) -> None:
            if per_slice is not None:
                slices = len(worker_group) // per_slice
                ray.get(
                    [
                        worker_group.execute_single_async(i, _set_slice, slices, i // per_slice)
                        for i in range(len(worker_group))
                    ]
                )
            if len(worker_group) == 1:
                # One process owns every device already; a process group would
                # route its collectives through gloo (about 3x slower here).
                return
            address, port = worker_group.execute_single(0, get_address_and_port)
            ray.get(
                [
                    worker_group.execute_single_async(
                        i, _init_cpu_process_group, f"{address}:{port}", len(worker_group), i
                    )
                    for i in range(len(worker_group))
                ]
            )

        def on_shutdown(self, worker_group: Any, backend_config: Any) -> None:
            if len(worker_group) == 1:
                return
            ray.get(worker_group.execute_async(_shutdown_process_group), timeout=60)

    class CpuJaxConfig(JaxConfig):
        @property
        def backend_cls(self) -> type:
            return _CpuBackend

    return CpuJaxConfig()


@dataclass(frozen=True)
class Placement:
    """Where the workers run: a slice of the platform, or CPU workers on this machine."""

    slice: Slice | None = None
    cpu_workers: int = 2
    devices_per_cpu_worker: int = 2
    # Slices of one multislice job: of `slice`'s shape, or groups of the CPU workers.
    slices: int = 1
    # Elastic: the fewest slices the job runs on (Ray Train's elastic worker group: whole slices, from this many
    # to `slices`, resized as slices are lost and come back); None for a fixed count.
    min_slices: int | None = None
    # How often an elastic job looks for slices that came back (Ray's elastic_resize_monitor_interval_s).
    resize_every_s: float = 60.0

    def __post_init__(self) -> None:
        if self.slices < 1 or (self.slice is None and self.cpu_workers % self.slices):
            raise ValueError(f"{self.cpu_workers} CPU workers do not split into {self.slices} slices")
        if self.min_slices is not None and not 1 <= self.min_slices <= self.slices:
            raise ValueError(f"min_slices {self.min_slices}: from 1 to the job's {self.slices} slices")

    @property
    def num_workers(self) -> int:
        return self.slice.hosts * self.slices if self.slice else self.cpu_workers

    @property
    def per_slice(self) -> int:
        """Workers (hosts) a slice."""
        return self.num_workers // self.slices

    @property
    def elastic(self) -> bool:
        return self.min_slices is not None and self.min_slices < self.slices

    def _workers(self) -> dict[str, Any]:
        """Ray's num_workers: a count, or an elastic job's (fewest, most), each a whole number of slices."""
        if not self.elastic:
            return {"num_workers": self.num_workers}
        assert self.min_slices is not None
        fewest = (self.min_slices * self.per_slice, self.num_workers)
        return {"num_workers": fewest, "elastic_resize_monitor_interval_s": self.resize_every_s}

    @property
    def devices(self) -> int:
        return self.slice.devices * self.slices if self.slice else self.cpu_workers * self.devices_per_cpu_worker

    def scaling_config_kwargs(self) -> dict[str, Any]:
        if self.slice is not None:
            return {**self.slice.ray_scaling_config, **self._workers()}
        return {
            **self._workers(),
            "use_tpu": False,
            "use_gpu": False,
            "resources_per_worker": {"CPU": 1},
            "placement_strategy": "SPREAD",
        }

    def worker_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """Environment of each training worker."""
        if self.slice is None:
            env = {
                "JAX_PLATFORMS": "cpu",
                "XLA_FLAGS": f"--xla_force_host_platform_device_count={self.devices_per_cpu_worker}",
            }
        elif self.slice.kind == "tpu":
            # TPU_* host bounds and worker hostnames come from GKE's TPU webhook; the rest is what the
            # GKE Ray + MaxText tutorial's worker_runtime_env sets (its dump settings are debugging only).
            env = dict(TPU_WORKER_ENV)
        else:
            env = {"JAX_PLATFORMS": "cuda"}
        return {**env, **(extra or {})}


def build_trainer(
    train_loop: Any,
    train_loop_config: dict[str, Any],
    *,
    placement: Placement,
    run_name: str,
    storage_path: str,
    max_failures: int,
    worker_env: dict[str, str] | None = None,
) -> Any:
    """The `JaxTrainer` for one run; `fit()` starts it."""
    # The Train v2 classes (what `ray.train` exports at run time, with v2 on by default).
    from ray.train.v2.api.config import FailureConfig, RunConfig, ScalingConfig
    from ray.train.v2.jax import JaxTrainer

    run_config = RunConfig(
        name=run_name,
        storage_path=storage_path,
        failure_config=FailureConfig(max_failures=max_failures),
        worker_runtime_env={"env_vars": placement.worker_env(worker_env)},
    )
    return JaxTrainer(
        train_loop_per_worker=train_loop,
        train_loop_config=train_loop_config,
        scaling_config=ScalingConfig(**placement.scaling_config_kwargs()),
        run_config=run_config,
        jax_config=(
            _cpu_jax_config(placement.per_slice if placement.slices > 1 else None) if placement.slice is None else None
        ),
    )


def canary_loop(config: dict[str, Any]) -> None:
    """`train_loop_per_worker` of the canary engine."""
    import ray.train

    from workloads.trainer.canary.train import CanaryConfig, train

    summary = train(CanaryConfig.from_dict(config))
    ray.train.report(summary)


def _local_ray_env() -> None:
    """What a private local Ray instance's processes read (they are this one's children): no usage stats, and
    the training workers at the machine's own priority. Ray starts its workers at niceness 15 (ray_config_def.h
    worker_niceness) so that its own daemons stay responsive on a busy host; on a machine of a few cores the
    training step then loses the CPU to anything else running, Ray's daemons included (the canary's step through
    JaxTrainer on two cores: 54-75 ms at 15, 50-52 at 0, 49-55 in a plain process; `make bench canary`). And
    Ray Train's controller looks at its workers every 0.5 s, not every 2 s (DEFAULT_HEALTH_CHECK_INTERVAL_S in
    ray/train/v2/_internal/constants.py): a local run's end and a worker's failure are seen sooner (the canary's
    2 steps: 23 s from start to done at 2 s, 20 s at 0.5). A RAY_ADDRESS this process was given names another
    cluster, not the private one, and its children would read it: Ray Train's placement group cleaner asked that
    address for the controller's state until it timed out, so every local run with RAY_ADDRESS set ended late."""
    os.environ.pop("RAY_ADDRESS", None)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_worker_niceness", "0")
    os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.5")


def local_ray(num_cpus: int) -> None:
    """Start a private local Ray instance for CPU runs (no dashboard, no usage stats): a new one, whatever
    RAY_ADDRESS says or a Ray instance on this machine, running or crashed, left in /tmp/ray (ray.init's default
    joins it, and refuses `num_cpus` for it)."""
    import ray

    _local_ray_env()
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)


def local_ray_slices(slices: int, per_slice: int) -> Any:
    """A private local Ray cluster with a node of its own per slice (`per_slice` CPUs, a worker each), as a
    multislice TPU job's slices are hosts of their own: a slice is lost by removing its node
    (`Cluster.remove_node`) and comes back with a new one (`Cluster.add_node`, from the main thread). The head
    takes no worker. Returns the cluster (ray.cluster_utils, Ray's own multi-node cluster on one machine)."""
    import ray
    from ray.cluster_utils import Cluster

    _local_ray_env()
    # Right after a slice is lost, Ray still counts its node's CPUs, and Ray Train first asks for the whole group
    # again: it waits this long for workers that cannot come before it starts on the slices left (default 60 s).
    # The nodes' processes are this one's children and read it.
    os.environ.setdefault("RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S", "15")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    for _ in range(slices):
        cluster.add_node(num_cpus=per_slice)
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    return cluster
