"""Whether each node pool can hold, at its maximum size, every pod of the stack that lands on it at once.

The scheduler rule (scheduler.py) asks whether a pod fits *a* node of some pool. Pods of different releases
share pools (the system pool takes the upstream controllers, the endpoint picker, the Pathways leaders, the Ray
head), and a pool has at most so many nodes: the cluster autoscaler adds nodes only up to the pool's maximum,
then the rest stay Pending ("pod didn't trigger scale-up: ... max node group size reached").

Here every steady pod of the stack (each replica of each pod template, a Horizontal Pod Autoscaler's target at its
maxReplicas, the upstream controllers' own pods from their charts' defaults) is packed, largest first, into the
nodes of the pools that may take it, each node less GKE's reservations and the DaemonSets that land on it; a pod
with several candidate pools goes where a node is already open, else to the pool with the most nodes left.
First-fit-decreasing packs at least as tightly as the scheduler's default spreading, so a pool refused here is too
small whatever the scheduler does; one accepted here may still be tight.

Not modelled (said, not guessed): GKE's own Deployments on the system pool (kube-dns, konnectivity-agent,
metrics-server, event-exporter: their requests are not published), pods of Jobs that finish before others
start (every pod is counted as running together), and surge pods of a rolling update.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from infra.catalogue.controllers import CONTROLLERS
from infra.derive.gke_nodes import Node
from infra.rules import Finding, pod_templates, rule, where
from infra.rules.manifest_subject import ReleaseContext, at_most, autoscaled
from infra.rules.scheduler import SCHEDULER, Pod, _fit_refusal, _selects, nodes, pods

AUTOSCALER = (
    "https://cloud.google.com/kubernetes-engine/docs/concepts/cluster-autoscaler (the autoscaler adds nodes up "
    "to the node pool's maximum size); https://github.com/kubernetes/autoscaler/blob/cluster-autoscaler-1.34.0/"
    "cluster-autoscaler/FAQ.md ('max node group size reached')"
)


def copies(obj: dict[str, Any], path: str) -> int:
    """How many pods of the template at `path` the object runs at once (DaemonSets: one per node, counted apart)."""
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if kind in ("Deployment", "StatefulSet"):
        return int(spec.get("replicas", 1))
    if kind == "Job":
        return int(spec.get("parallelism", 1))
    if kind == "JobSet":
        i = int(path.split("[", 1)[1].split("]", 1)[0])
        job = spec["replicatedJobs"][i]
        return int(job.get("replicas", 1)) * int((job["template"].get("spec") or {}).get("parallelism", 1))
    if kind == "LeaderWorkerSet":
        lwt = spec.get("leaderWorkerTemplate") or {}
        groups, size = int(spec.get("replicas", 1)), int(lwt.get("size", 1))
        if path.endswith("leaderTemplate"):
            return groups
        return groups * (size - 1 if "leaderTemplate" in lwt else size)
    if kind == "RayCluster":
        if path.startswith("spec.headGroupSpec"):
            return 1
        i = int(path.split("[", 1)[1].split("]", 1)[0])
        group = spec["workerGroupSpecs"][i]
        return int(group.get("replicas", group.get("minReplicas", 1))) * int(group.get("numOfHosts", 1))
    return 1


def max_nodes(pool: dict[str, Any], cluster_zones: int) -> int:
    """A pool's largest size: the autoscaler's total maximum, its per-zone maximum times the pool's zones, or the
    fixed per-zone node count times the zones (hashicorp/google 7.45.0 google_container_node_pool: node_count
    and max_node_count are per zone, total_max_node_count is for the whole pool)."""
    zones = len(pool.get("node_locations") or ()) or cluster_zones
    scaling = pool.get("autoscaling") or {}
    if scaling.get("total_max_node_count") is not None:
        return int(scaling["total_max_node_count"])
    if scaling.get("max_node_count") is not None:
        return int(scaling["max_node_count"]) * zones
    return int(pool.get("node_count") or pool.get("initial_node_count") or 0) * zones


@dataclass
class PoolPacking:
    """What one pool holds once every pod that lands on it is placed."""

    pool: str
    max_nodes: int
    free_per_node: dict[str, float]
    nodes: list[dict[str, float]] = field(default_factory=list)  # what is left on each open node
    placed: list[tuple[Pod, int]] = field(default_factory=list)  # (pod, copies)
    requested: dict[str, float] = field(default_factory=dict)

    def take(self, pod: Pod) -> bool:
        for left in self.nodes:
            if _fit_refusal(pod.requests, left) is None:
                self._put(pod, left)
                return True
        if len(self.nodes) < self.max_nodes and _fit_refusal(pod.requests, self.free_per_node) is None:
            self.nodes.append(dict(self.free_per_node))
            self._put(pod, self.nodes[-1])
            return True
        return False

    def _put(self, pod: Pod, left: dict[str, float]) -> None:
        for k, v in pod.requests.items():
            left[k] = left.get(k, 0.0) - v
            self.requested[k] = self.requested.get(k, 0.0) + v
        if self.placed and self.placed[-1][0] is pod:
            self.placed[-1] = (pod, self.placed[-1][1] + 1)
        else:
            self.placed.append((pod, 1))


@dataclass
class Packing:
    """Every pool's packing, and each pod copy that no pool had room for (pod, copies left out, why)."""

    pools: dict[str, PoolPacking]
    left_out: list[tuple[Pod, int, str]]
    # Each workload queued to Kueue, held alone to the room the steady pods leave: {workload: its packing}.
    queued: dict[str, dict[str, PoolPacking]] = field(default_factory=dict)


