"""HTTP front end of the canary server, in JetStream's shape.

  POST /generate  {"prompt": "...", "max_tokens": N}  ->  200 {"response": "..."}
  GET  /healthz   200 while the process serves HTTP
  GET  /readyz    200 once the weights are loaded and compiled, 503 before
  GET  /metrics   Prometheus text format

Every request gets an answer: 400 for a malformed or out-of-range request
(with a message), 429 at once when the queue is full, 503 while loading or
when a request outlives `request_timeout` (it is never left hanging).
"""

from __future__ import annotations

import asyncio
import json
import time

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from workloads.server.engine import Engine, QueueFull

ALLOWED_FIELDS = ("prompt", "max_tokens")
ENGINE: web.AppKey[Engine] = web.AppKey("engine", Engine)


class Metrics:
    def __init__(self, engine: Engine) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "canary_requests", "Requests answered, by HTTP status code", ["code"], registry=self.registry
        )
        self.latency = Histogram(
            "canary_request_seconds",
            "Time from arrival to answer of /generate requests that succeeded",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )
        self.tokens = Counter("canary_generated_tokens", "Tokens generated", registry=self.registry)
        Gauge("canary_queue_depth", "Requests waiting for a batch slot", registry=self.registry).set_function(
            lambda: engine.queued
        )
        Gauge("canary_ready", "1 once the weights are loaded", registry=self.registry).set_function(
            lambda: 1.0 if engine.ready else 0.0
        )
        Gauge(
            "canary_batch_size_mean", "Mean requests per decode step (last 1000 steps)", registry=self.registry
        ).set_function(lambda: sum(engine.batch_sizes[-1000:]) / max(len(engine.batch_sizes[-1000:]), 1))


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def parse_request(body: bytes, *, context: int, max_prompt_bytes: int) -> tuple[bytes, int]:
    """The prompt (UTF-8 bytes) and max_tokens of a /generate body; ValueError says what is wrong."""
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"the body is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"the body must be a JSON object with {', '.join(ALLOWED_FIELDS)}")
    unknown = sorted(set(data) - set(ALLOWED_FIELDS))
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(ALLOWED_FIELDS)}")
    prompt = data.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        raise ValueError("`prompt` must be a non-empty string")
    encoded = prompt.encode()
    if len(encoded) > max_prompt_bytes:
        raise ValueError(f"`prompt` is {len(encoded)} bytes; at most {max_prompt_bytes} are allowed")
    max_tokens = data.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        raise ValueError(f"`max_tokens` must be an integer, got {max_tokens!r}")
    room = context - len(encoded)
    if not 1 <= max_tokens <= room:
        raise ValueError(
            f"`max_tokens` {max_tokens} is out of range: 1 to {room} (the context is {context} tokens, "
            f"the prompt takes {len(encoded)})"
        )
    return encoded, max_tokens


def make_app(engine: Engine, *, request_timeout: float) -> web.Application:
    metrics = Metrics(engine)
    max_prompt_bytes = engine.context - 1

    async def generate(request: web.Request) -> web.Response:
        started = time.monotonic()
        response = await _generate(request)
        metrics.requests.labels(code=str(response.status)).inc()
        if response.status == 200:
            metrics.latency.observe(time.monotonic() - started)
        return response

    async def _generate(request: web.Request) -> web.Response:
        if not engine.ready:
            return _error(503, "the model is still loading; retry when /readyz answers 200")
        body = await request.read()
        try:
            prompt, max_tokens = parse_request(body, context=engine.context, max_prompt_bytes=max_prompt_bytes)
        except ValueError as err:
            return _error(400, str(err))
        try:
            queued = engine.submit(prompt, max_tokens)
        except QueueFull:
            return _error(429, "the queue is full; retry later")
        try:
            text = await asyncio.wait_for(asyncio.wrap_future(queued.future), timeout=request_timeout)
        except TimeoutError:
            queued.future.cancel()
            return _error(503, f"no answer within {request_timeout:g} s; retry later")
        except Exception as err:  # the engine failed this request
            return _error(503, f"generation failed: {err}")
        metrics.tokens.inc(max_tokens)
        return web.json_response({"response": text})

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_: web.Request) -> web.Response:
        if engine.ready:
            return web.json_response({"status": "ready", "checkpoint_step": engine.step})
        if engine.load_error is not None:
            return _error(503, f"the model failed to load: {engine.load_error}")
        return _error(503, "loading")

    async def metrics_view(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def on_startup(app: web.Application) -> None:
        app[ENGINE].start()

    async def on_cleanup(app: web.Application) -> None:
        await asyncio.get_running_loop().run_in_executor(None, app[ENGINE].stop)

    app = web.Application(client_max_size=64 * 1024)
    app[ENGINE] = engine
    app.router.add_post("/generate", generate)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_view)
    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    return app
