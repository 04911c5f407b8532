"""Benchmarks: synth wall time and peak memory against the stock provider import.

Each measurement runs in a fresh process on this machine, repeated; the
median is reported. Target (issue 2): synthesizing every environment takes
under half the time of `import cdktf_cdktf_provider_google` alone.

Usage: python -m scripts.bench [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Peak RSS is the largest single process (Python or the jsii Node runtime),
# read from the rusage of the measured process and the children it waited for.
_MEASURE = """
import resource, subprocess, sys, time
start = time.perf_counter()
code = subprocess.run(sys.argv[1:]).returncode
wall = time.perf_counter() - start
print(wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, code)
"""


def measure(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of one run of `command`."""
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, *command], env=env, cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    wall, rss_kib, code = float(out[-3]), int(out[-2]), int(out[-1])
    if code != 0:
        raise RuntimeError(f"{command} exited {code}")
    return wall, rss_kib / 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    base_env = {**os.environ, "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"}
    python = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        cases = {
            "stock import of the google bindings alone": ([python, "-c", "import cdktf_cdktf_provider_google"], {}),
            "synth, all environments (fast import)": ([python, "-m", "infra"], {"CDKTF_OUTDIR": f"{tmp}/fast"}),
            "synth, all environments (stock import)": (
                [python, "-m", "infra"],
                {"CDKTF_OUTDIR": f"{tmp}/stock", "PLATFORM_STOCK_PROVIDER_IMPORT": "1"},
            ),
        }
        results: dict[str, tuple[float, float]] = {}
        for name, (command, extra) in cases.items():
            runs = [measure(command, {**base_env, **extra}) for _ in range(args.repeat)]
            results[name] = (statistics.median(r[0] for r in runs), max(r[1] for r in runs))
    print(f"{'benchmark':<45} {'wall s (median)':>16} {'peak RSS MiB':>13}")
    for name, (wall, rss) in results.items():
        print(f"{name:<45} {wall:>16.2f} {rss:>13.0f}")
    fast = results["synth, all environments (fast import)"][0]
    stock = results["stock import of the google bindings alone"][0]
    ratio = fast / stock
    verdict = "met" if ratio < 0.5 else "MISSED"
    when = time.strftime("%Y-%m-%d")
    print(f"synth / stock import = {ratio:.2f} (target < 0.50: {verdict}); {when}, {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
