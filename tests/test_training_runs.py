"""Training runs as queued RayJobs (training.runs: jobs): what the deploy renders, what the plan holds of a run, what
`make train` submits and refuses. The runs against the real Kueue and KubeRay are in tests/test_localcluster.py
(test_runs_as_jobs_wait_their_turn_and_a_team_borrows_the_slice_between_runs)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from infra.charts.check import render
from infra.charts.runs import per_run
from infra.config import ENVIRONMENTS_DIR, ConfigError, Environment
from infra.constructs.releases import ray_training_values
from infra.rules.kueue import _raycluster_queued, max_worker_groups
from infra.synth.load import load_environment
from scripts import train
from tests.helpers import REPO, dev_edited, training_objects
from tests.in_process import run_main

JOBS = ("\n  queue: training\n", "\n  queue: training\n  runs: jobs\n")


def _jobs_env(tmp_path: Path) -> Environment:
    return load_environment(dev_edited(tmp_path, JOBS))


def test_runs_as_jobs_without_a_queue_are_refused_at_load_naming_the_field(tmp_path: Path) -> None:
    path = dev_edited(tmp_path, ("\n  queue: training\n", "\n  runs: jobs\n"), ("    borrow_training: true\n", ""))
    with pytest.raises(ConfigError, match=r"training\.runs: 'jobs': each run is a RayJob .*set training\.queue"):
        load_environment(path)


def test_the_deploy_renders_no_standing_cluster_and_the_plan_holds_what_a_run_makes(tmp_path: Path) -> None:
    env = _jobs_env(tmp_path)
    deployed = render("ray-training", ray_training_values(env), name="ray-training", namespace="ml-training")
    assert {o["kind"] for o in deployed} == {"ResourceFlavor", "ClusterQueue", "LocalQueue"}
    held = [o for o in training_objects(env) if per_run(o)]
    assert [(o["kind"], o["metadata"]["name"]) for o in held] == [("RayJob", "run"), ("RayCluster", "run-xxxxx")]
    job, cluster = held
    # Queued through the training queue, its cluster the standing cluster's spec (each run its own head Service).
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"
    assert (job["spec"]["shutdownAfterJobFinishes"], job["spec"]["ttlSecondsAfterFinished"]) == (True, 0)
    standing = load_environment(ENVIRONMENTS_DIR / "dev.yaml")
    (was,) = [o for o in training_objects(standing) if o["kind"] == "RayCluster"]
    assert was["spec"]["headGroupSpec"].pop("headService")
    assert cluster["spec"] == job["spec"]["rayClusterSpec"] == was["spec"]


def test_the_training_queue_holds_the_submitter_with_the_head_where_runs_are_jobs(tmp_path: Path) -> None:
    def head_quota(env: Environment) -> dict[str, str]:
        (queue,) = [o for o in training_objects(env) if o["kind"] == "ClusterQueue"]
        (flavors,) = [g["flavors"] for g in queue["spec"]["resourceGroups"]]
        (head,) = [f for f in flavors if f["name"] == "training-head"]
        return {r["name"]: r["nominalQuota"] for r in head["resources"]}

    # Kueue admits a RayJob's submitter pod with its cluster (kueue rayjob addSubmitterPodSet): 500m and 512Mi more.
    assert head_quota(_jobs_env(tmp_path)) == {"cpu": "4500m", "memory": "16896Mi", "google.com/tpu": "0"}
    assert head_quota(load_environment(ENVIRONMENTS_DIR / "dev.yaml")) == {
        "cpu": "4",
        "memory": "16Gi",
        "google.com/tpu": "0",
    }


def test_a_queued_rayjob_has_room_for_one_worker_group_fewer_than_a_queued_raycluster(tmp_path: Path) -> None:
    (job,) = [o for o in training_objects(_jobs_env(tmp_path)) if o["kind"] == "RayJob"]
    group = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"] = [
        {**group, "groupName": f"s{i}"} for i in range(max_worker_groups("RayJob") + 1)
    ]
    (found,) = _raycluster_queued([job], None)  # type: ignore[arg-type]
    assert found.path == "RayJob/run: spec.rayClusterSpec.workerGroupSpecs" and found.value == 17
    assert "at most 16 worker groups in a queued RayJob at Kueue 0.19.2" in found.message
    cluster = {"kind": "RayCluster", "metadata": job["metadata"], "spec": job["spec"]["rayClusterSpec"]}
    assert list(_raycluster_queued([cluster], None)) == []  # type: ignore[arg-type]


def test_a_queued_rayjob_that_keeps_its_cluster_or_borrows_another_is_refused_as_kueues_webhook_would(
    tmp_path: Path,
) -> None:
    """Kueue's RayJob webhook (rayjob_webhook.go validateCreate @ v0.19.2): a queued run brings its own cluster and
    deletes it when it ends. The chart's RayJob does both; an edit that undoes either is refused at plan."""
    (job,) = [o for o in training_objects(_jobs_env(tmp_path)) if o["kind"] == "RayJob"]
    assert list(_raycluster_queued([job], None)) == []  # type: ignore[arg-type]
    keeps = {**job, "spec": {**job["spec"], "shutdownAfterJobFinishes": False}}
    both = {**job, "spec": {**job["spec"], "clusterSelector": {"ray.io/cluster": "standing"}}}
    neither = {**job, "spec": {k: v for k, v in job["spec"].items() if k != "rayClusterSpec"}}
    said = {
        name: [(f.path, f.message) for f in _raycluster_queued([obj], None)]  # type: ignore[arg-type]
        for name, obj in (("keeps", keeps), ("both", both), ("neither", neither))
    }
    assert said["keeps"] == [("RayJob/run: spec.shutdownAfterJobFinishes", "true: Kueue refuses a queued RayJob whose "
                              "cluster outlives the run (it would hold the queue's quota)")]  # fmt: skip
    assert [p for p, _ in said["both"]] == ["RayJob/run: spec.clusterSelector"]
    assert said["neither"] == [
        ("RayJob/run: spec.rayClusterSpec", "a queued RayJob needs its own cluster (rayClusterSpec)")
    ]


