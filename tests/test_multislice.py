"""Training across slices: `slices.<key>.count` derives a node pool and a Ray worker group per slice, the trainer
runs one job over them (N times the workers, the slices on the data axis), a recipe is compiled for its slice count,
and a lost slice costs no completed step."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from infra.catalogue.accelerators import tpu_slice
from infra.cdk.layout import read_stack
from infra.config import ENVIRONMENTS_DIR, ConfigError, parse_environment
from infra.synth.app import synth
from infra.synth.load import load_environment
from tests.helpers import REPO, attempts, by_name, losses, of_type, release_values, rendered, train_local
from workloads.trainer.compiled import environment_recipes
from workloads.trainer.launcher import Placement
from workloads.trainer.maxtext import maxtext_args
from workloads.trainer.mesh import multislice_devices
from workloads.trainer.recipes import RecipeError, get_recipe

EXAMPLE = REPO / "docs/examples/multislice/dev.yaml"


@pytest.fixture(scope="module")
def variant_stack(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """docs/examples/multislice/dev.yaml (dev on two v6e 4x4 slices), loaded with every rule and synthesized."""
    env = load_environment(EXAMPLE)
    out = tmp_path_factory.mktemp("multislice")
    synth({"dev": env}, out)
    return read_stack(out, "platform-dev")


def test_the_example_is_dev_with_two_slices_elastic_down_to_one_and_the_recipe_compiled_for_them() -> None:
    dev = yaml.safe_load((ENVIRONMENTS_DIR / "dev.yaml").read_text())
    dev["slices"]["train"]["count"] = 2
    dev["training"]["recipe"] = "llama3-8b-2-slices"
    dev["training"]["resilience"] = {"min_slices": 1}
    assert yaml.safe_load(EXAMPLE.read_text()) == dev


def test_each_slice_is_a_node_pool_of_the_same_shape(variant_stack: dict[str, Any]) -> None:
    pools = by_name(variant_stack, "google_container_node_pool")
    first, second = pools["train"], pools["train-1"]

    def shape(pool: dict[str, Any]) -> dict[str, Any]:
        """The pool without what names it (its name, its node label `platform-slice`, cdktf's metadata)."""
        config = {k: v for k, v in pool["node_config"].items() if k != "labels"}
        return {**{k: v for k, v in pool.items() if k not in ("//", "name")}, "node_config": config}

    assert shape(first) == shape(second)
    assert second["node_config"]["labels"] == {"platform-slice": "train-1"}
    assert first["node_count"] == second["node_count"] == 4
    assert first["placement_policy"]["tpu_topology"] == "4x4"


def test_the_ray_cluster_has_one_worker_group_per_slice_each_on_its_own_pool(variant_stack: dict[str, Any]) -> None:
    release, values = release_values(variant_stack, "ray-training")
    assert values["worker"]["groups"] == [{"name": "v6e-16", "pool": "train"}, {"name": "v6e-16-1", "pool": "train-1"}]
    pool_ids = {v["name"]: k for k, v in variant_stack["resource"]["google_container_node_pool"].items()}
    assert {f"google_container_node_pool.{pool_ids[p]}" for p in ("train", "train-1")} <= set(release["depends_on"])
    (cluster,) = [o for o in rendered(variant_stack, "ray-training") if o["kind"] == "RayCluster"]
    groups = cluster["spec"]["workerGroupSpecs"]
    assert [(g["groupName"], g["replicas"], g["numOfHosts"]) for g in groups] == [("v6e-16", 1, 4), ("v6e-16-1", 1, 4)]
    selectors = [g["template"]["spec"]["nodeSelector"] for g in groups]
    assert [s["cloud.google.com/gke-nodepool"] for s in selectors] == ["train", "train-1"]
    assert all(s["cloud.google.com/gke-tpu-topology"] == "4x4" for s in selectors)


def test_one_slice_renders_the_ray_cluster_it_always_did(stacks: dict[str, dict[str, Any]]) -> None:
    """Counting slices did not change a one-slice cluster: unqueued, its name (a hash of its spec) is what it was;
    queued (dev's `training.queue`), the queue is in the hash."""
    from infra.charts.check import render

    release = next(r for r in of_type(stacks["dev"], "helm_release").values() if r["name"] == "ray-training")
    values = json.loads(release["values"][0])
    names = {}
    for queued in (True, False):
        shown = values if queued else {k: v for k, v in values.items() if k != "queue"}
        objects = render("ray-training", shown, name="ray-training", namespace=release["namespace"])
        (cluster,) = [o for o in objects if o["kind"] == "RayCluster"]
        names[queued] = cluster["metadata"]["name"]
        (group,) = cluster["spec"]["workerGroupSpecs"]
        assert group["template"]["spec"]["nodeSelector"]["cloud.google.com/gke-nodepool"] == "train"
    # As the chart renders it unqueued (0.7.0, whose pods no longer carry the chart's version; the workers' port 8081
    # named megascale, 1ab36e1).
    assert names[False] == "ray-training-15a15923"
    assert names[True] != names[False]


def test_a_chart_bump_that_leaves_the_cluster_as_it_was_keeps_its_name(tmp_path: Path, stacks: dict[str, Any]) -> None:
    """The RayCluster is named after its spec, and a new name is a new cluster (a training restart): a chart version
    bump alone names no new one (0.6.0's pods carried the version, so every bump restarted training)."""
    import shutil

    from infra.charts.check import CHARTS, render

    shutil.copytree(CHARTS / "ray-training", tmp_path / "ray-training")
    chart = tmp_path / "ray-training" / "Chart.yaml"
    chart.write_text(re.sub(r"^version: .*$", "version: 99.0.0", chart.read_text(), flags=re.M))
    release = next(r for r in of_type(stacks["dev"], "helm_release").values() if r["name"] == "ray-training")
    values = json.loads(release["values"][0])

    def name(charts: Path | None) -> str:
        objects = render("ray-training", values, name="ray-training", namespace=release["namespace"], charts=charts)
        (cluster,) = [o for o in objects if o["kind"] == "RayCluster"]
        assert cluster["metadata"]["labels"]["helm.sh/chart"] == (
            "ray-training-99.0.0" if charts else "ray-training-0.7.0"
        )
        return str(cluster["metadata"]["name"])

    assert name(tmp_path) == name(None)


def test_the_plan_reports_the_multislice_fit_and_the_cross_slice_traffic() -> None:
    lines = environment_recipes(parse_environment(EXAMPLE))
    assert lines[0] == ("dev: training.slice train (2 slices v6e-16, topology 4x4), training.recipe llama3-8b-2-slices")
    chosen = next(line for line in lines if line.startswith("  * "))
    assert "llama3-8b-2-slices: runs: 24.07 GiB per chip of 31.25 GiB HBM" in chosen
    # 2 (N-1)/N of 8.03B bfloat16 gradients per slice per step.
    assert "across slices about 16.1 GB per slice per step" in chosen
    one_slice = next(line for line in lines if "  llama3-8b:" in line)
    assert "does not run: tuned for 1 slice" in one_slice


def test_the_trainer_runs_n_times_the_workers_with_dcn_data_parallelism(monkeypatch: pytest.MonkeyPatch) -> None:
    from workloads.trainer.__main__ import cluster_plan, prepared

    monkeypatch.setenv("PLATFORM_ENVIRONMENTS_DIR", str(EXAMPLE.parent))
    args = SimpleNamespace(
        env="dev", recipe=None, slice="train", run_name=None, bucket="checkpoints", max_failures=None
    )
    plan = cluster_plan(args)  # type: ignore[arg-type]
    assert plan["slices"] == 2
    # 4 hosts a slice: Ray Train reserves whole slices, elastic from one to both (training.resilience.min_slices).
    assert (plan["min_slices"], plan["scaling_config"]["num_workers"]) == (1, (4, 8))
    assert plan["scaling_config"]["topology"] == "4x4"
    assert "dcn_data_parallelism=2" in plan["maxtext_args"]
    assert "ici_fsdp_parallelism=16" in plan["maxtext_args"]
    # An attempt on the one slice left takes the recipe's arguments for one slice: no dcn axis, the same batch.
    (one,) = plan["maxtext_args_by_slices"].values()
    assert one == [a for a in plan["maxtext_args"] if a != "dcn_data_parallelism=2"]
    # What the cluster's `run --plan` makes of it, after the trip through JSON that `submit` sends.
    _, _, loop_config = prepared(json.loads(json.dumps(plan)))
    assert loop_config["argv_by_slices"] == {"1": one}


def test_each_attempt_of_an_elastic_maxtext_run_takes_the_arguments_of_its_slice_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ray Train's JAX backend tells each worker its attempt's slice count (MEGASCALE_NUM_SLICES); the worker runs
    MaxText with that count's arguments, which the plan carries (the image holds no environment file)."""
    from workloads.trainer.maxtext import attempt_argv

    config = {"argv": ["base.yml", "dcn_data_parallelism=2"], "argv_by_slices": {"1": ["base.yml"]}}
    monkeypatch.setenv("MEGASCALE_NUM_SLICES", "1")
    assert attempt_argv(config) == ["base.yml"]
    monkeypatch.setenv("MEGASCALE_NUM_SLICES", "2")
    assert attempt_argv(config) == ["base.yml", "dcn_data_parallelism=2"]
    monkeypatch.setenv("MEGASCALE_NUM_SLICES", "0")
    with pytest.raises(RecipeError, match="this attempt runs 0 slices; the run's arguments are for"):
        attempt_argv(config)
    monkeypatch.delenv("MEGASCALE_NUM_SLICES")
    assert attempt_argv({"argv": ["base.yml"], "argv_by_slices": None}) == ["base.yml"]


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        ("  resilience: {min_slices: 2}\n",
         "training.resilience.min_slices: 2: allowed: from 1 to 1 (the training slice's count 2 less one)"),
        ("  resilience: {min_slices: 0}\n",
         "training.resilience.min_slices: 0: Input should be greater than or equal to 1"),
    ],
)  # fmt: skip
def test_an_elastic_range_the_slices_cannot_hold_is_refused_naming_the_field(
    tmp_path: Path, edit: str, said: str
) -> None:
    path = tmp_path / "dev.yaml"
    path.write_text(EXAMPLE.read_text().replace("  resilience: {min_slices: 1}\n", edit))
    with pytest.raises(ConfigError) as refused:
        load_environment(path)
    assert said in str(refused.value)


