"""Pathways on Cloud: workers that match the instance type and count the resource manager expects."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from infra.rules import Finding, containers, rule, where
from infra.rules.manifest_subject import PATHWAYS_TYPE, ReleaseContext, _args, _tpu_chips
from infra.rules.sources import JETSTREAM_LWS


@rule(
    id="pathways.workers-match-instance",
    system="Pathways",
    layer="engine-start",
    summary=(
        "The resource manager's --instance_count x hosts of --instance_type equals the TPU worker pods of the "
        "group; otherwise it waits for workers that never come."
    ),
    source=f"{JETSTREAM_LWS}; https://cloud.google.com/ai-hypercomputer/docs/workloads/pathways-on-cloud",
    kinds=("LeaderWorkerSet",),
    subject="manifest",
)
def _pathways(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for obj in objects:
        lwt = obj["spec"]["leaderWorkerTemplate"]
        size = int(lwt.get("size", 1))
        leader = (lwt.get("leaderTemplate") or lwt["workerTemplate"])["spec"]
        worker = lwt["workerTemplate"]["spec"]
        rm = next((c for _, c in containers(leader) if "--node_type=resource_manager" in _args(c)), None)
        if rm is None:
            continue
        count = next((int(a.split("=", 1)[1]) for a in _args(rm) if a.startswith("--instance_count=")), 1)
        kind = next((PATHWAYS_TYPE.match(a) for a in _args(rm) if a.startswith("--instance_type=")), None)
        if kind is None:
            yield Finding(
                f"{where(obj)}: leaderTemplate pathways args", _args(rm), "--instance_type=tpu<gen>:<topology>"
            )
            continue
        chips = math.prod(int(d) for d in kind.group(1).split("x"))
        per_host = _tpu_chips(worker)[0][1] if _tpu_chips(worker) else 0
        tpu_pods = (size - 1) * bool(per_host) + bool(_tpu_chips(leader))
        if not per_host or chips * count != tpu_pods * per_host:
            yield Finding(
                f"{where(obj)}: spec.leaderWorkerTemplate.size",
                size,
                f"{count} x {kind.group(1)} is {chips * count} chips; the group's TPU pods hold {tpu_pods * per_host}",
            )
