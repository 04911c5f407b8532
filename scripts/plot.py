"""`make plot`: pictures where people look. The local training run's loss, step time and goodput
(`<checkpoint dir>/training.png`, from the run's `metrics.jsonl`), and each review's node pool cost over the
plan's range (`cdktf.out/review/<env>.cost.png`, from `<env>.json`), linked from the review's Markdown.

Goodput, as Google's ML Goodput measures it (workloads/trainer/goodput.py): the share of the run's elapsed time spent
on steps that count. A step trained again after a restart (the work since the last checkpoint, lost) counts once,
its last time; the time between a crash and the resumed run's first step counts as elapsed, not productive.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from scripts.parser import ArgumentParser
from workloads.trainer.goodput import Goodput, goodput, read_records, steps_of

PICTURES = "## Pictures"


def _pyplot() -> Any:
    """matplotlib's pyplot drawing to files (no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def resumed_at(records: list[dict[str, Any]]) -> list[int]:
    """The index, among the step records with a time of day, of each step where training resumed: the first step
    after each start but the first (attempts.jsonl), or a step that is not after the one before it (a rerun from a
    checkpoint)."""
    found: list[int] = []
    index, previous, started, pending = -1, None, 0, False
    for record in records:
        if record.get("event") == "start":
            started += 1
            pending = started > 1
            continue
        if "step" not in record or not isinstance(record.get("time"), int | float):
            continue
        index += 1
        step = int(record["step"])
        if (started > 1 and pending) or (previous is not None and step <= previous):
            found.append(index)
        pending, previous = False, step
    return found


def plot_training(records: list[dict[str, Any]], out: Path, run: str = "") -> Goodput | None:
    """The training figure (training_figure) into `out` (PNG)."""
    fig, measured = training_figure(records, run)
    fig.savefig(out, dpi=80)
    _pyplot().close(fig)
    return measured


def training_figure(records: list[dict[str, Any]], run: str = "") -> tuple[Any, Goodput | None]:
    """Loss and step time by step, and goodput over the run's elapsed time: whole steps on the step axes, a dashed
    line where training resumed, and under the panels what goodput counts and where the rest of the time went."""
    from matplotlib.ticker import MaxNLocator

    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8))
    timed = [r for r in steps_of(records) if isinstance(r.get("time"), int | float)]
    stepped = steps_of(records)
    steps = [int(r["step"]) for r in stepped]
    loss = [r.get("loss", r.get("learning/loss")) for r in stepped]
    step_time = [r.get("step_time_s", r.get("perf/step_time_seconds")) for r in stepped]
    axes[0].plot(steps, loss, marker=".")
    axes[0].set(title="loss", xlabel="step", ylabel="training loss")
    axes[1].plot(steps, step_time, marker=".")
    axes[1].set(title="step time", xlabel="step", ylabel="seconds per step (log scale)", yscale="log")
    resumed = resumed_at(records)
    for ax in axes[:2]:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        for n, index in enumerate(resumed):
            label = "training resumed (steps after it ran again)" if n == 0 and ax is axes[0] else None
            ax.axvline(int(timed[index]["step"]), color="#d62728", linestyle="--", linewidth=1, label=label)
    if resumed:
        axes[0].legend(loc="upper right", fontsize="small")
    measured: Goodput | None = None
    try:
        measured = goodput(records)
    except ValueError:
        axes[2].text(0.5, 0.5, "no step times of day in this run", ha="center", va="center")
    else:
        elapsed = [e for e, _ in measured.points]
        axes[2].plot(elapsed, [p / e if e else 0 for e, p in measured.points], marker=".")
        axes[2].set(ylim=(0, 1.05))
        for index in resumed:
            axes[2].axvline(measured.points[index][0], color="#d62728", linestyle="--", linewidth=1)
        fig.text(
            0.5, 0.01,
            "goodput: the share of the elapsed time spent on steps that count (a step trained again counts once). "
            f"Here {measured.line().removeprefix('goodput ')}",
            ha="center", fontsize="small", wrap=True,
        )  # fmt: skip
    axes[2].set(title="goodput", xlabel="elapsed time (s)", ylabel="productive / elapsed time")
    said = f", goodput {measured.final:.0%}" if measured else ""
    again = f", resumed {len(resumed)} time(s) (dashed)" if resumed else ""
    fig.suptitle(f"{run or 'training run'}: {len(set(steps))} step(s){said}{again}")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig, measured


def _pool_costs(cost: dict[str, Any] | None) -> dict[str, tuple[float, float]]:
    """pool -> (USD/hour at its fewest nodes, at its most), an unpriced pool (its reason in the review) at 0."""
    out = {}
    for p in (cost or {}).get("pools") or []:
        price = p["usd_per_node_hour"] or 0
        out[p["pool"]] = (price * p["min_nodes"], price * p["max_nodes"])
    return out


