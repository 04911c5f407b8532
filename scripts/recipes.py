"""`python -m scripts.recipes [--env ENV] [--json]`: per environment, which training recipes run on its training slice.

For each environment with a Ray training cluster (`training:`), every recipe of workloads/trainer/recipes.yaml
on the training slice: runs (with the compiler's per-chip memory, HBM and headroom from
workloads/trainer/compiled.yaml where the recipe was compiled for that shape), or why not; the recipe the
environment names (`training.recipe`) is marked `*`. `--json`: the same verdicts as one JSON document, by
environment (null for one without a Ray training cluster on TPU). `make plan` prints it in its rules step; an
environment whose named recipe does not run there is refused when it loads (rule
maxtext.recipe-runs-on-training-slice).

Exit codes: 0 listed; 2 an environment that does not load (its file, field and value on stderr), or usage.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from infra import settings
from infra.config import ConfigError, environments_dir
from infra.synth.load import load_all, load_named
from scripts.parser import ArgumentParser, refuse
from workloads.trainer.compiled import environment_recipes, environment_recipes_json


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m scripts.recipes",
        description=__doc__.split("\n\n")[0],
        epilog="exit codes: 0 listed; 2 an environment that does not load, or usage",
    )
    parser.add_argument("--env", default=settings.ENVS.raw(), help="environments, comma-separated (PLATFORM_ENVS)")
    parser.add_argument("--environments", type=Path, default=None, help="the environments dir (infra/environments)")
    parser.add_argument("--json", action="store_true", help="one JSON document: each environment's verdicts")
    args = parser.parse_args(argv)
    directory = args.environments or environments_dir()
    only = [name for name in (args.env or "").split(",") if name]
    try:
        envs = {n: load_named(n, directory) for n in only} if only else load_all(directory)
    except ConfigError as err:
        return refuse(err)
    if args.json:
        print(json.dumps({name: environment_recipes_json(env) for name, env in envs.items()}, indent=1))
        return 0
    for env in envs.values():
        for line in environment_recipes(env):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
