"""The trainer: scaling config from the slice, MaxText arguments, and the canary on CPU."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from infra.catalogue.accelerators import tpu_slice
from infra.config import Environment
from tests.helpers import REPO, attempts, losses
from workloads.trainer.goodput import read_records
from workloads.trainer.launcher import Placement
from workloads.trainer.maxtext import maxtext_args
from workloads.trainer.recipes import Ici, RecipeError, get_recipe, load_recipes


def test_launcher_scaling_config_for_the_dev_slice(envs: dict[str, Environment]) -> None:
    from ray.train.v2.api.config import ScalingConfig

    placement = Placement(slice=envs["dev"].slices["train"].slice)
    config = ScalingConfig(**placement.scaling_config_kwargs())
    assert config.num_workers == 4
    assert config.use_tpu is True
    assert config.topology == "4x4"
    assert config.accelerator_type == "TPU-V6E"
    assert config.resources_per_worker == {"TPU": 4}
    assert config.placement_strategy == "SPREAD"
    assert placement.worker_env()["JAX_PLATFORMS"] == "tpu"
    assert placement.worker_env()["ENABLE_PJRT_COMPATIBILITY"] == "true"  # the GKE Ray + MaxText tutorial


def test_local_placement_gives_each_cpu_worker_several_devices() -> None:
    placement = Placement(cpu_workers=2, devices_per_cpu_worker=2)
    assert placement.devices == 4
    assert placement.worker_env()["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2"
    assert placement.scaling_config_kwargs()["num_workers"] == 2


def test_every_shipped_recipe_loads() -> None:
    assert {"llama3-8b", "llama3-8b-tutorial", "maxtext-tiny", "canary"} <= set(load_recipes())


def test_local_maxtext_args_come_from_the_same_code_with_the_mesh_sized_to_the_cpu_devices() -> None:
    recipe = get_recipe("maxtext-tiny")
    on_slice = maxtext_args(recipe, tpu_slice("v6e", "4x4"), run_name="r", base_output_directory="/ckpt")
    local = maxtext_args(recipe, 4, run_name="r", base_output_directory="/ckpt")
    differ = set(local) ^ set(on_slice)
    assert differ == {"ici_fsdp_parallelism=16", "ici_fsdp_parallelism=4"}
    with pytest.raises(RecipeError, match="does not divide 3 devices"):
        maxtext_args(get_recipe("llama3-8b"), 3, run_name="r", base_output_directory="/ckpt")


def test_llama3_8b_defaults_to_the_best_published_recipe_on_v6e_16() -> None:
    args = maxtext_args(
        get_recipe("llama3-8b"), tpu_slice("v6e", "4x4"), run_name="llama3-8b-dev", base_output_directory="gs://b/mt"
    )
    assert args[0] == "src/maxtext/configs/base.yml"  # resolved against the installed maxtext in the worker
    flags = dict(a.split("=", 1) for a in args[1:])
    assert flags["ici_fsdp_parallelism"] == "16"
    assert flags["ici_tensor_parallelism"] == "1"
    assert flags["ici_data_parallelism"] == "1"
    assert flags["per_device_batch_size"] == "3"
    assert flags["max_target_length"] == "8192"
    assert flags["remat_policy"].endswith("offloaded")
    assert flags["run_name"] == "llama3-8b-dev"
    assert flags["base_output_directory"] == "gs://b/mt"
    assert flags["enable_checkpointing"] == "true"


def test_the_tutorial_configuration_is_a_named_alternative() -> None:
    args = maxtext_args(
        get_recipe("llama3-8b-tutorial"), tpu_slice("v6e", "4x4"), run_name="r", base_output_directory="gs://b/mt"
    )
    flags = dict(a.split("=", 1) for a in args[1:])
    assert (flags["ici_fsdp_parallelism"], flags["ici_tensor_parallelism"]) == ("4", "4")
    assert (flags["per_device_batch_size"], flags["max_target_length"]) == ("1", "4096")


@pytest.mark.parametrize(
    ("change", "slice_args", "message"),
    [
        ({}, ("v6e", "8x8"), "tuned for v6e 4x4"),
        ({"ici": Ici(data=1, fsdp=8, tensor=4)}, ("v6e", "4x4"), "= 32 must equal the slice's 16 chips"),
        ({"accelerator": None, "topology": None, "ici": Ici(fsdp=-1)}, ("v5e", "2x2"), "more than the slice's 64 GB"),
        ({"flags": {"steps": 5}}, ("v6e", "4x4"), "set by the recipe's own fields"),
        ({"dataset_type": "hf"}, ("v6e", "4x4"), "needs a dataset_path"),
        ({"engine": "canary"}, ("v6e", "4x4"), "not maxtext"),
    ],
)
def test_recipes_that_do_not_fit_are_refused(change: dict, slice_args: tuple[str, str], message: str) -> None:
    recipe = get_recipe("llama3-8b").model_copy(update=change)
    with pytest.raises(RecipeError, match=message):
        maxtext_args(recipe, tpu_slice(*slice_args), run_name="r", base_output_directory="gs://b/mt")


def test_args_command_prints_the_run_plan_and_refuses_a_bad_recipe() -> None:
    command = [sys.executable, "-m", "workloads.trainer", "args", "--env", "dev"]
    ok = subprocess.run([*command, "--recipe", "llama3-8b"], cwd=REPO, capture_output=True, text=True, check=True)
    plan = json.loads(ok.stdout.splitlines()[-1])
    assert plan["scaling_config"]["num_workers"] == 4
    assert "ici_fsdp_parallelism=16" in plan["maxtext_args"]
    assert "base_output_directory=gs://acme-ml-platform-dev-checkpoints/maxtext" in plan["maxtext_args"]
    bad = subprocess.run([*command, "--recipe", "llama3-70b"], cwd=REPO, capture_output=True, text=True)
    assert bad.returncode == 2
    assert "unknown recipe 'llama3-70b'; recipes:" in bad.stderr


CANARY_TWO_STEPS = """
import json, sys
from workloads.logs import configure
from workloads.trainer.canary.train import CanaryConfig, train
configure()  # as in a job: one JSON line per event on stderr
print(json.dumps(train(CanaryConfig(checkpoint_dir=sys.argv[1], end_step=2,
                                    mesh={"data": 1, "fsdp": 2, "tensor": 2}))))