def controller_pods(stack: dict[str, Any]) -> list[Pod]:
    """The upstream controllers' own pods, for each controller release of the stack (their charts are not
    rendered here: their requests are the charts' defaults, infra/catalogue/controllers.py)."""
    installed = {r.get("name") for r in (stack.get("resource", {}).get("helm_release") or {}).values()}
    return [
        Pod(
            name, f"Deployment/{name}-controller-manager (chart {c.chart} defaults)", "Deployment", {}, dict(c.requests)
        )
        for name, c in sorted(CONTROLLERS.items())
        if name in installed
        for _ in range(c.pods)
    ]


def pack(stack: dict[str, Any], releases: dict[str, list[dict[str, Any]]], namespaces: dict[str, str]) -> Packing:
    """Pack every steady pod of the stack into its pools (see the module's docstring)."""
    pool_nodes, _ = nodes(stack)
    bodies = {p["name"]: p for p in (stack.get("resource", {}).get("google_container_node_pool") or {}).values()}
    cluster_zones = 3  # a regional cluster's default node locations: three zones of the region
    all_pods = pods(releases, namespaces)
    daemonsets = [p for p in all_pods if p.kind == "DaemonSet"]
    packings: dict[str, PoolPacking] = {}
    for node in pool_nodes:
        free = dict(node.allocatable)
        for ds in daemonsets:
            if _selects(ds, node) is None:
                free = {k: v - ds.requests.get(k, 0.0) for k, v in free.items()}
        packings[node.pool] = PoolPacking(node.pool, max_nodes(bodies[node.pool], cluster_zones), free)
    by_pool: dict[str, Node] = {n.pool: n for n in pool_nodes}
    counted = _copies_by_template(releases)
    queued = _queued_templates(releases)
    steady: list[tuple[Pod, int]] = [(p, 1) for p in controller_pods(stack)]
    steady += [
        (p, counted.get((p.release, p.at), 1))
        for p in all_pods
        if p.kind != "DaemonSet" and (p.release, p.at) not in queued
    ]
    left_out = _place(steady, packings, by_pool)
    # A workload queued to Kueue is admitted only when its quota allows: each is held to the room the steady pods
    # leave, alone (queued workloads wait for each other instead of running together).
    alone: dict[str, dict[str, PoolPacking]] = {}
    for workload in sorted({queued[(p.release, p.at)] for p in all_pods if (p.release, p.at) in queued}):
        alone[workload] = {}
        for name, steady_pool in packings.items():
            trial = PoolPacking(name, steady_pool.max_nodes, steady_pool.free_per_node)
            trial.nodes = [dict(left) for left in steady_pool.nodes]
            alone[workload][name] = trial
        members = [
            (p, counted.get((p.release, p.at), 1)) for p in all_pods if queued.get((p.release, p.at)) == workload
        ]
        left_out += _place(members, alone[workload], by_pool)
    return Packing(packings, left_out, alone)


def _place(
    work: list[tuple[Pod, int]], packings: dict[str, PoolPacking], by_pool: dict[str, Node]
) -> list[tuple[Pod, int, str]]:
    """Place `work` (pod, copies), largest first, into `packings`; return what found no room."""
    left_out: list[tuple[Pod, int, str]] = []
    for pod, n in sorted(work, key=lambda w: (-w[0].requests.get("cpu", 0.0), -w[0].requests.get("memory", 0.0))):
        candidates = [
            name
            for name, node in by_pool.items()
            if _selects(pod, node) is None and _fit_refusal(pod.requests, packings[name].free_per_node) is None
        ]
        if not candidates:
            continue  # the scheduler rule names a pod no pool can take at all
        missing = 0
        for _ in range(n):
            open_first = sorted(
                candidates, key=lambda c: (not packings[c].nodes, -(packings[c].max_nodes - len(packings[c].nodes)))
            )
            if not any(packings[c].take(pod) for c in open_first):
                missing += 1
        if missing:
            pools = ", ".join(f"{c} (at most {packings[c].max_nodes} nodes)" for c in candidates)
            left_out.append((pod, missing, f"{missing} of its {n} pod(s) find no room in {pools}"))
    return left_out


