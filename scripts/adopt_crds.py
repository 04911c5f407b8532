"""Before a deploy: the controllers' crds/ CRDs already in the cluster made the releases' own, once.

A chart's crds/ files are installed by Helm on the first install and belong to no release. The platform now
applies them as part of the release (infra/delivery/crd_postrender.py), and Helm refuses to take over an object that
lacks its ownership marks ("invalid ownership metadata"): the label app.kubernetes.io/managed-by=Helm and the
annotations meta.helm.sh/release-name and meta.helm.sh/release-namespace (Helm 3.2's adoption of existing
resources). So, where the cluster exists, each pinned crds/ CRD that is there without them gets them; one that
another release owns stops the deploy. On a new project (no cluster yet) there is nothing to adopt.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

from infra.catalogue.controller_crds import crd_set
from infra.catalogue.controllers import CONTROLLERS
from infra.config import Environment
from scripts.cluster_access import ToolsMissing, Unreachable, cluster_env, kubectl


def to_adopt(env: Environment) -> list[tuple[str, str, str]]:
    """(CRD name, release, namespace) of every crds/ CRD the environment's controller versions ship."""
    out = []
    for name, version in sorted(env.release.controllers.items()):
        crds = crd_set(name, str(version))
        for crd in crds.injected if crds else ():
            out.append((crd.name, name, CONTROLLERS[name].namespace))
    return out


def adopt(env: Environment, *, dry_run: bool) -> int:
    wanted = to_adopt(env)
    if not wanted:
        return 0
    if dry_run:
        names = ", ".join(n for n, _, _ in wanted)
        print(f"dry run, would mark as their releases' own, where the cluster has them without: {names}")
        return 0
    try:
        with cluster_env(env) as run_env:
            return _adopt(wanted, run_env)
    except ToolsMissing as err:
        print(f"warning: {err}: the controllers' crds/ CRDs are not checked for adoption "
              "(docs/operations.md, \"Upgrade a controller\")", file=sys.stderr)  # fmt: skip
    except Unreachable:
        print(f"{env.cluster.name}: no cluster to reach yet: no CRD to adopt")
    return 0


def _adopt(wanted: list[tuple[str, str, str]], run_env: dict[str, str]) -> int:
    for crd, release, namespace in wanted:
        got = subprocess.run([*kubectl(), "get", "crd", crd, "-o", "json", "--ignore-not-found"], env=run_env,
                             capture_output=True, text=True, check=False)  # fmt: skip
        if got.returncode != 0 or not got.stdout.strip():
            continue
        annotations = (json.loads(got.stdout).get("metadata") or {}).get("annotations") or {}
        owner = annotations.get("meta.helm.sh/release-name")
        if owner == release:
            continue
        if owner:
            print(f"error: CRD {crd} belongs to the Helm release {owner!r}, not {release!r}", file=sys.stderr)
            return 1
        print(f"running: mark CRD {crd} as release {namespace}/{release}'s (installed from crds/, owned by none)")
        for command in (
            [*kubectl(), "label", "crd", crd, "app.kubernetes.io/managed-by=Helm", "--overwrite"],
            [
                *kubectl(),
                "annotate",
                "crd",
                crd,
                f"meta.helm.sh/release-name={release}",
                f"meta.helm.sh/release-namespace={namespace}",
                "--overwrite",
            ],
        ):
            done = subprocess.run(command, env=run_env, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                print(f"error: {shlex.join(command)}: {done.stderr.strip()}", file=sys.stderr)
                return done.returncode
    return 0
