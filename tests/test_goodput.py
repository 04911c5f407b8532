"""A local run's goodput and where the rest of its time went (workloads/trainer/goodput.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from infra.catalogue.accelerators import tpu_slice
from infra.config.training import GOODPUT_ROLES
from tests.helpers import of_type
from workloads.trainer.goodput import goodput, read_records
from workloads.trainer.maxtext import GOODPUT_ARGS, maxtext_args
from workloads.trainer.recipes import get_recipe


def _write(folder: Path, steps: list[dict[str, float]], starts: list[float]) -> Path:
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps))
    (folder / "attempts.jsonl").write_text("".join(json.dumps({"event": "start", "time": t}) + "\n" for t in starts))
    return folder / "metrics.jsonl"


def test_badput_is_startup_compilation_checkpoints_work_redone_and_the_time_down(tmp_path: Path) -> None:
    """Attempt 1 starts at 1000 s, compiles for 4 s in step 1, checkpoints step 2 (0.5 s), trains 3 and 4 and dies;
    10 s later attempt 2 starts, resumes from step 2, compiles for 3 s and trains 3 and 4 again."""
    steps = [
        {"step": 1, "step_time_s": 5.0, "time": 1008.0},
        {"step": 2, "step_time_s": 1.0, "time": 1009.5, "checkpoint_s": 0.5},
        {"step": 3, "step_time_s": 1.0, "time": 1010.5},
        {"step": 4, "step_time_s": 1.0, "time": 1011.5},
        {"step": 3, "step_time_s": 4.0, "time": 1027.5},
        {"step": 4, "step_time_s": 1.0, "time": 1028.5},
    ]
    measured = goodput(read_records(_write(tmp_path, steps, [1000.0, 1021.5])))
    assert measured.elapsed == 28.5 and measured.redone == 2
    assert measured.badput == {
        "startup": 5.0,  # 3 s, then 2 s
        "compilation": 7.0,  # each attempt's first step beyond the usual 1 s
        "checkpoint": 0.5,
        "redone": 2.0,  # steps 3 and 4 of the first attempt
        "other": 10.0,  # down between the attempts
    }
    assert measured.final == pytest.approx(4 / 28.5)
    assert measured.line() == (
        "goodput 14% of 28.5 s; badput: startup 5.0 s, compilation 7.0 s, checkpoint 0.5 s, redone 2.0 s, other 10.0 s"
    )


def test_a_checkpoint_written_after_its_step_record_counts_as_in_one_record(tmp_path: Path) -> None:
    """The canary writes a step's record before its save and the save's line after it: the same goodput as one
    record of the step that ended with its checkpoint; a save that never ended leaves the step without one."""
    one = [{"step": 1, "step_time_s": 1.0, "time": 1001.0}, {"step": 2, "step_time_s": 1.0, "time": 1002.5,
           "checkpoint_s": 0.5}]  # fmt: skip
    two = [one[0], {"step": 2, "step_time_s": 1.0, "time": 1002.0}, {"saved": 2, "checkpoint_s": 0.5, "time": 1002.5}]
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    folded = read_records(_write(tmp_path / "two", two, [1000.0]))
    assert goodput(folded) == goodput(read_records(_write(tmp_path / "one", one, [1000.0])))
    assert [r.get("checkpoint_s") for r in folded if "step" in r] == [None, 0.5]
    unsaved = read_records(_write(tmp_path / "two", two[:2], [1000.0]))
    assert goodput(unsaved).badput["checkpoint"] == 0.0


def test_a_run_without_attempts_counts_from_its_first_step(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "step_time_s": 2.0, "time": 10.0}) + "\n")
    measured = goodput(read_records(tmp_path / "metrics.jsonl"))
    assert (measured.elapsed, measured.final) == (2.0, 1.0)
    with pytest.raises(ValueError, match="no step record has a `time`"):
        goodput([{"step": 1, "step_time_s": 1.0}])


def test_the_training_identity_may_record_and_upload_goodput(stacks: dict[str, Any]) -> None:
    """MaxText's goodput recorder writes and lists Cloud Logging entries and its monitor writes Cloud Monitoring series,
    as the trainer's own Kubernetes principal (dev's trainer is `direct`)."""
    members = [m for m in of_type(stacks["dev"], "google_project_iam_member").values() if "ray-trainer" in m["member"]]
    assert sorted(m["role"] for m in members) == sorted(GOODPUT_ROLES)
    assert all(m["member"].endswith("/subject/ns/ml-training/sa/ray-trainer") for m in members)


def test_the_dashboard_charts_the_runs_goodput_and_badput_by_cause(stacks: dict[str, Any]) -> None:
    (board,) = of_type(stacks["dev"], "google_monitoring_dashboard").values()
    tiles = json.loads(board["dashboard_json"])["mosaicLayout"]["tiles"]
    charts = {t["widget"]["title"]: t["widget"] for t in tiles}
    badput = charts["Training badput: time lost, by cause"]["xyChart"]["dataSets"][0]["timeSeriesQuery"]
    assert 'resource.labels.workload_id="llama3-8b-dev"' in badput["timeSeriesFilter"]["filter"]
    assert badput["timeSeriesFilter"]["aggregation"]["groupByFields"] == ["metric.labels.badput_source"]


def test_a_cluster_run_records_goodput_and_the_compiled_step_is_unchanged() -> None:
    from workloads.trainer.compiled import compile_argv

    recipe = get_recipe("llama3-8b")
    v6e = tpu_slice("v6e", "4x4")
    on = maxtext_args(recipe, v6e, run_name="r", base_output_directory="gs://b", goodput=True)
    off = maxtext_args(recipe, v6e, run_name="r", base_output_directory="gs://b")
    assert on == [*off, *GOODPUT_ARGS] and "enable_goodput_recording=true" in on
    assert not set(GOODPUT_ARGS) & set(compile_argv(recipe, v6e))
