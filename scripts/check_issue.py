"""A scheduled check's issue: one per check and environment, opened or updated while the check finds something and
closed by the first run that finds nothing (.github/workflows/drift.yml, cost.yml).

  python -m scripts.check_issue --check drift|cost --env <env> --code <the check's exit code> --report <its output>

`drift` (make drift): titled `Drift: platform-<env>`, code 2 when something changed outside Terraform. `cost` (make
cost): titled `Over budget: platform-<env>`, code 2 when a team or the project is over its budget or forecast to
pass it. Code 2: the open issue's body becomes the report, or a new issue is opened with it; code 0: the open
issue, if any, is closed with a comment. With GitHub's CLI (`gh`, on every hosted runner; GH_TOKEN with issues:
write), in the repository GITHUB_REPOSITORY names. Exit 0, or `gh`'s code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from infra.delivery.comment import this_run
from scripts.parser import ArgumentParser


@dataclass(frozen=True)
class Check:
    title: str
    found: str  # the issue's first paragraph: what the check found ({run}: the run's page, {env})
    then: str  # what a person does about it
    nothing: str  # the closing comment: "<nothing> in the check of <run>."


CHECKS = {
    "drift": Check(
        "Drift: platform-{env}",
        "The scheduled drift check of {run} found changes made outside Terraform: the next deploy of platform-{env} "
        "would change them back.",
        "Keep a change by committing it to the environment file; revert it with the next deploy.",
        "Nothing drifted",
    ),
    "cost": Check(
        "Over budget: platform-{env}",
        "The scheduled cost check of {run} found a team or the project of platform-{env} over its budget or "
        "forecast to pass it this month (GKE cost allocation's namespaces in the billing export).",
        "Lower what the team runs (its quota, its jobs, its servers' replicas) or raise its budget "
        "(teams.<team>.budget, monitoring.budget) in the environment file.",
        "Every budget holds",
    ),
}


def _gh(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    repo = os.environ.get("GITHUB_REPOSITORY")
    argv = ["gh", *args, *(["--repo", repo] if repo else [])]
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)


def open_issue(title: str) -> int | None:
    """The number of the open issue titled exactly `title`, or None."""
    found = _gh("issue", "list", "--state", "open", "--search", f'"{title}" in:title', "--json", "number,title")
    if found.returncode:
        raise RuntimeError(f"gh issue list: {found.stderr.strip()}")
    return next((i["number"] for i in json.loads(found.stdout or "[]") if i.get("title") == title), None)


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m scripts.check_issue", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", required=True, choices=sorted(CHECKS))
    parser.add_argument("--env", required=True)
    parser.add_argument("--code", type=int, required=True, choices=[0, 2], help="the check's exit code")
    parser.add_argument("--report", type=Path, required=True, help="the check's output")
    args = parser.parse_args(argv)
    check = CHECKS[args.check]
    title = check.title.format(env=args.env)
    run = this_run(os.environ)
    try:
        number = open_issue(title)
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if args.code == 0:
        if number is None:
            print(f"{args.check}: {title}: {check.nothing.lower()}, no issue open")
            return 0
        done = _gh("issue", "close", str(number), "--comment", f"{check.nothing} in the check of {run}.")
        said = f"closed #{number}"
    else:
        report = args.report.read_text() if args.report.is_file() else f"(the {args.check} check wrote no report)"
        body = (
            f"{check.found.format(run=run, env=args.env)}\n\n```\n{report.rstrip()}\n```\n\n{check.then} This "
            "issue is updated by each check and closed by the first that finds nothing.\n"
        )
        if number is None:
            done = _gh("issue", "create", "--title", title, "--body-file", "-", stdin=body)
            said = "opened"
        else:
            done = _gh("issue", "edit", str(number), "--body-file", "-", stdin=body)
            said = f"updated #{number}"
    if done.returncode:
        print(f"error: gh: {done.stderr.strip()}", file=sys.stderr)
        return done.returncode
    print(f"{args.check}: {title}: {said} {done.stdout.strip()}".rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
