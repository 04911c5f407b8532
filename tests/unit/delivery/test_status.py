"""`make status` (scripts/status.py): rows from the objects as the API server returns them. The same command is run
against the real Kueue, KubeRay, JobSet and LWS on the local cluster in tests/test_localcluster.py."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from infra.catalogue import prices
from infra.catalogue.controllers import PodsReadyWait, pods_ready_wait
from scripts import status

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
TPU = "ct6e-standard-4t"


def _node(name: str, pool: str, machine: str, provisioning: str = "standard", **extra: str) -> dict[str, Any]:
    labels = {
        "cloud.google.com/gke-nodepool": pool,
        "node.kubernetes.io/instance-type": machine,
        "topology.kubernetes.io/zone": "us-east5-b",
        "topology.kubernetes.io/region": "us-east5",
        "cloud.google.com/gke-provisioning": provisioning,
        **extra,
    }
    capacity = {"cpu": "180"}
    if "cloud.google.com/gke-tpu-topology" in labels:
        capacity["google.com/tpu"] = "4"
    if "cloud.google.com/gke-accelerator" in labels:
        capacity["nvidia.com/gpu"] = "8"
    return {"metadata": {"name": name, "labels": labels}, "status": {"capacity": capacity}}


def _tpu_nodes(pool: str, count: int, provisioning: str = "standard", topology: str = "4x4") -> list[dict[str, Any]]:
    labels = {"cloud.google.com/gke-tpu-topology": topology, "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice"}
    return [_node(f"{pool}-{i}", pool, TPU, provisioning, **labels) for i in range(count)]


def _pod(name: str, node: str | None, labels: dict[str, str], owner: tuple[str, str] | None = None) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ml-training", "labels": labels},
        "spec": {"nodeName": node} if node else {},
        "status": {"conditions": [{"type": "Ready", "status": "True" if node else "False"}]},
    }
    if node:
        pod["status"]["startTime"] = "2026-12-02T10:00:00Z"
    else:
        pod["status"]["conditions"].append(
            {"type": "PodScheduled", "status": "False", "message": "0/9 nodes are available: 9 Insufficient tpu."}
        )
    if owner:
        pod["metadata"]["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    return pod


def _raycluster(name: str, owner: tuple[str, str] | None = None) -> dict[str, Any]:
    worker = {"containers": [{"name": "ray-worker", "resources": {"limits": {"google.com/tpu": "4"}}}]}
    obj: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ml-training"},
        "spec": {"workerGroupSpecs": [{"groupName": "slice-0", "template": {"spec": worker}}]},
    }
    if owner:
        obj["metadata"]["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    return obj


def _workload(owner: tuple[str, str], queue: str, conditions: list[dict[str, str]], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{owner[0].lower()}-{owner[1]}",
            "namespace": "ml-training",
            "creationTimestamp": "2026-12-02T11:30:00Z",
            "ownerReferences": [{"kind": owner[0], "name": owner[1], "controller": True}],
        },
        "spec": {"queueName": queue, **spec},
        "status": {"conditions": conditions},
    }


def _ray_pods(cluster: str, nodes: list[str | None]) -> list[dict[str, Any]]:
    head = _pod(f"{cluster}-head", "system-0", {"ray.io/cluster": cluster, "ray.io/node-type": "head"})
    workers = [
        _pod(f"{cluster}-w{i}", node, {"ray.io/cluster": cluster, "ray.io/group": "slice-0"})
        for i, node in enumerate(nodes)
    ]
    return [head, *workers]


ADMITTED = {"type": "Admitted", "status": "True", "lastTransitionTime": "2026-12-02T10:00:00Z"}


def test_an_admitted_run_holds_its_whole_slice_and_costs_its_nodes_list_price_since_admission() -> None:
    nodes = [_node("system-0", "system", "e2-standard-8"), *_tpu_nodes("train", 4)]
    objects = {
        "RayCluster": [_raycluster("ray-training-abc")],
        "Pod": _ray_pods("ray-training-abc", [f"train-{i}" for i in range(4)]),
        "Workload": [_workload(("RayCluster", "ray-training-abc"), "training", [ADMITTED])],
    }
    (row,) = status.rows(objects, nodes, NOW)
    node_price = prices.hourly(TPU, "us-east5-b", "on-demand")
    assert node_price
    assert (row.kind, row.queue, row.state, row.ready, row.pods) == ("RayCluster", "training", "running", 5, 5)
    assert row.team == "platform"  # the training queue is no team's
    # The head's CPU node is shared and not counted; the four TPU hosts are one v6e 4x4 slice.
    assert row.holds == "1 x v6e 4x4 (4 nodes)" and row.pools == ("train",)
    assert row.usd_per_hour == pytest.approx(4 * node_price, abs=0.01)
    assert row.usd_so_far == pytest.approx(2 * 4 * node_price, abs=0.02)  # admitted at 10:00, read at 12:00
    assert f"held now: {row.usd_per_hour:,.2f} USD/h (platform {row.usd_per_hour:,.2f}) at list price" in status.table(
        [row], NOW
    )


def test_a_run_in_a_teams_queue_is_the_teams_and_the_total_says_each_teams_share() -> None:
    nodes = [*_tpu_nodes("train", 4), *_tpu_nodes("serve", 1, topology="2x2")]
    serving = {"containers": [{"name": "vllm", "resources": {"limits": {"google.com/tpu": "4"}}}]}
    objects = {
        "RayCluster": [_raycluster("borrowed")],
        "Pod": [*_ray_pods("borrowed", [f"train-{i}" for i in range(4)]),
                _pod("server-0", "serve-0", {}, ("ReplicaSet", "server-1"))],
        "Workload": [_workload(("RayCluster", "borrowed"), "research", [ADMITTED])],
        "Deployment": [{"metadata": {"name": "server", "namespace": "ml-training"},
                        "spec": {"replicas": 1, "template": {"spec": serving}}}],
        "ReplicaSet": [{"metadata": {"name": "server-1", "namespace": "ml-training", "ownerReferences": [
            {"kind": "Deployment", "name": "server", "controller": True}]}}],
    }  # fmt: skip
    found = status.rows(objects, nodes, NOW, teams=["research"])
    assert {(r.name, r.team) for r in found} == {("borrowed", "research"), ("server", "platform")}
    node = prices.hourly(TPU, "us-east5-b", "on-demand")
    assert node
    shares = f"(platform {node:,.2f}, research {4 * node:,.2f})"
    assert f"held now: {5 * node:,.2f} USD/h {shares}" in status.table(found, NOW)
    # A team's budget (teams.<team>.budget, USD a month) beside what it holds, per hour of a 730-hour month.
    budget = f"research {4 * node:,.2f} of its budget's 100.00)"
    assert budget in status.table(found, NOW, {"research": 73000.0})


def test_a_run_kueue_holds_back_says_why_and_holds_and_costs_nothing() -> None:
    waiting = _workload(
        ("RayJob", "second"),
        "training",
        [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
          "message": "couldn't assign flavors to pod set slice-0: insufficient unused quota for google.com/tpu"}],
    )  # fmt: skip
    objects = {
        "RayJob": [{"metadata": {"name": "second", "namespace": "ml-training"}, "spec": {}}],
        "RayCluster": [_raycluster("second-raycluster", owner=("RayJob", "second"))],
        "Workload": [waiting],
    }
    (row,) = status.rows(objects, _tpu_nodes("train", 4), NOW)
    # Shown as the RayJob that made the cluster, not as the cluster.
    assert (row.kind, row.name, row.state, row.holds, row.usd_so_far) == ("RayJob", "second", "waiting", "", None)
    assert "insufficient unused quota for google.com/tpu" in row.why
    assert row.since == "2026-12-02T11:30:00Z"
    table = status.table([row], NOW)
    assert "waiting" in table and "    Pending: couldn't assign flavors" in table and "30m00s" in table


@pytest.mark.parametrize(
    ("conditions", "spec", "state", "said"),
    [
        ([{"type": "Finished", "status": "True", "reason": "Succeeded", "message": "Job finished"}], {},
         "finished", "Succeeded: Job finished"),
        ([{"type": "Evicted", "status": "True", "reason": "Preempted", "message": "Preempted to accommodate"}],
         {}, "evicted", "Preempted: Preempted to accommodate"),
        ([{"type": "Evicted", "status": "True", "reason": "InactiveWorkload"}], {"active": False}, "paused",
         "make training-resume"),
        ([{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "Quota reserved"}],
         {}, "reserved", "waiting on its admission checks"),
    ],
)  # fmt: skip
def test_each_kueue_state_is_named_with_kueues_own_reason(
    conditions: list[dict[str, str]], spec: dict[str, Any], state: str, said: str
) -> None:
    objects = {
        "RayCluster": [_raycluster("c")],
        "Workload": [_workload(("RayCluster", "c"), "training", conditions, **spec)],
    }
    (row,) = status.rows(objects, [], NOW)
    assert row.state == state and said in row.why


def test_an_unqueued_server_is_shown_by_its_pods_and_a_cpu_only_deployment_is_not() -> None:
    serving = {"containers": [{"name": "vllm", "resources": {"limits": {"google.com/tpu": "4"}}}]}
    objects = {
        "Deployment": [
            {"metadata": {"name": "vllm", "namespace": "ml-training"},
             "spec": {"replicas": 2, "template": {"spec": serving}}},
            {"metadata": {"name": "admin", "namespace": "ml-training"},
             "spec": {"template": {"spec": {"containers": [{"name": "a", "resources": {}}]}}}},
        ],
        "ReplicaSet": [{"metadata": {"name": "vllm-1", "namespace": "ml-training",
                                     "ownerReferences": [{"kind": "Deployment", "name": "vllm", "controller": True}]}}],
        "Pod": [_pod("vllm-1-a", "serve-0", {}, ("ReplicaSet", "vllm-1")),
                _pod("vllm-1-b", None, {}, ("ReplicaSet", "vllm-1"))],
    }  # fmt: skip
    nodes = _tpu_nodes("serve", 1, provisioning="spot", topology="2x2")
    (row,) = status.rows(objects, nodes, NOW)
    assert (row.kind, row.name, row.queue, row.state, row.ready, row.pods) == (
        "Deployment",
        "vllm",
        None,
        "starting",
        1,
        2,
    )
    assert "Insufficient tpu" in row.why
    # A single-host slice (2x2: one host's four chips) on a spot node, at the spot price.
    assert row.holds == "1 x v6e 2x2 (1 node)"
    assert row.usd_per_hour == pytest.approx(prices.hourly(TPU, "us-east5-b", "spot"), abs=0.01)


def test_the_cluster_is_read_once_per_namespace_and_a_kind_it_does_not_serve_reads_as_none() -> None:
    import subprocess

    calls: list[tuple[str, ...]] = []
    served = {"pods", "nodes"} | {r for r in status.READ.values() if "ray.io" not in r}

    def run(*words: str) -> subprocess.CompletedProcess[str]:
        calls.append(words)
        asked = words[1].split(",")
        for resource in asked:
            if resource not in served:
                # kubectl's words for a kind whose CRD is not installed.
                said = f'error: the server doesn\'t have a resource type "{resource.split(".")[0]}"\n'
                return subprocess.CompletedProcess(words, 1, "", said)
        items = [{"kind": "Pod", "metadata": {"name": f"p-{words[3]}"}}] if "pods" in asked else []
        if words[1] == "nodes":
            items = [{"kind": "Node", "metadata": {"name": "n"}}]
        return subprocess.CompletedProcess(words, 0, json.dumps({"items": items}), "")

    objects = status.read(run, ["ml-training", "ml-serving"])
    assert [p["metadata"]["name"] for p in objects["Pod"]] == ["p-ml-training", "p-ml-serving"]
    assert objects["RayJob"] == objects["RayCluster"] == [] and len(objects["Node"]) == 1
    # Kueue not installed: no ClusterQueue.
    assert objects["ClusterQueue"] == [] and calls[-1][1] == status.CLUSTER_QUEUES
    # Two kinds not served: two retries in the first namespace, then one read per namespace; the nodes, the queues.
    assert len(calls) == 3 + 1 + 1 + 1


def _server_pod(name: str, created: str, scheduled: str, started: str, ready: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ml-serving", "creationTimestamp": created},
        "spec": {"nodeName": "vllm-0"},
        "status": {
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled},
                {"type": "Ready", "status": "True", "lastTransitionTime": ready},
            ],
            "containerStatuses": [{"name": "vllm", "state": {"running": {"startedAt": started}}}],
        },
    }


def test_a_servers_start_is_read_in_the_phases_the_cold_start_catalogue_records() -> None:
    """Created 10:00:00, on a node at 10:04:00 (provisioned), its image running at 10:05:35, ready at 10:12:25: 240 s
    for the node, 95 for the image, 410 to serve (the weights and the compile)."""
    pod = _server_pod("serve-0", "2026-12-02T10:00:00Z", "2026-12-02T10:04:00Z", "2026-12-02T10:05:35Z",
                      "2026-12-02T10:12:25Z")  # fmt: skip
    assert status.cold_start_of(pod) == {"node": 240.0, "image": 95.0, "serve": 410.0}
    # Restarted since it became ready (its container started after): not a cold start to record.
    restarted = _server_pod("serve-0", "2026-12-02T10:00:00Z", "2026-12-02T10:04:00Z", "2026-12-02T11:00:00Z",
                            "2026-12-02T10:12:25Z")  # fmt: skip
    assert status.cold_start_of(restarted) is None
    not_ready = _server_pod("serve-0", "2026-12-02T10:00:00Z", "2026-12-02T10:04:00Z", "2026-12-02T10:05:35Z",
                            "2026-12-02T10:12:25Z")  # fmt: skip
    not_ready["status"]["conditions"][1]["status"] = "False"
    assert status.cold_start_of(not_ready) is None


def test_a_running_servers_last_start_is_said_under_its_row() -> None:
    pod = _server_pod("serve-0", "2026-12-02T10:00:00Z", "2026-12-02T10:04:00Z", "2026-12-02T10:05:35Z",
                      "2026-12-02T10:12:25Z")  # fmt: skip
    pod["metadata"]["labels"] = {
        "leaderworkerset.sigs.k8s.io/name": "serve",
        "leaderworkerset.sigs.k8s.io/worker-index": "0",
    }
    worker = {"containers": [{"name": "vllm", "resources": {"limits": {"google.com/tpu": "8"}}}]}
    server = {
        "metadata": {"name": "serve", "namespace": "ml-serving"},
        "spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": worker}}},
    }
    nodes = [_node("vllm-0", "vllm", "ct6e-standard-8t", **{"cloud.google.com/gke-tpu-topology": "2x4"})]
    (row,) = status.rows({"LeaderWorkerSet": [server], "Pod": [pod]}, nodes, NOW)
    assert (row.kind, row.state) == ("LeaderWorkerSet", "running")
    assert row.cold_start == {"node": 240.0, "image": 95.0, "serve": 410.0}
    assert "last start 745 s from creation to ready: node 240 s, image 95 s, serve 410 s" in status.table([row], NOW)


def _cluster_queue(name: str, reserved: str, borrowed: str, weight: str | None, share: int | None) -> dict[str, Any]:
    """A ClusterQueue as Kueue's status writes it (apis/kueue/v1beta2/clusterqueue_types.go)."""
    usage = [
        {
            "name": "a3mega",
            "resources": [
                {"name": "nvidia.com/gpu", "total": reserved, "borrowed": borrowed},
                {"name": "cpu", "total": "0"},
            ],
        }
    ]
    state: dict[str, Any] = {
        "flavorsReservation": usage,
        "pendingWorkloads": 2,
        "reservingWorkloads": 3,
        "admittedWorkloads": 1,
    }
    if share is not None:
        state["fairSharing"] = {"weightedShare": share}
    spec = {"fairSharing": {"weight": weight}} if weight else {}
    return {"metadata": {"name": name}, "spec": spec, "status": state}


