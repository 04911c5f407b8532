"""Cluster.read, what the supervisor reads every half second while an apply runs, straight from the API server: a
503 or no answer is asked again, as kubectl's reads are, and anything else fails at once naming the path; and a
read that fails stops the apply at once, with the error said then."""

from __future__ import annotations

import io
import json
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from infra.localcluster import cluster as cluster_module
from infra.localcluster.cluster import Cluster, ClusterError
from infra.localcluster.controllers import ApplyError, Supervisor


def _cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answers: list[Any]) -> tuple[Cluster, list[str]]:
    """A cluster whose API server gives `answers` in turn: a dict is a 200 with it as JSON, an int that status,
    an exception raised as the connection's."""
    folder = tmp_path / "cluster"
    folder.mkdir(parents=True)
    (folder / "kubeconfig").write_text("clusters:\n- cluster:\n    server: https://127.0.0.1:6443\n")
    asked: list[str] = []

    def urlopen(request: urllib.request.Request, **_: Any) -> Any:
        url = request.full_url
        asked.append(url if request.get_method() == "GET" else f"{request.get_method()} {url}")
        answer = answers.pop(0)
        if isinstance(answer, dict):
            return io.BytesIO(json.dumps(answer).encode())
        if isinstance(answer, int):
            raise urllib.error.HTTPError(url, answer, "", {}, io.BytesIO(b"the server says why"))  # type: ignore[arg-type]
        raise answer

    monkeypatch.setattr(cluster_module.urllib.request, "urlopen", urlopen)
    monkeypatch.setattr(Cluster, "_admin_tls", lambda self: None)
    monkeypatch.setattr(cluster_module.time, "sleep", lambda _: None)
    monkeypatch.setattr(cluster_module, "_DISCOVERED", {})
    return Cluster(folder), asked


def test_a_read_the_server_could_not_take_yet_is_asked_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, asked = _cluster(tmp_path, monkeypatch, [503, TimeoutError("timed out"), {"items": []}])
    assert cluster.read("/api/v1/pods") == {"items": []}
    assert asked == ["https://127.0.0.1:6443/api/v1/pods"] * 3


def test_a_refused_read_fails_at_once_naming_the_path_and_the_servers_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster, asked = _cluster(tmp_path, monkeypatch, [403, {"items": []}])
    with pytest.raises(ClusterError, match=r"GET /api/v1/pods: 403 the server says why"):
        cluster.read("/api/v1/pods")
    assert len(asked) == 1


def test_it_gives_up_after_three_tries_and_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, asked = _cluster(tmp_path, monkeypatch, [ConnectionRefusedError("refused")] * 5)
    with pytest.raises(ClusterError, match="refused"):
        cluster.read("/api/v1/pods")
    assert len(asked) == 3


def test_a_failed_read_stops_the_apply_at_once_with_its_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The apply is told the error when it happens (OpenTofu may then wait minutes on a release), and the error is
    raised again when the apply ends."""
    cluster, _ = _cluster(tmp_path, monkeypatch, [403])
    told: list[Exception] = []
    stopped = threading.Event()
    supervisor = Supervisor(cluster, on_error=lambda err: (told.append(err), stopped.set()))
    supervisor.start()
    assert stopped.wait(30)
    assert [str(e) for e in told] == ["GET /api/v1/pods: 403 the server says why"]
    with pytest.raises(ApplyError, match="the local controllers: GET /api/v1/pods: 403"):
        supervisor.stop()


def test_a_cluster_with_no_kubeconfig_is_not_asked_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the server's not answering is worth another try: a missing kubeconfig fails at once, naming it."""
    slept: list[float] = []
    monkeypatch.setattr(cluster_module.time, "sleep", slept.append)
    with pytest.raises(FileNotFoundError, match="kubeconfig"):
        Cluster(tmp_path / "gone").read("/api/v1/pods")
    assert slept == []


DISCOVERY = Path(__file__).resolve().parents[2] / "fixtures" / "localcluster"
API, APIS = (json.loads((DISCOVERY / f"discovery-{n}.json").read_text()) for n in ("api", "apis"))
POD = {"metadata": {"name": "p", "namespace": "ml", "managedFields": [{"manager": "kwok"}]}, "spec": {}}


