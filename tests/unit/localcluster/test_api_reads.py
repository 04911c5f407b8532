"""Cluster.read, what the supervisor reads every half second while an apply runs, straight from the API server: a
503 or no answer is asked again, as kubectl's reads are, and anything else fails at once naming the path; and a
read that fails stops the apply at once, with the error said then."""

from __future__ import annotations

import io
import json
import threading
import urllib.error
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
    folder.mkdir()
    (folder / "kubeconfig").write_text("clusters:\n- cluster:\n    server: https://127.0.0.1:6443\n")
    asked: list[str] = []

    def urlopen(url: str, **_: Any) -> Any:
        asked.append(url)
        answer = answers.pop(0)
        if isinstance(answer, dict):
            return io.BytesIO(json.dumps(answer).encode())
        if isinstance(answer, int):
            raise urllib.error.HTTPError(url, answer, "", {}, io.BytesIO(b"the server says why"))  # type: ignore[arg-type]
        raise answer

    monkeypatch.setattr(cluster_module.urllib.request, "urlopen", urlopen)
    monkeypatch.setattr(Cluster, "_admin_tls", lambda self: None)
    monkeypatch.setattr(cluster_module.time, "sleep", lambda _: None)
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
