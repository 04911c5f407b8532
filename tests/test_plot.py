"""`make plot`: the local run's loss, step time and goodput, and each review's cost, as PNG files the review links."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from scripts.plot import cost_figure, goodput, main, resumed_at, training_figure

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
    out = capsys.readouterr()
    said = out.out
    assert "no training run" not in out.err, "a run was drawn"
    assert f"plot: {run / 'training.png'}: loss, step time, goodput 33% (2 step(s) trained again)" in said
    assert (run / "training.png").read_bytes().startswith(PNG)
    for env in ("dev", "prod"):
        assert (outdir / "review" / f"{env}.cost.png").read_bytes().startswith(PNG)
        markdown = (outdir / "review" / f"{env}.md").read_text()
        picture = markdown.split("## Pictures\n\n", 1)[1]
        assert picture.startswith(
            f"![node pool cost over the plan's range]({env}.cost.png)\n\nEach node pool's USD/hour"
        )
        assert "the values of the Cost table above, drawn" in picture
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


def test_the_training_picture_says_what_it_shows_whole_steps_and_where_the_run_resumed(tmp_path: Path) -> None:
    """The new user's findings on training.png: fractional step ticks, no title, an unexplained goodput axis, no
    mark where the run resumed (here at step 3, after the crash)."""
    records = _run(tmp_path / "metrics.jsonl")
    assert resumed_at(records) == [4]
    fig, measured = training_figure(records, "canary")
    loss, step_time, share = fig.axes
    assert fig._suptitle.get_text() == "canary: 6 step(s), goodput 33%, resumed 1 time(s) (dashed)"
    for ax in (loss, step_time):
        ticks = [t for t in ax.get_xticks() if 1 <= t <= 6]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
        assert [list(line.get_xdata()) for line in ax.lines[1:]] == [[3, 3]]
    assert share.get_ylabel() == "productive / elapsed time" and measured is not None
    assert [list(line.get_xdata()) for line in share.lines[1:]] == [[measured.points[4][0]] * 2]
    said = " ".join(t.get_text() for t in fig.texts)
    assert "the share of the elapsed time spent on steps that count" in said and "redone 2.0 s" in said


def test_a_run_resumed_from_its_starts_where_the_steps_go_on_is_marked_too() -> None:
    """A restart whose checkpoint was the last step: the steps go on (4, 5), the second start marks it."""
    records = [
        {"event": "start", "time": 0.0},
        *({"step": n, "step_time_s": 1.0, "time": float(n)} for n in (1, 2, 3)),
        {"event": "start", "time": 10.0},
        *({"step": n, "step_time_s": 1.0, "time": 10.0 + n} for n in (4, 5)),
    ]
    assert resumed_at(records) == [3]


def _review(before: bool) -> dict[str, object]:
    def pool(name: str, price: float, low: int, high: int) -> dict[str, object]:
        return {"pool": name, "usd_per_node_hour": price, "min_nodes": low, "max_nodes": high}

    after = {"usd_per_hour": {"fewest": 4.0, "most": 50.0},
             "pools": [pool("system", 1.0, 1, 2), pool("train", 10.0, 0, 4), pool("serve", 3.0, 1, 1)]}  # fmt: skip
    was = {"usd_per_hour": {"fewest": 1.0, "most": 32.0}, "pools": [pool("system", 1.0, 1, 2), pool("old", 5.0, 0, 6)]}
    return {"stack": "platform-dev", "baseline": before, "cost": {"after": after, "before": was if before else None}}


def test_the_cost_picture_is_sorted_priciest_first_with_its_values_and_the_cost_before() -> None:
    fig = cost_figure(_review(before=True))
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_yticklabels()] == ["train", "old", "serve", "system"]
    values = [t.get_text().strip() for t in ax.texts]
    assert values == ["0.00-40.00 (new)", "removed (was 0.00-30.00)", "3.00 (new)", "1.00-2.00"]
    assert ax.get_title() == "platform-dev: node pools 4.00-50.00 USD/hour (was 1.00-32.00)"
    assert [t.get_text() for t in ax.get_legend().get_texts()][-1] == "before, at most nodes"


def test_without_a_baseline_the_cost_picture_draws_no_before() -> None:
    (ax,) = cost_figure(_review(before=False)).axes
    assert [t.get_text().strip() for t in ax.texts] == ["0.00-40.00", "3.00", "1.00-2.00"]
    assert len(ax.get_legend().get_texts()) == 2
