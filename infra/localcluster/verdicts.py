"""What the real components decided after a local apply, read back from the API server: each release's status
(Helm), each custom object's children (its controller's work), each Kueue workload (admitted, or held with Kueue's
reason), and each pod (bound by the scheduler to a node of a pool, or pending with the scheduler's message), held
against the placement report's pools for the pod's template (infra/rules/scheduler.py `verdicts`, the model behind
`cdktf.out/placement/<stack>.md` and gke.pools-hold-their-pods-together).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

POOL = "cloud.google.com/gke-nodepool"


@dataclass(frozen=True)
class PodVerdict:
    namespace: str
    name: str
    template: str  # "<Kind>/<name>: <template path>" as the placement report names it, or "" when not found
    pool: str | None  # the pool of the node it is bound to
    pending: str | None  # the scheduler's (or Kueue's) reason it is not bound
    # The pools the placement report says can take it; None: the report does not cover its template (an upstream
    # controller's chart, which the platform does not render).
    allowed: tuple[str, ...] | None = ()

    @property
    def agrees(self) -> bool:
        """Bound where the report allows it, or pending where the report allows no pool."""
        if self.allowed is None:
            return True
        if self.pool is not None:
            return self.pool in self.allowed
        return not self.allowed or self.pending is not None


@dataclass
class Verdicts:
    releases: dict[str, str] = field(default_factory=dict)  # release -> Helm status
    pods: list[PodVerdict] = field(default_factory=list)
    workloads: dict[str, str] = field(default_factory=dict)  # namespace/name -> "admitted" or Kueue's reason
    objects: dict[str, int] = field(default_factory=dict)  # "<Kind>/<namespace>/<name>" -> children made

    def bound_by_pool(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for pod in self.pods:
            if pod.pool is not None:
                out[pod.pool] = out.get(pod.pool, 0) + 1
        return dict(sorted(out.items()))


def _owner(item: dict[str, Any]) -> tuple[str, str] | None:
    for ref in item["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return ref["kind"], ref["name"]
    return None


def template_of(pod: dict[str, Any], owners: dict[tuple[str, str, str], dict[str, Any]]) -> str:
    """The pod's template as the placement report names it (`<Kind>/<name>: <path>`): followed up its owners to
    the object a release created (Deployment, DaemonSet, Job, JobSet, LeaderWorkerSet, RayCluster)."""
    labels = pod["metadata"].get("labels") or {}
    ns = pod["metadata"]["namespace"]
    if "ray.io/cluster" in labels:
        cluster = owners.get(("RayCluster", ns, labels["ray.io/cluster"]))
        if labels.get("ray.io/node-type") == "head":
            return f"RayCluster/{labels['ray.io/cluster']}: spec.headGroupSpec.template"
        groups = [g["groupName"] for g in (cluster or {}).get("spec", {}).get("workerGroupSpecs", [])]
        index = groups.index(labels.get("ray.io/group")) if labels.get("ray.io/group") in groups else 0
        return f"RayCluster/{labels['ray.io/cluster']}: spec.workerGroupSpecs[{index}].template"
    if "leaderworkerset.sigs.k8s.io/name" in labels:
        lws = labels["leaderworkerset.sigs.k8s.io/name"]
        role = "leaderTemplate" if labels.get("leaderworkerset.sigs.k8s.io/worker-index") == "0" else "workerTemplate"
        spec = (owners.get(("LeaderWorkerSet", ns, lws)) or {}).get("spec", {}).get("leaderWorkerTemplate", {})
        if role == "leaderTemplate" and "leaderTemplate" not in spec:
            role = "workerTemplate"  # no leader template: the leader is made from the worker's
        return f"LeaderWorkerSet/{lws}: spec.leaderWorkerTemplate.{role}"
    if "jobset.sigs.k8s.io/jobset-name" in labels:
        name = labels["jobset.sigs.k8s.io/jobset-name"]
        jobs = (owners.get(("JobSet", ns, name)) or {}).get("spec", {}).get("replicatedJobs", [])
        names = [j["name"] for j in jobs]
        wanted = labels.get("jobset.sigs.k8s.io/replicatedjob-name")
        index = names.index(wanted) if wanted in names else 0
        return f"JobSet/{name}: spec.replicatedJobs[{index}].template.spec.template"
    owner = _owner(pod)
    if owner is None:
        return ""
    kind, name = owner
    if kind == "ReplicaSet":
        replica_set = owners.get(("ReplicaSet", ns, name))
        deployment = _owner(replica_set) if replica_set else None
        if deployment is None:
            return ""
        kind, name = deployment
    return f"{kind}/{name}: spec.template"


def pod_verdicts(
    pods: list[dict[str, Any]],
    nodes: dict[str, str],
    owners: dict[tuple[str, str, str], dict[str, Any]],
    allowed: dict[str, tuple[str, ...]],
) -> list[PodVerdict]:
    """Each pod's verdict: `nodes` maps node -> pool, `allowed` template -> pools from the placement report."""
    out = []
    for pod in pods:
        template = template_of(pod, owners)
        node = pod["spec"].get("nodeName")
        pending = None
        if node is None:
            for condition in pod.get("status", {}).get("conditions") or []:
                if condition["type"] == "PodScheduled" and condition["status"] == "False":
                    pending = f"{condition.get('reason', '')}: {condition.get('message', '')}"
            gates = [g["name"] for g in pod["spec"].get("schedulingGates") or []]
            if gates:
                pending = f"SchedulingGated: {', '.join(gates)}"
        out.append(
            PodVerdict(
                pod["metadata"]["namespace"],
                pod["metadata"]["name"],
                template,
                nodes.get(node) if node else None,
                pending,
                allowed.get(template),
            )
        )
    return out


