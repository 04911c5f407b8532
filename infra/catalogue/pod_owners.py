"""Which object made a pod, as each controller labels and owns the pods it makes (KubeRay's `ray.io/cluster` and
`ray.io/group`, LeaderWorkerSet's `leaderworkerset.sigs.k8s.io/name` and worker index, JobSet's jobset and
replicated-job names, a Deployment's ReplicaSet): read by the local cluster's verdicts (infra/localcluster/verdicts.py)
and by `make status` (scripts/status.py)."""

from __future__ import annotations

from typing import Any


def controller_of(item: dict[str, Any]) -> tuple[str, str] | None:
    """(kind, name) of the object that controls `item` (its ownerReference with `controller: true`), or None."""
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
    owner = controller_of(pod)
    if owner is None:
        return ""
    kind, name = owner
    if kind == "ReplicaSet":
        replica_set = owners.get(("ReplicaSet", ns, name))
        deployment = controller_of(replica_set) if replica_set else None
        if deployment is None:
            return ""
        kind, name = deployment
    return f"{kind}/{name}: spec.template"
