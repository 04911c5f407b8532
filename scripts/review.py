"""Write the offline plan review of every synthesized stack.

Usage: python -m scripts.review [--outdir cdktf.out] [--base <baseline cdktf.out>]
Exit codes: 0 nothing blocks, 3 a protected resource would be destroyed or
replaced, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from infra.review import BLOCKED, write_reviews


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--outdir", type=Path, default=Path("cdktf.out"))
    parser.add_argument("--base", type=Path, default=None, help="a baseline cdktf.out to compare with")
    args = parser.parse_args(argv)
    try:
        reviews = write_reviews(args.outdir, args.base)
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    blocked = False
    for review in reviews:
        env = review.stack.removeprefix("platform-")
        print(f"review: {args.outdir / 'review' / (env + '.md')}")
        for change in review.blocking:
            blocked = True
            print(f"  BLOCKING: {change.action} {change.address}", file=sys.stderr)
    return BLOCKED if blocked else 0


if __name__ == "__main__":
    sys.exit(main())
