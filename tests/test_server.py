"""The canary server end to end, on a freshly trained tiny checkpoint: good, bad and too many requests."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.catalogue.serving_metrics import SERVER_METRICS
from tests.helpers import REPO, assert_exports
from workloads.server.app import parse_request
from workloads.server.load import run_load


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two canary training steps on one CPU device: a real checkpoint, as `make train-local` writes it."""
    directory = tmp_path_factory.mktemp("canary")
    code = (
        "from workloads.trainer.canary.train import CanaryConfig, train;"
        f"train(CanaryConfig(checkpoint_dir={str(directory)!r}, end_step=2))"
    )
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, check=True, capture_output=True, timeout=300)
    return directory


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _post(url: str, body: bytes) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    return _get_request(request)


def _get_request(request: urllib.request.Request) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _serve(checkpoint_dir: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "workloads.server",
            "--port",
            str(port),
            "--checkpoint-dir",
            str(checkpoint_dir),
            *extra,
        ],
        cwd=REPO,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return proc, f"http://127.0.0.1:{port}"


def _wait_ready(proc: subprocess.Popen[str], url: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        try:
            status, _ = _get(f"{url}/readyz")
        except (urllib.error.URLError, ConnectionError):
            status = 0
        if status == 200:
            return
        time.sleep(0.2)
    pytest.fail("the server never became ready")


@pytest.fixture(scope="module")
def server(checkpoint: Path) -> Iterator[str]:
    """A server with 2 batch slots and a queue of 4, so a burst of 40 must overflow it."""
    proc, url = _serve(checkpoint, "--max-batch", "2", "--queue-size", "4", "--request-timeout", "30")
    try:
        _wait_ready(proc, url)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_generate_answers_in_jetstream_shape_and_is_deterministic(server: str) -> None:
    body = json.dumps({"prompt": "A slice is healthy when", "max_tokens": 12}).encode()
    status, first = _post(f"{server}/generate", body)
    assert status == 200, first
    assert set(first) == {"response"} and isinstance(first["response"], str) and first["response"]
    assert _post(f"{server}/generate", body) == (200, first), "greedy decoding of one checkpoint is deterministic"
    status, ready = _get(f"{server}/readyz")
    assert (status, ready["checkpoint_step"]) == (200, 2)
    assert _get(f"{server}/healthz") == (200, {"status": "ok"})


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json", "not valid JSON"),
        (b'["prompt"]', "must be a JSON object"),
        (b'{"max_tokens": 4}', "`prompt` must be a non-empty string"),
        (b'{"prompt": "", "max_tokens": 4}', "`prompt` must be a non-empty string"),
        (b'{"prompt": "hi", "max_tokens": "4"}', "`max_tokens` must be an integer, got '4'"),
        (b'{"prompt": "hi", "max_tokens": true}', "`max_tokens` must be an integer"),
        (b'{"prompt": "hi", "max_tokens": 0}', "`max_tokens` 0 is out of range: 1 to 126"),
        (b'{"prompt": "hi", "max_tokens": 500}', "`max_tokens` 500 is out of range: 1 to 126"),
        (b'{"prompt": "hi", "max_tokens": 4, "temperature": 1}', "unknown field(s) temperature; allowed: prompt"),
        (json.dumps({"prompt": "x" * 200, "max_tokens": 1}).encode(), "`prompt` is 200 bytes; at most 127"),
    ],
)
def test_bad_requests_get_400_with_a_message(server: str, body: bytes, message: str) -> None:
    status, answer = _post(f"{server}/generate", body)
    assert status == 400
    assert message in answer["error"]


def test_a_burst_larger_than_the_queue_is_answered_in_full(server: str) -> None:
    result = asyncio.run(run_load(server, requests=40, concurrency=40, prompt="The canary", max_tokens=24))
    summary = result.summary()
    assert result.errors == [], "every request gets an HTTP answer"
    assert result.answered == 40
    assert set(result.codes) <= {200, 429}, summary
    assert result.codes[429] > 0, f"40 requests into 2 slots + a queue of 4 must overflow: {summary}"
    # At least the queue's worth got in (more when the engine freed a slot during the burst).
    assert result.codes[200] >= 4, summary
    assert max(result.latencies_rejected) < 2.0, "a full queue answers at once"
    # The requests that got in were decoded several to a step.
    with urllib.request.urlopen(f"{server}/metrics", timeout=10) as response:
        metrics = response.read().decode()
    mean = next(float(line.split()[-1]) for line in metrics.splitlines() if line.startswith("canary_batch_size_mean"))
    assert mean > 1.0, metrics
    assert 'canary_requests_total{code="429"}' in metrics
    # What the dashboards and alert policies read of a canary server, as Managed Prometheus would write it.
    assert_exports(metrics, SERVER_METRICS["canary"].metrics)


def test_make_serve_local_serves_the_checkpoint(checkpoint: Path) -> None:
    """The documented command: `make serve-local PORT= CKPT_DIR=` answers /generate."""
    port = _free_port()
    proc = subprocess.Popen(
        ["make", "-s", "serve-local", f"PORT={port}", f"CKPT_DIR={checkpoint}"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # make and the server it starts stop together
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(proc, url)
        status, answer = _post(f"{url}/generate", b'{"prompt": "The canary", "max_tokens": 5}')
        assert status == 200 and answer["response"]
        assert _post(f"{url}/generate", b'{"prompt": "The canary"}')[0] == 400
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    # Every request leaves one structured access-log line.
    assert proc.stdout is not None
    access = [json.loads(line) for line in proc.stdout.read().splitlines() if '"workloads.server.access"' in line]
    posts = [line["message"] for line in access if '"POST ' in line["message"]]
    assert [m.split('"')[1] for m in posts] == ["POST /generate HTTP/1.1"] * 2
    assert [m.split('"')[2].split()[0] for m in posts] == ["200", "400"]
    assert {line["severity"] for line in access} == {"INFO"}


def test_not_ready_until_the_weights_load(tmp_path: Path) -> None:
    """A checkpoint that cannot be loaded keeps /readyz at 503 with the reason; /generate answers 503."""
    (tmp_path / "state" / "3" / "default").mkdir(parents=True)  # a step with no checkpoint in it
    proc, url = _serve(tmp_path)
    try:
        deadline = time.monotonic() + 60
        status, answer = 0, {}
        while time.monotonic() < deadline:
            try:
                status, answer = _get(f"{url}/readyz")
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.2)
                continue
            if "failed to load" in answer.get("error", ""):
                break
            time.sleep(0.2)
        assert status == 503 and "failed to load" in answer["error"], answer
        status, answer = _post(f"{url}/generate", b'{"prompt": "hi", "max_tokens": 2}')
        assert status == 503 and "still loading" in answer["error"]
        assert _get(f"{url}/healthz")[0] == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_missing_checkpoint_is_a_clear_startup_error(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "workloads.server", "--checkpoint-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "no canary checkpoint under" in result.stderr and "make train-local" in result.stderr


def test_request_parsing_counts_bytes_not_characters() -> None:
    prompt, max_tokens = parse_request(
        json.dumps({"prompt": "é", "max_tokens": 3}).encode(), context=8, max_prompt_bytes=7
    )
    assert (prompt, max_tokens) == ("é".encode(), 3)
    with pytest.raises(ValueError, match="1 to 6"):
        parse_request(json.dumps({"prompt": "é", "max_tokens": 7}).encode(), context=8, max_prompt_bytes=7)
