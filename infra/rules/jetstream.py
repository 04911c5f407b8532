"""JetStream: a startup budget that covers restoring a large checkpoint."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from infra.rules import Finding, containers, probe_budget, rule, where
from infra.rules.manifest_subject import TUTORIAL_STARTUP_BUDGET_S, ReleaseContext
from infra.rules.sources import JETSTREAM_LWS


@rule(
    id="jetstream.startup-probe-covers-restore",
    system="Kubernetes kubelet / JetStream",
    layer="pod-start",
    summary=(
        "The JetStream server's startup probe allows as long as the tutorial's (600 s + 10000 x 1 s): a 405B "
        "restore plus warm-up takes far more than 30 minutes, and a failed probe restarts the whole group."
    ),
    source=f"{JETSTREAM_LWS} (startupProbe initialDelaySeconds 600, periodSeconds 1, failureThreshold 10000)",
    kinds=("LeaderWorkerSet",),
    subject="manifest",
)
def _startup_probe(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for obj in objects:
        leader = obj["spec"]["leaderWorkerTemplate"].get("leaderTemplate") or {}
        images = " ".join(str(c.get("image", "")) for _, c in containers(leader.get("spec") or {}))
        if "jetstream" not in images:
            continue  # another engine's group (vLLM's has its own rule)
        for path, c in containers(leader.get("spec") or {}):
            probe = c.get("startupProbe")
            if probe is None:
                continue
            budget = probe_budget(probe)
            if budget < TUTORIAL_STARTUP_BUDGET_S:
                yield Finding(
                    f"{where(obj)}: leaderTemplate.spec.{path}.startupProbe",
                    probe,
                    f"allows {budget} s; at least {TUTORIAL_STARTUP_BUDGET_S} s",
                )
