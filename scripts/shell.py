"""`python -m scripts.shell`: every generated shell script, checked and run as its host runs it.

    check [<outdir>]  for every environment: each generated script (infra/shell) through ShellCheck, run under bash
                      with `set -euo pipefail` against its host's facts (stand-ins only for cloud and host commands,
                      the real pinned files it sources where fetched), and held to the host rules
                      (infra/rules/host_scripts.py); with <outdir>, the scripts are written to <outdir>/scripts/<env>/
                      and the charts' scripts (from <outdir>/rendered) are checked too; `--part generated|charts`
                      checks one of the two (`make plan` runs them as two steps)
    list              each environment's scripts and their hosts
    fetch             download the pinned upstream files scripts source into .cache/pinned-scripts (sha256 verified)

Exit codes: 0 every script passed; 1 a script failed (each failure named with its script, host fact and source), a
failed download or a pinned file with another checksum; 2 a bad environment file.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from infra.catalogue.hosts import HOSTS
from infra.config import ConfigError, environments_dir
from infra.shell import GeneratedScript, generated_scripts, pinned
from infra.shell.charts import rendered_scripts
from infra.synth.load import load_planned
from scripts.parser import ArgumentParser, refuse


def check(scripts: list[GeneratedScript]) -> tuple[list[str], dict[str, str], int]:
    """(failure lines, which pinned file each key used, how many rules ran) of `scripts`."""
    from infra.rules import check_script, rules_for
    from infra.shell.run import run_script, shellcheck

    failures: list[str] = []
    used: dict[str, str] = {}
    # A script that two environments generate alike (everything but the environment's name) runs once. ShellCheck
    # (one process) and the runs (each a separate process, several at a time) go side by side: the threads mostly
    # wait on their processes, so there are more of them than cores.
    unique = {dataclasses.replace(s, env=""): s for s in scripts}
    with ThreadPoolExecutor(max_workers=2 * max(2, os.cpu_count() or 2)) as pool:
        linted = pool.submit(shellcheck, scripts)
        outcomes = dict(zip(unique, pool.map(run_script, unique.values()), strict=True))
        for label, findings in linted.result().items():
            failures += [f"{label}: ShellCheck: {finding}" for finding in findings]
    for script in scripts:
        outcome = outcomes[dataclasses.replace(script, env="")]
        used.update(outcome.pinned)
        if not outcome.ok:
            sourced = "".join(
                f"; it sources {key} ({pinned.pinned()[key].cites}; {which})" for key, which in outcome.pinned.items()
            )
            failures.append(
                f"{script.label}: exit {outcome.returncode} under bash -euo pipefail on host {script.host} "
                f"(infra/catalogue/hosts.py: {HOSTS[script.host].description}){sourced}:\n    "
                + "\n    ".join(outcome.output.strip().splitlines()[-6:])
            )
        failures += [v.line(script.env) for v in check_script(script)]
    return failures, used, len(rules_for("script"))


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m scripts.shell",
        description="Every generated shell script: ShellCheck, bash -euo pipefail on its host's facts, host rules.",
        epilog="Exit codes: 0 every script passed, 1 a script failed (or a download), 2 a bad environment file.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    check_parser = sub.add_parser("check", help="check and run every environment's scripts")
    check_parser.add_argument("outdir", nargs="?", type=Path, help="also write the scripts to <outdir>/scripts/<env>")
    check_parser.add_argument(
        "--part",
        choices=["all", "generated", "charts"],
        default="all",
        help="the scripts generated from the environment files, the charts' scripts (from the releases the rules "
        "step rendered into <outdir>), or all (make plan runs the two parts as two steps)",
    )
    sub.add_parser("list", help="each environment's scripts and their hosts")
    sub.add_parser("fetch", help="download the pinned upstream files into .cache/pinned-scripts")
    args = parser.parse_args(argv)
    if args.command == "fetch":
        try:
            count = pinned.fetch()
        except (OSError, ValueError) as err:
            return refuse(err, 1)
        print(f"pinned-scripts: {count} file(s) in {pinned.FETCHED}")
        return 0
    try:
        envs = load_planned(environments_dir())
    except ConfigError as err:
        return refuse(err)
    part = getattr(args, "part", "all")
    scripts = [s for env in envs.values() for s in generated_scripts(env)] if part != "charts" else []
    if args.command == "check" and args.outdir is not None and part != "generated":
        # The charts' scripts, from the releases the rules step rendered into the same output (make plan).
        scripts += [s for env in envs.values() for s in rendered_scripts(args.outdir, env.name)]
    if args.command == "list":
        for script in scripts:
            print(f"{script.label}  (host {script.host})")
        return 0
    if args.outdir is not None:
        for script in scripts:
            target = args.outdir / "scripts" / script.env / script.name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(script.text)
    try:
        failures, used, rules = check(scripts)
    except pinned.PinnedFileMismatch as err:
        return refuse(err, 1)
    for key, which in sorted(used.items()):
        print(f"scripts: pinned file {key} ({pinned.pinned()[key].cites}): {which}")
    for line in failures:
        print(f"error: {line}", file=sys.stderr)
    verdict = "no failures" if not failures else f"{len(failures)} failure(s)"
    noun = {
        "all": "generated scripts",
        "generated": "scripts generated from the environment files",
        "charts": "scripts of the charts",
    }[part]
    print(
        f"scripts: {len(scripts)} {noun} run and checked (ShellCheck, bash -euo pipefail, host facts: {rules} host "
        f"rules) in {len(envs)} environments: {verdict}"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
