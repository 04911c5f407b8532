"""The canary model as a generation engine: load a checkpoint, decode many requests per step.

Batching is continuous: the engine keeps `max_batch` slots; before every
decode step it fills free slots from the queue, then runs one forward pass
over all slots (a fixed [max_batch, context] shape, so it compiles once) and
appends one greedy token to every active request. A request leaves its slot as
soon as it has `max_tokens` new tokens or reaches the context length, and the
next waiting request takes the slot at the next step.
"""

from __future__ import annotations

import json
import queue
import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workloads.trainer.canary.model import ModelConfig
from workloads.trainer.canary.train import MODEL_FILE


@dataclass
class Request:
    """One generation request; `future` resolves to the generated text."""

    prompt: bytes
    max_tokens: int
    enqueued: float = field(default_factory=time.monotonic)
    future: Future[str] = field(default_factory=Future)
    generated: list[int] = field(default_factory=list)


class QueueFull(Exception):
    """The engine's queue is full: the caller should answer 429 at once."""


def latest_checkpoint(checkpoint_dir: Path) -> Path:
    """`<dir>/state/<latest step>/default`, as the canary trainer writes it."""
    state = checkpoint_dir / "state"
    steps = sorted((int(p.name), p) for p in state.iterdir() if p.name.isdigit()) if state.is_dir() else []
    if not steps:
        raise FileNotFoundError(f"no canary checkpoint under {state} (train one with `make train-local`)")
    return steps[-1][1] / "default"


def load_model_config(checkpoint_dir: Path) -> ModelConfig:
    """The model's shape as the trainer recorded it next to its checkpoints (the defaults if absent)."""
    path = checkpoint_dir / MODEL_FILE
    return ModelConfig(**json.loads(path.read_text())) if path.exists() else ModelConfig()


class Engine:
    """Loads the weights in a background thread, then serves a bounded queue of requests."""

    def __init__(self, checkpoint_dir: Path, *, max_batch: int, queue_size: int) -> None:
        if max_batch < 1 or queue_size < 1:
            raise ValueError(f"max_batch ({max_batch}) and queue_size ({queue_size}) must be at least 1")
        self.checkpoint_dir = checkpoint_dir
        self.max_batch = max_batch
        self.config = load_model_config(checkpoint_dir)
        self.context = self.config.max_seq_len
        self._queue: queue.Queue[Request] = queue.Queue(maxsize=queue_size)
        self._ready = threading.Event()
        self._stop = threading.Event()
        self.load_error: Exception | None = None
        self.step = 0
        self.batch_sizes: list[int] = []  # recent decode-step batch sizes, for metrics
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)

    # -- public -------------------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    def submit(self, prompt: bytes, max_tokens: int) -> Request:
        """Queue a request, or raise QueueFull at once."""
        request = Request(prompt=prompt, max_tokens=max_tokens)
        try:
            self._queue.put_nowait(request)
        except queue.Full:
            raise QueueFull from None
        return request

    # -- the engine thread --------------------------------------------------------------------------------

    def _load(self) -> tuple[Any, Any]:
        import jax
        import jax.numpy as jnp
        import orbax.checkpoint as ocp

        from workloads.trainer.canary.model import Decoder

        path = latest_checkpoint(self.checkpoint_dir)
        checkpointer = ocp.StandardCheckpointer()
        metadata = checkpointer.metadata(path)
        tree = getattr(metadata, "item_metadata", metadata)
        tree = getattr(tree, "tree", tree)
        device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
        target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device), tree)
        state = checkpointer.restore(path, target)
        self.step = int(state["step"])
        params = state["params"]
        model = Decoder(self.config)

        @jax.jit
        def next_tokens(params: Any, tokens: jax.Array, lengths: jax.Array) -> jax.Array:
            logits: jax.Array = model.apply({"params": params}, tokens)  # type: ignore[assignment]
            last = jnp.take_along_axis(logits, (lengths - 1)[:, None, None], axis=1)[:, 0, :]
            return jnp.argmax(last, axis=-1).astype(jnp.int32)

        # Compile before reporting ready, so the first request is not the slow one.
        zeros = jnp.zeros((self.max_batch, self.context), jnp.int32)
        next_tokens(params, zeros, jnp.ones((self.max_batch,), jnp.int32)).block_until_ready()
        return params, next_tokens

    def _run(self) -> None:
        import numpy as np

        try:
            params, next_tokens = self._load()
        except Exception as err:  # reported through /readyz and the log
            self.load_error = err
            print(f"error: the model failed to load from {self.checkpoint_dir}: {err!r}", file=sys.stderr, flush=True)
            return
        self._ready.set()
        slots: list[Request | None] = [None] * self.max_batch
        tokens = np.zeros((self.max_batch, self.context), np.int32)
        lengths = np.ones((self.max_batch,), np.int32)
        while not self._stop.is_set():
            for i in range(self.max_batch):
                if slots[i] is None:
                    try:
                        waiting = self._queue.get(timeout=0.05 if not any(slots) else 0)
                    except queue.Empty:
                        break
                    slots[i] = waiting
                    ids = np.frombuffer(waiting.prompt, np.uint8)
                    tokens[i, :] = 0
                    tokens[i, : len(ids)] = ids
                    lengths[i] = len(ids)
            active = [i for i, r in enumerate(slots) if r is not None]
            if not active:
                continue
            self.batch_sizes.append(len(active))
            del self.batch_sizes[:-1000]
            try:
                chosen = np.asarray(next_tokens(params, tokens, lengths))
            except Exception as err:  # fail these requests, keep serving
                for i in active:
                    slots[i].future.set_exception(err)  # type: ignore[union-attr]
                    slots[i] = None
                continue
            for i in active:
                request = slots[i]
                assert request is not None
                request.generated.append(int(chosen[i]))
                if lengths[i] < self.context:
                    tokens[i, lengths[i]] = chosen[i]
                    lengths[i] += 1
                if len(request.generated) >= request.max_tokens or lengths[i] >= self.context:
                    request.future.set_result(bytes(request.generated).decode("utf-8", errors="replace"))
                    slots[i] = None
        for request in [r for r in slots if r is not None]:
            request.future.set_exception(RuntimeError("the server is shutting down"))
