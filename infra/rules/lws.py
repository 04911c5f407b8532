"""LeaderWorkerSet's webhook: subgroups that divide the group."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from infra.rules import Finding, rule, where
from infra.rules.manifest_subject import ReleaseContext


@rule(
    id="lws.subgroup-size-divides-group",
    system="LeaderWorkerSet webhook",
    layer="admission",
    summary=(
        "subGroupSize is at most size and divides size or size-1 (size-1 with LeaderExcluded); the "
        "subgroup-exclusive-topology annotation needs a subGroupSize."
    ),
    source="kubernetes-sigs/lws pkg/webhooks/leaderworkerset_webhook.go L175-181, L236-255 @ v0.7.0",
    kinds=("LeaderWorkerSet",),
    subject="manifest",
)
def _lws_subgroups(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for obj in objects:
        lwt = obj["spec"]["leaderWorkerTemplate"]
        policy = lwt.get("subGroupPolicy") or {}
        size, sub = int(lwt.get("size", 1)), policy.get("subGroupSize")
        at = f"{where(obj)}: spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize"
        annotation = "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology"
        if annotation in ((obj.get("metadata") or {}).get("annotations") or {}) and not sub:
            yield Finding(at, sub, f"the {annotation} annotation needs subGroupSize")
        if not sub:
            continue
        sub = int(sub)
        if sub > size:
            yield Finding(at, sub, f"cannot be larger than size {size}")
        elif policy.get("subGroupPolicyType") == "LeaderExcluded":
            if (size - 1) % sub:
                yield Finding(
                    at, sub, f"size-1 = {size - 1} must be divisible by subGroupSize when using LeaderExcluded"
                )
        elif size % sub and (size - 1) % sub:
            yield Finding(at, sub, f"size {size} or size - 1 must be divisible by subGroupSize")
