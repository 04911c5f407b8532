"""What KWOK does to a node and a pod, as its own stages do, but a node's heartbeat the Lease one (NODE_STAGES) and
the controllers' pods not Ready until their controller serves.

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
# A node's stages, as a kubelet's heartbeat goes: its Lease renewed every 10 s (KWOK's --node-lease-duration-seconds)
# and its status written every 10 to 20 minutes (a kubelet's nodeStatusReportFrequency is 5). KWOK means to use the
# second stage when it renews leases, but at the pinned v0.7.0 its default is the other way round
# (pkg/kwok/cmd/root.go: getDefaultNodeStages(NodeLeaseDurationSeconds == 0)): with leases on it writes every
# node's status every 20 to 45 s as well, each write sent to every watcher of nodes (the scheduler, the controller
# manager, Kueue, KWOK itself). Named here, the lease stage is the one used.
NODE_STAGES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
)


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


def node_stages(source: Path | None = None) -> list[dict[str, Any]]:
    """KWOK's own node stages for nodes whose heartbeat is a Lease (NODE_STAGES)."""
    folder = source or _kwok_source()
    return [yaml.safe_load((folder / name).read_text()) for name in NODE_STAGES]


def write_config(path: Path, controller_namespaces: list[str]) -> Path:
    """KWOK's --config file: the node stages of a Lease heartbeat and the pod stages above."""
    source = _kwok_source()
    stages = node_stages(source) + pod_stages(controller_namespaces, source)
    path.write_text(yaml.safe_dump_all(stages, sort_keys=False))
    return path