"""


def _cpu_env(devices: int) -> dict[str, str]:
    return {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
        "PYTHONPATH": str(REPO),
    }


CANARY_STOPPED_AFTER_A_SAVE = """
import os, sys
import workloads.trainer.canary.train as canary
saving = canary._save
def save_then_stop(config, manager, state, done):
    took = saving(config, manager, state, done)
    if done == 2:
        os._exit(137)  # stopped once step 2 is saved, as Ray's elastic resize stops a worker group
    return took
canary._save = save_then_stop
canary.train(canary.CanaryConfig(checkpoint_dir=sys.argv[1], end_step=3, mesh={"data": 1, "fsdp": 2, "tensor": 2}))
"""


def test_a_step_saved_just_before_its_worker_is_stopped_keeps_its_record(tmp_path: Path) -> None:
    """A resumed attempt starts after the newest checkpoint, so the step of that checkpoint is never trained again:
    its record must already be written when the worker is stopped (an elastic run lost step 34's record this way,
    and train-local then said "steps [34] were never completed")."""
    out = subprocess.run(
        [sys.executable, "-c", CANARY_STOPPED_AFTER_A_SAVE, str(tmp_path)], env=_cpu_env(4), capture_output=True,
        text=True,
    )  # fmt: skip
    assert out.returncode == 137, out.stderr[-3000:]
    assert (tmp_path / "state" / "2").is_dir()
    assert [r["step"] for r in read_records(tmp_path / "metrics.jsonl") if "step" in r] == [1, 2]


def test_canary_trains_two_sharded_steps_and_loss_goes_down(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", CANARY_TWO_STEPS, str(tmp_path)], env=_cpu_env(4), capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout.splitlines()[-1])
    assert summary["devices"] == 4
    assert summary["mesh"] == {"data": 1, "fsdp": 2, "tensor": 2}
    assert summary["loss_last"] < summary["loss_first"]
    assert (tmp_path / "state" / "2").is_dir()
    # Each step as one JSON line, as Cloud Logging reads them (jsonPayload.step, .loss): docs/logs.md.
    steps = [
        r for r in map(json.loads, (x for x in out.stderr.splitlines() if x.startswith("{"))) if r["message"] == "step"
    ]
    assert [(r["step"], r["end_step"]) for r in steps] == [(1, 2), (2, 2)]
    assert steps[-1]["loss"] == summary["loss_last"]


@pytest.mark.slow
def test_local_jaxtrainer_resumes_and_survives_a_killed_worker(canary_one_slice: SimpleNamespace) -> None:
    """`make train-local` with a worker killed mid-run: Ray restarts the group and it resumes from the checkpoint."""
    run, summary = canary_one_slice, canary_one_slice.summary
    assert (summary["start_step"], summary["end_step"], summary["processes"], summary["devices"]) == (0, 8, 2, 4)
    # Progress as it trains (it printed nothing for minutes): the phases, then each step.
    assert "train-local: training the canary, steps 1-8" in run.stderr
    assert re.search(r"^train-local: step 8/8, loss [0-9.]+, [0-9.]+ s/step \(\d+ s\)$", run.stderr, re.M)

    # The compiled step is kept beside the checkpoints: the worker group Ray restarts (and a rerun) loads it.
    assert any((run.ckpt / "jax-compilation-cache").iterdir())

    assert (run.ckpt / ".failed-at-3").exists(), "the worker was never killed"
    assert [a["start_step"] for a in attempts(run.ckpt)] == [0, 3], (
        "the restarted group resumed from step 3's checkpoint"
    )
    assert summary["loss_last"] < summary["loss_first"]
    assert [step for step, _ in losses(run.ckpt)] == [1, 2, 3, 4, 5, 6, 7, 8], "a completed step was lost or redone"
    # Goodput over both attempts, and where the rest went: each attempt's startup and compilation, the checkpoints,
    # the time down between the failure and the restart.
    assert re.search(r"^train-local: goodput \d+% of [0-9.]+ s; badput: startup [0-9.]+ s, ", run.stderr, re.M)
    lost = summary["badput_s"]
    assert lost["startup"] > 0 and lost["compilation"] > 0 and lost["checkpoint"] > 0 and lost["other"] > 0
    assert 0 < summary["goodput"] < 1


def test_submit_sends_the_run_command_to_the_ray_job_api(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import ray.job_submission

    from workloads.trainer.__main__ import main

    sent: dict[str, object] = {}

    class FakeClient:
        def __init__(self, address: str) -> None:
            sent["address"] = address

        def submit_job(self, **kwargs: object) -> str:
            sent.update(kwargs)
            return "raysubmit_123"

    monkeypatch.setattr(ray.job_submission, "JobSubmissionClient", FakeClient)
    assert main(["submit", "--env", "dev", "--recipe", "llama3-8b", "--address", "http://127.0.0.1:8265"]) == 0
    assert sent["address"] == "http://127.0.0.1:8265"
    command = shlex.split(str(sent["entrypoint"]))
    assert command[:5] == ["python", "-m", "workloads.trainer", "run", "--plan"]
    plan = json.loads(command[5])
    out = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert out["job_id"] == "raysubmit_123"
    assert out["max_failures"] == plan["max_failures"] == 3
    assert (plan["recipe"], plan["run_name"], plan["shape"]["accelerator"]) == ("llama3-8b", "llama3-8b-dev", "v6e")
    # What the cluster's `run` makes of it, with no environment file: the slice `args` planned for.
    from workloads.trainer.__main__ import prepared

    slice_, _, _ = prepared(plan)
    assert slice_.name == plan["slice"]


@pytest.mark.parametrize(
    ("argv", "env", "said"),
    [
        # STEPS=abc was read with int() while the parser was built: a traceback before the fix.
        (["local"], {"STEPS": "abc"}, "argument --steps: STEPS='abc' (--steps): a whole number of steps, at least 1"),
        (["local", "--steps", "0"], {}, "STEPS='0' (--steps): a whole number of steps, at least 1"),
        (
            ["local"],
            {"SLICES": "two"},
            "argument --slices: SLICES='two' (--slices): a whole number of slices, at least 1",
        ),
        (["local", "--slices", "3"], {}, "error: 2 CPU workers do not split into 3 slices"),
        (
            ["local", "--min-slices", "one"],
            {},
            "argument --min-slices: 'one' is not a number of slices (1 or more, at most --slices)",
        ),
        (["local", "--slices", "2", "--min-slices", "3"], {}, "error: min_slices 3: from 1 to the job's 2 slices"),
        # make train-local ENGINE=foo trained the canary; the engine now reaches the command, which refuses it.
        (
            ["local", "--engine", "foo"],
            {},
            "argument --engine: invalid choice: 'foo' (choose from 'canary', 'maxtext')",
        ),
    ],
)
def test_a_bad_train_local_argument_is_refused_by_name(argv: list[str], env: dict[str, str], said: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "workloads.trainer", *argv],
        cwd=REPO, capture_output=True, text=True, env={**os.environ, **env}, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_train_local_on_two_slices_takes_a_mesh_that_fits_each_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    """`make train-local SLICES=2`, as documented: the default mesh (fsdp 2 x tensor 2, for one slice of two
    workers of two devices) did not fit a slice of two devices, and the run was refused before it started."""
    import workloads.trainer.__main__ as trainer
    from workloads.trainer.mesh import mesh_shape

    given: dict[str, object] = {}
    monkeypatch.setattr(trainer, "run_local", lambda **kwargs: given.update(kwargs) or {})
    for slices, devices, expected in ((1, 4, (1, 2, 2)), (2, 2, (1, 1, 2))):
        assert trainer.main(["local", "--slices", str(slices), "--steps", "1"]) == 0
        assert given["slices"] == slices and mesh_shape(devices, **given["mesh"]) == expected


def test_a_local_run_gives_its_ray_processes_no_address_of_another_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """The private instance's processes inherit this one's environment: a RAY_ADDRESS there (of the cluster `make
    train` submits to) sent Ray Train's placement group cleaner to that cluster until it timed out."""
    from workloads.trainer.launcher import _local_ray_env

    monkeypatch.setenv("RAY_ADDRESS", "192.0.2.1:6379")
    for name in ("RAY_USAGE_STATS_ENABLED", "RAY_worker_niceness", "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"):
        monkeypatch.delenv(name, raising=False)
    _local_ray_env()
    assert "RAY_ADDRESS" not in os.environ
    assert os.environ["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"] == "0.5"
