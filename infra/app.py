"""The cdktf app: synthesizes every environment's stack in one process."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from infra.config import ConfigError, Environment, environments_dir, load_all

DEFAULT_OUTDIR = Path("cdktf.out")


def synth(envs: dict[str, Environment], outdir: Path) -> None:
    """Synthesize `envs` into `outdir` (cdktf's layout: stacks/platform-<env>/cdk.tf.json)."""
    from cdktf import App

    from infra.stacks.platform import PlatformStack

    app = App(outdir=str(outdir))
    for env in envs.values():
        PlatformStack(app, env)
    app.synth()


def synth_atomically(envs: dict[str, Environment], outdir: Path) -> None:
    """Synthesize into a sibling temporary directory, then swap it in.

    A failure leaves the previous `outdir` exactly as it was.
    """
    outdir = outdir.resolve()
    outdir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{outdir.name}-", dir=outdir.parent))
    try:
        synth(envs, staging)
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


def main(argv: list[str] | None = None) -> int:
    from infra import bindings

    bindings.use_stock_import(os.environ.get("PLATFORM_STOCK_PROVIDER_IMPORT") == "1")
    try:
        envs = load_all(environments_dir())
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    only = os.environ.get("PLATFORM_ENVS")
    if only:
        wanted = only.split(",")
        unknown = sorted(set(wanted) - set(envs))
        if unknown:
            print(f"error: PLATFORM_ENVS names unknown environments {unknown}; known: {sorted(envs)}", file=sys.stderr)
            return 2
        envs = {k: envs[k] for k in wanted}
    # The cdktf CLI passes its own output directory (synth --hcl, deploy).
    cli_outdir = os.environ.get("CDKTF_OUTDIR")
    if cli_outdir:
        synth(envs, Path(cli_outdir))
    else:
        synth_atomically(envs, DEFAULT_OUTDIR)
    for name in envs:
        print(f"synthesized platform-{name}")
    return 0
