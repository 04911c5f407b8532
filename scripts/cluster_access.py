"""kubectl on an environment's cluster, as the deploy reaches it: `gcloud container clusters get-credentials
--dns-endpoint` into a kubeconfig of its own (a temporary file), so nothing is written to the caller's
~/.kube/config. Used before the apply: to adopt the controllers' CRDs (scripts/adopt_crds.py) and to read each
release's deployed revision from Helm's record (the gate's upgrade check, scripts/apply.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from infra import settings
from infra.catalogue.helm_records import interrupted_record
from infra.config import Environment
from infra.review.upgrades import helm_record_objects


class ToolsMissing(RuntimeError):
    """gcloud or kubectl is not on this machine."""


class Unreachable(RuntimeError):
    """The cluster cannot be reached (there is none yet, or the credentials are refused)."""


def kubectl() -> list[str]:
    return settings.KUBECTL.command()


def kubectl_in(run_env: dict[str, str]) -> Callable[..., subprocess.CompletedProcess[str]]:
    """`kubectl <words>` in the process environment cluster_env gives, its output captured, never raising."""

    def run(*words: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*kubectl(), *words], input=stdin, env=run_env, capture_output=True, text=True, check=False
        )

    return run


@contextmanager
def cluster_env(env: Environment) -> Iterator[dict[str, str]]:
    """The process environment whose KUBECONFIG reaches `env`'s cluster through its DNS endpoint (or the one
    PLATFORM_KUBECONFIG names: the local cluster's)."""
    given = settings.KUBECONFIG.path()
    if given is not None:
        if not given.is_file():
            raise Unreachable(f"PLATFORM_KUBECONFIG={str(given)!r}: no such file")
        if shutil.which(kubectl()[0]) is None:
            raise ToolsMissing(f"{kubectl()[0]} not found")
        yield {**os.environ, "KUBECONFIG": str(given)}
        return
    gcloud = settings.GCLOUD.command()
    missing = [tool[0] for tool in (gcloud, kubectl()) if shutil.which(tool[0]) is None]
    if missing:
        raise ToolsMissing(f"{', '.join(missing)} not found")
    with tempfile.TemporaryDirectory() as tmp:
        run_env = {**os.environ, "KUBECONFIG": str(Path(tmp) / "kubeconfig")}
        creds = [*gcloud, "container", "clusters", "get-credentials", env.cluster.name, "--location", env.region,
                 "--project", env.project, "--dns-endpoint"]  # fmt: skip
        done = subprocess.run(creds, env=run_env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise Unreachable(f"{env.cluster.name}: {' '.join(done.stderr.split()) or 'get-credentials failed'}")
        yield run_env


def deployed_objects(run_env: dict[str, str], name: str, namespace: str) -> list[dict[str, Any]]:
    """The objects of release `namespace/name`'s deployed revision, from Helm's record in the cluster (the
    provider's helm_driver, infra/constructs/providers.py HELM_DRIVER: ConfigMaps, which the read-only planner
    reads too); ValueError when there is none or it cannot be read."""
    command = [*kubectl(), "get", "configmaps", "-n", namespace, "-l", f"owner=helm,name={name},status=deployed",
               "-o", "json"]  # fmt: skip
    done = subprocess.run(command, env=run_env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ValueError(f"kubectl could not read its Helm record: {' '.join(done.stderr.split())}")
    return helm_record_objects(json.loads(done.stdout), f"{namespace}/{name}")


def interrupted(run_env: dict[str, str], name: str, namespace: str) -> tuple[str, str] | None:
    """(record, status) where an interrupted apply left release `namespace/name` pending
    (infra/catalogue/helm_records.py `interrupted_record`); None otherwise, or when its records cannot be read (the
    gate's other reads say why)."""
    command = [*kubectl(), "get", "configmaps", "-n", namespace, "-l", f"owner=helm,name={name}", "-o", "json"]
    done = subprocess.run(command, env=run_env, capture_output=True, text=True, check=False)
    return interrupted_record(json.loads(done.stdout)) if done.returncode == 0 else None


def served_crds(run_env: dict[str, str]) -> dict[tuple[str, str], dict[str, Any]]:
    """The openAPIV3Schema of every CRD version the cluster serves, by (apiVersion, kind); ValueError when kubectl
    cannot list them."""
    done = subprocess.run([*kubectl(), "get", "crds", "-o", "json"], env=run_env, capture_output=True, text=True,
                          check=False)  # fmt: skip
    if done.returncode != 0:
        raise ValueError(f"kubectl could not list the cluster's CRDs: {' '.join(done.stderr.split())}")
    out = {}
    for crd in json.loads(done.stdout).get("items") or []:
        spec = crd.get("spec") or {}
        for version in spec.get("versions") or []:
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            if version.get("served") and schema:
                out[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = schema
    return out
