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


def _cpu_jax_config(slices: int = 1) -> Any:
    """A JaxConfig whose backend forms one JAX process group over CPU workers, `slices` groups of them.

    Ray's own JAX backend does this only for TPU and GPU workers; off an
    accelerator it would leave every worker an independent replica.
    """
    import ray
    from ray.train._internal.utils import get_address_and_port
    from ray.train.backend import Backend
    from ray.train.v2.jax import JaxConfig

    class _CpuBackend(Backend):
        def on_start(self, worker_group: Any, backend_config: Any) -> None:
            if slices > 1:
                per_slice = len(worker_group) // slices
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

    def __post_init__(self) -> None:
        if self.slices < 1 or (self.slice is None and self.cpu_workers % self.slices):
            raise ValueError(f"{self.cpu_workers} CPU workers do not split into {self.slices} slices")

    @property
    def num_workers(self) -> int:
        return self.slice.hosts * self.slices if self.slice else self.cpu_workers

    @property
    def devices(self) -> int:
        return self.slice.devices * self.slices if self.slice else self.cpu_workers * self.devices_per_cpu_worker

    def scaling_config_kwargs(self) -> dict[str, Any]:
        if self.slice is not None:
            return {**self.slice.ray_scaling_config, "num_workers": self.num_workers}
        return {
            "num_workers": self.cpu_workers,
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
        jax_config=_cpu_jax_config(placement.slices) if placement.slice is None else None,
    )


def canary_loop(config: dict[str, Any]) -> None:
    """`train_loop_per_worker` of the canary engine."""
    import ray.train

    from workloads.trainer.canary.train import CanaryConfig, train

    summary = train(CanaryConfig.from_dict(config))
    ray.train.report(summary)


def local_ray(num_cpus: int) -> None:
    """Start a private local Ray instance for CPU runs (no dashboard, no usage stats)."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
