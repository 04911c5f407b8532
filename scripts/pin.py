"""`make pin` and `make rollback`: set one release pin of an environment, or put it back to its previous value.

    python -m scripts.pin <env> <field> <value> [--dry-run]     make pin ENV= FIELD= VALUE= [DRY_RUN=1]
    python -m scripts.pin <env> <field> --rollback [--dry-run]  make rollback ENV= FIELD= [DRY_RUN=1]

<field> is release.controllers.<name>, release.charts.<name> or release.images.<name>. The file keeps its
comments and order and is validated with every environment before it is written; a dry run prints the diff and
writes nothing. The rollback's previous value is the newest one the file's git history holds that differs from
now. Then `make plan` shows the change in the review (a controller's new CRDs included) and `make deploy` applies
it; docs/operations.md, "Pin and roll back".

Exit codes: 0 written, or nothing to change, or a dry run; 2 a refused field, value or environment.
"""

from __future__ import annotations

import sys

from infra.config import ConfigError, environment_file
from infra.delivery.pins import PinError, apply, plan_pin, plan_rollback
from scripts.parser import ArgumentParser, refuse


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m scripts.pin", description=__doc__.split("\n\n")[0])
    parser.add_argument("env", help="the environment (infra/environments/<env>.yaml)")
    parser.add_argument("field", help="release.controllers.<name>, release.charts.<name> or release.images.<name>")
    parser.add_argument("value", nargs="?", help="the new value (not with --rollback)")
    parser.add_argument("--rollback", action="store_true", help="put the field back to its previous value (git)")
    parser.add_argument("--dry-run", action="store_true", help="print the change; write nothing")
    args = parser.parse_args(argv)
    if args.rollback == (args.value is not None):
        print(f"{parser.prog}: error: give VALUE, or --rollback (not both, not neither)", file=sys.stderr)
        return 2
    try:
        path = environment_file(args.env)
        if args.rollback:
            change, commit = plan_rollback(path, args.field)
            print(f"{change.field}: back to {change.new!r}, its value before {change.old!r} (commit {commit[:12]})")
        else:
            change = plan_pin(path, args.field, args.value)
    except (ConfigError, PinError) as err:
        return refuse(err, then="nothing was written")
    if change.old == change.new:
        print(f"{change.field}: already {change.new!r}; nothing to change")
        return 0
    print(change.diff, end="")
    if args.dry_run:
        print(f"dry run: {path} not written")
        return 0
    apply(change)
    print(f"{path}: {change.field} {change.old!r} -> {change.new!r}; next: make plan (the review shows the change)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