def test_elastic_on_one_slice_or_a_recipe_not_compiled_for_the_fewer_count_is_refused(tmp_path: Path) -> None:
    from workloads.trainer.compiled import elastic_problem, load_table

    path = tmp_path / "dev.yaml"
    path.write_text((ENVIRONMENTS_DIR / "dev.yaml").read_text().replace(
        "  shared_memory: 64Gi\n", "  shared_memory: 64Gi\n  resilience: {min_slices: 1}\n", 1
    ))  # fmt: skip
    with pytest.raises(ConfigError) as refused:
        load_environment(path)
    assert (
        "training.resilience.min_slices: 1: elastic slices need a training slice of several (slices.train.count 2 or "
        "more); it has 1" in str(refused.value)
    )
    assert "rule ray-train.elastic-range" in str(refused.value)

    v6e, fixed = tpu_slice("v6e", "4x4"), get_recipe("llama3-8b-2-slices").model_copy(update={"min_slices": None})
    problem = elastic_problem(fixed, v6e, 2, 1)
    assert problem and "runs on 2 slices only" in problem and "give the recipe `min_slices: 1`" in problem
    table = load_table()
    del table["llama3-8b-2-slices@1"]
    problem = elastic_problem(get_recipe("llama3-8b-2-slices"), v6e, 2, 1, table)
    assert problem and problem.startswith("on 1 slice: the compiler has not checked these arguments")
    assert elastic_problem(get_recipe("canary"), v6e, 4, 1) is None, "the canary builds its mesh for any count"


