"""Build, push and pin an image: python -m scripts.image <name> <env> [--dry-run]

Builds with the local Docker engine when one answers, else with Cloud Build;
tags the image with the git commit in the environment's Artifact Registry
repository; writes the pushed digest to `release.images.<name>` of
`infra/environments/<env>.yaml`. `--dry-run` prints the commands and the pin
and runs nothing.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from collections.abc import Sequence

from infra.config import ConfigError, environments_dir
from infra.delivery.images import ImageError, build, docker_answers, git_commit, plan_build


def _run(command: Sequence[str]) -> str:
    """Run a step; its output is shown (on stderr) and returned."""
    print(f"+ {shlex.join(command)}", file=sys.stderr)
    out = subprocess.run(list(command), check=True, text=True, stdout=subprocess.PIPE).stdout
    sys.stderr.write(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.image", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("name")
    parser.add_argument("env")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    try:
        dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True, check=True).stdout
        if dirty.strip() and not args.dry_run:
            raise ImageError(
                "the working tree has uncommitted changes; an image is tagged with its commit: commit first"
            )
        plan = plan_build(
            args.name, args.env, commit=git_commit(), use_docker=docker_answers(), environments=environments_dir()
        )
        pin, change = build(plan, run=_run, dry_run=args.dry_run)
    except (ConfigError, ImageError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as err:
        print(f"error: {shlex.join(err.cmd)} failed (exit {err.returncode}); nothing was pinned", file=sys.stderr)
        return 1
    if args.dry_run:
        print(f"# dry run: {plan.engine} build of {plan.image}; nothing runs")
        if plan.cloudbuild is not None:
            print("# cloudbuild.yaml:")
            print("#   " + json.dumps(plan.cloudbuild))
        for command in plan.commands:
            print(shlex.join(command))
        print(shlex.join(plan.digest_command))
        print(f"# would pin in {plan.env_path}: release.images.{plan.name}: {pin}")
    else:
        print(change, end="")
        print(f"pinned release.images.{plan.name}: {pin}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
