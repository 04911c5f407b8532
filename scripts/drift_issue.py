"""The drift workflow's issue (.github/workflows/drift.yml): one per environment, titled `Drift: platform-<env>`.

  python -m scripts.drift_issue --env <env> --code <drift's exit code> --report <its output>

Code 2 (something drifted): the open issue's body becomes the report, or a new issue is opened with it. Code 0
(nothing drifted): the open issue, if any, is closed with a comment. With GitHub's CLI (`gh`, on every hosted
runner; GH_TOKEN with issues: write), in the repository GITHUB_REPOSITORY names. Exit 0, or `gh`'s code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from infra.delivery.comment import this_run
from scripts.parser import ArgumentParser

TITLE = "Drift: platform-{env}"


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
    parser = ArgumentParser(prog="python -m scripts.drift_issue", description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", required=True)
    parser.add_argument("--code", type=int, required=True, choices=[0, 2], help="the drift check's exit code")
    parser.add_argument("--report", type=Path, required=True, help="the drift check's output")
    args = parser.parse_args(argv)
    title = TITLE.format(env=args.env)
    run = this_run(os.environ)
    try:
        number = open_issue(title)
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if args.code == 0:
        if number is None:
            print(f"drift: {title}: nothing drifted, no issue open")
            return 0
        done = _gh("issue", "close", str(number), "--comment", f"Nothing drifted in the check of {run}.")
        said = f"closed #{number}"
    else:
        report = args.report.read_text() if args.report.is_file() else "(the drift check wrote no report)"
        body = (
            f"The scheduled drift check of {run} found changes made outside Terraform: the next deploy of "
            f"platform-{args.env} would change them back.\n\n```\n{report.rstrip()}\n```\n\n"
            "Keep a change by committing it to the environment file; revert it with the next deploy. This issue is "
            "updated by each check and closed by the first that finds nothing.\n"
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
    print(f"drift: {title}: {said} {done.stdout.strip()}".rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
