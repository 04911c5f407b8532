"""What manifest rules share: a rendered release's objects as the rules read them.

A manifest rule gets one release's objects (exactly what the Helm provider will send to the API server)
and a `ReleaseContext`: the release, the stack it is in, and the objects of every release of that stack,
for rules that span releases (a JobSet naming a LocalQueue of another release)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from infra.catalogue.accelerators import TPU_RESOURCE
from infra.derive.names import COMPUTE_CLASS_LABEL
from infra.rules import containers, pod_templates, where

FUSE_DRIVER = "gcsfuse.csi.storage.gke.io"


NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"


PATHWAYS_TYPE = re.compile(r"^--instance_type=tpu[a-z0-9]+:([0-9x]+)$")


@dataclass(frozen=True)
class ReleaseContext:
    """Where a release's objects will go."""

    name: str
    namespace: str
    stack: dict[str, Any] = field(default_factory=dict, repr=False)
    # Objects of every local release of the stack, by release name.
    stack_objects: dict[str, list[dict[str, Any]]] = field(default_factory=dict, repr=False)

    def namespace_of(self, release: str) -> str | None:
        """The namespace another release of the stack installs into."""
        for r in (self.stack.get("resource", {}).get("helm_release") or {}).values():
            if r.get("name") == release:
                return r.get("namespace")
        return None

    def chart_version(self, chart: str) -> str | None:
        """The version of the stack's release of `chart` (a controller's, from its repository), or None."""
        for r in (self.stack.get("resource", {}).get("helm_release") or {}).values():
            if r.get("chart") == chart and r.get("version"):
                return str(r["version"])
        return None

    def pools(self) -> dict[str, dict[str, Any]]:
        """Node pools of the stack by name."""
        return {
            p.get("name"): p for p in (self.stack.get("resource", {}).get("google_container_node_pool") or {}).values()
        }

    def workload_identities(self) -> set[str]:
        """Names of the Kubernetes service accounts the stack binds to Workload Identity."""
        ksas = (self.stack.get("resource", {}).get("kubernetes_service_account_v1") or {}).values()
        return {k["metadata"]["name"] for k in ksas}

    def gce_metadata_pools(self) -> set[str]:
        return {
            name
            for name, pool in self.pools().items()
            if ((pool.get("node_config") or {}).get("workload_metadata_config") or {}).get("mode") == "GCE_METADATA"
        }

    def min_master_version(self) -> str | None:
        clusters = (self.stack.get("resource", {}).get("google_container_cluster") or {}).values()
        return next((c.get("min_master_version") for c in clusters), None)


def _pods(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(`Kind/name: path`, pod metadata, pod spec) of every pod template."""
    for obj in objects:
        for path, template in pod_templates(obj):
            yield f"{where(obj)}: {path}", template.get("metadata") or {}, template.get("spec") or {}


def _fuse_volumes(spec: dict[str, Any]) -> Iterator[tuple[int, dict[str, Any]]]:
    for i, volume in enumerate(spec.get("volumes") or []):
        if (volume.get("csi") or {}).get("driver") == FUSE_DRIVER:
            yield i, volume


def _mount_options(volume: dict[str, Any]) -> list[str]:
    return [o.strip() for o in str((volume["csi"].get("volumeAttributes") or {}).get("mountOptions", "")).split(",")]


def _tpu_chips(spec: dict[str, Any]) -> list[tuple[str, int]]:
    found = []
    for path, c in containers(spec):
        limits = (c.get("resources") or {}).get("limits") or {}
        if TPU_RESOURCE in limits:
            found.append((path, int(str(limits[TPU_RESOURCE]))))
    return found


def _accelerators(spec: dict[str, Any]) -> bool:
    return any(
        name in ((c.get("resources") or {}).get("limits") or {})
        for _, c in containers(spec)
        for name in (TPU_RESOURCE, "nvidia.com/gpu")
    )


FUSE_SIDECAR_LIMITS = ("gke-gcsfuse/cpu-limit", "gke-gcsfuse/memory-limit", "gke-gcsfuse/ephemeral-storage-limit")


def class_pools(pools: dict[str, dict[str, Any]], name: str) -> set[str]:
    """The node pools of the stack that join ComputeClass `name` (its label on their nodes)."""
    return {
        p
        for p, body in pools.items()
        if ((body.get("node_config") or {}).get("labels") or {}).get(COMPUTE_CLASS_LABEL) == name
    }


def _selected_pools(spec: dict[str, Any], pools: dict[str, dict[str, Any]] | None = None) -> set[str] | None:
    """The node pools a pod may land on, if its placement names them (nodeSelector or required affinity, or the
    ComputeClass it selects: the pools of the stack that join it, when `pools` are given)."""
    selector = spec.get("nodeSelector") or {}
    pool = selector.get(NODEPOOL_LABEL)
    if pool:
        return {pool}
    if pools is not None and selector.get(COMPUTE_CLASS_LABEL):
        return class_pools(pools, selector[COMPUTE_CLASS_LABEL]) or None
    terms = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        or {}
    ).get("nodeSelectorTerms") or []
    found: set[str] = set()
    for term in terms:
        exprs = [e for e in term.get("matchExpressions") or [] if e.get("key") == NODEPOOL_LABEL]
        if not exprs or exprs[0].get("operator") != "In":
            return None
        found |= set(exprs[0].get("values") or [])
    return found or None


def _queues(ctx: ReleaseContext) -> dict[tuple[str, str], dict[str, Any]]:
    """LocalQueues of the stack by (namespace, name) -> the ClusterQueue they point at."""
    objs = [o for objs in ctx.stack_objects.values() for o in objs]
    cqs = {o["metadata"]["name"]: o for o in objs if o.get("kind") == "ClusterQueue"}
    return {
        (o["metadata"].get("namespace", ""), o["metadata"]["name"]): cqs.get(o["spec"].get("clusterQueue"), {})
        for o in objs
        if o.get("kind") == "LocalQueue"
    }


def _args(c: dict[str, Any]) -> list[str]:
    return [str(a) for a in c.get("args") or []]


# The GKE tutorial's startup probe: initialDelaySeconds 600 + failureThreshold 10000 x periodSeconds 1.
TUTORIAL_STARTUP_BUDGET_S = 600 + 10000 * 1


# Flags the driver sets itself (sidecar_mounter_config.go DisallowedFlags; the GKE perf page lists the first eight).
FUSE_DISALLOWED = {
    "app-name", "temp-dir", "foreground", "log-file", "log-format", "key-file", "token-url",
    "reuse-token-from-url", "config-file", "cache-dir", "prometheus-port", "kernel-params-file", "o",
}  # fmt: skip


def autoscaled(objects: list[dict[str, Any]]) -> dict[tuple[str, str], int]:
    """{(kind, name): the HorizontalPodAutoscaler's maxReplicas} of each object of a release an HPA scales."""
    return {
        (str(ref.get("kind")), str(ref.get("name"))): int(hpa["spec"].get("maxReplicas", 1))
        for hpa in objects
        if hpa.get("kind") == "HorizontalPodAutoscaler"
        for ref in [hpa["spec"].get("scaleTargetRef") or {}]
    }


def at_most(obj: dict[str, Any], scaled: dict[tuple[str, str], int]) -> dict[str, Any]:
    """The object at its autoscaler's maximum replicas (the pool must hold them all), or as it is."""
    most = scaled.get((str(obj.get("kind")), str((obj.get("metadata") or {}).get("name"))))
    return obj if most is None else {**obj, "spec": {**(obj.get("spec") or {}), "replicas": most}}