def test_each_queue_says_what_waits_what_it_holds_and_borrows_and_with_fair_sharing_its_weight_and_share() -> None:
    queues = [_cluster_queue("vision", "2", "2", "1", 333), _cluster_queue("research", "14", "6", "3", 333),
              _cluster_queue("gpu", "0", "0", None, 0)]  # fmt: skip
    found = status.queue_rows(queues, teams=["research", "vision"])
    assert [(q.name, q.team, q.weight, q.share) for q in found] == [
        ("gpu", "platform", None, 0), ("research", "research", "3", 333), ("vision", "vision", "1", 333)
    ]  # fmt: skip
    research = found[1]
    assert (research.waiting, research.reserving, research.admitted) == (2, 3, 1)
    assert research.holds == ("a3mega nvidia.com/gpu 14 (6 borrowed)",) and found[0].holds == ()
    text = status.queue_table(found)
    assert "fair sharing on" in text[0]
    assert text[1].split() == ["QUEUE", "TEAM", "WEIGHT", "WAITING", "RESERVING", "ADMITTED", "HOLDS", "SHARE"]
    # A queue without a weight weighs 1 (Kueue's default, kubebuilder:default=1).
    assert text[2].split() == ["gpu", "platform", "1", "2", "3", "1", "-", "0"]
    # Fair sharing off: no weight, no share.
    off = status.queue_rows([_cluster_queue("gpu", "8", "0", None, None)])
    assert status.queue_table(off)[1].split() == ["QUEUE", "TEAM", "WAITING", "RESERVING", "ADMITTED", "HOLDS"]
    assert status.queue_table(off)[2].split() == ["gpu", "platform", "2", "3", "1", "a3mega", "nvidia.com/gpu", "8"]


