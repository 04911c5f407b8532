"""Promote a tested release: python -m scripts.promote <from> <to> [--dry-run]

Copies the release pins (image digests, chart and controller versions) from
one environment file to the other after checking that every image is an
immutable sha256 digest from the source environment's registry; copies the
images into the target registry; rewrites the target file keeping its
comments and order; prints the diff. A second run changes nothing.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from collections.abc import Sequence

from infra.config import ConfigError, environments_dir
from infra.delivery.promote import PromotionError, promote
from scripts.parser import ArgumentParser, refuse


def _run(command: Sequence[str]) -> None:
    print(f"+ {shlex.join(command)}", file=sys.stderr)
    subprocess.run(list(command), check=True)


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m scripts.promote", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("source")
    parser.add_argument("target")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    try:
        promotion = promote(args.source, args.target, dry_run=args.dry_run, run=_run, environments=environments_dir())
    except (ConfigError, PromotionError) as err:
        return refuse(err, then="nothing was changed")
    except subprocess.CalledProcessError as err:
        print(f"error: {shlex.join(err.cmd)} failed (exit {err.returncode}); nothing was changed", file=sys.stderr)
        return 1
    if not promotion.changed:
        print(f"{promotion.target} already runs {promotion.source}'s release: nothing to change")
        return 0
    prefix = "# dry run: would run" if args.dry_run else "# ran"
    for command in promotion.copies:
        print(f"{prefix}: {shlex.join(command)}")
    print(promotion.diff, end="")
    if args.dry_run:
        print(f"# dry run: {promotion.target_path} not written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