def _queued_templates(releases: dict[str, list[dict[str, Any]]]) -> dict[tuple[str, str], str]:
    """{(release, `Kind/name: path`): the workload} of every pod template of a workload queued to Kueue with
    others: a workload alone in its queue (the training cluster in its own) waits for no one, and runs beside the
    steady pods."""

    def queue(obj: dict[str, Any]) -> str | None:
        return ((obj.get("metadata") or {}).get("labels") or {}).get("kueue.x-k8s.io/queue-name")

    queued = [(release, obj) for release, objects in releases.items() for obj in objects if queue(obj)]
    sharing = Counter(queue(obj) for _, obj in queued)
    return {
        (release, f"{where(obj)}: {path}"): f"{release}/{where(obj)}"
        for release, obj in queued
        if sharing[queue(obj)] > 1
        for path, _ in pod_templates(obj)
    }


def _copies_by_template(releases: dict[str, list[dict[str, Any]]]) -> dict[tuple[str, str], int]:
    out = {}
    for release, objects in releases.items():
        scaled = autoscaled(objects)
        for obj in objects:
            for path, _ in pod_templates(obj):
                out[(release, f"{where(obj)}: {path}")] = copies(at_most(obj, scaled), path)
    return out


# The last stack packed, kept by reference (not id) so a new stack is never mistaken for it.
_LAST: list[tuple[dict[str, Any], dict[str, list[dict[str, Any]]], Packing]] = []


def _pack_release(ctx: ReleaseContext, objects: list[dict[str, Any]]) -> Packing:
    releases = {**ctx.stack_objects, ctx.name: objects}
    namespaces = {name: ctx.namespace_of(name) or ctx.namespace for name in releases}
    namespaces[ctx.name] = ctx.namespace
    return pack(ctx.stack, releases, namespaces)


def stack_packing(ctx: ReleaseContext, objects: list[dict[str, Any]]) -> Packing:
    """The packing of the stack `ctx` belongs to, computed once per stack while its releases are as rendered."""
    if ctx.stack_objects.get(ctx.name) is not objects:
        return _pack_release(ctx, objects)  # this release differs from the stack's: pack afresh
    for stack, releases, packing in _LAST:
        if stack is ctx.stack and releases is ctx.stack_objects:
            return packing
    packing = _pack_release(ctx, objects)
    _LAST[:] = [(ctx.stack, ctx.stack_objects, packing)]
    return packing


@rule(
    id="gke.pools-hold-their-pods-together",
    system="GKE cluster autoscaler / Kubernetes scheduler",
    layer="pod-start",
    summary=(
        "Every pool can hold, at its maximum node count, all the pods of the stack that land on it at once (every "
        "replica of every release, the upstream controllers' pods, the DaemonSets on each node); a pod left over "
        "stays Pending once the pool is at its maximum."
    ),
    source=f"{AUTOSCALER}; {SCHEDULER} (NodeResourcesFit)",
    subject="manifest",
)
def _held(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for pod, _missing, why in stack_packing(ctx, objects).left_out:
        if pod.release == ctx.name:
            asks = ", ".join(f"{k} {v:g}" for k, v in sorted(pod.requests.items()))
            yield Finding(pod.at, asks, f"{why}: raise the pool's maximum or its machine type")


def packing_report(packing: Packing) -> str:
    """Markdown: each pool that holds pods, what they request together, the nodes that takes and the most the
    pool may have; then every pod left without room."""
    rows = [
        "| pool | pods (release: count) | requested | nodes needed | at most |",
        "|---|---|---|---|---|",
    ]
    for name, p in sorted(packing.pools.items()):
        if not p.placed:
            continue
        counts: dict[str, int] = {}
        for pod, n in p.placed:
            counts[pod.release] = counts.get(pod.release, 0) + n
        who = ", ".join(f"{r}: {n}" for r, n in sorted(counts.items()))
        asks = ", ".join(f"{k} {v:.4g}" for k, v in sorted(p.requested.items()))
        rows.append(f"| {name} | {who} | {asks} | {len(p.nodes)} | {p.max_nodes} |")
    for workload, trial in sorted(packing.queued.items()):
        for name, p in sorted(trial.items()):
            if p.placed:
                taken = sum(n for _, n in p.placed)
                rows.append(
                    f"| {name} | {workload} (queued to Kueue, held alone): {taken} | "
                    + ", ".join(f"{k} {v:.4g}" for k, v in sorted(p.requested.items()))
                    + f" | {len(p.nodes)} | {p.max_nodes} |"
                )
    for pod, n, why in packing.left_out:
        rows.append(f"| **left out** | {pod.release}: {pod.at} | {n} pod(s) | {why} | |")
    return "\n".join(rows) + "\n"
