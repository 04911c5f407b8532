"""Build, push and pin images: python -m scripts.image <name> <env> [--dry-run]
                                    python -m scripts.image --all <env> [--dry-run]

Builds with the local Docker engine when one answers, else with Cloud Build;
tags the image with the git commit in the environment's Artifact Registry
repository; writes the pushed digest to `release.images.<name>` of
`infra/environments/<env>.yaml`. `--all` builds every image of
images/images.yaml in turn and pins all their digests in one write of the
environment file, after the last build: a failed build leaves the file as it
was. A working tree with uncommitted changes is refused (the tag is the
commit), `--dry-run` too; `--dry-run` prints the commands and the pins and
runs nothing.

Exit codes: 0 built and pinned (or dry run); 1 a build command failed (nothing pinned); 2 bad input or
uncommitted changes.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from collections.abc import Sequence

from infra.config import ConfigError, environments_dir
from infra.delivery.images import (
    CATALOGUE,
    ImageBuild,
    ImageError,
    build_all,
    check_image_name,
    docker_answers,
    git_commit,
    load_catalogue,
    plan_build,
    uncommitted,
)
from infra.synth.load import load_named
from scripts.parser import ArgumentParser, refuse


def _run(command: Sequence[str]) -> str:
    """Run a step; its output is shown (on stderr) and returned."""
    print(f"+ {shlex.join(command)}", file=sys.stderr)
    out = subprocess.run(list(command), check=True, text=True, stdout=subprocess.PIPE).stdout
    sys.stderr.write(out)
    return out


def _show_dry_run(plan: ImageBuild, pin: str) -> None:
    print(f"# dry run: {plan.engine} build of {plan.image}; nothing runs")
    if plan.cloudbuild is not None:
        print("# cloudbuild.yaml:")
        print("#   " + json.dumps(plan.cloudbuild))
    for command in plan.commands:
        print(shlex.join(command))
    print(shlex.join(plan.digest_command))
    print(f"# would pin in {plan.env_path}: release.images.{plan.name}: {pin}")


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m scripts.image", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("name", nargs="?", help="an image of images/images.yaml (not with --all)")
    parser.add_argument("env", nargs="?", help="the environment whose registry and file it goes to")
    parser.add_argument("--all", action="store_true", help="every image of images/images.yaml, pinned in one write")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    if args.all and args.env is not None:
        print(
            f"{parser.prog}: error: --all builds every image: give the environment alone (IMAGE={args.name!r} "
            f"ENV={args.env!r})",
            file=sys.stderr,
        )
        return 2
    # With --all the one word is the environment; a missing word is an empty value, refused by its name below.
    image, env = (None, args.name or "") if args.all else (args.name or "", args.env or "")
    try:
        # The arguments first: a refusal names the one at fault, whatever state the working tree is in.
        catalogue = load_catalogue()
        names = sorted(catalogue) if image is None else [image]
        if not names:
            raise ImageError(f"{CATALOGUE}: no images")
        for name in names:
            check_image_name(name, catalogue)
        load_named(env, environments_dir())
        dirty = uncommitted()
        if dirty:
            raise ImageError(
                f"the working tree has {len(dirty)} uncommitted change(s) ({', '.join(d[3:] for d in dirty[:3])}"
                f"{', ...' if len(dirty) > 3 else ''}); an image is tagged with its commit: commit first"
                + (" (a dry run refuses what the build would)" if args.dry_run else "")
            )
        commit, use_docker = git_commit(), docker_answers()
        plans = [
            plan_build(name, env, commit=commit, use_docker=use_docker, environments=environments_dir())
            for name in names
        ]
        pins, change = build_all(plans, run=_run, dry_run=args.dry_run)
    except (ConfigError, ImageError) as err:
        return refuse(err)
    except subprocess.CalledProcessError as err:
        print(
            f"error: {shlex.join(err.cmd)} failed (exit {err.returncode}); nothing was pinned"
            + (" (the images built before it are pushed, not pinned)" if len(names) > 1 else ""),
            file=sys.stderr,
        )
        return 1
    if args.dry_run:
        for plan in plans:
            _show_dry_run(plan, pins[plan.name])
        return 0
    print(change, end="")
    for name, pin in pins.items():
        print(f"pinned release.images.{name}: {pin}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
