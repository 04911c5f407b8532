"""`make cdktn-parity`: the exit from cdktf stays proven. Every stack is synthesized with cdktf (.venv) and with
CDK Terrain (cdktn, .venv-cdktn from requirements-cdktn.lock: the same Terraform provider versions), and the
two are compared: the same resource addresses (logical IDs), the same bodies, providers, outputs and
backend. Only the CDK's own version metadata may differ, and a provider source written with or without
Terraform's default `hashicorp/` namespace, which names the same provider.

Exit codes: 0 the same; 1 they differ (each difference printed); 2 a synth failed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from scripts.parser import ArgumentParser

REPO = Path(__file__).resolve().parents[1]


def _normalized(stack: dict[str, Any]) -> dict[str, Any]:
    """The stack without the CDK's version, provider sources with Terraform's default namespace spelled out."""
    out = json.loads(json.dumps(stack))
    out.get("//", {}).get("metadata", {}).pop("version", None)
    for provider in (out.get("terraform", {}).get("required_providers") or {}).values():
        source = provider.get("source", "")
        if source and "/" not in source:
            provider["source"] = f"hashicorp/{source}"  # Terraform's default namespace
    return out


def differences(a: dict[str, Any], b: dict[str, Any], where: str = "") -> list[str]:
    """Every path at which two normalized stacks differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        found = []
        for key in sorted(set(a) | set(b)):
            path = f"{where}.{key}" if where else key
            if key not in a or key not in b:
                found.append(f"{path}: only in {'cdktf' if key in a else 'cdktn'}")
            else:
                found += differences(a[key], b[key], path)
        return found
    return [] if a == b else [f"{where}: {json.dumps(a)[:120]} != {json.dumps(b)[:120]}"]


def _synth(python: Path, outdir: Path, flavour: str) -> float:
    started = time.monotonic()
    env = {**os.environ, "CDKTF_OUTDIR": str(outdir), "PLATFORM_CDK": flavour, "PYTHONPATH": str(REPO)}
    done = subprocess.run([str(python), "-m", "infra"], cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{flavour} synth failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m scripts.cdk_parity", description=__doc__.splitlines()[0], epilog="Exit codes: see above."
    )
    parser.add_argument("--cdktn-python", type=Path, default=REPO / ".venv-cdktn" / "bin" / "python")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            seconds = {
                flavour: _synth(python, Path(tmp) / flavour, flavour)
                for flavour, python in (("cdktf", Path(sys.executable)), ("cdktn", args.cdktn_python))
            }
        except RuntimeError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        found, resources = [], 0
        stacks = sorted(p.parent.name for p in (Path(tmp) / "cdktf" / "stacks").glob("*/cdk.tf.json"))
        for name in stacks:
            a, b = (
                json.loads((Path(tmp) / f / "stacks" / name / "cdk.tf.json").read_text()) for f in ("cdktf", "cdktn")
            )
            resources += sum(len(v) for v in a.get("resource", {}).values())
            found += [f"{name}: {d}" for d in differences(_normalized(a), _normalized(b))]
    for line in found:
        print(f"error: {line}", file=sys.stderr)
    verdict = "identical" if not found else f"{len(found)} difference(s)"
    print(
        f"cdktn parity: {len(stacks)} stacks, {resources} resources: {verdict} (addresses, bodies, providers, outputs; "
        f"version metadata aside); synth {seconds['cdktf']:.1f} s with cdktf, {seconds['cdktn']:.1f} s with cdktn"
    )
    return 1 if found or not stacks else 0


if __name__ == "__main__":
    sys.exit(main())
