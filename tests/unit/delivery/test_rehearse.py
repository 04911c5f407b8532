"""`make rehearse-local` (scripts/rehearse.py): the shapes each queue is filled with, the stand-in runs, and how a run's
wait, preemptions and time held, and each team's spending, are read from Kueue's Workloads as the API server returns
them. The rehearsal itself runs against the real Kueue on the local cluster in tests/test_localcluster.py."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from infra.catalogue import prices
from infra.synth.load import load_environment, load_named
from scripts import rehearse
from scripts.rehearse import Rehearsal, Run, Shape
from tests.helpers import REPO, dev_edited
from tests.in_process import run_main
from tests.test_training_runs import JOBS


def test_each_queue_is_filled_with_its_own_shapes_the_borrowers_first() -> None:
    """dev: research's guaranteed A3 Mega share, research borrowing the whole training slice, the platform's GPU
    queue with what the team leaves; the standing training cluster is not a run (training.runs: cluster)."""
    got = [(s.queue, s.namespace, s.team, s.asks) for s in rehearse.shapes(load_named("dev"))]
    assert got == [
        ("research", "ml-gpu", "research", "a3mega: 1 x 8 nvidia.com/gpu"),
        ("research", "ml-gpu", "research", "train: 4 x 4 google.com/tpu"),
        ("gpu", "ml-gpu", "platform", "a3mega: 1 x 8 nvidia.com/gpu"),
    ]


def test_training_runs_as_jobs_fill_the_training_queue_last(tmp_path: Path) -> None:
    shapes = rehearse.shapes(load_environment(dev_edited(tmp_path, JOBS)))
    assert (shapes[-1].queue, shapes[-1].team, shapes[-1].asks) == (
        "training",
        "platform",
        "train: 4 x 4 google.com/tpu",
    )


def test_a_stand_in_run_waits_for_kueue_and_its_pods_never_run() -> None:
    shape = Shape("research", "ml-gpu", "research", "train", "google.com/tpu", 4, 4)
    job = rehearse.stand_in(shape, "rehearsal-research-train-1", "abc123")
    assert job["spec"]["suspend"] is True and job["spec"]["parallelism"] == job["spec"]["completions"] == 4
    assert job["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "research", rehearse.LABEL: "abc123"}
    pod = job["spec"]["template"]["spec"]
    assert pod["schedulingGates"] == [{"name": rehearse.HELD}]
    assert pod["containers"][0]["resources"]["limits"] == {"google.com/tpu": "4"}


def _workload(job: str, queue: str, *conditions: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": f"job-{job}", "ownerReferences": [{"kind": "Job", "name": job, "controller": True}],
                     "creationTimestamp": "2026-12-02T12:00:00Z"},
        "spec": {"queueName": queue},
        "status": {"conditions": list(conditions)},
    }  # fmt: skip


def _admitted(at: str = "2026-12-02T12:00:01Z") -> dict[str, str]:
    return {"type": "Admitted", "status": "True", "reason": "Admitted", "lastTransitionTime": at}


def _preempted(at: str) -> list[dict[str, str]]:
    said = {"reason": "Preempted", "message": "Preempted to accommodate a workload (UID: x) due to reclamation "
            "within the cohort", "lastTransitionTime": at}  # fmt: skip
    return [{"type": "Evicted", "status": "True", **said}, {"type": "Preempted", "status": "True", **said}]


def _waiting(why: str = "couldn't assign flavors to pod set main: insufficient unused quota") -> dict[str, str]:
    return {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": why}


def test_a_run_waits_holds_its_time_is_preempted_once_and_holds_its_whole_time_again() -> None:
    shape = Shape("research", "ml-gpu", "research", "train", "google.com/tpu", 4, 4)
    runs = [Run("r-1", shape, 0.0)]
    state = Rehearsal(load_named("dev"), runs, hold=20)
    price = {"r-1": 10.0}

    def read(now: float, *conditions: dict[str, str]) -> None:
        state.observe(now, [_workload("r-1", "research", *conditions)], lambda w: price[w["metadata"]["name"][4:]])

    read(1, _waiting())
    assert (runs[0].state, runs[0].waited) == ("waiting", None) and "insufficient unused quota" in runs[0].why
    read(5, _admitted())
    read(15, _admitted())
    assert state.due(15) == [] and runs[0].waited == 5
    # Preempted at 15 s held: the time is counted, the preemption once however often it is read.
    read(20, *_preempted("2026-12-02T12:00:20Z"))
    read(22, *_preempted("2026-12-02T12:00:20Z"), _waiting())
    assert (runs[0].preempted, runs[0].ran, runs[0].state) == (1, 15, "evicted")
    read(30, _admitted("2026-12-02T12:00:30Z"))
    assert state.due(45) == []  # its hold starts again at its new admission
    read(50, _admitted("2026-12-02T12:00:30Z"))
    (due,) = state.due(50)
    state.end(due, 50)
    assert state.finished and (runs[0].ran, runs[0].waited, runs[0].state) == (35, 5, "done")
    # 10 USD/h held from 5 s to 20 s and from 30 s to 50 s (readings at 15, 20 and 50 count the time before them).
    team = {t["team"]: t for t in state.summary()["teams"]}["research"]
    assert team["usd_per_hour_peak"] == 10.0 and team["preempted"] == 1 and team["waited_median_s"] == 5
    assert team["usd_per_hour_mean"] == pytest.approx(10.0 * 35 / 50, abs=0.01)


def test_a_preemption_between_two_readings_is_seen_by_the_lost_admission() -> None:
    """Kueue may preempt and readmit between two readings, or clear the condition: a run that was admitted and is
    not now, and has not ended, was interrupted."""
    shape = Shape("gpu", "ml-gpu", "platform", "a3mega", "nvidia.com/gpu", 1, 8)
    runs = [Run("g-1", shape, 0.0)]
    state = Rehearsal(load_named("dev"), runs, hold=20)
    state.observe(2, [_workload("g-1", "gpu", _admitted())], lambda w: 0.0)
    state.observe(4, [_workload("g-1", "gpu", _waiting())], lambda w: 0.0)
    assert runs[0].preempted == 1 and runs[0].ran == 2
    # Kueue's condition for that same preemption, read later: still one.
    state.observe(6, [_workload("g-1", "gpu", *_preempted("2026-12-02T12:00:03Z"), _waiting())], lambda w: 0.0)
    assert runs[0].preempted == 1
    # Preempted and readmitted between two readings: only the condition says so.
    state.observe(8, [_workload("g-1", "gpu", _admitted())], lambda w: 0.0)
    state.observe(10, [_workload("g-1", "gpu", *_preempted("2026-12-02T12:00:09Z"), _admitted())], lambda w: 0.0)
    assert runs[0].preempted == 2


def test_what_a_standing_workload_holds_counts_for_its_queues_team() -> None:
    """The standing training cluster (the platform's, queue training) and an unknown queue: the platform's."""
    state = Rehearsal(load_named("dev"), [], hold=20)
    standing = _workload("ray", "training", _admitted())
    standing["metadata"]["ownerReferences"] = [{"kind": "RayCluster", "name": "ray", "controller": True}]
    for now in (0, 36):
        state.observe(now, [standing, _workload("other", "research", _admitted())], lambda w: 100.0)
    teams = {t["team"]: t for t in state.summary()["teams"]}
    assert teams["platform"]["usd_per_hour_mean"] == teams["research"]["usd_per_hour_mean"] == 100.0


def test_the_table_says_why_a_run_never_ran() -> None:
    shape = Shape("research", "ml-gpu", "research", "train", "google.com/tpu", 4, 4)
    runs = [Run("r-1", shape, 0.0)]
    state = Rehearsal(load_named("dev"), runs, hold=20)
    state.observe(300, [_workload("r-1", "research", _waiting("insufficient unused quota for google.com/tpu"))],
                  lambda w: 0.0)  # fmt: skip
    state.stop(300)
    text = rehearse.table(state.summary())
    lines = text.splitlines()
    assert lines[1].split()[:3] == ["r-1", "research", "research"] and lines[1].split()[-1] == "waiting"
    assert lines[2].strip() == "Pending: insufficient unused quota for google.com/tpu"
    assert "research  1     0     1" in text


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["dev", "--runs", "0"], "error: --runs 0: at least 1"),
        (["dev", "--hold", "0.5"], "error: --hold 0.5: at least 1"),
        (["dve"], "dev"),
    ],
)
def test_bad_input_is_refused_before_anything_is_submitted(argv: list[str], said: str) -> None:
    done = run_main(rehearse.main, argv, env=dict(os.environ), cwd=REPO)
    assert done.returncode == 2 and said in done.stderr and "nothing was submitted" in done.stderr


def test_without_the_local_cluster_nothing_is_submitted(tmp_path: Path) -> None:
    done = run_main(rehearse.main, ["dev", "--dir", str(tmp_path)], env=dict(os.environ), cwd=REPO)
    assert done.returncode == 1 and "is not up: make cluster-local, then make deploy-local ENV=dev" in done.stderr


def test_the_next_run_waits_for_kueues_word_and_a_rehearsal_settles_when_nothing_moves() -> None:
    """Runs are submitted one at a time, each once Kueue has decided on the one before, so a rehearsal of the same
    settings goes the same way; it stops early once nothing of it holds an admission and nothing changed for twice
    the hold (what waits then waits on something it does not end)."""
    shape = Shape("research", "ml-gpu", "research", "train", "google.com/tpu", 4, 4)
    state = Rehearsal(load_named("dev"), [], hold=20)
    run = Run("r-1", shape, 3.0)
    state.add(run)
    state.observe(4, [], lambda w: 0.0)
    assert not run.decided and run.why == "no Kueue Workload yet"
    state.observe(5, [_workload("r-1", "research", {"type": "Admitted", "status": "False"})], lambda w: 0.0)
    assert not run.decided and run.why == "not yet considered by Kueue"
    state.observe(6, [_workload("r-1", "research", _waiting())], lambda w: 0.0)
    assert run.decided and not state.settled(45)
    state.observe(46, [_workload("r-1", "research", _waiting())], lambda w: 0.0)
    assert state.settled(46)
    state.observe(47, [_workload("r-1", "research", _admitted())], lambda w: 0.0)
    assert not state.settled(200), "a run holding its admission is never settled"


class _Cluster:
    """What pricer reads: the ResourceFlavors and the nodes, as the API server returns them."""

    def get(self, kind: str) -> dict[str, Any]:
        if kind.startswith("resourceflavors"):
            return {"items": [{"metadata": {"name": "a3mega"}, "spec": {"nodeLabels": {POOL: "a3mega"}}}]}
        labels = {POOL: "a3mega", "node.kubernetes.io/instance-type": "a3-megagpu-8g",
                  "topology.kubernetes.io/zone": "us-east5-a"}  # fmt: skip
        capacity = {"cpu": "207011m", "memory": "1872Gi", "nvidia.com/gpu": "8"}
        return {"items": [{"metadata": {"name": f"a3mega-{i}", "labels": labels}, "status": {"capacity": capacity}}
                          for i in range(2)]}  # fmt: skip


POOL = "cloud.google.com/gke-nodepool"


def test_an_admitted_run_costs_the_nodes_its_accelerators_fill_at_list_price() -> None:
    """16 GPUs on the a3mega flavor: its two nodes; the CPU and memory that go with them (a quantity such as
    207011m) add nothing."""
    workload = _workload("g-1", "gpu", _admitted())
    workload["status"]["admission"] = {"podSetAssignments": [{
        "name": "main", "count": 2, "flavors": {"cpu": "a3mega", "memory": "a3mega", "nvidia.com/gpu": "a3mega"},
        "resourceUsage": {"cpu": "2", "memory": "2Gi", "nvidia.com/gpu": "16"}}]}  # fmt: skip
    node = prices.hourly("a3-megagpu-8g", "us-east5-a", "on-demand")
    assert node and rehearse.pricer(_Cluster())(workload) == pytest.approx(2 * node)  # type: ignore[arg-type]


def test_a_provisioning_request_kueue_deletes_before_it_is_granted_is_passed_over_and_any_other_failure_stops() -> None:
    """Kueue 0.19 deletes the ProvisioningRequest of a workload that no longer needs it, and one can go between the
    list and the grant (a CI failure: rehearse-local stopped on the NotFound of the NCCL test's request)."""
    import subprocess

    from infra.localcluster.cluster import ClusterError

    class Cluster:
        def __init__(self, answer: str) -> None:
            self.answer, self.patched = answer, []

        def get(self, *args: str) -> dict[str, Any]:
            return {"items": [{"metadata": {"name": "job-dws-provisioning-1"}}]}

        def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
            self.patched.append(args[2])
            return subprocess.CompletedProcess(args, 1 if self.answer else 0, "", self.answer)

    granted: set[str] = set()
    gone = Cluster('Error from server (NotFound): provisioningrequests "job-dws-provisioning-1" not found')
    rehearse.grant_provisioning(gone, ["ml-gpu"], granted)  # type: ignore[arg-type]
    assert gone.patched == ["job-dws-provisioning-1"] and granted == {"ml-gpu/job-dws-provisioning-1"}
    refused = Cluster("Error from server (Forbidden): nope")
    with pytest.raises(ClusterError, match=r"ml-gpu/job-dws-provisioning-1: Error from server \(Forbidden\)"):
        rehearse.grant_provisioning(refused, ["ml-gpu"], set())  # type: ignore[arg-type]
