"""Objects the controllers create next to ours: their names must be free, and short enough.

LeaderWorkerSet, JobSet and KubeRay each create Services, StatefulSets, Jobs and pods named after our
objects. Each controller, finding an object of that name already there, either uses it as if it were
its own (LWS and JobSet headless Services: our ClusterIP Service then stands in for the headless one and
pod DNS names never resolve), takes it over, or fails on every reconcile. And a derived name can break a
length limit no webhook checks: a StatefulSet's pods carry `controller-revision-hash: <sts>-<10 chars>`,
so a StatefulSet name over 52 characters leaves pods that are never created.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from infra.rules import Finding, rule, where

LWS_SRC = "kubernetes-sigs/lws @ v0.7.0"
JOBSET_SRC = "kubernetes-sigs/jobset @ v0.12.0"
KUBERAY_SRC = "ray-project/kuberay @ v1.4.2"
# A StatefulSet's pods are labelled controller-revision-hash=<sts>-<hash of up to 10 characters>.
STS_NAME_MAX = 52
RAYCLUSTER_NAME_MAX = 53  # ray-operator/controllers/ray/utils/constant.go MaxRayClusterNameLength


@dataclass(frozen=True)
class Created:
    """One object a controller will create for one of ours."""

    kind: str
    name: str
    limit: int  # the longest the name may be
    why: str  # where the name and the limit come from


def created_objects(obj: dict[str, Any]) -> list[Created]:
    """What the LWS, JobSet or KubeRay controller creates for `obj` (nothing for other kinds)."""
    kind, name, spec = obj.get("kind"), obj["metadata"]["name"], obj.get("spec") or {}
    out: list[Created] = []
    if kind == "LeaderWorkerSet":
        lwt = spec.get("leaderWorkerTemplate") or {}
        size, replicas = int(lwt.get("size", 1)), int(spec.get("replicas", 1))
        out.append(
            Created("Service", name, 63, f"headless Service, {LWS_SRC} pkg/utils/controller/controller_utils.go")
        )
        out.append(Created("StatefulSet", name, STS_NAME_MAX, "leader StatefulSet; kubernetes/kubernetes#64023"))
        for g in range(replicas):
            out.append(Created("Pod", f"{name}-{g}", 63, "leader pod and hostname"))
            if size > 1:
                out.append(Created("StatefulSet", f"{name}-{g}", STS_NAME_MAX, "worker StatefulSet; k8s#64023"))
                out.append(Created("Pod", f"{name}-{g}-{size - 1}", 63, "worker pod and hostname"))
    elif kind == "JobSet":
        network = spec.get("network") or {}
        if network.get("enableDNSHostnames", True):
            out.append(
                Created(
                    "Service",
                    network.get("subdomain") or name,
                    63,
                    f"headless Service, {JOBSET_SRC} pkg/controllers/jobset_controller.go",
                )
            )
        for rjob in spec.get("replicatedJobs") or []:
            for j in range(int(rjob.get("replicas", 1))):
                out.append(Created("Job", f"{name}-{rjob['name']}-{j}", 63, f"{JOBSET_SRC} pkg/util/placement"))
    elif kind == "RayCluster":
        head = (spec.get("headGroupSpec") or {}).get("headService") or {}
        out.append(Created("RayCluster", name, RAYCLUSTER_NAME_MAX, f"{KUBERAY_SRC} MaxRayClusterNameLength"))
        out.append(
            Created(
                "Service",
                (head.get("metadata") or {}).get("name") or f"{name}-head-svc",
                63,
                f"head Service, {KUBERAY_SRC} ray-operator/controllers/ray/utils/util.go",
            )
        )
        if any(int(g.get("numOfHosts", 1)) > 1 for g in spec.get("workerGroupSpecs") or []):
            out.append(Created("Service", f"{name}-headless", 63, f"{KUBERAY_SRC} common/service.go"))
        for g in spec.get("workerGroupSpecs") or []:
            out.append(Created("Label ray.io/group", g.get("groupName", ""), 63, "pod label value"))
    return out


@rule(
    id="k8s.controller-created-names",
    system="LeaderWorkerSet / JobSet / KubeRay controllers",
    layer="pod-start",
    summary=(
        "No object of ours (in any release of the namespace) has the name of a Service, StatefulSet or Job a "
        "controller creates for our LWS, JobSet or RayCluster, and every such derived name fits its limit."
    ),
    source=(
        f"{LWS_SRC} pkg/utils/controller/controller_utils.go CreateHeadlessServiceIfNotExists (an existing Service "
        f"of that name is used as is); {JOBSET_SRC} pkg/controllers/jobset_controller.go (headless Service "
        f"`spec.network.subdomain` or the JobSet's name); {KUBERAY_SRC} ray-operator/controllers/ray/utils/"
        "util.go, constant.go (MaxRayClusterNameLength 53); https://github.com/kubernetes/kubernetes/issues/64023 "
        "(controller-revision-hash label: StatefulSet names over 52 characters)"
    ),
    subject="manifest",
)
def _created_names(objects: list[dict[str, Any]], ctx: Any) -> Iterator[Finding]:
    ours: dict[tuple[str, str], str] = {}  # (kind, name) -> release, for every release in this namespace
    for release, objs in {**ctx.stack_objects, ctx.name: objects}.items():
        if ctx.namespace_of(release) != ctx.namespace:
            continue
        for o in objs:
            ours[(o.get("kind"), o["metadata"]["name"])] = release
    for obj in objects:
        for c in created_objects(obj):
            if len(c.name) > c.limit:
                yield Finding(f"{where(obj)}: {c.kind} {c.name}", len(c.name), f"over {c.limit} characters ({c.why})")
            taken = ours.get((c.kind, c.name))
            if taken is not None and not (c.kind == obj.get("kind") and c.name == obj["metadata"]["name"]):
                yield Finding(
                    f"{where(obj)}: {c.kind} {c.name}",
                    c.name,
                    f"release {taken} already has a {c.kind} of this name; the controller would use or fight it "
                    f"({c.why})",
                )