def plot_cost(review: dict[str, Any], out: Path) -> None:
    """The cost figure (cost_figure) into `out` (PNG)."""
    fig = cost_figure(review)
    fig.savefig(out, dpi=80)
    _pyplot().close(fig)


def cost_figure(review: dict[str, Any]) -> Any:
    """Each node pool's USD/hour at its fewest and its most nodes after the change, the priciest first, each with
    its values; where the review has a baseline, a pool's cost before the change drawn as an outline beside it
    (a pool the change removes: the outline alone)."""
    plt = _pyplot()
    after = _pool_costs(review["cost"]["after"])
    before = _pool_costs(review["cost"].get("before")) if review.get("baseline") else {}
    names = sorted({*after, *before}, key=lambda n: (-max(after.get(n, (0, 0))[1], before.get(n, (0, 0))[1]), n))
    fig, ax = plt.subplots(figsize=(11, max(3, 0.4 * len(names) + 1.5)))
    fewest = [after.get(n, (0, 0))[0] for n in names]
    most = [after.get(n, (0, 0))[1] for n in names]
    ax.barh(names, most, color="#c6dbef", label="after, at most nodes")
    ax.barh(names, fewest, color="#2171b5", label="after, at fewest nodes")
    if before:
        was = [before.get(n, (0, 0))[1] for n in names]
        ax.barh(names, was, fill=False, edgecolor="#d62728", linestyle="--", label="before, at most nodes")
    for y, name in enumerate(names):
        low, high = after.get(name, (0, 0))
        text = f"{low:,.2f}" if low == high else f"{low:,.2f}-{high:,.2f}"
        if name not in after:
            text = "removed"
        if name in before and before[name] != after.get(name):
            old = before[name]
            text += f" (was {old[0]:,.2f}" + ("" if old[0] == old[1] else f"-{old[1]:,.2f}") + ")"
        elif before and name not in before:
            text += " (new)"
        ax.text(max(high, before.get(name, (0, 0))[1]), y, f" {text}", va="center", fontsize="small")
    total = review["cost"]["after"]["usd_per_hour"]
    change = ""
    if before and review["cost"].get("before"):
        old = review["cost"]["before"]["usd_per_hour"]
        change = f" (was {old['fewest']:,.2f}-{old['most']:,.2f})"
    ax.set(
        title=f"{review['stack']}: node pools {total['fewest']:,.2f}-{total['most']:,.2f} USD/hour{change}",
        xlabel="USD per hour at list price (the review's Cost table)",
    )
    ax.set_xlim(0, max([*most, *(b[1] for b in before.values()), 1]) * 1.3)
    ax.invert_yaxis()
    ax.legend(loc="lower right")
    fig.tight_layout()
    return fig


def link_from_review(markdown: Path, picture: Path) -> None:
    """Put (or replace) the review's Pictures section: the picture, and in words what it draws (a pull request's
    comment does not show a picture linked by a relative path)."""
    text = markdown.read_text()
    text = text.split(f"\n{PICTURES}\n", 1)[0].rstrip("\n")
    words = (
        "Each node pool's USD/hour at its fewest and most nodes after this change, the priciest first, with the cost "
        "before it outlined where there is a baseline: the values of the Cost table above, drawn."
    )
    markdown.write_text(f"{text}\n\n{PICTURES}\n\n![node pool cost over the plan's range]({picture.name})\n\n{words}\n")


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m scripts.plot", description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint-dir", type=Path, default=Path(".cache/canary"), help="the run (make: CKPT_DIR=)")
    parser.add_argument("--outdir", type=Path, default=Path("cdktf.out"), help="the plan's output (its reviews)")
    args = parser.parse_args(argv)
    drawn = 0
    metrics = args.checkpoint_dir / "metrics.jsonl"
    skipped: list[str] = []
    if metrics.exists() and (records := read_records(metrics, skipped)):
        picture = args.checkpoint_dir / "training.png"
        measured = plot_training(records, picture, args.checkpoint_dir.name)
        said = f"goodput {measured.final:.0%} ({measured.redone} step(s) trained again)" if measured else "no goodput"
        print(f"plot: {picture}: loss, step time, {said} over {len(steps_of(records))} step record(s)")
        drawn += 1
    for line in skipped:
        print(f"plot: skipped, not a metrics record: {line}", file=sys.stderr)
    if not drawn:
        print(f"plot: no training run in {args.checkpoint_dir} (make train-local writes {metrics})", file=sys.stderr)
    for facts in sorted((args.outdir / "review").glob("*.json")):
        review = json.loads(facts.read_text())
        if not review.get("cost", {}).get("after", {}).get("pools"):
            continue
        picture = facts.with_name(f"{facts.stem}.cost.png")
        plot_cost(review, picture)
        markdown = facts.with_suffix(".md")
        if markdown.exists():
            link_from_review(markdown, picture)
        print(f"plot: {picture}: node pool cost over the plan's range (linked from {markdown})")
        drawn += 1
    if not drawn:
        print("error: nothing to plot: run make train-local or make plan first", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