WAIT = PodsReadyWait(timeout_s=1800, recovery_s=1800)


def _pods_ready(status: str, reason: str, at: str) -> dict[str, str]:
    return {"type": "PodsReady", "status": status, "reason": reason, "lastTransitionTime": at}


def test_a_queued_runs_start_is_kueues_from_admission_to_every_pod_ready_and_a_wait_says_when_kueue_evicts() -> None:
    """Kueue 0.19 evicts an admitted workload whose pods are not all Ready in waitForPodsReady's time (or again in
    recoveryTimeout after one failed): the row says how far along that wait it is, and once started, how long its
    start took, which is what a timeout is set from."""
    nodes = [_node("system-0", "system", "e2-standard-8"), *_tpu_nodes("train", 4)]

    def row(ready: dict[str, str], workers: list[str | None]) -> status.Row:
        objects = {
            "RayCluster": [_raycluster("ray-training-abc")],
            "Pod": _ray_pods("ray-training-abc", workers),
            "Workload": [_workload(("RayCluster", "ray-training-abc"), "training", [ADMITTED, ready])],
        }
        (found,) = status.rows(objects, nodes, NOW, wait=WAIT)
        return found

    started = row(_pods_ready("True", "Started", "2026-12-02T10:04:10Z"), [f"train-{i}" for i in range(4)])
    assert (started.state, started.pods_ready_s) == ("running", 250.0)
    assert "every pod Ready 250 s after its admission" in status.table([started], NOW)
    waiting = row(_pods_ready("False", "WaitForStart", "2026-12-02T10:00:00Z"), [None] * 4)
    assert waiting.state == "admitted" and waiting.pods_ready_s is None
    assert waiting.why == (
        "pod ray-training-abc-w0: 0/9 nodes are available: 9 Insufficient tpu.; admitted 7200 s ago: Kueue evicts it "
        "and queues it again once 1800 s pass without every pod Ready (waitForPodsReady)"
    )
    recovering = row(_pods_ready("False", "WaitForRecovery", "2026-12-02T11:58:20Z"), ["train-0", None, None, None])
    assert "a pod of it stopped being Ready 100 s ago: Kueue evicts it" in recovering.why
    # A Kueue that does not wait for pods (0.17 as the platform configures it) says nothing of it.
    assert pods_ready_wait("0.17.3") is None and pods_ready_wait("0.19.2") == WAIT
    objects = {
        "RayCluster": [_raycluster("c")],
        "Pod": _ray_pods("c", [None]),
        "Workload": [_workload(("RayCluster", "c"), "training", [ADMITTED, _pods_ready("False", "WaitForStart", "x")])],
    }
    (quiet,) = status.rows(objects, nodes, NOW)
    assert "waitForPodsReady" not in quiet.why


