"""Checkov's runners on each stack's folder on its own, in one process: run by Checkov's Python (`.venv-policy`).

`python infra/policy/checkov_scan.py FRAMEWORK DIR...` (the policy gate runs it with Checkov's Python) prints one
JSON document on stdout, shaped as `checkov -o json` prints one report:
`[{"check_type", "results": {"passed_checks", "failed_checks"}}]`, each check as
`{"check_id", "check_name", "file_path" (absolute), "resource"}`.

Why not `checkov -d <all stacks>`: Checkov builds one graph of everything under the folder it is given. For
Kubernetes its label-selector edges are matched between every pair of objects, so the time grew with the square of
the environments (336 releases of 32 environments: 39 s); across stacks those edges are wrong as well, since each
stack is a cluster of its own. Nor `checkov -d A -d B`: Checkov 3.3.30 keeps adding each folder's results to the
last and prints them all again after every folder. Here each folder gets new runners, as `checkov -d <folder>`
would, and Checkov is imported once (about 1.2 s).

It imports Checkov and the standard library only: it runs in Checkov's own environment, not the platform's.
"""

from __future__ import annotations

import json
import os
import sys


def scan(framework: str, folders: list[str]) -> dict[str, object]:
    os.environ.setdefault("BC_SKIP_MAPPING", "TRUE")  # no Prisma Cloud mapping download (no network here)
    os.environ.setdefault("CHECKOV_RUN_SCA_PACKAGE_SCAN_V2", "false")
    from checkov.kubernetes.runner import Runner as KubernetesRunner
    from checkov.runner_filter import RunnerFilter
    from checkov.terraform_json.runner import TerraformJsonRunner

    runners = {"kubernetes": KubernetesRunner, "terraform_json": TerraformJsonRunner}
    passed: list[dict[str, str]] = []
    failed: list[dict[str, str]] = []
    for folder in folders:
        report = runners[framework]().run(root_folder=folder, runner_filter=RunnerFilter(framework=[framework]))
        for records, out in ((report.passed_checks, passed), (report.failed_checks, failed)):
            out += [
                {
                    "check_id": r.check_id,
                    "check_name": r.check_name,
                    "file_path": r.file_abs_path,
                    "resource": r.resource,
                }
                for r in records
            ]
    return {"check_type": framework, "results": {"passed_checks": passed, "failed_checks": failed}}


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m infra.policy.checkov_scan",
        description="Checkov's runners on each folder on its own, in one process; one JSON report on stdout.",
        epilog="Exit codes: 0 the report was printed (failed checks are in it), 2 usage. Run it with Checkov's Python.",
    )
    parser.add_argument("framework", choices=["kubernetes", "terraform_json"])
    parser.add_argument("folders", nargs="+", help="each stack's folder")
    args = parser.parse_args(argv)
    json.dump([scan(args.framework, args.folders)], sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
