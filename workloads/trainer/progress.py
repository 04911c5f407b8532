"""Progress of a local training run: each step's loss and time, printed by the driver as the workers finish it.

Ray keeps the workers' output from the driver of a local run (`log_to_driver=False`: their JAX and Ray noise
would bury the result), so `make train-local` said nothing until the end. The workers' process 0 appends one
JSON line per step to a metrics file (the canary's `metrics.jsonl`, MaxText's `metrics_file`); `StepProgress`
reads what is new in those files from a thread of the driver and prints a line per step on stderr:

    train-local: step 3/4, loss 5.4132, 0.21 s/step (38 s)
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO


def step_line(record: dict[str, Any], last_step: int, seconds: float, label: str = "train-local") -> str | None:
    """The progress line of one metrics record (the canary's or MaxText's keys), or None if it holds no step."""
    if "step" not in record:
        return None
    loss = record.get("loss", record.get("learning/loss"))
    step_time = record.get("step_time_s", record.get("perf/step_time_seconds"))
    parts = [f"{label}: step {int(record['step'])}/{last_step}"]
    if isinstance(loss, int | float):
        parts.append(f"loss {loss:.4f}")
    if isinstance(step_time, int | float):
        parts.append(f"{step_time:.2f} s/step")
    return ", ".join(parts) + f" ({seconds:.0f} s)"


class StepProgress:
    """Prints each new step of the files `files()` lists while a run trains; a context manager around `fit()`.

    Only lines appended after it starts count (a resumed canary run appends to the same `metrics.jsonl`); a
    line still being written is read once it is whole.
    """

    def __init__(
        self,
        files: Callable[[], list[Path]],
        *,
        last_step: int,
        label: str = "train-local",
        out: TextIO | None = None,
        interval_s: float = 0.5,
    ) -> None:
        self._files = files
        self._last_step = last_step
        self._label = label
        self._out = out or sys.stderr
        self._interval = interval_s
        self._offsets = {path: path.stat().st_size for path in files() if path.exists()}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="step-progress", daemon=True)
        self._started = time.monotonic()
        self.steps_seen = 0

    def __enter__(self) -> StepProgress:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.poll()  # what the last step wrote after the last look

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.poll()

    def poll(self) -> None:
        """Print the steps appended since the last look."""
        for path in sorted(self._files()):
            try:
                with path.open("rb") as f:
                    f.seek(self._offsets.get(path, 0))
                    data = f.read()
            except FileNotFoundError:
                continue
            whole = data[: data.rfind(b"\n") + 1]
            self._offsets[path] = self._offsets.get(path, 0) + len(whole)
            for raw in whole.decode(errors="replace").splitlines():
                try:
                    record = json.loads(raw)
                except json.JSONDecodeError:
                    continue
                line = step_line(record, self._last_step, time.monotonic() - self._started, self._label)
                if line:
                    self.steps_seen += 1
                    print(line, file=self._out, flush=True)


def say(message: str, started: float, label: str = "train-local") -> None:
    """A phase of a local run, with the seconds since it started, on stderr."""
    print(f"{label}: {message} ({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
