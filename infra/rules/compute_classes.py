"""GKE custom ComputeClasses: the class over a slice's capacity tiers as GKE admits and uses it, and the Pods
that select one. GKE publishes no CRD file to pin, so these rules hold the objects to the CRD's CEL rules and to
what the docs require of manually created node pools (infra/catalogue/compute_classes.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from infra.catalogue import compute_classes as cc
from infra.derive.names import COMPUTE_CLASS_LABEL
from infra.rules import Finding, rule, where
from infra.rules.manifest_subject import ReleaseContext, _pods, class_pools


def _classes(objects: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for obj in objects:
        if obj.get("kind") == "ComputeClass" and str(obj.get("apiVersion", "")).startswith("cloud.google.com/"):
            yield obj


def _joins(body: dict[str, Any], name: str) -> list[str]:
    """What a node pool body lacks to join class `name`: GKE's label and NoSchedule taint, cluster autoscaling."""
    config = body.get("node_config") or {}
    missing = []
    if (config.get("labels") or {}).get(COMPUTE_CLASS_LABEL) != name:
        missing.append(f"node label {COMPUTE_CLASS_LABEL}={name}")
    taints = {(t.get("key"), t.get("value"), t.get("effect")) for t in config.get("taint") or []}
    if (COMPUTE_CLASS_LABEL, name, "NO_SCHEDULE") not in taints:
        missing.append(f"taint {COMPUTE_CLASS_LABEL}={name}:NoSchedule")
    if not body.get("autoscaling"):
        missing.append("autoscaling (a nodepools rule is for pools the cluster autoscaler grows)")
    return missing


def _lowest(body: dict[str, Any]) -> int:
    scaling = body.get("autoscaling") or {}
    return int(scaling.get("total_min_node_count", scaling.get("min_node_count", 0)) or 0)


@rule(
    id="gke.compute-class-tiers",
    system="GKE custom ComputeClasses",
    layer="admission",
    summary=(
        "A ComputeClass over the stack's node pools: a name GKE leaves to users, whenUnsatisfiable set, each "
        "`nodepools` priority alone in its rule and naming pools of the stack that carry the class's label and "
        "NoSchedule taint and autoscale, each pool in one class; with active migration, the lower tiers scale to zero."
    ),
    source=(
        f"{cc.DOC} (manually created node pools: label and taint cloud.google.com/compute-class; 'You can't use "
        "other spec.priorities fields alongside the nodepools field'; a node pool in one class; active migration "
        "does not remove nodes below a pool's minimum; whenUnsatisfiable's default changed in 1.33; names "
        f"starting gke or autopilot are GKE's); {cc.CRD_SOURCE}"
    ),
    subject="manifest",
)
def _tiers(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    pools = ctx.pools()
    classes_of: dict[str, list[str]] = {}
    for objs in ctx.stack_objects.values():
        for other in _classes(objs):
            for item in (other.get("spec") or {}).get("priorities") or []:
                for pool in item.get("nodepools") or []:
                    classes_of.setdefault(pool, []).append(other["metadata"]["name"])
    for obj in _classes(objects):
        at, name, spec = where(obj), obj["metadata"]["name"], obj.get("spec") or {}
        if name.startswith(cc.RESERVED_PREFIXES):
            yield Finding(f"{at}.metadata.name", name, f"names starting {' or '.join(cc.RESERVED_PREFIXES)} are GKE's")
        if spec.get("whenUnsatisfiable") not in cc.WHEN_UNSATISFIABLE:
            yield Finding(
                f"{at}.spec.whenUnsatisfiable",
                spec.get("whenUnsatisfiable"),
                f"one of {', '.join(cc.WHEN_UNSATISFIABLE)}, written out (the default changed in GKE 1.33)",
            )
        migrates = bool((spec.get("activeMigration") or {}).get("optimizeRulePriority"))
        for i, item in enumerate(spec.get("priorities") or []):
            path = f"{at}.spec.priorities[{i}]"
            if "nodepools" not in item:
                continue
            if len(item) > 1:
                yield Finding(path, sorted(item), "Nodepool field cannot be set along with other fields")
            for pool in item["nodepools"]:
                body = pools.get(pool)
                if body is None:
                    yield Finding(
                        f"{path}.nodepools", pool, f"no node pool of the stack has that name: {sorted(pools)}"
                    )
                    continue
                missing = _joins(body, name)
                if missing:
                    yield Finding(f"{path}.nodepools", pool, "the pool lacks " + "; ".join(missing))
                if len(set(classes_of.get(pool, []))) > 1:
                    yield Finding(
                        f"{path}.nodepools", pool, f"in several classes ({', '.join(sorted(set(classes_of[pool])))})"
                    )
                if migrates and i > 0 and _lowest(body) > 0:
                    yield Finding(
                        f"{path}.nodepools",
                        pool,
                        f"keeps {_lowest(body)} node(s) at least: active migration cannot move servers off a lower "
                        "tier below its minimum (scale it from zero)",
                    )


@rule(
    id="gke.compute-class-pod-selector",
    system="GKE custom ComputeClasses",
    layer="admission",
    summary=(
        "A Pod that selects a ComputeClass selects one the stack declares, over pools that exist, and none of the "
        "node labels GKE derives from a class's fields."
    ),
    source=f"{cc.DOC} (node selectors that you can't use with ComputeClasses; selecting a class)",
    subject="manifest",
)
def _selectors(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    declared = {c["metadata"]["name"] for objs in ctx.stack_objects.values() for c in _classes(objs)}
    declared |= {c["metadata"]["name"] for c in _classes(objects)}
    pools = ctx.pools()
    for at, _meta, spec in _pods(objects):
        selector = spec.get("nodeSelector") or {}
        name = selector.get(COMPUTE_CLASS_LABEL)
        if not name:
            continue
        if name not in declared:
            yield Finding(
                f"{at}.spec.nodeSelector", name, f"no ComputeClass of the stack has that name: {sorted(declared)}"
            )
        elif not class_pools(pools, name):
            yield Finding(f"{at}.spec.nodeSelector", name, "no node pool of the stack joins that class")
        controlled = sorted(set(selector) & cc.CLASS_CONTROLLED_LABELS)
        if controlled:
            yield Finding(
                f"{at}.spec.nodeSelector",
                controlled,
                "GKE refuses a Pod that selects a ComputeClass and these labels (the class decides them)",
            )
