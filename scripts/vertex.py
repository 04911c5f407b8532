"""`python -m scripts.vertex`: the environments' Vertex AI custom jobs, validated, written and submitted.

    write <outdir>                  every environment's job requests: <outdir>/vertex/<env>/<job>.json, each held
                                    as written to the API's types and the request rules (`make plan` runs this)
    submit --env ENV --job JOB      create the job through the region's endpoint (`make vertex-submit`);
           [--dry-run]              --dry-run prints the endpoint, parent and request instead

Exit codes: 0 done; 1 a refused request, or the API refused the job; 2 a bad environment file or usage.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from infra.config import ConfigError, Environment, environments_dir
from infra.rules import rules_for
from infra.rules.request_subject import RequestContext, write_checked
from infra.synth.load import load_all, load_planned
from infra.vertex.job import custom_job, endpoint, job_names, parent
from scripts.parser import ArgumentParser, refuse

ORIGIN = {"nccl-test": "vertex.nccl_test", "train": "vertex.training"}


def write(env: Environment, outdir: Path) -> tuple[list[Path], list[str]]:
    """Write and check every job of `env`: (files written, violation lines)."""
    written, lines = [], []
    for name in job_names(env):
        path = outdir / "vertex" / env.name / f"{name}.json"
        ctx = RequestContext("aiplatform.v1.CustomJob", env, ORIGIN[name])
        lines += write_checked(path, custom_job(env, name), ctx)
        written.append(path)
    return written, lines


def submit(env: Environment, name: str, *, dry_run: bool, client: Any = None) -> dict[str, Any]:
    """Create job `name` of `env`; returns what was sent (dry run) or the created job's name and state."""
    if name not in job_names(env):
        raise ValueError(f"environment {env.name!r} has no Vertex AI job {name!r}; jobs: {', '.join(job_names(env))}")
    request = custom_job(env, name)
    # Refused before the dry run returns: a dry run refuses what the real one would.
    unbuilt = [i for i in env.placeholder_images() if env.release.images[i] in json.dumps(request)]
    if unbuilt:
        raise ValueError(
            f"image {', '.join(unbuilt)} is still at the placeholder digest: "
            f"`make image IMAGE={unbuilt[0]} ENV={env.name}` first"
        )
    if dry_run:
        return {"endpoint": endpoint(env), "parent": parent(env), "customJob": request}
    from google.cloud import aiplatform_v1

    job_client = client or aiplatform_v1.JobServiceClient(client_options={"api_endpoint": endpoint(env)})
    created = job_client.create_custom_job(
        parent=parent(env), custom_job=aiplatform_v1.CustomJob.from_json(json.dumps(request))
    )
    return {"name": created.name, "state": created.state.name, "endpoint": endpoint(env)}


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m scripts.vertex",
        description="The environments' Vertex AI custom jobs: validated, written, submitted.",
        epilog="Exit codes: 0 done; 1 a refused request or a refused job; 2 a bad environment file or usage.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    write_cmd = sub.add_parser("write", help="write and validate every environment's job requests")
    write_cmd.add_argument("outdir", type=Path)
    submit_cmd = sub.add_parser("submit", help="create one job through the region's endpoint")
    submit_cmd.add_argument("--env", required=True)
    submit_cmd.add_argument("--job", required=True)
    submit_cmd.add_argument("--dry-run", action="store_true", help="print what would be sent; send nothing")
    args = parser.parse_args(argv)
    try:
        envs = (load_planned if args.command == "write" else load_all)(environments_dir())
    except ConfigError as err:
        return refuse(err)
    if args.command == "write":
        refused = False
        for env in envs.values():
            written, lines = write(env, args.outdir)
            for line in lines:
                print(f"error: {line}", file=sys.stderr)
            if written:
                verdict = f"{len([r for r in rules_for('request') if r.system == 'Vertex AI'])} request rules: " + (
                    "valid" if not lines else f"{len(lines)} violation(s)"
                )
                print(f"vertex: {env.name}: {len(written)} job request(s) in {written[0].parent}: {verdict}")
            refused = refused or bool(lines)
        return 1 if refused else 0
    if args.env not in envs:
        print(f"error: no environment {args.env!r}; environments: {', '.join(envs)}", file=sys.stderr)
        return 2
    env = envs[args.env]
    try:
        with tempfile.TemporaryDirectory() as checked:
            _, lines = write(env, Path(checked))
        if lines:
            for line in lines:
                print(f"error: {line}", file=sys.stderr)
            return 1
        out = submit(env, args.job, dry_run=args.dry_run)
    except ValueError as err:
        return refuse(err)
    except Exception as err:  # the API's refusal (google.api_core.exceptions.*) or no credentials
        print(f"error: Vertex AI refused the job: {err}", file=sys.stderr)
        return 1
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
