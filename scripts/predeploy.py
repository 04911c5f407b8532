"""Refuse to deploy an environment whose release still holds placeholder images.

Usage: python -m scripts.predeploy <env>   (exit 0: deployable, 2: refused)
"""

from __future__ import annotations

import sys

from infra.config import ConfigError, environments_dir, load_environment


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 1:
        print("usage: python -m scripts.predeploy <env>", file=sys.stderr)
        return 2
    path = environments_dir() / f"{args[0]}.yaml"
    try:
        env = load_environment(path)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    placeholders = env.placeholder_images()
    if placeholders:
        names = ", ".join(placeholders)
        print(
            f"error: {path}: release.images: {names} still at the placeholder digest sha256:000...; "
            f"build and pin them first (make image IMAGE=<name> ENV={env.name})",
            file=sys.stderr,
        )
        return 2
    print(f"platform-{env.name}: every release image is pinned to a built digest")
    return 0


if __name__ == "__main__":
    sys.exit(main())
