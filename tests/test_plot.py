"""`make plot`: the local run's loss, step time and goodput, and each review's cost, as PNG files the review links."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from scripts.plot import goodput, main

PNG = b"\x89PNG\r\n\x1a\n"


def _run(path: Path) -> list[dict[str, float]]:
    """Four steps of 1 s, a crash 10 s long, and a resumed run from the checkpoint at step 2: steps 3 and 4 are
    trained again, then 5 and 6."""
    records, t = [], 1000.0
    for steps, pause in ((range(1, 5), 0.0), (range(3, 7), 10.0)):
        t += pause
        for step in steps:
            t += 1.0
            records.append({"step": step, "loss": 5 - step / 2, "step_time_s": 1.0, "time": t})
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"step": 7, "lo')  # the last line half-written
    return records


def test_goodput_counts_a_step_trained_again_once_and_the_crash_as_elapsed(tmp_path: Path) -> None:
    measured = goodput(_run(tmp_path / "metrics.jsonl"))
    # 6 distinct steps of 1 s in 18 s from the first step's start (8 steps run, 10 s down).
    assert measured.redone == 2 and measured.points[-1] == (18.0, 6.0) and measured.final == pytest.approx(1 / 3)
    assert measured.points[3] == (4.0, 2.0)  # steps 3 and 4 of the first run did not count: they ran again


def test_make_plot_draws_the_run_and_each_reviews_cost_and_links_it(
    tmp_path: Path, synth_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from infra.review import write_reviews

    run = tmp_path / "canary"
    run.mkdir()
    _run(run / "metrics.jsonl")
    outdir = tmp_path / "cdktf.out"
    shutil.copytree(synth_dir / "stacks", outdir / "stacks")
    write_reviews(outdir, None)
    assert main(["--checkpoint-dir", str(run), "--outdir", str(outdir)]) == 0
    said = capsys.readouterr().out
    assert f"plot: {run / 'training.png'}: loss, step time, goodput 33% (2 step(s) trained again)" in said
    assert (run / "training.png").read_bytes().startswith(PNG)
    for env in ("dev", "prod"):
        assert (outdir / "review" / f"{env}.cost.png").read_bytes().startswith(PNG)
        markdown = (outdir / "review" / f"{env}.md").read_text()
        assert markdown.endswith(f"## Pictures\n\n![node pool cost over the plan's range]({env}.cost.png)\n")
    # Again: the section is replaced, not repeated.
    assert main(["--checkpoint-dir", str(run), "--outdir", str(outdir)]) == 0
    assert (outdir / "review" / "dev.md").read_text().count("## Pictures") == 1


def test_nothing_to_plot_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--checkpoint-dir", str(tmp_path / "none"), "--outdir", str(tmp_path / "out")]) == 2
    assert "nothing to plot: run make train-local or make plan first" in capsys.readouterr().err


MALFORMED = [
    '{"step": "three", "loss": 1.0, "time": 2000}',
    '{"step": 8, "loss": "low", "time": 2001}',
    '{"step": 9, "loss": 1.0, "time": "later"}',
    '{"step": 10, "loss": NaN, "time": 2003}',
    '{"step": -1, "loss": 1.0, "time": 2004}',
    '{"step": true, "loss": 1.0, "time": 2005}',
    '["step", 11]',
]


def test_malformed_records_are_skipped_and_named_never_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Seven records no run writes (review round 4: `make plot` crashed on them): the plot is drawn from the others
    and each skipped line is named."""
    run = tmp_path / "run"
    run.mkdir()
    _run(run / "metrics.jsonl")
    with (run / "metrics.jsonl").open("a") as f:
        f.write("\n" + "\n".join(MALFORMED) + "\n")
    assert main(["--checkpoint-dir", str(run), "--outdir", str(tmp_path / "none")]) == 0
    out = capsys.readouterr()
    assert (run / "training.png").read_bytes().startswith(PNG)
    assert "over 8 step record(s)" in out.out
    assert out.err.count("plot: skipped, not a metrics record: metrics.jsonl:") == len(MALFORMED) + 1  # + the half line
