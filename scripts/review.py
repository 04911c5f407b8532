"""Plan review for pull requests.

  python -m scripts.review --plan plan.json [--stack platform-dev]
      review a real plan (`terraform show -json`) and print Markdown
  python -m scripts.review [--outdir cdktf.out] [--base <baseline cdktf.out>]
      review the synthesized stacks offline, write <outdir>/review/<env>.md

Exit codes: 0 nothing blocks; 3 a protected stateful resource (bucket,
cluster, registry) would be destroyed or replaced; 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from infra.review import BLOCKED, PlanFormatError, StackReview, render, review_plan, write_reviews


def _report_blocking(reviews: list[StackReview]) -> int:
    blocked = False
    for review in reviews:
        for change in review.blocking:
            blocked = True
            print(f"BLOCKING: {change.action} {change.address} ({review.stack})", file=sys.stderr)
    return BLOCKED if blocked else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.review", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--plan", type=Path, default=None, help="a plan as `terraform show -json` prints it")
    parser.add_argument("--stack", default=None, help="the stack the plan belongs to (default: the plan's file name)")
    parser.add_argument("--outdir", type=Path, default=Path("cdktf.out"))
    parser.add_argument("--base", type=Path, default=None, help="a baseline cdktf.out to compare with")
    parser.add_argument("--print", action="store_true", help="offline mode: also print the Markdown")
    args = parser.parse_args(argv)
    if args.plan is not None:
        try:
            plan = json.loads(args.plan.read_text())
            review = review_plan(args.stack or args.plan.stem, plan)
        except (OSError, json.JSONDecodeError, PlanFormatError) as err:
            print(f"error: {args.plan}: {err}", file=sys.stderr)
            return 2
        print(render(review), end="")
        return _report_blocking([review])
    try:
        reviews = write_reviews(args.outdir, args.base)
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for review in reviews:
        env = review.stack.removeprefix("platform-")
        path = args.outdir / "review" / f"{env}.md"
        if args.print:
            print(path.read_text())
        else:
            print(f"review: {path}")
    return _report_blocking(reviews)


if __name__ == "__main__":
    sys.exit(main())
