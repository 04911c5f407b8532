"""MaxText's own training loop through our JaxTrainer launcher, on local CPU workers."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.engine.helpers import run_json

pytestmark = pytest.mark.engine


def _train(checkpoint_dir: Path, steps: int, *extra: str) -> dict:
    return run_json(
        "workloads.trainer", "local", "--engine", "maxtext", "--steps", str(steps),
        "--checkpoint-dir", str(checkpoint_dir), *extra,
    )  # fmt: skip


def test_maxtext_trains_through_jaxtrainer_and_a_second_run_resumes_from_the_last_step(tmp_path: Path) -> None:
    first = _train(tmp_path, 5)
    assert (first["start_step"], first["end_step"]) == (0, 4)
    assert first["workers"] == 2 and first["devices"] == 4
    assert "ici_fsdp_parallelism=4" in first["maxtext_args"]
    assert 4 in first["checkpoints"]
    assert all(math.isfinite(first[k]) for k in ("loss_first", "loss_last"))

    second = _train(tmp_path, 3)
    assert (second["start_step"], second["end_step"]) == (5, 7)
    assert [a["first_step"] for a in second["attempts"]] == [5]  # restored step 4, not a fresh model
    assert 7 in second["checkpoints"]
    assert second["loss_first"] < first["loss_first"]  # the restored weights carry the first run's training


def test_a_killed_worker_is_restarted_by_ray_and_resumes_from_the_last_checkpoint(tmp_path: Path) -> None:
    out = _train(tmp_path, 8, "--kill-after-checkpoint", "2", "--max-failures", "1")
    assert (out["start_step"], out["end_step"]) == (0, 7)
    first, second = out["attempts"]  # worker 0 was killed once and the group restarted once
    assert first["first_step"] == 0 and first["last_step"] >= 2
    resumed_from = second["first_step"] - 1
    assert resumed_from >= 2 and resumed_from in out["checkpoints"], out
    assert second["last_step"] == 7 and 7 in out["checkpoints"]
