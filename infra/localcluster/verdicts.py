"""What the real components decided after a local apply, read back from the API server: each release's status
(Helm), each custom object's children (its controller's work), each Kueue workload (admitted, or held with Kueue's
reason), and each pod (bound by the scheduler to a node of a pool, or pending with the scheduler's message), held
against the placement report's pools for the pod's template (infra/rules/scheduler.py `verdicts`, the model behind
`cdktf.out/placement/<stack>.md` and gke.pools-hold-their-pods-together).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from infra.catalogue.pod_owners import controller_of, template_of
from infra.charts.runs import per_run

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
    # Templates the placement report places that made no pod: template -> why (Kueue holds it, or its
    # controller's last warning, such as a Job's FailedCreate), and whether that is expected (Kueue's hold).
    missing: dict[str, str] = field(default_factory=dict)
    held: list[str] = field(default_factory=list)  # the templates of `missing` Kueue holds (expected)

    def unexpected(self) -> list[str]:
        """Disagreements with the placement report: pods bound or pending where it says otherwise, and templates
        it places that made no pod for a reason other than Kueue's queueing."""
        lines = []
        for pod in self.pods:
            if not pod.agrees:
                where = f"bound to pool {pod.pool}" if pod.pool else f"pending ({pod.pending})"
                lines.append(
                    f"{pod.namespace}/{pod.name} ({pod.template}): {where}; the report allows "
                    f"{', '.join(pod.allowed or ()) or 'no pool'}"
                )
        for template, why in sorted(self.missing.items()):
            if template not in self.held:
                lines.append(f"{template}: the report places its pods, but none exists: {why}")
        return lines

    def bound_by_pool(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for pod in self.pods:
            if pod.pool is not None:
                out[pod.pool] = out.get(pod.pool, 0) + 1
        return dict(sorted(out.items()))


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
    # What a run makes (training.runs: jobs) is `make train`'s, not the apply's: no pod of it is expected here.
    runs = {f"{o['kind']}/{o['metadata']['name']}" for objs in objects.values() for o in objs if per_run(o)}
    return {
        pod.at: tuple(sorted(pool for pool, refusal in result.items() if refusal is None))
        for pod, result in report(stack, objects, namespaces)
        if pod.at.split(":", 1)[0] not in runs
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
    queued: dict[str, str] = {}  # "<Kind>/<name>" of a Kueue-managed object -> its workload's state
    for workload in cluster.get("workloads.kueue.x-k8s.io", "-A")["items"]:
        conditions = {c["type"]: c for c in workload.get("status", {}).get("conditions") or []}
        key = f"{workload['metadata']['namespace']}/{workload['metadata']['name']}"
        admitted = conditions.get("Admitted", {}).get("status") == "True"
        reason = conditions.get("QuotaReserved") or conditions.get("Admitted") or {}
        found.workloads[key] = (
            "admitted" if admitted else f"{reason.get('reason', 'Pending')}: {reason.get('message', '')}"
        )
        owner = controller_of(workload)
        if owner is not None:
            queued[f"{owner[0]}/{owner[1]}"] = f"kueue workload {key}: {found.workloads[key]}"
    made = {pod.template for pod in found.pods}
    empty = [t for t in allowed_pools(stack) if t not in made]
    warnings = _last_warnings(cluster.get("events", "-A")["items"]) if empty else {}
    for template in empty:
        made_by = template.split(":", 1)[0]
        if made_by in queued:
            found.missing[template] = queued[made_by]
            found.held.append(template)
        else:
            found.missing[template] = warnings.get(made_by, NO_WORD_YET)
    return found


NO_WORD_YET = "no pod and no warning from its controller yet"


def undecided(found: Verdicts) -> list[str]:
    """What no component has decided yet: a pod neither bound nor given a reason, a template with no pod and no
    word from its controller."""
    pods = [f"{p.namespace}/{p.name}" for p in found.pods if p.pool is None and p.pending is None]
    return pods + [t for t, why in found.missing.items() if why == NO_WORD_YET]


def _last_warnings(events: list[dict[str, Any]]) -> dict[str, str]:
    """ "<Kind>/<name>" -> the latest Warning event about it (`reason: message`), such as a Job's FailedCreate."""
    out: dict[str, tuple[str, str]] = {}
    for event in events:
        if event.get("type") != "Warning":
            continue
        about = event.get("involvedObject") or {}
        key = f"{about.get('kind')}/{about.get('name')}"
        when = event.get("lastTimestamp") or event.get("eventTime") or ""
        if key not in out or when >= out[key][0]:
            out[key] = (when, f"{event.get('reason')}: {event.get('message')}")
    return {key: text for key, (_, text) in out.items()}