def test_each_submission_is_a_rayjob_of_its_own_named_as_kuberay_allows() -> None:
    now = datetime(2026, 12, 3, 0, 14, 37, tzinfo=UTC)
    name = train.job_name("llama3-8b-dev", None, now)
    assert name.startswith("llama3-8b-dev-1203-001437-") and len(name) == len("llama3-8b-dev-1203-001437-") + 4
    assert len(train.job_name("a" * 60, None, now)) <= train.NAME_MAX
    assert train.job_name("x", "My_Run.2", now) == "my-run-2"
    with pytest.raises(ValueError, match=r"--submission-id '42': a RayJob's name starts with a letter"):
        train.job_name("x", "42", now)


def test_make_train_refuses_a_bad_recipe_before_it_reaches_the_cluster(tmp_path: Path) -> None:
    folder = dev_edited(tmp_path, JOBS).parent
    env = {"PATH": "/usr/bin:/bin", "PLATFORM_ENVIRONMENTS_DIR": str(folder), "PLATFORM_KUBECONFIG": "/nonexistent"}
    done = run_main(train.main, ["submit", "--env", "dev", "--recipe", "no-such"], env=env, cwd=REPO)
    assert done.returncode == 2 and "no-such" in done.stderr and "nothing was submitted" in done.stderr
    done = run_main(train.main, ["submit", "--env", "dev", "--recipe", "canary"], env=env, cwd=REPO)
    assert done.returncode == 1, done.stderr
    assert "PLATFORM_KUBECONFIG='/nonexistent': no such file; nothing was submitted" in done.stderr


@pytest.mark.slow  # reads a Go module: downloaded into the module cache the first time
def test_the_pod_set_limit_is_the_kueue_apis_own() -> None:
    """KUEUE_MAX_POD_SETS against Kueue's Workload API in the Go module the local cluster builds (the version the
    environments pin), so the cap follows the version: 8 pod sets at 0.17, 18 at 0.19."""
    import re

    from infra.catalogue.controllers import CONTROLLERS, kueue_max_pod_sets
    from tests.helpers import kueue_module

    version, module = kueue_module()
    source = (module / "apis/kueue/v1beta2/workload_types.go").read_text()
    found = re.search(r"\+kubebuilder:validation:MaxItems=(\d+)\n(?:\s*//.*\n)*?\s*PodSets \[\]PodSet", source)
    assert found, "WorkloadSpec.PodSets' MaxItems not found"
    pinned = version.lstrip("v")
    assert pinned in CONTROLLERS["kueue"].versions
    assert kueue_max_pod_sets(pinned) == int(found.group(1)) == 18
    with pytest.raises(KeyError, match=r"Kueue 0\.99\.0: its Workload's pod-set limit is not in"):
        kueue_max_pod_sets("0.99.0")


def test_a_misspelt_slice_is_refused_with_the_closest_one() -> None:
    done = run_main(train.main, ["args", "--env", "dev", "--slice", "trian"], env={"PATH": "/usr/bin:/bin"}, cwd=REPO)
    assert done.returncode == 2
    assert "environment 'dev' has no slice 'trian'; slices: train, " in done.stderr
    assert done.stderr.rstrip().endswith("did you mean 'train'?")


def test_make_train_marks_a_run_that_records_goodput_with_the_name_it_records_it_under(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MaxText records goodput under the run's name (training.goodput, on by default): `make status` reads it from
    Cloud Monitoring by the annotation on the run's RayJob. The canary records none, and its RayJob carries none."""
    import json
    import subprocess
    from contextlib import contextmanager

    from scripts.status import GOODPUT_WORKLOAD

    created: list[dict[str, Any]] = []

    @contextmanager
    def reach(env: Environment) -> Iterator[dict[str, str]]:
        yield {}

    def kubectl(run_env: dict[str, str]) -> Any:
        def run(*argv: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
            created.append(json.loads(stdin))
            return subprocess.CompletedProcess(argv, 0, "rayjob.ray.io/x", "")

        return run

    monkeypatch.setattr(train, "cluster_env", reach)
    monkeypatch.setattr(train, "kubectl_in", kubectl)
    edited = dev_edited(tmp_path, JOBS)
    monkeypatch.setenv("PLATFORM_ENVIRONMENTS_DIR", str(edited.parent))
    env = load_environment(edited)
    for recipe in ("llama3-8b", "canary"):
        assert train.submit(env, train.trainer.parser().parse_args(["submit", "--env", "dev", "--recipe", recipe])) == 0
    assert [(j["kind"], (j["metadata"].get("annotations") or {}).get(GOODPUT_WORKLOAD)) for j in created] == [
        ("RayJob", "llama3-8b-dev"),
        ("RayJob", None),
    ]
