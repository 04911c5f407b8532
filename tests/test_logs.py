"""In-cluster processes log one JSON object per line, as Cloud Logging reads them."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from workloads.logs import configure


def test_a_log_record_is_one_json_line_with_severity_message_and_its_fields(capsys: pytest.CaptureFixture[str]) -> None:
    configure()
    try:
        logging.getLogger("workloads.trainer").info("trainer done", extra={"seconds": 1.5, "result": {"step": 3}})
        logging.getLogger("workloads.trainer").error("trainer refused", extra={"error": "no slice"})
    finally:
        logging.getLogger().handlers.clear()
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [(x["severity"], x["logger"], x["message"]) for x in lines] == [
        ("INFO", "workloads.trainer", "trainer done"),
        ("ERROR", "workloads.trainer", "trainer refused"),
    ]
    assert lines[0]["seconds"] == 1.5 and lines[0]["result"] == {"step": 3} and lines[1]["error"] == "no slice"
    assert lines[0]["time"].endswith("Z")


def test_local_training_prints_each_step_as_the_workers_append_it(tmp_path: Path) -> None:
    """`make train-local` said nothing for minutes: the workers' output stays in Ray. The driver now prints each
    step the workers append to their metrics file, only new ones, and a half-written line once it is whole."""
    import io
    import time

    from workloads.trainer.progress import StepProgress

    canary, maxtext = tmp_path / "metrics.jsonl", tmp_path / "rank0-pid7.jsonl"
    canary.write_text(json.dumps({"step": 1, "loss": 9.0, "step_time_s": 2.0}) + "\n")  # an earlier run's
    out = io.StringIO()
    with StepProgress(lambda: [canary, maxtext], last_step=3, out=out, interval_s=0.01) as progress:
        with canary.open("a") as f:
            f.write(json.dumps({"step": 2, "loss": 5.41326, "step_time_s": 0.214}) + "\n")
            f.write('{"step": 3, "loss": 5.1')  # being written
            f.flush()
            time.sleep(0.1)
            f.write(', "step_time_s": 0.2}\n')
        maxtext.write_text(json.dumps({"step": 0.0, "learning/loss": 5.5, "perf/step_time_seconds": 1.5}) + "\n")
    lines = [line.rsplit(" (", 1)[0] for line in out.getvalue().splitlines()]
    assert lines == [
        "train-local: step 2/3, loss 5.4133, 0.21 s/step",
        "train-local: step 3/3, loss 5.1000, 0.20 s/step",
        "train-local: step 0/3, loss 5.5000, 1.50 s/step",
    ]
    assert progress.steps_seen == 3