def test_a_recipe_runs_only_on_the_slice_count_it_was_compiled_for() -> None:
    v6e = load_environment(ENVIRONMENTS_DIR / "dev.yaml").slices["train"].slice
    with pytest.raises(RecipeError, match="tuned \\(and compiled\\) for 2 slices; use a recipe with `slices: 1`"):
        maxtext_args(get_recipe("llama3-8b-2-slices"), v6e, run_name="r", base_output_directory="/c")
    with pytest.raises(RecipeError, match="tuned \\(and compiled\\) for 1 slice; use a recipe with `slices: 2`"):
        maxtext_args(get_recipe("llama3-8b"), v6e, run_name="r", base_output_directory="/c", slices=2)
    assert "dcn_data_parallelism=2" not in maxtext_args(
        get_recipe("llama3-8b"), v6e, run_name="r", base_output_directory="/c"
    )


def test_an_environment_on_more_slices_than_its_recipe_is_refused_naming_the_recipes_that_run(tmp_path: Path) -> None:
    path = tmp_path / "dev.yaml"
    path.write_text(EXAMPLE.read_text().replace("    count: 2\n", "    count: 3\n"))
    with pytest.raises(ConfigError) as refused:
        load_environment(path)
    said = str(refused.value)
    assert f"{path}: training.recipe: 'llama3-8b-2-slices': does not run on training.slice 'train' (3 slices" in said
    assert "tuned for 2 slices" in said and "slices: 3" in said and "rule maxtext.recipe-runs-on-training-slice" in said