def _series(metric: str, workload: str, value: float, minute: int, **labels: str) -> Any:
    from google.cloud import monitoring_v3

    return monitoring_v3.TimeSeries(
        metric={"type": f"compute.googleapis.com/workload/{metric}", "labels": labels},
        resource={"type": "compute.googleapis.com/Workload", "labels": {"workload_id": workload, "replica_id": "0"}},
        points=[
            {"interval": {"end_time": datetime(2026, 12, 2, 11, minute, tzinfo=UTC)}, "value": {"double_value": v}}
            for v in (value, value / 2)  # newest first, as Cloud Monitoring returns them
        ],
    )


class _Monitoring:
    """Answers list_time_series as Cloud Monitoring would, by metric type: what MaxText's goodput monitor uploaded
    (ml-goodput-measurement 0.2.3 src/monitoring.py: goodput_time by goodput_source, badput_time by badput_source,
    total_elapsed_time with window_type cumulative, on resource compute.googleapis.com/Workload)."""

    def __init__(self, error: Exception | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.error = error

    def list_time_series(self, request: dict[str, Any]) -> list[Any]:
        self.requests.append(request)
        if self.error:
            raise self.error
        metric = request["filter"].split('"')[1].rsplit("/", 1)[1]
        return {
            "goodput_time": [_series("goodput_time", "llama3-8b-dev", 5400.0, 59, goodput_source="TOTAL")],
            "badput_time": [
                _series("badput_time", "llama3-8b-dev", 900.0, 59, badput_source="TPU_INITIALIZATION"),
                _series("badput_time", "llama3-8b-dev", 300.0, 59, badput_source="DATA_LOADING_SYNC"),
                _series("badput_time", "llama3-8b-dev", 0.0, 59, badput_source="OTHER"),
            ],
            "total_elapsed_time": [
                _series("total_elapsed_time", "llama3-8b-dev", 7200.0, 59, window_type="cumulative")
            ],
        }[metric]


def test_a_runs_goodput_is_read_from_what_maxtext_uploaded_to_cloud_monitoring_and_said_under_its_row() -> None:
    """make train marks a run that records goodput with the name MaxText records it under; make status reads the
    newest goodput, badput and elapsed time of every such run in three reads, and says them under the row."""
    job = {"metadata": {"name": "run-1", "namespace": "ml-training",
                        "annotations": {status.GOODPUT_WORKLOAD: "llama3-8b-dev"}}, "spec": {}}  # fmt: skip
    admitted = _workload(("RayJob", "run-1"), "training", [ADMITTED])
    objects = {"RayJob": [job], "RayCluster": [_raycluster("run-1-abcde", owner=("RayJob", "run-1"))],
               "Workload": [admitted]}  # fmt: skip
    found = status.rows(objects, _tpu_nodes("train", 4), NOW)
    assert [r.goodput_workload for r in found] == ["llama3-8b-dev"]
    monitoring = _Monitoring()
    (row,), unread = status.with_goodput(found, "acme-ml-dev", NOW, monitoring)
    assert unread == "" and row.goodput == status.Goodput(
        5400.0, 7200.0, {"TPU_INITIALIZATION": 900.0, "DATA_LOADING_SYNC": 300.0, "OTHER": 0.0}
    )
    assert len(monitoring.requests) == 3 and all(r["name"] == "projects/acme-ml-dev" for r in monitoring.requests)
    assert 'resource.labels.workload_id = one_of("llama3-8b-dev")' in monitoring.requests[0]["filter"]
    assert "goodput 75% of 2h00m (most badput: tpu_initialization 15m00s, data_loading_sync 5m00s)" in status.table(
        [row], NOW
    )
    assert json.loads(json.dumps(dataclasses.asdict(row)))["goodput"]["productive_s"] == 5400.0


def test_goodput_cloud_monitoring_refuses_leaves_the_rows_and_says_why() -> None:
    from google.api_core import exceptions

    job = {"metadata": {"name": "run-1", "namespace": "ml-training",
                        "annotations": {status.GOODPUT_WORKLOAD: "llama3-8b-dev"}}, "spec": {}}  # fmt: skip
    objects = {"RayJob": [job], "Workload": [_workload(("RayJob", "run-1"), "training", [ADMITTED])]}
    found = status.rows(objects, [], NOW)
    denied = _Monitoring(exceptions.PermissionDenied("monitoring.timeSeries.list denied"))
    rows, unread = status.with_goodput(found, "acme-ml-dev", NOW, denied)
    assert rows == found and unread == (
        "goodput not read from Cloud Monitoring (project acme-ml-dev): 403 monitoring.timeSeries.list denied"
    )
    # A run that records no goodput (the canary) asks Cloud Monitoring nothing.
    quiet = _Monitoring()
    plain = [dataclasses.replace(r, goodput_workload=None) for r in found]
    assert status.with_goodput(plain, "acme-ml-dev", NOW, quiet) == (plain, "") and quiet.requests == []


def test_a_waiting_run_says_its_place_in_line_as_kueues_visibility_api_gives_it() -> None:
    """Kueue's visibility API lists each ClusterQueue's waiting workloads in the order it admits them
    (apis/visibility/v1beta2 PendingWorkload: positionInClusterQueue from 0); read once per ClusterQueue."""
    import subprocess

    pending = {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "insufficient quota"}
    waiting = _workload(("RayJob", "second"), "training", [pending])
    summary = {"kind": "PendingWorkloadsSummary", "items": [
        {"metadata": {"name": "rayjob-third", "namespace": "ml-training"}, "positionInClusterQueue": 0},
        {"metadata": {"name": waiting["metadata"]["name"], "namespace": "ml-training"}, "positionInClusterQueue": 1},
    ]}  # fmt: skip
    calls: list[tuple[str, ...]] = []

    def run(*words: str) -> subprocess.CompletedProcess[str]:
        calls.append(words)
        if words[:2] == ("get", "--raw"):
            return subprocess.CompletedProcess(words, 0, json.dumps(summary), "")
        items = (
            [{"kind": "ClusterQueue", "metadata": {"name": "training"}}] if words[1] == status.CLUSTER_QUEUES else []
        )
        return subprocess.CompletedProcess(words, 0, json.dumps({"items": items}), "")

    objects = status.read(run, ["ml-training"])
    assert calls[-1] == ("get", "--raw", f"{status.VISIBILITY}/clusterqueues/training/pendingworkloads")
    objects |= {"RayJob": [{"metadata": {"name": "second", "namespace": "ml-training"}, "spec": {}}],
                "Workload": [waiting]}  # fmt: skip
    (row,) = status.rows(objects, [], NOW)
    assert (
        row.queue_position == (1, 2)
        and row.why == "Pending: insufficient quota (place 2 of 2 waiting in its ClusterQueue)"
    )

    def refused(*words: str) -> subprocess.CompletedProcess[str]:
        if words[:2] == ("get", "--raw"):
            return subprocess.CompletedProcess(
                words, 1, "", "Error from server (ServiceUnavailable): the server is currently unable"
            )
        return run(*words)

    unread = status.read(refused, ["ml-training"])["PendingWorkloads"]
    assert unread == [{"unread": "Error from server (ServiceUnavailable): the server is currently unable"}]


def test_status_names_each_queued_slices_slowest_start_to_record_where_it_is_slower_than_the_recorded() -> None:
    """Kueue's wait for a run's pods is set from each queued slice's recorded start (slices.<key>.queued_start):
    `make status` names the lines to add, each the slowest run read on its slice, only where it is slower than what
    the file records (or the file records none)."""
    from infra.config import environments_dir
    from infra.config.compute import QueuedStart
    from infra.synth.load import load_all

    dev = load_all(environments_dir())["dev"]

    def row(name: str, pools: tuple[str, ...], seconds: float | None) -> status.Row:
        return status.Row("RayJob", "ml-training", name, "training", "platform", "running", "", 4, 4, "", pools,
                          None, None, None, pods_ready_s=seconds)  # fmt: skip

    found = [row("r1", ("train",), 212.4), row("r2", ("train",), 388.2), row("j1", ("a3mega",), None)]
    measured = status.measured_starts(dev, found)
    assert measured == {"train": (388.2, "ml-training/r2")}, "the slowest of the train slice's; j1 has not started"
    now = datetime(2026, 12, 5, 12, tzinfo=UTC)
    said = status.starts_to_record(dev, measured, now)
    assert said[1] == (
        '  slices.train.queued_start: {seconds: 389, measured: 2026-12-05, source: "make status ENV=dev, '
        'ml-training/r2"}'
    )
    # Already recorded at least as slow: nothing to add.
    recorded = QueuedStart(seconds=400, measured=now.date(), source="earlier")
    slices = {**dev.slices, "train": dev.slices["train"].model_copy(update={"queued_start": recorded})}
    recorded_dev = dev.model_copy(update={"slices": slices})
    assert status.starts_to_record(recorded_dev, measured, now) == []
    # A run Kueue evicted for not starting within its wait never ends its start, so none is measured: it is named,
    # with the wait it exceeded, or each retry would be evicted again with nothing said.
    evicted = status.Row("RayJob", "ml-training", "r3", "training", "platform", "evicted",
                         "PodsReadyTimeout: Exceeded the PodsReady timeout ml-training/rayjob-r3-1a2b3", 0, 0, "", (),
                         None, None, None)  # fmt: skip
    said = status.starts_to_record(recorded_dev, measured, now, [*found, evicted])
    assert said[1].startswith("  none for ml-training/r3: evicted for pods not all Ready within Kueue's wait (30m: ")
    preempted = dataclasses.replace(evicted, why="Preempted: Preempted to accommodate a workload")
    assert status.starts_to_record(recorded_dev, measured, now, [*found, preempted]) == []