def allowed_pools(stack: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """template -> the pools the placement report says can take its pods (the same model, the same names)."""
    from infra.rules.run import stack_releases
    from infra.rules.scheduler import verdicts as report

    releases = stack_releases(stack)
    objects = {name: objs for name, (_, objs) in releases.items()}
    namespaces = {name: release["namespace"] for name, (release, _) in releases.items()}
    return {
        pod.at: tuple(sorted(pool for pool, refusal in result.items() if refusal is None))
        for pod, result in report(stack, objects, namespaces)
    }


def collect(cluster: Any, stack: dict[str, Any], helm_list: list[dict[str, Any]]) -> Verdicts:
    """Read what the components decided from the local cluster (`cluster`: infra.localcluster.cluster.Cluster)."""
    found = Verdicts(releases={r["name"]: r["status"] for r in helm_list})
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"].get(POOL, "") for n in cluster.get("nodes")["items"]}
    owners: dict[tuple[str, str, str], dict[str, Any]] = {}
    kinds = (
        "replicasets",
        "rayclusters.ray.io",
        "leaderworkersets.leaderworkerset.x-k8s.io",
        "jobsets.jobset.x-k8s.io",
    )
    for kind in kinds:
        for item in cluster.get(kind, "-A")["items"]:
            owners[(item["kind"], item["metadata"]["namespace"], item["metadata"]["name"])] = item
    pods = cluster.get("pods", "-A")["items"]
    found.pods = pod_verdicts(pods, nodes, owners, allowed_pools(stack))
    children: dict[str, int] = {}
    for pod in pods:
        template = template_of(pod, owners)
        if template and template.split("/", 1)[0] in ("RayCluster", "LeaderWorkerSet", "JobSet"):
            key = f"{template.split(':', 1)[0]}"
            children[key] = children.get(key, 0) + 1
    for kind, namespace, name in owners:
        if kind != "ReplicaSet":
            found.objects[f"{kind}/{namespace}/{name}"] = children.get(f"{kind}/{name}", 0)
    for workload in cluster.get("workloads.kueue.x-k8s.io", "-A")["items"]:
        conditions = {c["type"]: c for c in workload.get("status", {}).get("conditions") or []}
        key = f"{workload['metadata']['namespace']}/{workload['metadata']['name']}"
        admitted = conditions.get("Admitted", {}).get("status") == "True"
        reason = conditions.get("QuotaReserved") or conditions.get("Admitted") or {}
        found.workloads[key] = (
            "admitted" if admitted else f"{reason.get('reason', 'Pending')}: {reason.get('message', '')}"
        )
    return found
