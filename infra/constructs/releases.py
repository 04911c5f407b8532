"""Helm releases of the workload charts, with values derived from the environment and its slices."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from constructs import Construct

from infra.bindings import helm
from infra.config import Environment
from workloads.constants import CHECKPOINT_MOUNT, RAY_VERSION

REPO = Path(__file__).resolve().parents[2]
CHARTS = REPO / "workloads" / "charts"


def chart_path(name: str) -> str:
    """A local chart's path as Terraform sees it: relative to the stack's directory in cdktf.out."""
    return f"../../../workloads/charts/{name}"


def ray_training_values(env: Environment) -> dict[str, Any]:
    """Values of the ray-training chart: every number from the slice, every name from the config."""
    training = env.training
    if training is None:
        raise ValueError(f"environment {env.name!r} has no `training` section")
    slice_ = env.slices[training.slice].slice
    return {
        "image": env.release.images[training.image],
        "rayVersion": RAY_VERSION,
        "serviceAccountName": env.identities[training.identity].service_account,
        "head": {"resources": {"cpu": training.head.cpu, "memory": training.head.memory}, "nodeSelector": {}},
        "worker": {
            "groupName": slice_.name,
            "replicas": 1,
            "numOfHosts": slice_.hosts,
            "acceleratorResource": slice_.resource_name,
            "acceleratorsPerHost": slice_.chips_per_host,
            "resources": {"cpu": training.worker.cpu, "memory": training.worker.memory},
            "nodeSelector": slice_.node_selector,
            "sharedMemory": training.shared_memory,
            "env": {},
        },
        "checkpoints": {"bucket": env.bucket_name(training.bucket), "mountPath": CHECKPOINT_MOUNT},
    }


class ChartRelease(Construct):
    """A Helm release of one of the repository's charts, values passed as one JSON document."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        chart: str,
        namespace: str,
        values: dict[str, Any],
        depends_on: list[Any],
    ) -> None:
        super().__init__(scope, id_)
        version = _chart_version(chart)
        self.release = helm("release").Release(
            self,
            "release",
            name=id_,
            chart=chart_path(chart),
            version=version,
            namespace=namespace,
            values=[json.dumps(values, sort_keys=True)],
            atomic=True,
            wait=True,
            timeout=900,
            depends_on=depends_on,
        )


def _chart_version(chart: str) -> str:
    for line in (CHARTS / chart / "Chart.yaml").read_text().splitlines():
        if line.startswith("version:"):
            return line.split(":", 1)[1].strip().strip('"')
    raise ValueError(f"{CHARTS / chart / 'Chart.yaml'} has no version")
