"""`make help`: the Makefile's targets grouped by task, each with its `## ` line, none cut short.

Standard library only (it runs before any environment is installed): `python3 scripts/make_help.py Makefile`.
A target the groups below do not name is listed under "Other" and makes the listing exit 1, so a new target
cannot go unfiled (tests/test_makefile.py runs it).
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from pathlib import Path

GROUPS: dict[str, list[str]] = {
    "Start here": ["help", "plan", "test"],
    "Plan and review a change": ["synth", "rules", "policy", "review", "diff", "hcl", "snapshots"],
    "Deploy and run an environment": [
        "preflight", "deploy-infra", "deploy", "destroy", "promote", "pin", "rollback", "blue-green", "new-env",
        "drift", "cost", "status", "training-pause", "training-resume", "logs",
    ],
    "Images": ["image", "images", "image-digests"],
    "Train": ["train-local", "train", "plot", "compile-recipes", "engine-check"],
    "Serve": ["serve-local", "saxml"],
    "Other orchestrators (Vertex AI, Compute Engine VMs)": ["vertex-submit", "vm-up", "vm-down"],
    "The local control plane": [
        "cluster-local", "deploy-local", "drift-local", "rehearse-local", "destroy-local", "cluster-local-down",
        "local-cluster-build", "tofu", "tofu-validate",
    ],
    "Tests and measurements": [
        "lint", "test-unit", "test-integration", "test-e2e", "test-upstream", "test-changed", "bench",
    ],
    "Set up and maintain": [
        "venv", "node", "engine", "vllm", "vllm-options", "cluster-toolkit", "slurm-local", "pinned-scripts", "crds",
        "lock", "clean",
    ],
}  # fmt: skip

_TARGET = re.compile(r"^([a-zA-Z0-9_-]+):.*?## (.+)$")


def targets(makefile: str) -> dict[str, str]:
    """{target: its description}, in the Makefile's order (a target defined twice, under ifeq, once)."""
    found: dict[str, str] = {}
    for line in makefile.splitlines():
        if m := _TARGET.match(line):
            found.setdefault(m.group(1), m.group(2).strip())
    return found


def render(found: dict[str, str], width: int = 118) -> tuple[str, list[str]]:
    """The grouped listing, and the targets no group names."""
    name_width = max(len(t) for t in found) + 2
    out = ["Usage: make <target> [VARIABLE=value ...]   (ENV=dev where a target takes one; make plan: every one)"]
    filed = [t for group in GROUPS.values() for t in group]
    unfiled = [t for t in found if t not in filed]
    for title, group in [*GROUPS.items(), ("Other", unfiled)]:
        shown = [t for t in group if t in found]
        if not shown:
            continue
        out += ["", f"{title}:"]
        for target in shown:
            lines = textwrap.wrap(found[target], width - name_width - 7) or [""]
            out.append(f"  make {target:<{name_width}}{lines[0]}")
            out += [" " * (7 + name_width) + rest for rest in lines[1:]]
    return "\n".join(out), unfiled


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.make_help", description=__doc__.split("\n\n")[0])
    parser.add_argument("makefile", nargs="?", type=Path, default=Path("Makefile"))
    listing, unfiled = render(targets(parser.parse_args(argv).makefile.read_text()))
    print(listing)
    if unfiled:
        print(f"\nscripts/make_help.py: file {', '.join(unfiled)} under a group of GROUPS", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
