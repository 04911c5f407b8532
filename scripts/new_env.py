"""A new environment file from an existing one:
python -m scripts.new_env <name> --from dev --project <id> --project-number <n> --region <region>

Writes infra/environments/<name>.yaml (PLATFORM_ENVIRONMENTS_DIR: another directory) with the project, number,
region, zones, registry and image paths (placeholders until `make image`), and the names that carry the
environment's name rewritten; every other setting and comment comes from the source. The file must load as
`make plan` loads it, or nothing is written.

Exit codes: 0 written; 2 refused (the name exists, a machine the source uses has no zone in the region, or
the result does not load), nothing written.
"""

from __future__ import annotations

import argparse
import sys

from infra.config import ConfigError, environment_file, environments_dir
from infra.delivery.new_env import NewEnvironmentError, write_new_environment
from scripts.parser import ArgumentParser, refuse


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m scripts.new_env", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("name")
    parser.add_argument("--from", dest="source", default="dev", help="the environment to start from (dev)")
    parser.add_argument("--project", required=True, help="the new environment's project id")
    parser.add_argument("--project-number", required=True, help="its number (gcloud projects describe <id>)")
    parser.add_argument("--region", required=True, help="its region, e.g. us-central1")
    args = parser.parse_args(argv)
    directory = environments_dir()
    target = directory / f"{args.name}.yaml"
    try:
        placement = write_new_environment(
            environment_file(args.source, directory, argument="FROM"),
            target,
            name=args.name,
            project=args.project,
            project_number=args.project_number,
            region=args.region,
        )
    except (ConfigError, NewEnvironmentError, FileNotFoundError) as err:
        return refuse(err, then="nothing was written")
    print(f"wrote {target}: zones {', '.join(placement.zones)}")
    for who, (old, new) in placement.substitutes.items():
        print(
            f"  {who}: {new} instead of {old}, which infra/catalogue/zones.yaml does not list for {args.region} "
            "(if Compute Engine offers it there, add its zones to the catalogue and run this again)"
        )
    for who, (old, new) in placement.reservations.items():
        key = who.split(".")[1]
        if old == new:
            print(
                f"  {who}: {new}, shared from its project: check it is shared with {args.project} "
                f"in {placement.zone_of(key)}"
            )
        else:
            print(
                f"  {who}: {new} ({args.source} draws on {old}): reserve it in {placement.zone_of(key)} "
                f"before make deploy (make preflight ENV={args.name} checks it)"
            )
    print(
        f"next: make plan (it plans {args.name} with the others), then make images ENV={args.name} "
        "(docs/new-environment.md)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
