"""The serving autoscalers of a stack, as the review shows them: each release whose servers a Horizontal Pod
Autoscaler adds and removes, its fewest and most servers, what it scales on, and what its accelerator pool costs at
either end (read from the releases' values and the node pools the stack declares); and the ComputeClasses over
the capacity tiers of the slices that fall back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infra.derive.names import COMPUTE_CLASS_LABEL
from infra.review.model import Autoscaler, Fallback
from infra.review.releases import release_values

POOL_LABEL = "cloud.google.com/gke-nodepool"


def autoscalers(stack_json: Mapping[str, Any]) -> list[Autoscaler]:
    """Every release of the stack whose chart values turn its autoscaler on."""
    out = []
    for release, _, values in release_values(stack_json):
        scaling = values.get("autoscaling") or {}
        if not scaling.get("enabled"):
            continue
        metric = str(scaling["metric"]).split("|")
        selector = values.get("nodeSelector") or {}
        warm_up = scaling.get("warmUp") or {}
        out.append(
            Autoscaler(
                release=str(release.get("name")),
                fewest=int(scaling["minReplicas"]),
                most=int(scaling["maxReplicas"]),
                metric=metric[1] if len(metric) == 3 else str(scaling["metric"]),
                target=str(scaling["averageValue"]),
                pools=_pools(selector, values),
                hosts=int(values.get("hosts", 0)) if selector else 0,
                compute_class=COMPUTE_CLASS_LABEL in selector,
                warm_up_s=int(warm_up.get("seconds", 0)),
                warm_up_basis=str(warm_up.get("basis", "")),
            )
        )
    return sorted(out, key=lambda a: a.release)


def _pools(selector: Mapping[str, str], values: Mapping[str, Any]) -> tuple[str, ...]:
    """The pools (or the ComputeClass) the servers run on: the selected one, or a counted slice's pools."""
    one = selector.get(COMPUTE_CLASS_LABEL) or selector.get(POOL_LABEL)
    return (str(one),) if one else tuple(str(p) for p in values.get("groupPools") or ())


def fallbacks(stack_json: Mapping[str, Any]) -> list[Fallback]:
    """The ComputeClasses the stack declares over its capacity tiers' pools (the compute-classes release)."""
    return [
        Fallback(str(c["name"]), tuple(c["pools"]))
        for _, chart, values in release_values(stack_json)
        if chart == "compute-classes"
        for c in values.get("classes") or []
    ]
