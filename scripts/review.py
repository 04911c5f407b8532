"""Plan review for pull requests.

  python -m scripts.review --plan plan.json [--stack platform-dev]
      review a real plan (`terraform show -json`) and print Markdown
  python -m scripts.review [--outdir cdktf.out] [--base <baseline cdktf.out>]
      review the synthesized stacks offline, write <outdir>/review/<env>.md and print each one's path and
      what its node pools cost per hour and per month (fewest-most nodes; with --base, the change)

Exit codes: 0 nothing blocks; 3 the gate stops a change: a protected stateful
resource (bucket, cluster, registry) destroyed or replaced, or, until confirmed
for its resource, an accelerator slice pool replaced, deleted or moved, a
namespace deleted, a Helm release uninstalled or a controller bumped to a
version whose CRDs differ; 2 bad input.

Confirm a gated change by its address: `--confirm-change ADDRESS` (repeatable)
or CONFIRM_CHANGE="ADDRESS ..." in the environment (`make plan CONFIRM_CHANGE=...`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from infra.cdk.layout import stack_files
from infra.config import ConfigError, Environment
from infra.delivery import confirmations
from infra.review import BLOCKED, PlanFormatError, StackReview, cost_summary, render, review_plan, write_reviews
from infra.settings import SettingError
from scripts.parser import ArgumentParser, refuse


def _file_confirmations(outdir: Path) -> tuple[dict[str, list[str]], dict[str, tuple[Environment, dict[str, Any]]]]:
    """{stack: addresses its environment file confirms}, {stack: (environment, stack body)}; prints stale entries."""
    from scripts.apply import environment_of

    by_stack: dict[str, list[str]] = {}
    known: dict[str, tuple[Environment, dict[str, Any]]] = {}
    for path in stack_files(outdir, "platform-*"):
        stack = path.parent.name
        env = environment_of(stack)
        if env is None:
            continue
        body = json.loads(path.read_text())
        known[stack] = (env, body)
        by_stack[stack], stale = confirmations.from_file(env, body)
        for line in stale:
            print(f"note: {line}", file=sys.stderr)
    return by_stack, known


def _settled(
    in_files: dict[str, list[str]], known: dict[str, tuple[Environment, dict[str, Any]]]
) -> dict[str, list[str]]:
    """{stack: the entries of in_files merged before the change} (confirmations.settled)."""
    return {stack: confirmations.settled(known[stack][0], found, known[stack][1]) for stack, found in in_files.items()}


def _report_blocking(
    reviews: list[StackReview], known: dict[str, tuple[Environment, dict[str, Any]]] | None = None
) -> int:
    blocked = False
    for review in reviews:
        env_body = (known or {}).get(review.stack)
        for change in review.blocking:
            blocked = True
            env, body = env_body if env_body is not None else (None, {})
            how = confirmations.how_to_confirm(
                change.address, change.confirmable, env, body, change.kinds, change.before_values
            )
            print(
                f"BLOCKING: {change.action} {change.address} ({review.stack}): {change.blocked}; {how}",
                file=sys.stderr,
            )
        for change in review.gated:
            if change not in review.blocking:
                print(f"confirmed: {change.action} {change.address} ({review.stack})", file=sys.stderr)
    return BLOCKED if blocked else 0


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m scripts.review", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--plan", type=Path, default=None, help="a plan as `terraform show -json` prints it")
    parser.add_argument("--stack", default=None, help="the stack the plan belongs to (default: the plan's file name)")
    parser.add_argument("--outdir", type=Path, default=Path("cdktf.out"))
    parser.add_argument("--base", type=Path, default=None, help="a baseline cdktf.out to compare with")
    parser.add_argument("--print", action="store_true", help="offline mode: also print the Markdown")
    parser.add_argument(
        "--confirm-change",
        action="append",
        default=re.split(r"[\s,]+", os.environ.get("CONFIRM_CHANGE", "").strip()),
        metavar="ADDRESS",
        help="let one gated change through (its resource address); also CONFIRM_CHANGE in the environment",
    )
    args = parser.parse_args(argv)
    confirmed = [a for a in args.confirm_change if a]
    if args.plan is not None:
        try:
            plan = json.loads(args.plan.read_text())
            review = review_plan(args.stack or args.plan.stem, plan, confirmed)
        except (OSError, json.JSONDecodeError, PlanFormatError) as err:
            print(f"error: {args.plan}: {err}", file=sys.stderr)
            return 2
        print(render(review), end="")
        return _report_blocking([review])
    try:
        in_files, known = _file_confirmations(args.outdir)
        reviews = write_reviews(args.outdir, args.base, confirmed, _settled(in_files, known), in_files)
    except (ConfigError, PlanFormatError, SettingError) as err:
        return refuse(err)
    except FileNotFoundError as err:
        return refuse(err)
    for review in reviews:
        env = review.stack.removeprefix("platform-")
        path = args.outdir / "review" / f"{env}.md"
        if args.print:
            print(path.read_text())
        else:
            print(f"review: {path}: {cost_summary(review)}")
        if review.stack in known:
            gated = [c.address for c in review.gated]
            for line in confirmations.unused(known[review.stack][0], in_files.get(review.stack, []), gated):
                print(f"note: {line}", file=sys.stderr)
    return _report_blocking(reviews, known)


if __name__ == "__main__":
    sys.exit(main())
