"""The plan comment of one environment's review, for the pull request workflow.

  python -m scripts.comment --env dev <review.md> > comment.md

The link is this run's page, from GitHub Actions' GITHUB_SERVER_URL, GITHUB_REPOSITORY and GITHUB_RUN_ID.
Exit codes: 0 written, 2 bad input (no such review file).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from infra.delivery.comment import plan_comment, this_run
from scripts.parser import ArgumentParser, refuse


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m scripts.comment", description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", required=True)
    parser.add_argument("review", type=Path, help="the review's Markdown (the real plan's, else the offline one)")
    args = parser.parse_args(argv)
    try:
        review = args.review.read_text()
    except OSError as err:
        return refuse(f"{args.review}: {err.strerror or err}")
    sys.stdout.write(plan_comment(args.env, review, this_run(os.environ)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
