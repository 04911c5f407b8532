"""Rules checked on rendered charts: exactly the objects the Helm provider will send to the API server.

Each check gets one release's objects and a `ReleaseContext` (the release,
the stack it is in, and the objects of every release of that stack, for rules
that span releases, such as a JobSet naming a LocalQueue of another release).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from infra.accelerators import (
    TPU_ACCELERATOR_LABEL,
    TPU_RESOURCE,
    TPU_TOPOLOGY_LABEL,
    ShapeError,
    tpu_accelerator_for_label,
    tpu_accelerator_for_machine,
    tpu_slice_for_machine,
)
from infra.rules import Finding, containers, pod_templates, probe_budget, rule, where

DOCS = "https://cloud.google.com/kubernetes-engine/docs"
FUSE_PERF_DOC = f"{DOCS}/how-to/cloud-storage-fuse-csi-driver-perf"
FUSE_SIDECAR_DOC = f"{DOCS}/how-to/cloud-storage-fuse-csi-driver-sidecar"
TPU_DOC = f"{DOCS}/how-to/tpus"
RAY_TUTORIAL = (
    "GKE tutorial 'Train an LLM using JAX, Ray Train, and TPU Trillium on GKE' "
    f"({DOCS}/tutorials/distributed-training-tpu), RayCluster manifest"
)
JETSTREAM_TUTORIAL = (
    "GKE tutorial 'Serve LLMs using multi-host TPUs on GKE with JetStream and Pathways' "
    f"({DOCS}/tutorials/serve-multihost-tpu-jetstream), LWS manifest"
)
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


# Cloud Storage FUSE --------------------------------------------------------------------------------------


@rule(
    id="gcsfuse.parallel-downloads-need-file-cache",
    system="Cloud Storage FUSE CSI driver",
    layer="mount",
    summary="file-cache:enable-parallel-downloads needs the file cache enabled (fileCacheCapacity, not 0).",
    source=(
        f"{FUSE_PERF_DOC}#parallel-download; since GKE 1.32.0-gke.1795000 the mount fails with "
        "'file cache should be enabled for parallel download support'"
    ),
    subject="manifest",
)
def _parallel_downloads(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for at, _meta, spec in _pods(objects):
        for i, volume in _fuse_volumes(spec):
            if "file-cache:enable-parallel-downloads:true" not in _mount_options(volume):
                continue
            attributes = volume["csi"].get("volumeAttributes") or {}
            capacity = str(attributes.get("fileCacheCapacity", "0"))
            if capacity in ("0", "0Gi", ""):
                yield (
                    f"{at}.spec.volumes[{i}].csi.volumeAttributes.fileCacheCapacity",
                    attributes.get("fileCacheCapacity"),
                    "parallel downloads need a file cache: set fileCacheCapacity (e.g. '-1') or drop the option",
                )


@rule(
    id="gcsfuse.pod-annotation",
    system="Cloud Storage FUSE CSI driver",
    layer="mount",
    summary='A pod with a Cloud Storage FUSE CSI volume carries gke-gcsfuse/volumes: "true" (sidecar injection).',
    source=f"{DOCS}/how-to/cloud-storage-fuse-csi-driver-ephemeral#consume-ephemeral-volume",
    subject="manifest",
)
def _fuse_annotation(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for at, meta, spec in _pods(objects):
        if any(True for _ in _fuse_volumes(spec)):
            value = (meta.get("annotations") or {}).get("gke-gcsfuse/volumes")
            if value != "true":
                yield f"{at}.metadata.annotations.gke-gcsfuse/volumes", value, 'must be "true"'


FUSE_SIDECAR_LIMITS = ("gke-gcsfuse/cpu-limit", "gke-gcsfuse/memory-limit", "gke-gcsfuse/ephemeral-storage-limit")


@rule(
    id="gcsfuse.sidecar-limits",
    system="Cloud Storage FUSE CSI driver",
    layer="pod-start",
    summary=(
        "FUSE pods on accelerator hosts, and batch Jobs reading whole checkpoints, set the sidecar's cpu, memory and "
        "ephemeral-storage limits (the tutorial: 0, unlimited)."
    ),
    source=f"{FUSE_SIDECAR_DOC}#configure-sidecar-resources (defaults throttle large reads); {RAY_TUTORIAL}",
    subject="manifest",
)
def _fuse_limits(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for at, meta, spec in _pods(objects):
        heavy = at.startswith("Job/") or _accelerators(spec)
        if not heavy or not any(True for _ in _fuse_volumes(spec)):
            continue
        annotations = meta.get("annotations") or {}
        missing = [a for a in FUSE_SIDECAR_LIMITS if a not in annotations]
        if missing:
            yield f"{at}.metadata.annotations", sorted(annotations), f"set {', '.join(missing)}"


@rule(
    id="gcsfuse.needs-gke-metadata-node",
    system="Cloud Storage FUSE CSI driver",
    layer="mount",
    summary="A pod mounting a FUSE volume runs on a pool with the GKE metadata server (Workload Identity).",
    source=(
        "GoogleCloudPlatform/gcs-fuse-csi-driver pkg/csi_driver/node.go checkWINodeLabel: 'Workload Identity "
        "Federation is not enabled on node'"
    ),
    subject="manifest",
)
def _fuse_node(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    gce = ctx.gce_metadata_pools()
    for at, _meta, spec in _pods(objects):
        pools = _selected_pools(spec)
        if any(True for _ in _fuse_volumes(spec)) and pools and pools & gce:
            yield f"{at}.spec.nodeSelector", sorted(pools), f"pools {', '.join(sorted(pools & gce))} use GCE_METADATA"


# Identity -----------------------------------------------------------------------------------------------------


@rule(
    id="gke.wi.host-network-has-no-workload-identity",
    system="GKE Workload Identity",
    layer="pod-start",
    summary="Pods on the host network do not use Workload Identity: they act as the node's service account.",
    source=f"{DOCS}/concepts/workload-identity#limitations (Pods that run on the host network)",
    subject="manifest",
)
def _host_network(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    bound = ctx.workload_identities()
    for at, _meta, spec in _pods(objects):
        if spec.get("hostNetwork") and spec.get("serviceAccountName") in bound:
            yield (
                f"{at}.spec.hostNetwork",
                True,
                f"service account {spec['serviceAccountName']!r} would not apply: the pod gets the node's identity",
            )


# TPU pods ------------------------------------------------------------------------------------------------------


@rule(
    id="k8s.extended-resources-requests-equal-limits",
    system="Kubernetes",
    layer="admission",
    summary="Extended resources (google.com/tpu, nvidia.com/gpu) are whole numbers with requests equal to limits.",
    source="https://kubernetes.io/docs/tasks/configure-pod-container/extended-resource/ (cannot be overcommitted)",
    subject="manifest",
)
def _extended(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for at, _meta, spec in _pods(objects):
        for path, c in containers(spec):
            resources = c.get("resources") or {}
            requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
            for name in set(requests) | set(limits):
                if "/" not in name or name.startswith(("kubernetes.io/", "hugepages-")):
                    continue
                if name in requests and str(requests[name]) != str(limits.get(name)):
                    yield (
                        f"{at}.spec.{path}.resources.requests.{name}",
                        requests[name],
                        f"must equal the limit {limits.get(name)!r}",
                    )
                if not str(limits.get(name, requests.get(name))).isdigit():
                    yield f"{at}.spec.{path}.resources.limits.{name}", limits.get(name), "must be a whole number"


@rule(
    id="gke.tpu.selectors-and-whole-host",
    system="GKE",
    layer="pod-start",
    summary=(
        "A TPU pod selects both the accelerator and topology labels and requests all chips of its host "
        "(multi-host slices cannot share a host)."
    ),
    source=f"{TPU_DOC}#prepare-workloads (nodeSelector gke-tpu-accelerator and gke-tpu-topology; google.com/tpu)",
    subject="manifest",
)
def _tpu_pods(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    pools = ctx.pools()
    for at, _meta, spec in _pods(objects):
        chips = _tpu_chips(spec)
        if not chips:
            continue
        selector = spec.get("nodeSelector") or {}
        label, topology = selector.get(TPU_ACCELERATOR_LABEL), selector.get(TPU_TOPOLOGY_LABEL)
        if not label or not topology:
            yield f"{at}.spec.nodeSelector", selector, f"select both {TPU_ACCELERATOR_LABEL} and {TPU_TOPOLOGY_LABEL}"
            continue
        acc = tpu_accelerator_for_label(label)
        if acc is None:
            yield f"{at}.spec.nodeSelector.{TPU_ACCELERATOR_LABEL}", label, "not a TPU generation GKE labels"
            continue
        pool = pools.get(selector.get(NODEPOOL_LABEL, ""))
        machines = [pool["node_config"]["machine_type"]] if pool else list(acc.machine_types)
        per_host = set()
        for machine in machines:
            try:
                per_host.add(tpu_slice_for_machine(machine, topology).chips_per_host)
            except ShapeError:
                continue
        if not per_host:
            yield f"{at}.spec.nodeSelector.{TPU_TOPOLOGY_LABEL}", topology, f"no {acc.name} machine offers it"
        for path, n in chips:
            if per_host and n not in per_host:
                yield (
                    f"{at}.spec.{path}.resources.limits.{TPU_RESOURCE}",
                    n,
                    f"a {acc.name} {topology} host has {' or '.join(map(str, sorted(per_host)))} chips: request all",
                )


def _selected_pools(spec: dict[str, Any]) -> set[str] | None:
    """The node pools a pod may land on, if its placement names them (nodeSelector or required affinity)."""
    pool = (spec.get("nodeSelector") or {}).get(NODEPOOL_LABEL)
    if pool:
        return {pool}
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


@rule(
    id="platform.tpu.pod-pinned-to-its-pool",
    system="Kubernetes scheduler / GKE",
    layer="pod-start",
    summary=(
        "When two slice pools carry the same TPU labels, a TPU pod names its pool "
        "(cloud.google.com/gke-nodepool); otherwise it can take another workload's slice."
    ),
    source=(
        "https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#nodeselector (any node with "
        f"the labels matches); GKE node pool label: {DOCS}/how-to/node-pools#nodepool-label"
    ),
    subject="manifest",
)
def _pinned(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    by_labels: dict[tuple[str, str], list[str]] = {}
    for name, pool in ctx.pools().items():
        topology = (pool.get("placement_policy") or {}).get("tpu_topology")
        machine = (pool.get("node_config") or {}).get("machine_type", "")
        if topology and tpu_accelerator_for_machine(machine) is not None:
            acc = tpu_slice_for_machine(machine, topology).accelerator
            by_labels.setdefault((acc.node_label, topology), []).append(name)
    for at, _meta, spec in _pods(objects):
        selector = spec.get("nodeSelector") or {}
        key = (selector.get(TPU_ACCELERATOR_LABEL, ""), selector.get(TPU_TOPOLOGY_LABEL, ""))
        twins = by_labels.get(key, [])
        if len(twins) > 1 and _selected_pools(spec) is None:
            yield (
                f"{at}.spec.nodeSelector",
                selector,
                f"pools {', '.join(sorted(twins))} all match: add {NODEPOOL_LABEL}: <its pool>",
            )


@rule(
    id="k8s.tpu-taint-needs-request-or-toleration",
    system="GKE / Kubernetes",
    layer="pod-start",
    summary="A pod selecting TPU nodes requests google.com/tpu or tolerates the google.com/tpu taint.",
    source=f"{TPU_DOC} (TPU nodes are tainted google.com/tpu=present:NoSchedule)",
    subject="manifest",
)
def _tpu_taint(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for at, _meta, spec in _pods(objects):
        if TPU_ACCELERATOR_LABEL not in (spec.get("nodeSelector") or {}) or _tpu_chips(spec):
            continue
        if not any(t.get("key") == TPU_RESOURCE for t in spec.get("tolerations") or []):
            yield f"{at}.spec.tolerations", spec.get("tolerations"), "add a google.com/tpu toleration or request chips"


# KubeRay ----------------------------------------------------------------------------------------------------


@rule(
    id="kuberay.tpu.num-of-hosts-matches-topology",
    system="KubeRay TPU webhook",
    layer="admission",
    summary="A TPU worker group's numOfHosts is the number of hosts of its topology.",
    source=(
        "ray-project/kuberay ray-operator/pkg/webhooks (TPU multi-host validation: numOfHosts must match the "
        "topology); https://docs.ray.io/en/latest/cluster/kubernetes/user-guides/tpu.html"
    ),
    subject="manifest",
)
def _num_of_hosts(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    pools = ctx.pools()
    for obj in objects:
        if obj.get("kind") != "RayCluster":
            continue
        for i, group in enumerate(obj["spec"].get("workerGroupSpecs") or []):
            spec = group["template"]["spec"]
            chips = _tpu_chips(spec)
            selector = spec.get("nodeSelector") or {}
            topology = selector.get(TPU_TOPOLOGY_LABEL)
            if not chips or not topology:
                continue
            per_host = chips[0][1]
            pool = pools.get(selector.get(NODEPOOL_LABEL, ""))
            machine = pool["node_config"]["machine_type"] if pool else None
            total = math.prod(int(d) for d in topology.split("x"))
            hosts = tpu_slice_for_machine(machine, topology).hosts if machine else total // per_host
            if group.get("numOfHosts", 1) != hosts:
                yield (
                    f"{where(obj)}: spec.workerGroupSpecs[{i}].numOfHosts",
                    group.get("numOfHosts", 1),
                    f"topology {topology} with {per_host} chips per host is {hosts} hosts",
                )


@rule(
    id="kuberay.tpu.worker-env",
    system="libtpu / JAX on KubeRay",
    layer="engine-start",
    summary="TPU Ray workers run with JAX_PLATFORMS=tpu and ENABLE_PJRT_COMPATIBILITY=true, as the tutorial sets them.",
    source=RAY_TUTORIAL,
    subject="manifest",
)
def _ray_env(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    wanted = {"JAX_PLATFORMS": "tpu", "ENABLE_PJRT_COMPATIBILITY": "true"}
    for obj in objects:
        if obj.get("kind") != "RayCluster":
            continue
        for i, group in enumerate(obj["spec"].get("workerGroupSpecs") or []):
            spec = group["template"]["spec"]
            for path, c in containers(spec):
                if not _tpu_chips({"containers": [c]}):
                    continue
                env = {e["name"]: e.get("value") for e in c.get("env") or []}
                for name, value in wanted.items():
                    if env.get(name) != value:
                        yield (
                            f"{where(obj)}: spec.workerGroupSpecs[{i}].template.spec.{path}.env.{name}",
                            env.get(name),
                            f"must be {value!r}",
                        )


# JobSet, LeaderWorkerSet, Kueue -----------------------------------------------------------------------------


@rule(
    id="jobset.job-names-dns-1035",
    system="JobSet webhook",
    layer="admission",
    summary="<jobset>-<replicatedJob>-<index> (each child Job's name) is a DNS-1035 label of at most 63 characters.",
    source=(
        "kubernetes-sigs/jobset pkg/webhooks/jobset_webhook.go L63, L236-242 @ v0.12.0: 'JobSet name is too long, "
        "job names generated for this JobSet will exceed 63 characters'"
    ),
    subject="manifest",
)
def _jobset_names(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for obj in objects:
        if obj.get("kind") != "JobSet":
            continue
        name = obj["metadata"]["name"]
        for i, job in enumerate(obj["spec"].get("replicatedJobs") or []):
            longest = f"{name}-{job['name']}-{int(job.get('replicas', 1)) - 1}"
            if len(longest) > 63 or not re.match(r"^[a-z]([-a-z0-9]*[a-z0-9])?$", longest):
                yield f"{where(obj)}: spec.replicatedJobs[{i}].name", job["name"], f"job name {longest!r} is invalid"


@rule(
    id="lws.subgroup-size-divides-group",
    system="LeaderWorkerSet webhook",
    layer="admission",
    summary=(
        "subGroupSize is at most size and divides size or size-1 (size-1 with LeaderExcluded); the "
        "subgroup-exclusive-topology annotation needs a subGroupSize."
    ),
    source="kubernetes-sigs/lws pkg/webhooks/leaderworkerset_webhook.go L175-181, L236-255 @ v0.7.0",
    subject="manifest",
)
def _lws_subgroups(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for obj in objects:
        if obj.get("kind") != "LeaderWorkerSet":
            continue
        lwt = obj["spec"]["leaderWorkerTemplate"]
        policy = lwt.get("subGroupPolicy") or {}
        size, sub = int(lwt.get("size", 1)), policy.get("subGroupSize")
        at = f"{where(obj)}: spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize"
        annotation = "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology"
        if annotation in ((obj.get("metadata") or {}).get("annotations") or {}) and not sub:
            yield at, sub, f"the {annotation} annotation needs subGroupSize"
        if not sub:
            continue
        sub = int(sub)
        if sub > size:
            yield at, sub, f"cannot be larger than size {size}"
        elif policy.get("subGroupPolicyType") == "LeaderExcluded":
            if (size - 1) % sub:
                yield at, sub, f"size-1 = {size - 1} must be divisible by subGroupSize when using LeaderExcluded"
        elif size % sub and (size - 1) % sub:
            yield at, sub, f"size {size} or size - 1 must be divisible by subGroupSize"


def _queues(ctx: ReleaseContext) -> dict[tuple[str, str], dict[str, Any]]:
    """LocalQueues of the stack by (namespace, name) -> the ClusterQueue they point at."""
    objs = [o for objs in ctx.stack_objects.values() for o in objs]
    cqs = {o["metadata"]["name"]: o for o in objs if o.get("kind") == "ClusterQueue"}
    return {
        (o["metadata"].get("namespace", ""), o["metadata"]["name"]): cqs.get(o["spec"].get("clusterQueue"), {})
        for o in objs
        if o.get("kind") == "LocalQueue"
    }


@rule(
    id="kueue.queue-exists-and-covers-resources",
    system="Kueue",
    layer="admission",
    summary=(
        "A job's kueue.x-k8s.io/queue-name names a LocalQueue in its namespace whose ClusterQueue covers every "
        "resource its pods request; otherwise the workload is never admitted."
    ),
    source=(
        "https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/#resources (covered resources; a workload "
        "requesting another stays pending: 'resource ... unavailable in ClusterQueue'); kueue LocalQueue docs"
    ),
    subject="manifest",
)
def _kueue(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    queues = _queues(ctx)
    for obj in objects:
        queue = ((obj.get("metadata") or {}).get("labels") or {}).get("kueue.x-k8s.io/queue-name")
        if not queue:
            continue
        namespace = obj["metadata"].get("namespace") or ctx.namespace
        cq = queues.get((namespace, queue))
        if cq is None:
            known = ", ".join(f"{ns}/{n}" for ns, n in sorted(queues)) or "(none)"
            yield f"{where(obj)}: metadata.labels.kueue.x-k8s.io/queue-name", queue, f"no LocalQueue; known: {known}"
            continue
        covered = {r for g in cq.get("spec", {}).get("resourceGroups") or [] for r in g.get("coveredResources") or []}
        for path, template in pod_templates(obj):
            for cpath, c in containers(template.get("spec") or {}):
                for name in (c.get("resources") or {}).get("requests") or {}:
                    if name not in covered:
                        yield (
                            f"{where(obj)}: {path}.spec.{cpath}.resources.requests.{name}",
                            name,
                            f"ClusterQueue {cq['metadata']['name']} covers only {', '.join(sorted(covered))}",
                        )


@rule(
    id="k8s.native-sidecars-need-1.29",
    system="Kubernetes",
    layer="admission",
    summary="Init containers with restartPolicy: Always (native sidecars) need Kubernetes 1.29 or later.",
    source="https://kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/ (beta, on by default, in 1.29)",
    subject="manifest",
)
def _sidecars(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    version = ctx.min_master_version()
    numbers = tuple(int(n) for n in re.findall(r"[0-9]+", version or "")[:2])
    if not version or numbers >= (1, 29):
        return
    for at, _meta, spec in _pods(objects):
        for i, c in enumerate(spec.get("initContainers") or []):
            if c.get("restartPolicy") == "Always":
                yield f"{at}.spec.initContainers[{i}].restartPolicy", "Always", f"the cluster may run {version}"


# Pathways / JetStream ------------------------------------------------------------------------------------------


def _args(c: dict[str, Any]) -> list[str]:
    return [str(a) for a in c.get("args") or []]


@rule(
    id="pathways.workers-match-instance",
    system="Pathways",
    layer="engine-start",
    summary=(
        "The resource manager's --instance_count x hosts of --instance_type equals the TPU worker pods of the "
        "group; otherwise it waits for workers that never come."
    ),
    source=f"{JETSTREAM_TUTORIAL}; https://cloud.google.com/ai-hypercomputer/docs/workloads/pathways-on-cloud",
    subject="manifest",
)
def _pathways(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for obj in objects:
        if obj.get("kind") != "LeaderWorkerSet":
            continue
        lwt = obj["spec"]["leaderWorkerTemplate"]
        size = int(lwt.get("size", 1))
        leader = (lwt.get("leaderTemplate") or lwt["workerTemplate"])["spec"]
        worker = lwt["workerTemplate"]["spec"]
        rm = next((c for _, c in containers(leader) if "--node_type=resource_manager" in _args(c)), None)
        if rm is None:
            continue
        count = next((int(a.split("=", 1)[1]) for a in _args(rm) if a.startswith("--instance_count=")), 1)
        kind = next((PATHWAYS_TYPE.match(a) for a in _args(rm) if a.startswith("--instance_type=")), None)
        if kind is None:
            yield f"{where(obj)}: leaderTemplate pathways args", _args(rm), "--instance_type=tpu<gen>:<topology>"
            continue
        chips = math.prod(int(d) for d in kind.group(1).split("x"))
        per_host = _tpu_chips(worker)[0][1] if _tpu_chips(worker) else 0
        tpu_pods = (size - 1) * bool(per_host) + bool(_tpu_chips(leader))
        if not per_host or chips * count != tpu_pods * per_host:
            yield (
                f"{where(obj)}: spec.leaderWorkerTemplate.size",
                size,
                f"{count} x {kind.group(1)} is {chips * count} chips; the group's TPU pods hold {tpu_pods * per_host}",
            )


# The GKE tutorial's startup probe: initialDelaySeconds 600 + failureThreshold 10000 x periodSeconds 1.
TUTORIAL_STARTUP_BUDGET_S = 600 + 10000 * 1


@rule(
    id="jetstream.startup-probe-covers-restore",
    system="Kubernetes kubelet / JetStream",
    layer="pod-start",
    summary=(
        "The JetStream server's startup probe allows as long as the tutorial's (600 s + 10000 x 1 s): a 405B "
        "restore plus warm-up takes far more than 30 minutes, and a failed probe restarts the whole group."
    ),
    source=f"{JETSTREAM_TUTORIAL} (startupProbe initialDelaySeconds 600, periodSeconds 1, failureThreshold 10000)",
    subject="manifest",
)
def _startup_probe(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for obj in objects:
        if obj.get("kind") != "LeaderWorkerSet":
            continue
        leader = obj["spec"]["leaderWorkerTemplate"].get("leaderTemplate") or {}
        for path, c in containers(leader.get("spec") or {}):
            probe = c.get("startupProbe")
            if probe is None:
                continue
            budget = probe_budget(probe)
            if budget < TUTORIAL_STARTUP_BUDGET_S:
                yield (
                    f"{where(obj)}: leaderTemplate.spec.{path}.startupProbe",
                    probe,
                    f"allows {budget} s; at least {TUTORIAL_STARTUP_BUDGET_S} s",
                )


# Kubernetes names ---------------------------------------------------------------------------------------------


@rule(
    id="k8s.names-and-label-values",
    system="Kubernetes API server",
    layer="admission",
    summary="Object names are DNS-1123 subdomains (253); label values are at most 63 characters of [-A-Za-z0-9_.].",
    source=(
        "https://kubernetes.io/docs/concepts/overview/working-with-objects/names/ and "
        "https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set"
    ),
    subject="manifest",
)
def _names(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for obj in objects:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        if len(name) > 253 or not re.match(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", name):
            yield f"{where(obj)}: metadata.name", name, "a DNS-1123 subdomain of at most 253 characters"
        labelled = [("metadata.labels", meta.get("labels") or {})]
        labelled += [
            (f"{p}.metadata.labels", (t.get("metadata") or {}).get("labels") or {}) for p, t in pod_templates(obj)
        ]
        for path, labels in labelled:
            for key, value in labels.items():
                if len(str(value)) > 63 or not re.match(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$", str(value)):
                    yield f"{where(obj)}: {path}.{key}", value, "at most 63 characters of [-A-Za-z0-9_.]"


GCSFUSE_CSI = "GoogleCloudPlatform/gcs-fuse-csi-driver"
# Flags the driver sets itself (sidecar_mounter_config.go DisallowedFlags; the GKE perf page lists the first eight).
FUSE_DISALLOWED = {
    "app-name", "temp-dir", "foreground", "log-file", "log-format", "key-file", "token-url",
    "reuse-token-from-url", "config-file", "cache-dir", "prometheus-port", "kernel-params-file", "o",
}  # fmt: skip


@rule(
    id="gcsfuse.allowed-mount-options-and-attributes",
    system="Cloud Storage FUSE CSI driver",
    layer="mount",
    summary="An ephemeral FUSE volume names its bucket and passes none of the flags the driver sets itself.",
    source=(
        f"{GCSFUSE_CSI} pkg/sidecar_mounter/sidecar_mounter_config.go (DisallowedFlags), pkg/csi_driver/utils.go: "
        "'VolumeContext \"bucketName\" must be provided for ephemeral storage'; "
        f"{FUSE_PERF_DOC} (flags that are not allowed)"
    ),
    subject="manifest",
)
def _fuse_options(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for at, _meta, spec in _pods(objects):
        for i, volume in _fuse_volumes(spec):
            attributes = volume["csi"].get("volumeAttributes") or {}
            if not attributes.get("bucketName"):
                yield f"{at}.spec.volumes[{i}].csi.volumeAttributes.bucketName", None, "required for ephemeral volumes"
            for option in _mount_options(volume):
                flag = re.split(r"[=:]", option, maxsplit=1)[0]
                if flag in FUSE_DISALLOWED:
                    yield f"{at}.spec.volumes[{i}].csi.volumeAttributes.mountOptions", option, "set by the driver"


@rule(
    id="jobset.policies-name-replicated-jobs",
    system="JobSet webhook",
    layer="admission",
    summary="successPolicy and failurePolicy rules target replicatedJobs that exist.",
    source=(
        "kubernetes-sigs/jobset pkg/webhooks/jobset_webhook.go L178-180, L259-263 @ v0.12.0: 'invalid "
        "replicatedJob name ... does not appear in .spec.ReplicatedJobs'"
    ),
    subject="manifest",
)
def _jobset_policies(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for obj in objects:
        if obj.get("kind") != "JobSet":
            continue
        spec = obj["spec"]
        names = {j["name"] for j in spec.get("replicatedJobs") or []}
        targets = [("spec.successPolicy.targetReplicatedJobs", (spec.get("successPolicy") or {}))]
        targets += [
            (f"spec.failurePolicy.rules[{i}].targetReplicatedJobs", r)
            for i, r in enumerate((spec.get("failurePolicy") or {}).get("rules") or [])
        ]
        for path, holder in targets:
            for name in holder.get("targetReplicatedJobs") or []:
                if name not in names:
                    yield f"{where(obj)}: {path}", name, f"not a replicatedJob: {', '.join(sorted(names))}"


@rule(
    id="kuberay.worker-group-names-unique",
    system="KubeRay",
    layer="admission",
    summary="Worker group names of a RayCluster are unique (KubeRay creates no pods for an invalid spec).",
    source="ray-project/kuberay ray-operator/controllers/ray/utils/validation.go ValidateRayClusterSpec @ v1.7.0",
    subject="manifest",
)
def _ray_groups(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for obj in objects:
        if obj.get("kind") != "RayCluster":
            continue
        names = [g.get("groupName") for g in obj["spec"].get("workerGroupSpecs") or []]
        for name in sorted({n for n in names if names.count(n) > 1}):
            yield f"{where(obj)}: spec.workerGroupSpecs[].groupName", name, "used by more than one worker group"


@rule(
    id="kueue.flavors-list-covered-resources",
    system="Kueue webhook",
    layer="admission",
    summary="Every flavor of a ClusterQueue resource group lists exactly the group's coveredResources, in order.",
    source=(
        "kubernetes-sigs/kueue apis/kueue/v1beta1/clusterqueue_types.go CEL validation @ v0.17.3 (each "
        "flavor's resources must match coveredResources); CRD pinned in workloads/charts/crds.yaml"
    ),
    subject="manifest",
)
def _kueue_flavors(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for obj in objects:
        if obj.get("kind") != "ClusterQueue":
            continue
        for i, group in enumerate(obj["spec"].get("resourceGroups") or []):
            covered = list(group.get("coveredResources") or [])
            for j, flavor in enumerate(group.get("flavors") or []):
                names = [r.get("name") for r in flavor.get("resources") or []]
                if names != covered:
                    yield (
                        f"{where(obj)}: spec.resourceGroups[{i}].flavors[{j}].resources",
                        names,
                        f"must list {covered}",
                    )
