"""Deploy and tear down one environment with the pinned cdktf CLI, with the guards a real project needs.

  python -m scripts.deploy deploy <env> [--infra-only] [--auto-approve] [--dry-run]
  python -m scripts.deploy destroy <env> [--confirm platform-<env>] [--auto-approve] [--dry-run]

deploy      refuses while a release image is still at the placeholder digest, and says how a fresh
            environment gets there: `--infra-only` first (everything but the releases that run those
            images: the registry included), then `make image` for each, then deploy again.
destroy     shows what would go, refuses while anything is protected (prevent_destroy, GKE deletion
            protection) or a bucket would fail to delete half-way (no force_destroy), and runs only with
            `--confirm platform-<env>` typed out.

The CLI is `npx --no-install cdktf` unless PLATFORM_CDKTF names another command (tests use a stand-in).
Exit codes: 0 done (or dry run), 2 bad input or refused deploy, 3 refused destroy, else the CLI's.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from infra.config import PLACEHOLDER_DIGEST, ConfigError, Environment, environments_dir
from infra.load import load_environment

DEFAULT_CDKTF = "npx --no-install cdktf"


def _cdktf() -> list[str]:
    return shlex.split(os.environ.get("PLATFORM_CDKTF") or DEFAULT_CDKTF)


def _run(command: list[str], extra_env: dict[str, str], *, dry_run: bool) -> int:
    shown = " ".join([*(f"{k}={v}" for k, v in extra_env.items()), *map(shlex.quote, command)])
    if dry_run:
        print(f"dry run, would run: {shown}")
        return 0
    print(f"running: {shown}", flush=True)
    return subprocess.run(command, env={**os.environ, **extra_env}, check=False).returncode


def _synth_one(env: Environment, *, omit_unbuilt: bool = False) -> tuple[dict[str, Any], list[str]]:
    """The stack JSON of one environment (synthesized in a temporary directory) and the releases left out."""
    from infra.app import synth

    with tempfile.TemporaryDirectory() as tmp:
        left_out = synth({env.name: env}, Path(tmp), omit_unbuilt=omit_unbuilt)
        stack = json.loads((Path(tmp) / "stacks" / f"platform-{env.name}" / "cdk.tf.json").read_text())
    return stack, left_out[env.name]


def deploy(env: Environment, path: Path, *, infra_only: bool, auto_approve: bool, dry_run: bool) -> int:
    stack = f"platform-{env.name}"
    placeholders = env.placeholder_images()
    if placeholders and not infra_only:
        names = ", ".join(placeholders)
        print(
            f"error: {path}: release.images: {names} still at the placeholder digest {PLACEHOLDER_DIGEST[:10]}...; "
            "build and pin them first.\n"
            "A fresh environment is deployed in three steps:\n"
            f"  1. make deploy-infra ENV={env.name}    everything except the releases that run those images "
            "(the registry included)\n"
            + "".join(f"  2. make image IMAGE={name} ENV={env.name}\n" for name in placeholders)
            + f"  3. make deploy ENV={env.name}",
            file=sys.stderr,
        )
        return 2
    extra = {"PLATFORM_ENVS": env.name}
    if infra_only:
        # A real deploy's synth (the app, run by cdktf) names what it leaves out; a dry run synthesizes here.
        if dry_run:
            _, left_out = _synth_one(env, omit_unbuilt=True)
            if left_out:
                print(f"{stack}: left out until their images are built: {', '.join(left_out)}")
        extra["PLATFORM_OMIT_UNBUILT"] = "1"
    else:
        print(f"{stack}: every release image is pinned to a built digest")
    return _run([*_cdktf(), "deploy", stack, *(["--auto-approve"] if auto_approve else [])], extra, dry_run=dry_run)


# What each guard is called in the environment file.
GUARD_FIELDS = {
    "google_container_cluster": "cluster.deletion_protection",
    "google_storage_bucket": "buckets.<key>.protect",
    "google_artifact_registry_repository": "registry.protect",
}
STATEFUL = ("google_container_cluster", "google_storage_bucket", "google_artifact_registry_repository")


def destroy_report(stack: dict[str, Any]) -> tuple[list[str], list[str], list[str]]:
    """(summary lines, guarded resources, buckets that would stop a destroy half-way) of a stack."""
    resources = stack.get("resource") or {}
    counts = Counter({rtype: len(bodies) for rtype, bodies in resources.items()})
    lines = [f"  {n:3d} {rtype}" for rtype, n in sorted(counts.items())]
    guarded, stuck = [], []
    for rtype, bodies in sorted(resources.items()):
        for body in bodies.values():
            name = body.get("name") or body.get("repository_id") or "?"
            if rtype in STATEFUL:
                lines.append(f"  stateful: {rtype} {name}")
            protected = (body.get("lifecycle") or {}).get("prevent_destroy") or body.get("deletion_protection")
            if protected:
                guarded.append(f"{rtype} {name} (set {GUARD_FIELDS.get(rtype, 'its protect field')}: false, deploy)")
            if rtype == "google_storage_bucket" and not protected and not body.get("force_destroy"):
                stuck.append(f"{rtype} {name}: no force_destroy, a non-empty bucket would stop the destroy half-way")
    return lines, guarded, stuck


def destroy(env: Environment, *, confirm: str | None, auto_approve: bool, dry_run: bool) -> int:
    stack_name = f"platform-{env.name}"
    stack, _ = _synth_one(env)
    lines, guarded, stuck = destroy_report(stack)
    total = sum(len(b) for b in (stack.get("resource") or {}).values())
    print(f"{stack_name}: destroy would remove {total} resources:")
    print("\n".join(lines))
    refusals = [f"protected: {g}" for g in guarded] + stuck
    if confirm != stack_name:
        refusals.append(f"not confirmed: pass CONFIRM={stack_name} (make destroy ENV={env.name} CONFIRM={stack_name})")
    if refusals:
        print(f"error: {stack_name}: destroy refused; nothing was changed:", file=sys.stderr)
        for line in refusals:
            print(f"  {line}", file=sys.stderr)
        return 3
    command = [*_cdktf(), "destroy", stack_name, *(["--auto-approve"] if auto_approve else [])]
    return _run(command, {"PLATFORM_ENVS": env.name}, dry_run=dry_run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.deploy", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["deploy", "destroy"])
    parser.add_argument("env")
    parser.add_argument("--infra-only", action="store_true", help="deploy: leave out releases of unbuilt images")
    parser.add_argument("--confirm", help="destroy: the stack's name, platform-<env>")
    parser.add_argument("--auto-approve", action="store_true")
    parser.add_argument("--dry-run", action="store_true", help="show what would run; change nothing")
    args = parser.parse_args(argv)
    path = environments_dir() / f"{args.env}.yaml"
    try:
        env = load_environment(path)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.action == "deploy":
        return deploy(env, path, infra_only=args.infra_only, auto_approve=args.auto_approve, dry_run=args.dry_run)
    return destroy(env, confirm=args.confirm, auto_approve=args.auto_approve, dry_run=args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
