"""What KWOK does to a pod, as its own default stages do, but for the controllers' pods.

KWOK stands in for the kubelets: its default stages (sigs.k8s.io/kwok kustomize/stage/pod/fast at the pinned version)
make every pod Running and Ready at once. On GKE a controller's pod is Ready only once its readiness probe answers,
which for Kueue, JobSet and LWS is once their webhook server serves; until then the Service their webhooks name has no
endpoint and every call through a `failurePolicy: Fail` webhook is refused. Here the controller runs on this machine,
not in its pod, so its pods (those of the controllers' namespaces) take a stage of their own: Running with an address
and not Ready. The supervisor (infra/localcluster/controllers.py) starts the controller on that address and marks the
pod Ready once its webhook server answers, as the kubelet's probe would. Every other pod takes KWOK's defaults as
they are.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from infra.engine.build import components

KWOK_MODULE = "sigs.k8s.io/kwok"
DEFAULTS = "kustomize/stage/pod/fast"  # pod-ready.yaml, pod-complete.yaml, pod-delete.yaml
NOT_READY = "controller-pod-running"


def _kwok_source() -> Path:
    done = subprocess.run(
        ["go", "mod", "download", "-json", KWOK_MODULE],
        cwd=components()["kwok"].folder,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "GOFLAGS": "-mod=readonly"},
    )
    return Path(json.loads(done.stdout)["Dir"])


def _not_ready(template: str) -> str:
    """KWOK's pod-ready status template with the pod not Ready: its Ready and ContainersReady conditions False and
    each container running but not ready."""
    changed = template
    for kind in ("Ready", "ContainersReady"):
        changed, found = re.subn(rf'status: "True"(\s+)type: {kind}\n', rf'status: "False"\1type: {kind}\n', changed)
        if found != 1:
            raise ValueError(
                f"KWOK's pod-ready template has no {kind} condition as expected: {DEFAULTS}/pod-ready.yaml"
            )
    changed, found = re.subn(r"ready: true(\s+restartCount: 0\s+state:\s+running:)", r"ready: false\1", changed)
    if found != 1:
        raise ValueError(f"KWOK's pod-ready template has no running container as expected: {DEFAULTS}/pod-ready.yaml")
    return changed


def pod_stages(controller_namespaces: list[str], source: Path | None = None) -> list[dict[str, Any]]:
    """KWOK's default pod stages, the pods of `controller_namespaces` left out of its pod-ready stage and given
    the not-ready one instead."""
    folder = (source or _kwok_source()) / DEFAULTS
    stages = [
        yaml.safe_load((folder / f"{name}.yaml").read_text()) for name in ("pod-ready", "pod-complete", "pod-delete")
    ]
    ready = stages[0]
    namespace = {"key": ".metadata.namespace", "values": sorted(controller_namespaces)}
    controllers = json.loads(json.dumps(ready))
    ready["spec"]["selector"]["matchExpressions"].append({**namespace, "operator": "NotIn"})
    controllers["metadata"]["name"] = NOT_READY
    controllers["spec"]["selector"]["matchExpressions"].append({**namespace, "operator": "In"})
    controllers["spec"]["next"]["statusTemplate"] = _not_ready(ready["spec"]["next"]["statusTemplate"])
    return [*stages, controllers]


def write_config(path: Path, controller_namespaces: list[str]) -> Path:
    """KWOK's --config file: the pod stages above (KWOK's node stages stay its defaults)."""
    path.write_text(yaml.safe_dump_all(pod_stages(controller_namespaces), sort_keys=False))
    return path