def test_get_reads_the_list_as_kubectl_prints_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Discovered once per server; the items carry their kind and apiVersion, and no managedFields, as kubectl's."""
    cluster, asked = _cluster(tmp_path, monkeypatch, [API, APIS, {"items": [POD]}, {"items": []}])
    assert cluster.get("pods", "-n", "ml", "-l", "app=x")["items"] == [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"}, "spec": {}}
    ]
    assert cluster.get("jobs", "-A")["items"] == []
    server = "https://127.0.0.1:6443"
    assert asked == [
        f"{server}/api",
        f"{server}/apis",
        f"{server}/api/v1/namespaces/ml/pods?labelSelector=app%3Dx",
        f"{server}/apis/batch/v1/jobs",
    ]


def test_a_resource_installed_since_the_discovery_is_discovered_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    without = {**APIS, "items": [g for g in APIS["items"] if g["metadata"]["name"] != "ray.io"]}
    cluster, asked = _cluster(tmp_path, monkeypatch, [API, without, {"items": []}, API, APIS, {"items": []}])
    cluster.get("pods")
    assert cluster.get("rayclusters", "-n", "ml")["items"] == []
    assert asked[-1].endswith("/apis/ray.io/v1/namespaces/ml/rayclusters")
    with pytest.raises(ClusterError, match="the server doesn't have a resource type 'nothing'"):
        _cluster(tmp_path / "again", monkeypatch, [API, APIS, API, APIS])[0].get("nothing")


def test_a_list_whose_version_went_since_the_discovery_is_discovered_again_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CRD's served version changed since the discovery (a controller bump): its list answers 404, the resources
    are discovered again, and the list is asked at the version served now; a second 404 is the answer."""
    cluster, asked = _cluster(tmp_path, monkeypatch, [API, APIS, 404, API, APIS, {"items": []}])
    assert cluster.get("workloads.kueue.x-k8s.io", "-A")["items"] == []
    assert [a.rsplit("/", 1)[-1] for a in asked] == ["api", "apis", "workloads", "api", "apis", "workloads"]
    cluster, asked = _cluster(tmp_path / "gone", monkeypatch, [API, APIS, 404, API, APIS, 404])
    with pytest.raises(cluster_module.NotFound):
        cluster.get("workloads.kueue.x-k8s.io", "-A")
    assert len(asked) == 6


def test_an_object_not_there_is_not_found_in_the_servers_words(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, _ = _cluster(tmp_path, monkeypatch, [API, APIS, 404])
    with pytest.raises(cluster_module.NotFound, match="GET /api/v1/namespaces/ml/pods/p: 404 the server says why"):
        cluster.get("pods", "p", "-n", "ml")


def test_what_get_does_not_read_itself_is_kubectls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, asked = _cluster(tmp_path, monkeypatch, [])
    ran: list[tuple[str, ...]] = []
    monkeypatch.setattr(Cluster, "kubectl", lambda self, *a, **_: ran.append(a) or type("D", (), {"stdout": "{}"}))
    assert cluster.get("pods", "--field-selector", "spec.nodeName=n") == {}
    assert ran == [("get", "pods", "--field-selector", "spec.nodeName=n", "-o", "json")] and asked == []


def test_the_supervisors_patches_are_sent_again_when_unanswered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster, asked = _cluster(tmp_path, monkeypatch, [503, {"kind": "Pod"}])
    assert cluster.patch("/api/v1/namespaces/ml/pods/p/status", {"status": {}}, "strategic") == {"kind": "Pod"}
    assert asked == ["PATCH https://127.0.0.1:6443/api/v1/namespaces/ml/pods/p/status"] * 2


def test_a_resource_whose_storage_is_initializing_is_asked_again_after_the_servers_retry_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CRD's list right after the CRD was made: 429 "storage is (re)initializing" (a first deploy failed on it in
    the inventory), which kubectl's client asks again after the server's Retry-After; more than TRIES times."""
    cluster, asked = _cluster(tmp_path, monkeypatch, [429, 429, 429, 429, {"items": []}])
    assert cluster.read("/apis/autoscaling.x-k8s.io/v1/provisioningrequests") == {"items": []}
    assert len(asked) == 5
    cluster, asked = _cluster(tmp_path / "busy", monkeypatch, [429] * 12)
    with pytest.raises(ClusterError, match="429"):
        cluster.read("/api/v1/pods")
    assert len(asked) == 11