def test_a_placement_splits_cpu_workers_into_equal_slices_or_refuses() -> None:
    assert Placement(cpu_workers=4, slices=2).num_workers == 4
    with pytest.raises(ValueError, match="3 CPU workers do not split into 2 slices"):
        Placement(cpu_workers=3, slices=2)


def test_an_elastic_placement_asks_ray_for_whole_slices_from_the_fewest_to_all() -> None:
    from ray.train.v2.api.config import ScalingConfig

    v6e = load_environment(ENVIRONMENTS_DIR / "dev.yaml").slices["train"].slice
    asked = Placement(slice=v6e, slices=2, min_slices=1).scaling_config_kwargs()
    assert (asked["num_workers"], asked["elastic_resize_monitor_interval_s"]) == ((4, 8), 60.0)
    assert ScalingConfig(**asked).elasticity_enabled, "Ray's own ScalingConfig takes it, TPU topology and all"
    assert Placement(slice=v6e, slices=2).scaling_config_kwargs()["num_workers"] == 8
    assert Placement(cpu_workers=4, slices=2, min_slices=2).scaling_config_kwargs()["num_workers"] == 4
    with pytest.raises(ValueError, match="min_slices 3: from 1 to the job's 2 slices"):
        Placement(cpu_workers=4, slices=2, min_slices=3)


def test_the_mesh_puts_the_slices_on_the_data_axis_slice_major() -> None:
    devices = [SimpleNamespace(process_index=p, id=p * 2 + i, slice_index=0) for p in range(4) for i in range(2)]
    grid = multislice_devices(devices, 2, data=1, fsdp=-1, tensor=1)
    assert grid.shape == (2, 4, 1)
    assert [d.process_index for d in grid[0].ravel()] == [0, 0, 1, 1]  # slice 0: processes 0 and 1
    assert [d.process_index for d in grid[1].ravel()] == [2, 2, 3, 3]
    # A TPU device of a multislice job names its slice itself.
    tpu = [SimpleNamespace(process_index=p, id=p, slice_index=p % 2) for p in range(4)]
    assert [d.slice_index for d in multislice_devices(tpu, 2, 1, -1, 1).ravel()] == [0, 0, 1, 1]
    with pytest.raises(ValueError, match="3 processes do not split into 2 slices"):
        multislice_devices(devices[:6], 2, 1, -1, 1)


