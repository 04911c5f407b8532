"""The cdktf app: synthesizes every environment's stack in one process."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from infra import settings
from infra.cdk.layout import stack_file, stack_name
from infra.config import ConfigError, Environment, environments_dir
from infra.config.delivery import record_carried_out
from infra.synth.load import load_all

DEFAULT_OUTDIR = Path("cdktf.out")


def synth(envs: dict[str, Environment], outdir: Path, *, omit_unbuilt: bool = False) -> dict[str, list[str]]:
    """Synthesize `envs` into `outdir` (cdktf's layout: stacks/platform-<env>/cdk.tf.json).

    With `omit_unbuilt` (a first deploy) the releases that run images not built yet are left
    out; returns them by environment.
    """
    from infra.cdk import App
    from infra.stacks.platform import PlatformStack

    app = App(outdir=str(outdir))
    stacks = [PlatformStack(app, env, omit_unbuilt=omit_unbuilt) for env in envs.values()]
    app.synth()
    if app.hcl_output:
        # An HCL export (`make hcl`): read by people, never applied; its confirmations output stays empty.
        return {s.env.name: s.left_out for s in stacks}
    for s in stacks:
        path = stack_file(outdir, stack_name(s.env.name))
        body = json.loads(path.read_text())
        if record_carried_out(body, s.env.confirm):
            path.write_text(json.dumps(body, indent=2))
    return {s.env.name: s.left_out for s in stacks}


class SharedStateBucket(ValueError):
    """Two environments name one state bucket."""


def shared_state_buckets(envs: dict[str, Environment]) -> list[str]:
    """Environments that share a state bucket (each environment's deployer may reach only its
    own environment's state, which bucket-level IAM gives only with a bucket each)."""
    by_bucket: dict[str, list[str]] = {}
    for env in envs.values():
        by_bucket.setdefault(env.state.bucket, []).append(env.name)
    return [
        f"state.bucket {bucket} is shared by {', '.join(names)}: give each environment its own"
        for bucket, names in sorted(by_bucket.items())
        if len(names) > 1
    ]


class UnknownPromotionSource(ValueError):
    """`delivery.promotes_from` names no environment."""


def promotion_sources(
    envs: dict[str, Environment], known: dict[str, Environment] | None = None
) -> dict[str, Environment]:
    """{environment: the environment its `delivery.promotes_from` names}, looked up in `known` (default `envs`)."""
    known = envs if known is None else known
    out = {}
    for env in envs.values():
        wanted = env.delivery.promotes_from if env.delivery is not None else None
        if wanted is None:
            continue
        if wanted == env.name or wanted not in known:
            choices = ", ".join(sorted(n for n in known if n != env.name)) or "none"
            raise UnknownPromotionSource(
                f"{env.name}.yaml: delivery.promotes_from: {wanted!r} is not another environment of this folder "
                f"(known: {choices})"
            )
        out[env.name] = known[wanted]
    return out


def synth_bootstrap(
    envs: dict[str, Environment], outdir: Path, known: dict[str, Environment] | None = None
) -> list[str]:
    """The bootstrap stacks (infra/stacks/bootstrap.py) of the environments with a `delivery` section, into
    `outdir`/stacks/bootstrap-<env>: an App of their own, so cdktf.out/stacks holds the platform stacks only (a
    person applies these with terraform, never the workflows). `known`: every environment of the folder, where a
    `delivery.promotes_from` is looked up (default `envs`). Returns the stacks' names."""
    from infra.cdk import App
    from infra.stacks.bootstrap import BootstrapStack, bootstrap_stack_name

    shared = shared_state_buckets(envs)
    if shared:
        raise SharedStateBucket("; ".join(shared))
    sources = promotion_sources(envs, known)
    app = App(outdir=str(outdir))
    stacks = [BootstrapStack(app, env, sources.get(env.name)) for env in envs.values() if env.delivery is not None]
    app.synth()
    return [bootstrap_stack_name(s.env) for s in stacks]


def synth_atomically(envs: dict[str, Environment], outdir: Path, *, omit_unbuilt: bool = False) -> dict[str, list[str]]:
    """Synthesize into a sibling temporary directory, then swap it in.

    A failure leaves the previous `outdir` exactly as it was.
    """
    outdir = outdir.resolve()
    outdir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{outdir.name}-", dir=outdir.parent))
    try:
        left_out = synth(envs, staging, omit_unbuilt=omit_unbuilt)
        # Keep what other tools put beside the stacks (the plan review).
        if outdir.exists():
            for child in outdir.iterdir():
                if child.name not in {"stacks", "manifest.json"} and not (staging / child.name).exists():
                    shutil.move(str(child), staging / child.name)
            old = outdir.with_name(f".{outdir.name}-old")
            shutil.rmtree(old, ignore_errors=True)
            outdir.rename(old)
            staging.rename(outdir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            staging.rename(outdir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return left_out


def main(argv: list[str] | None = None) -> int:
    """`python -m infra`: the cdktf app (cdktf.json). Exit codes: 0 synthesized, 2 a bad environment file."""
    import argparse

    argparse.ArgumentParser(
        prog="python -m infra",
        description="Synthesize every environment into cdktf.out/stacks/platform-<env>/cdk.tf.json (the cdktf app).",
        epilog="Environment: PLATFORM_ENVIRONMENTS_DIR, PLATFORM_ENVS, PLATFORM_OMIT_UNBUILT, CDKTF_OUTDIR "
        "(docs/reference.md). "
        "Exit codes: 0 synthesized, 2 a bad environment file.",
    ).parse_args(argv)

    try:
        envs = load_all(environments_dir())
        promotion_sources(envs)
    except (ConfigError, UnknownPromotionSource) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    known = envs
    wanted = settings.ENVS.names()
    if wanted:
        unknown = sorted(set(wanted) - set(envs))
        if unknown:
            print(f"error: PLATFORM_ENVS names unknown environments {unknown}; known: {sorted(envs)}", file=sys.stderr)
            return 2
        envs = {k: envs[k] for k in wanted}
    # The cdktf CLI passes its own output directory (synth --hcl, deploy). A first deploy
    # (`make deploy-infra`) sets PLATFORM_OMIT_UNBUILT=1: releases of unbuilt images are left out.
    # Absolute paths: the jsii runtime (a Node process) resolves a relative one against its own working directory,
    # which is this process's only when the runtime was started here (not when main runs in a process that had
    # loaded it elsewhere, as the tests do).
    cli_outdir = os.environ.get("CDKTF_OUTDIR")
    outdir = Path(cli_outdir or DEFAULT_OUTDIR).absolute()
    omit = settings.OMIT_UNBUILT.on()
    if cli_outdir:
        left_out = synth(envs, outdir, omit_unbuilt=omit)
    else:
        left_out = synth_atomically(envs, outdir, omit_unbuilt=omit)
    # What was made, on stderr: the targets that synthesize first (`make cost JSON=1`, `make status JSON=1`) keep
    # their standard output for what they print.
    for name in envs:
        print(f"synthesized platform-{name}", file=sys.stderr)
        if left_out.get(name):
            print(f"  left out until their images are built: {', '.join(left_out[name])}", file=sys.stderr)
    if not cli_outdir:
        # The bootstrap stacks (state buckets, planner and deployer, GitHub federation) beside, in their own folder.
        try:
            bootstrap = synth_bootstrap(envs, outdir / "bootstrap", known)
        except SharedStateBucket as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        for name in bootstrap:
            print(f"synthesized {name} (into {DEFAULT_OUTDIR}/bootstrap)", file=sys.stderr)
    return 0
