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


def plot_training(records: list[dict[str, Any]], out: Path) -> Goodput | None:
    """Loss and step time by step, and goodput over the run, into `out` (PNG)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    stepped = steps_of(records)
    steps = [int(r["step"]) for r in stepped]
    loss = [r.get("loss", r.get("learning/loss")) for r in stepped]
    step_time = [r.get("step_time_s", r.get("perf/step_time_seconds")) for r in stepped]
    axes[0].plot(steps, loss, marker=".")
    axes[0].set(title="loss", xlabel="step")
    axes[1].plot(steps, step_time, marker=".")
    axes[1].set(title="step time (s)", xlabel="step", yscale="log")
    measured: Goodput | None = None
    try:
        measured = goodput(records)
    except ValueError:
        axes[2].text(0.5, 0.5, "no step times of day in this run", ha="center", va="center")
    else:
        elapsed = [e for e, _ in measured.points]
        axes[2].plot(elapsed, [p / e if e else 0 for e, p in measured.points], marker=".")
        axes[2].set(ylim=(0, 1.05))
    axes[2].set(title="goodput (productive / elapsed)", xlabel="elapsed (s)")
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return measured


def plot_cost(review: dict[str, Any], out: Path) -> None:
    """Each node pool's USD/hour at its fewest and its most nodes, after the change (and before, where the review
    has a baseline), into `out` (PNG)."""
    plt = _pyplot()
    pools = review["cost"]["after"]["pools"]
    names = [p["pool"] for p in pools]
    price = [p["usd_per_node_hour"] or 0 for p in pools]  # an unpriced pool (its reason in the review) at 0
    fewest = [n * p["min_nodes"] for n, p in zip(price, pools, strict=True)]
    most = [n * p["max_nodes"] for n, p in zip(price, pools, strict=True)]
    fig, ax = plt.subplots(figsize=(10, max(3, 0.35 * len(pools) + 1)))
    ax.barh(names, most, color="#c6dbef", label="at most nodes")
    ax.barh(names, fewest, color="#2171b5", label="at fewest nodes")
    total = review["cost"]["after"]["usd_per_hour"]
    ax.set(
        title=f"{review['stack']}: node pools {total['fewest']:,.2f}-{total['most']:,.2f} USD/hour",
        xlabel="USD/hour (list prices)",
    )
    ax.invert_yaxis()
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)


def link_from_review(markdown: Path, picture: Path) -> None:
    """Put (or replace) the review's Pictures section, linking `picture` beside it."""
    text = markdown.read_text()
    text = text.split(f"\n{PICTURES}\n", 1)[0].rstrip("\n")
    markdown.write_text(f"{text}\n\n{PICTURES}\n\n![node pool cost over the plan's range]({picture.name})\n")


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
        measured = plot_training(records, picture)
        said = f"goodput {measured.final:.0%} ({measured.redone} step(s) trained again)" if measured else "no goodput"
        print(f"plot: {picture}: loss, step time, {said} over {len(steps_of(records))} step record(s)")
        drawn += 1
    for line in skipped:
        print(f"plot: skipped, not a metrics record: {line}", file=sys.stderr)
    else:
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