@pytest.mark.slow
def test_two_slices_train_as_one_and_a_lost_slice_costs_no_step(
    tmp_path: Path, canary_one_slice: SimpleNamespace
) -> None:
    """The canary through JaxTrainer on two slices of two CPU workers each, with Orbax's emergency checkpointing:
    the first slice writes the bucket every 3 steps, the second its local folder (a host's RAM disk) every step.
    Slice 1 fails twice, and Ray restarts the job each time.

    A crash right after step 4 (the local checkpoints intact), the last process compiling the first step 40 s after
    the others: it resumes from step 4 (a step the bucket does not have), and no step is lost or redone. A lost host
    right after step 7 (the local checkpoints go with it), an unfinished save of step 7 lying in the bucket where
    Orbax writes one: it resumes from the bucket's step 6, not the unfinished 7, and redoes step 7. Every loss equals
    the one-slice run's (conftest.py: the same math)."""
    ckpt, local = tmp_path / "ckpt", tmp_path / "local"
    unfinished = ckpt / "state" / "7.orbax-checkpoint-tmp-1795876000000"  # Orbax's name
    unfinished.mkdir(parents=True)
    (unfinished / "partial").write_text("not a checkpoint")
    # The last process compiles 40 s after the others, past the 30 s a step's first collective waits on CPU.
    summary, _ = train_local(
        ckpt, "--local-checkpoint-dir", str(local), "--local-every", "1", "--checkpoint-every", "3", "--steps", "8",
        "--fail-at-step", "4", "--lose-host-at-step", "7", "--max-failures", "2", "--compile-delay-s", "40",
        "--workers", "4", "--devices-per-worker", "1", "--slices", "2", "--mesh", "data=1,fsdp=2,tensor=1",
    )  # fmt: skip
    assert (summary["slices"], summary["processes"], summary["mesh"]) == (2, 4, {"data": 2, "fsdp": 2, "tensor": 1})
    saved = sorted(p.name for p in (ckpt / "state").iterdir() if p.name.isdigit())
    assert saved == ["6", "8"], "the bucket: every 3rd and the last"
    failed = sorted(p.name for p in ckpt.glob(".failed-at-*"))
    assert failed == [f".failed-at-{s}-process-{p}" for s in (4, 7) for p in (2, 3)]
    starts = [a["start_step"] for a in attempts(ckpt)]
    assert starts == [0, 4, 6], "from slice 1's local step 4, then from the bucket's 6"
    assert [s for s, _ in losses(ckpt)] == [1, 2, 3, 4, 5, 6, 7, 7, 8], "a step lost, or one redone but the lost host's"
    whole = dict(losses(canary_one_slice.ckpt))
    for step, loss in losses(ckpt):
        assert loss == pytest.approx(whole[step], abs=1e-5), f"step {step}"


@pytest.mark.slow
def test_an_elastic_run_goes_on_with_the_slices_left_and_grows_back_when_the_slice_returns(
    tmp_path: Path, canary_one_slice: SimpleNamespace
) -> None:
    """`--min-slices 1` on two slices of two CPU workers, a local Ray node per slice (Ray's own multi-node cluster on
    one machine): the second slice's node removed once step 3 is saved, Ray Train's elastic worker group goes on
    with the one slice left, from the bucket's newest checkpoint; a node given back once that attempt trains grows
    it to two slices again. No step is lost, and each is the same math on any slice count (the global batch
    stays): its loss equals the one-slice run's. The attempt on one slice trains 2 steps, then waits for the growth
    (which took 33 s here) rather than racing it to the run's end (160 steps took 210 s of a test)."""
    ckpt = tmp_path / "ckpt"
    summary, err = train_local(
        ckpt, "--steps", "10", "--checkpoint-every", "1", "--workers", "4", "--devices-per-worker", "1",
        "--slices", "2", "--mesh", "data=1,fsdp=2,tensor=1", "--min-slices", "1", "--lose-slice-at-step", "3",
        "--slice-back-after-s", "0", "--max-failures", "2",
    )  # fmt: skip
    made = attempts(ckpt)
    assert [a["slices"] for a in made] == [2, 1, 2], err[-3000:]
    assert made[1]["start_step"] >= 3, "resumed from a checkpoint of the steps before the loss"
    assert made[2]["start_step"] == made[1]["start_step"] + 2, "one slice trained on, and grew from there"
    done = [s for s, _ in losses(ckpt)]
    assert sorted(set(done)) == list(range(1, 11)) and summary["slices"] == 2
    whole = dict(losses(canary_one_slice.ckpt))
    for step, loss in losses(ckpt):
        if step in whole:
            assert loss == pytest.approx(whole[step], abs=1e-5), f"step {step}"
