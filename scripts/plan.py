"""`make plan`, all or nothing: synthesize every environment, run the rules and the policy gate, write the
plan review, and only then put the result in place of the previous `cdktf.out`.

Each step runs as `make <step>` would run it, on a staging copy (`<outdir>.next`). When every step
passes, the staging copy replaces `<outdir>`. When one refuses, `<outdir>` stays exactly as it was (the
last good stacks with their review) and the refused output moves to `<outdir>.failed` for a look.

With `--env NAME` (`make plan ENV=NAME`) only that environment is planned: every step runs with
PLATFORM_ENVS=NAME, and only its parts of the staging copy (its stack, review, blueprints, requests, scripts,
rendered releases and placement) replace its parts of `<outdir>`; the other environments' output and reviews stay
exactly as they were. Skips no planned stack needs are then not stale (the other stacks may need them).

Exit codes: 0 every step passed; otherwise the failing step's own code (2 a bad environment file or
usage, 1 a policy or rule violation or a refused blueprint, 3 a review that blocks a destroy or replacement).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

Step = tuple[str, list[str], dict[str, str]]


def steps(staging: Path, base: Path | None, env: str | None = None) -> list[Step]:
    """The steps of `make plan`, each as (name, argv, extra environment), writing into `staging`; with `env`, each
    step is given PLATFORM_ENVS=env (synth writes that stack alone, the others write that environment's parts)."""
    py = sys.executable
    review = [py, "-m", "scripts.review", "--outdir", str(staging), *(["--base", str(base)] if base else [])]
    only = {"PLATFORM_ENVS": env} if env else {}
    return [
        ("synth", [py, "-m", "infra"], {"CDKTF_OUTDIR": str(staging), **only}),
        # The rules before Checkov: a refusal of the rules comes in seconds, and Checkov takes the longest.
        ("rules", [py, "-m", "scripts.rules", str(staging / "stacks")], only),
        ("policy", [py, "-m", "infra.policy", str(staging / "stacks"), *(["--partial"] if env else [])], only),
        # The Slurm clusters' Cluster Toolkit blueprints, validated against the pinned module interfaces.
        ("slurm", [py, "-m", "scripts.slurm", "write", str(staging)], only),
        # The Vertex AI jobs' requests and the VM groups' bulkInsert requests, held to the client libraries' types.
        ("vertex", [py, "-m", "scripts.vertex", "write", str(staging)], only),
        ("vms", [py, "-m", "scripts.vms", "write", str(staging)], only),
        # Every generated shell script: ShellCheck, bash -euo pipefail against its host's facts, the host rules.
        ("scripts", [py, "-m", "scripts.shell", "check", str(staging)], only),
        ("review", review, only),  # its paths name the staging copy; the final ones are printed at the end
    ]


def _is_of(entry: Path, env: str) -> bool:
    """Whether an entry of an output folder (cdktf.out/<folder>/<entry>) belongs to environment `env`."""
    return entry.name.split(".")[0] in (env, f"platform-{env}")


def _merged(staging: Path, outdir: Path, env: str) -> Path:
    """A copy of `outdir` whose parts of `env` are the staging copy's (everything else as it was), beside them."""
    merged = outdir.with_name(f"{outdir.name}.merge")
    shutil.rmtree(merged, ignore_errors=True)
    if outdir.exists():
        shutil.copytree(outdir, merged, symlinks=True)
    else:
        merged.mkdir()
    for folder in sorted(p for p in staging.iterdir() if p.is_dir()):
        target = merged / folder.name
        target.mkdir(exist_ok=True)
        for old in [e for e in target.iterdir() if _is_of(e, env)]:
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old)
            else:
                old.unlink()
        for new in [e for e in folder.iterdir() if _is_of(e, env)]:
            new.rename(target / new.name)
    # cdktf's manifest lists every stack: the others' entries stay.
    manifest, planned = merged / "manifest.json", staging / "manifest.json"
    if planned.exists():
        stacks = json.loads(manifest.read_text()).get("stacks", {}) if manifest.exists() else {}
        new = json.loads(planned.read_text())
        new["stacks"] = {**stacks, **new.get("stacks", {})}
        manifest.write_text(json.dumps(new, indent=2) + "\n")
    shutil.rmtree(staging)
    return merged


def _replace(source: Path, target: Path) -> None:
    """Move `source` to `target`, removing whatever `target` was."""
    old = target.with_name(f".{target.name}-old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    source.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def run_plan(
    outdir: Path, planned: Sequence[Step] | None = None, *, base: Path | None = None, env: str | None = None
) -> int:
    """Run the steps on a staging copy; swap it in only if all pass (with `env`, that environment's parts of it
    alone). Returns the exit code."""
    outdir = outdir.resolve()
    staging = outdir.with_name(f"{outdir.name}.next")
    failed = outdir.with_name(f"{outdir.name}.failed")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    started = time.monotonic()
    for name, argv, extra in planned if planned is not None else steps(staging, base, env):
        print(f"plan: {name} ({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
        code = subprocess.run(argv, env={**os.environ, **extra}).returncode
        if code != 0:
            _replace(staging, failed)
            kept = f"{outdir} is unchanged" if outdir.exists() else f"{outdir} was not written"
            print(
                f"error: make plan failed at `{name}` (exit {code}): {kept}; the refused output is in {failed}",
                file=sys.stderr,
            )
            return code
    _replace(_merged(staging, outdir, env) if env else staging, outdir)
    shutil.rmtree(failed, ignore_errors=True)
    written = (
        f"{outdir}'s parts of {env} written (the other environments' as they were)" if env else f"{outdir} written"
    )
    print(f"plan: every step passed in {time.monotonic() - started:.0f} s; {written}", file=sys.stderr)
    for review in sorted((outdir / "review").glob(f"{env}.md" if env else "*.md")):
        print(f"review: {review}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.plan", description=__doc__.splitlines()[0], epilog="exit codes: see the module doc"
    )
    parser.add_argument("--outdir", type=Path, default=Path("cdktf.out"), help="where the plan goes (cdktf.out)")
    parser.add_argument("--base", type=Path, default=None, help="a baseline cdktf.out for the review's diff")
    parser.add_argument("--env", default=None, help="plan this environment only; the others' output stays as it was")
    args = parser.parse_args(argv)
    if args.env is not None:
        from infra.config import environments_dir

        known = sorted(p.stem for p in environments_dir().glob("*.yaml"))
        if args.env not in known:
            print(
                f"error: --env {args.env!r}: no {environments_dir()}/{args.env}.yaml; environments: {', '.join(known)}",
                file=sys.stderr,
            )
            return 2
    return run_plan(args.outdir, base=args.base, env=args.env)


if __name__ == "__main__":
    sys.exit(main())
