"""Goodput of a local run, from its `metrics.jsonl`, in ML Goodput Measurement's terms (the library MaxText records
with on a cluster): the share of the elapsed time spent on training steps that count, and where the rest went.

The canary writes one record per step to `metrics.jsonl` (`step`, `step_time_s`, `time` when it ended) and, after
a step it saved, `{"saved": step, "checkpoint_s", "time"}`, which `read_records` folds into the step's record; and
one `{"event": "start", "time": ...}` to `attempts.jsonl` beside it when a process starts training (a run, or
Ray's restart of it). From them:

- startup: from a start to that attempt's first step (JAX, the mesh, restoring the checkpoint);
- compilation: an attempt's first step beyond the run's usual step time (the step is compiled then);
- checkpoint: saving checkpoints;
- redone: steps trained again after a restart (the work since the last checkpoint, lost);
- other: the rest of the elapsed time (the gap while a failed attempt is noticed and restarted, a rerun's wait).
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# One line per attempt beside a run's metrics (a run, or Ray's restart of it), written when it starts training.
ATTEMPTS_FILE = "attempts.jsonl"

BADPUT = ("startup", "compilation", "checkpoint", "redone", "other")


# The fields a record may carry and what each must be: a step a whole number, the rest finite numbers.
_NUMBERS = ("time", "step_time_s", "checkpoint_s", "loss", "learning/loss", "perf/step_time_seconds")


def well_formed(record: Any) -> bool:
    """Whether a metrics record is one the goodput and the plot can read (a step a whole number, times and losses
    finite numbers): a hand-edited or half-written file may hold others."""
    if not isinstance(record, dict):
        return False
    for field in ("step", "saved"):
        step = record.get(field)
        if field in record and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
            return False
    for key in _NUMBERS:
        value = record.get(key)
        if key in record and value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            return False
        if isinstance(value, float) and not math.isfinite(value):
            return False
    return True


def _lines(path: Path, skipped: list[str] | None = None) -> list[dict[str, Any]]:
    """A JSON-lines file's whole, well-formed records (a line still being written, or one that is not a record,
    skipped and, where `skipped` is given, named there); none when it does not exist."""
    records = []
    for number, line in enumerate(path.read_text(errors="replace").splitlines() if path.exists() else [], 1):
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            record = None
        if well_formed(record):
            records.append(record)
        elif skipped is not None and line.strip():
            skipped.append(f"{path.name}:{number}: {line[:80]}")
    return records


def read_records(path: Path, skipped: list[str] | None = None) -> list[dict[str, Any]]:
    """The step records of a metrics file and the start events of the `attempts.jsonl` beside it, in time order
    (a start before its attempt's first step ends); the lines that are no record go to `skipped`."""
    steps: list[dict[str, Any]] = []
    for record in _lines(path, skipped):
        if "step" in record:
            steps.append(record)
        elif "saved" in record:  # the checkpoint of the newest record of its step: when it ended, and its time
            step = next((r for r in reversed(steps) if r["step"] == record["saved"]), None)
            if step is not None:
                step.update(checkpoint_s=record.get("checkpoint_s"), time=record.get("time", step.get("time")))
    starts = [r for r in _lines(path.with_name(ATTEMPTS_FILE), skipped) if r.get("event") == "start"]
    if not starts:
        return steps
    return sorted([*steps, *starts], key=lambda r: float(r.get("time") or 0.0))


def steps_of(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if "step" in r]


@dataclass(frozen=True)
class Goodput:
    """A run's goodput after each step record: (elapsed seconds, productive seconds), the steps trained again, and
    the badput by cause (seconds)."""

    points: list[tuple[float, float]]
    redone: int
    badput: dict[str, float]

    @property
    def final(self) -> float:
        elapsed, productive = self.points[-1]
        return productive / elapsed if elapsed else 0.0

    @property
    def elapsed(self) -> float:
        return self.points[-1][0]

    def line(self) -> str:
        """`goodput 82% of 28.8 s; badput: startup 3.1 s, compilation 1.9 s, ...`."""
        lost = ", ".join(f"{cause} {self.badput[cause]:.1f} s" for cause in BADPUT)
        return f"goodput {self.final:.0%} of {self.elapsed:.1f} s; badput: {lost}"


def goodput(records: list[dict[str, Any]]) -> Goodput:
    """The goodput of `records` in the order they were written (see the module's docstring)."""
    steps = [r for r in steps_of(records) if isinstance(r.get("time"), int | float)]
    if not steps:
        raise ValueError("no step record has a `time` (written by the canary trainer since `make plot`)")
    usual = statistics.median(float(r["step_time_s"]) for r in steps)
    last = {int(r["step"]): i for i, r in enumerate(steps)}  # the run of each step that counts
    first_start = next((r["time"] for r in records if r.get("event") == "start"), None)
    start = first_start if first_start is not None else steps[0]["time"] - steps[0]["step_time_s"]
    badput = dict.fromkeys(BADPUT, 0.0)
    points, productive = [], 0.0
    attempt_started: float | None = None
    first_of_attempt = True
    index = 0
    for record in records:
        if record.get("event") == "start":
            attempt_started, first_of_attempt = float(record["time"]), True
            continue
        if "step" not in record or not isinstance(record.get("time"), int | float):
            continue
        took = float(record["step_time_s"])
        began = float(record["time"]) - took - float(record.get("checkpoint_s") or 0.0)
        if first_of_attempt:
            if attempt_started is not None:
                badput["startup"] += max(0.0, began - attempt_started)
            compile_s = max(0.0, took - usual)
            badput["compilation"] += compile_s
            took -= compile_s
            first_of_attempt = False
        badput["checkpoint"] += float(record.get("checkpoint_s") or 0.0)
        if last[int(record["step"])] == index:
            productive += took
        else:
            badput["redone"] += took
        index += 1
        points.append((float(record["time"]) - start, productive))
    counted = productive + sum(badput.values())
    badput["other"] = max(0.0, points[-1][0] - counted)
    return Goodput(points, redone=len(steps) - len(last), badput=badput)
