"""Cluster.kubectl sends a command that changes nothing twice again when the API server did not answer in time
(a CI failure: kubectl's 32-s wait for the OpenAPI document under load), and nothing else."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from infra.localcluster import cluster as cluster_module
from infra.localcluster.cluster import Cluster, ClusterError

# A kubectl that fails with `message` on its first `fails` calls, then succeeds; each call recorded.
FAKE = """#!{python}
import sys
from pathlib import Path
calls = Path(__file__).with_name("calls")
n = len(calls.read_text().splitlines()) if calls.exists() else 0
with calls.open("a") as f:
    f.write(" ".join(sys.argv[2:]) + "\\n")
if n < {fails}:
    sys.stderr.write({message!r})
    sys.exit(1)
print("ok")
"""
TIMEOUT = 'error validating data: Get "https://127.0.0.1:1/openapi/v2?timeout=32s": net/http: request canceled'


def _cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fails: int, message: str) -> Cluster:
    fake = tmp_path / "kubectl"
    fake.write_text(FAKE.format(python=sys.executable, fails=fails, message=message))
    fake.chmod(0o755)
    monkeypatch.setattr(cluster_module, "kubectl_binary", lambda: fake)
    monkeypatch.setattr(cluster_module.time, "sleep", lambda _: None)
    return Cluster(tmp_path / "cluster")


def _calls(tmp_path: Path) -> list[str]:
    return (tmp_path / "calls").read_text().splitlines()


def test_an_apply_the_api_server_did_not_answer_in_time_is_sent_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = _cluster(tmp_path, monkeypatch, fails=2, message=TIMEOUT)
    assert cluster.kubectl("apply", "--server-side", "-f", "-", input="{}").stdout == "ok\n"
    assert len(_calls(tmp_path)) == 3


def test_it_gives_up_after_three_tries_and_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = _cluster(tmp_path, monkeypatch, fails=5, message=TIMEOUT)
    with pytest.raises(ClusterError, match="request canceled"):
        cluster.kubectl("get", "nodes")
    assert len(_calls(tmp_path)) == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [(["delete", "job", "x"], TIMEOUT), (["apply", "-f", "-"], 'Error from server (Invalid): "x" is invalid')],
)
def test_a_command_that_may_change_twice_or_a_refusal_is_not_sent_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    cluster = _cluster(tmp_path, monkeypatch, fails=1, message=message)
    with pytest.raises(ClusterError):
        cluster.kubectl(*args, input="{}")
    assert len(_calls(tmp_path)) == 1
