"""`make blue-green`: replace a GKE slice beside the old one, in two steps (infra/delivery/blue_green.py).

    python -m scripts.blue_green <env> <slice> [--topology T] [--capacity TYPE] [--reservation R] [--dry-run]
    python -m scripts.blue_green <env> <slice> --finish [--dry-run]

Step 1 copies the slice under `<slice>-green` with the new shape; deploy it. Step 2 moves every workload to the
green slice and removes the old one; deploy again. Each step is a validated write of the file; a dry run prints
the diff. Exit codes: 0 written or a dry run; 2 refused (nothing written).
"""

from __future__ import annotations

import sys

from infra.config import ConfigError, environment_file
from infra.delivery.blue_green import BlueGreenError, finish, green_key, start
from infra.delivery.release_file import write_validated
from scripts.parser import ArgumentParser, refuse


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m scripts.blue_green", description=__doc__.split("\n\n")[0])
    parser.add_argument("env", help="the environment (infra/environments/<env>.yaml)")
    parser.add_argument("slice", help="the GKE slice to replace (a key of slices)")
    parser.add_argument("--topology", help="step 1: the new slice's topology")
    parser.add_argument("--capacity", help="step 1: the new slice's capacity type")
    parser.add_argument("--reservation", help="step 1: the reservation the new slice consumes")
    parser.add_argument("--finish", action="store_true", help="step 2: move the workloads, remove the old slice")
    parser.add_argument("--dry-run", action="store_true", help="print the change; write nothing")
    args = parser.parse_args(argv)
    changes = {k: v for k, v in (("topology", args.topology), ("capacity", args.capacity),
                                 ("reservation", args.reservation)) if v}  # fmt: skip
    try:
        path = environment_file(args.env)
        if args.finish and changes:
            raise BlueGreenError("--finish moves the workloads; the new shape was given at the start")
        step = finish(path, args.slice) if args.finish else start(path, args.slice, changes=changes)
    except (ConfigError, BlueGreenError) as err:
        return refuse(err, then="nothing was written")
    print(step.diff, end="")
    for line in step.said:
        print(f"blue-green: {line}")
    if args.dry_run:
        print(f"dry run: {path} not written")
        return 0
    write_validated(path, step.new_text)
    green = green_key(args.slice)
    if args.finish:
        print(f"next: make plan ENV={args.env} (the workloads move to {green}; the gate stops the old pool's "
              f"deletion until confirmed), then make deploy ENV={args.env}")  # fmt: skip
    else:
        print(f"next: make plan ENV={args.env} (a pool created, none replaced), make deploy ENV={args.env}; once "
              f"{green} runs: make blue-green ENV={args.env} SLICE={args.slice} FINISH=1")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
