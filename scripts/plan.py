"""`make plan`, all or nothing: synthesize every environment, run the policy gate and the rules, write the
plan review, and only then put the result in place of the previous `cdktf.out`.

Each step runs as `make <step>` would run it, on a staging copy (`<outdir>.next`). When every step
passes, the staging copy replaces `<outdir>`. When one refuses, `<outdir>` stays exactly as it was (the
last good stacks with their review) and the refused output moves to `<outdir>.failed` for a look.

Exit codes: 0 every step passed; otherwise the failing step's own code (2 a bad environment file or
usage, 1 a policy or rule violation or a refused blueprint, 3 a review that blocks a destroy or replacement).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

Step = tuple[str, list[str], dict[str, str]]


def steps(staging: Path, base: Path | None) -> list[Step]:
    """The steps of `make plan`, each as (name, argv, extra environment), writing into `staging`."""
    py = sys.executable
    review = [py, "-m", "scripts.review", "--outdir", str(staging), *(["--base", str(base)] if base else [])]
    return [
        ("synth", [py, "-m", "infra"], {"CDKTF_OUTDIR": str(staging)}),
        ("policy", [py, "-m", "infra.policy", str(staging / "stacks")], {}),
        ("rules", [py, "-m", "scripts.rules", str(staging / "stacks")], {}),
        # The Slurm clusters' Cluster Toolkit blueprints, validated against the pinned module interfaces.
        ("slurm", [py, "-m", "scripts.slurm", "write", str(staging)], {}),
        # The Vertex AI jobs' requests and the VM groups' bulkInsert requests, held to the client libraries' types.
        ("vertex", [py, "-m", "scripts.vertex", "write", str(staging)], {}),
        ("vms", [py, "-m", "scripts.vms", "write", str(staging)], {}),
        # Every generated shell script: ShellCheck, bash -euo pipefail against its host's facts, the host rules.
        ("scripts", [py, "-m", "scripts.shell", "check", str(staging)], {}),
        ("review", review, {}),  # its paths name the staging copy; the final ones are printed at the end
    ]


def _replace(source: Path, target: Path) -> None:
    """Move `source` to `target`, removing whatever `target` was."""
    old = target.with_name(f".{target.name}-old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    source.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def run_plan(outdir: Path, planned: Sequence[Step] | None = None, *, base: Path | None = None) -> int:
    """Run the steps on a staging copy; swap it in only if all pass. Returns the exit code."""
    outdir = outdir.resolve()
    staging = outdir.with_name(f"{outdir.name}.next")
    failed = outdir.with_name(f"{outdir.name}.failed")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    started = time.monotonic()
    for name, argv, extra in planned if planned is not None else steps(staging, base):
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
    _replace(staging, outdir)
    shutil.rmtree(failed, ignore_errors=True)
    print(f"plan: every step passed in {time.monotonic() - started:.0f} s; {outdir} written", file=sys.stderr)
    for review in sorted((outdir / "review").glob("*.md")):
        print(f"review: {review}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.plan", description=__doc__.splitlines()[0], epilog="exit codes: see the module doc"
    )
    parser.add_argument("--outdir", type=Path, default=Path("cdktf.out"), help="where the plan goes (cdktf.out)")
    parser.add_argument("--base", type=Path, default=None, help="a baseline cdktf.out for the review's diff")
    args = parser.parse_args(argv)
    return run_plan(args.outdir, base=args.base)


if __name__ == "__main__":
    sys.exit(main())
