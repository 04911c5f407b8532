"""Where the Kubernetes scheduler could place each pod the stack creates, decided as it decides.

For every pod template of every rendered release (DaemonSets included) and every node pool of the stack,
the scheduler's filter predicates, in its order:
1. NodeAffinity: `nodeSelector` and required node affinity against the node's labels (GKE's own included);
2. TaintToleration: every NoSchedule / NoExecute taint of the node tolerated (GKE's TPU, GPU and queued
   taints included; the ExtendedResourceToleration admission plugin GKE runs adds a toleration for each
   extended resource a pod requests);
3. NodeResourcesFit: the pod's requests within the node's allocatable, after GKE's reservations, GKE's
   own DaemonSets and the stack's DaemonSets that land on that node.
Kueue's part is applied first: a pod of a workload queued to a LocalQueue gets its ResourceFlavor's
nodeLabels and tolerations when admitted. The FUSE CSI driver's sidecar adds its requests to every pod
that asks for it.

Whether each pool has room for all of them at once (every replica of every release, the upstream controllers'
own pods, up to the pool's maximum nodes) is the cluster autoscaler's question: cluster_autoscaler.py.

Not modelled (said, not guessed): inter-pod (anti-)affinity and topology spread (LWS and JobSet exclusive
placement) and ephemeral storage.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from infra.catalogue.accelerators import (
    TPU_ACCELERATOR_LABEL,
    TPU_TOPOLOGY_LABEL,
    tpu_accelerator_for_machine,
    tpu_slice_for_machine,
)
from infra.catalogue.models import conversion_memory_gib
from infra.derive.gke_nodes import Node, allocatable_memory_gib, machine_allocatable, node_of
from infra.rules import Finding, pod_templates, rule, where
from infra.rules.environment_subject import _workloads
from infra.rules.manifest_subject import NODEPOOL_LABEL, ReleaseContext, _pods, _selected_pools
from infra.rules.sources import DOCS, FUSE_SIDECAR_DOC, PLAN_TPUS_DOC

if TYPE_CHECKING:
    from infra.config import Environment

SCHEDULER = "https://kubernetes.io/docs/reference/scheduling/config/#scheduling-plugins"
# The FUSE sidecar's requests unless the pod's annotations say otherwise (GKE: "Configure resources for
# the sidecar container": cpu 250m, memory 256Mi).
FUSE_DEFAULTS = {"cpu": 0.25, "memory": 0.25}
_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def quantity(value: Any, resource: str) -> float:
    """A Kubernetes quantity in the units the scheduler compares: cores for cpu, GiB for memory, else a count."""
    text = str(value)
    if resource == "cpu":
        return float(text[:-1]) / 1000 if text.endswith("m") else float(text)
    for suffix, factor in _UNITS.items():
        if text.endswith(suffix):
            number = float(text[: -len(suffix)]) * factor
            return number / 2**30 if resource == "memory" else number
    return float(text) / 2**30 if resource == "memory" else float(text)


def _container_requests(c: dict[str, Any]) -> dict[str, float]:
    resources = c.get("resources") or {}
    # A limit without a request defaults the request to the limit.
    merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {name: quantity(v, name) for name, v in merged.items()}


def _add(total: dict[str, float], more: dict[str, float]) -> dict[str, float]:
    return {k: total.get(k, 0.0) + more.get(k, 0.0) for k in {*total, *more}}


def pod_requests(template: dict[str, Any]) -> dict[str, float]:
    """What the scheduler reserves for one pod (Kubernetes' sidecar rules, KEP-753): the larger of (a) the app
    containers plus every native sidecar and (b) for each ordinary init container, its own requests plus the
    sidecars started before it. The FUSE CSI driver injects its sidecar first among the init containers."""
    spec = template.get("spec") or {}
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    sidecars: dict[str, float] = {}
    if annotations.get("gke-gcsfuse/volumes") == "true":
        sidecars = {
            name: quantity(annotations[f"gke-gcsfuse/{name}-request"], name)
            if f"gke-gcsfuse/{name}-request" in annotations
            else default
            for name, default in FUSE_DEFAULTS.items()
        }
    peak: dict[str, float] = {}
    for c in spec.get("initContainers") or []:
        if c.get("restartPolicy") == "Always":
            sidecars = _add(sidecars, _container_requests(c))
        else:
            during = _add(sidecars, _container_requests(c))
            peak = {k: max(peak.get(k, 0.0), during.get(k, 0.0)) for k in {*peak, *during}}
    running = dict(sidecars)
    for c in spec.get("containers") or []:
        running = _add(running, _container_requests(c))
    return {k: max(running.get(k, 0.0), peak.get(k, 0.0)) for k in {*running, *peak}}


def _matches(expression: dict[str, Any], labels: dict[str, str]) -> bool:
    key, op, values = expression["key"], expression["operator"], expression.get("values") or []
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and key in labels:
        number, bound = int(labels[key]), int(values[0])
        return number > bound if op == "Gt" else number < bound
    return False


def _affinity_refusal(spec: dict[str, Any], labels: dict[str, str]) -> str | None:
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return f"nodeSelector {key}={value} (the node has {labels.get(key, 'no such label')})"
    required = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        or {}
    ).get("nodeSelectorTerms")
    if required and not any(all(_matches(e, labels) for e in term.get("matchExpressions") or []) for term in required):
        return "required node affinity matches none of its terms"
    return None


def _tolerates(toleration: dict[str, Any], taint: tuple[str, str, str]) -> bool:
    key, value, effect = taint
    if toleration.get("effect") and toleration["effect"] != effect:
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration["key"] == key
    return toleration.get("key") == key and str(toleration.get("value", "")) == value


def _taint_refusal(spec: dict[str, Any], requests: dict[str, float], node: Node) -> str | None:
    tolerations = list(spec.get("tolerations") or [])
    # ExtendedResourceToleration: a pod requesting an extended resource tolerates the taint of that name.
    tolerations += [{"key": name, "operator": "Exists"} for name in requests if "/" in name]
    for taint in node.taints:
        if taint[2] in ("NoSchedule", "NoExecute") and not any(_tolerates(t, taint) for t in tolerations):
            return f"taint {taint[0]}={taint[1]}:{taint[2]} not tolerated"
    return None


def _fit_refusal(requests: dict[str, float], free: dict[str, float]) -> str | None:
    for name, need in sorted(requests.items()):
        have = free.get(name, 0.0)
        if need > have + 1e-9:
            unit = {"cpu": " cores", "memory": " GiB"}.get(name, "")
            return f"requests {need:g}{unit} of {name}; a node has {max(have, 0):.4g}{unit} allocatable"
    return None


@dataclass(frozen=True)
class Pod:
    """One pod template of a release, as the scheduler will receive it (Kueue's injections applied)."""

    release: str
    at: str  # `Kind/name: path`
    kind: str
    spec: dict[str, Any]
    requests: dict[str, float]


def _kueue_injection(obj: dict[str, Any], namespace: str, objects: list[dict[str, Any]]) -> dict[str, Any]:
    """nodeSelector and tolerations Kueue adds to an admitted workload's pods (its flavor's)."""
    queue_name = ((obj.get("metadata") or {}).get("labels") or {}).get("kueue.x-k8s.io/queue-name")
    if not queue_name:
        return {}
    by_kind: dict[str, dict[str, dict[str, Any]]] = {}
    for o in objects:
        by_kind.setdefault(o.get("kind", ""), {})[o["metadata"]["name"]] = o
    local = by_kind.get("LocalQueue", {}).get(queue_name)
    if local is None or (local["metadata"].get("namespace") or namespace) != namespace:
        return {}
    cluster_queue = by_kind.get("ClusterQueue", {}).get(local["spec"]["clusterQueue"]) or {}
    flavors = [f["name"] for g in cluster_queue.get("spec", {}).get("resourceGroups") or [] for f in g["flavors"]]
    flavor = by_kind.get("ResourceFlavor", {}).get(flavors[0]) if flavors else None
    if flavor is None:
        return {}
    return {
        "nodeSelector": flavor["spec"].get("nodeLabels") or {},
        "tolerations": flavor["spec"].get("tolerations") or [],
    }


def pods(releases: dict[str, list[dict[str, Any]]], namespaces: dict[str, str]) -> list[Pod]:
    """Every pod template of every release, with what admission will add to it."""
    everything = [o for objs in releases.values() for o in objs]
    out = []
    for release, objects in releases.items():
        for obj in objects:
            injected = _kueue_injection(obj, namespaces.get(release, ""), everything)
            for path, template in pod_templates(obj):
                spec = dict(template.get("spec") or {})
                if injected:
                    spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **injected["nodeSelector"]}
                    spec["tolerations"] = [*(spec.get("tolerations") or []), *injected["tolerations"]]
                out.append(Pod(release, f"{where(obj)}: {path}", obj.get("kind", ""), spec, pod_requests(template)))
    return out


def nodes(stack: dict[str, Any]) -> tuple[list[Node], list[str]]:
    """(a node of every pool, the pools whose machine type the catalogue does not size)."""
    region = next(
        (c.get("location", "") for c in (stack.get("resource", {}).get("google_container_cluster") or {}).values()),
        "",
    )
    found, unknown = [], []
    for pool in (stack.get("resource", {}).get("google_container_node_pool") or {}).values():
        node = node_of(pool, region)
        if node is None:
            unknown.append(pool["name"])
        else:
            found.append(node)
    return found, unknown


def _selects(pod: Pod, node: Node) -> str | None:
    return _affinity_refusal(pod.spec, node.labels) or _taint_refusal(pod.spec, pod.requests, node)


def verdicts(
    stack: dict[str, Any],
    releases: dict[str, list[dict[str, Any]]],
    namespaces: dict[str, str],
    only: str | None = None,
) -> list[tuple[Pod, dict[str, str | None]]]:
    """For every pod (of release `only`, if given): {pool: None if it fits there, else the predicate that
    refused it}. The DaemonSets of every release count against each node's room."""
    all_pods = pods(releases, namespaces)
    pool_nodes, _ = nodes(stack)
    daemonsets = [p for p in all_pods if p.kind == "DaemonSet"]
    out = []
    for pod in all_pods if only is None else [p for p in all_pods if p.release == only]:
        result: dict[str, str | None] = {}
        for node in pool_nodes:
            refusal = _selects(pod, node)
            if refusal is None:
                free = dict(node.allocatable)
                for ds in daemonsets:
                    if ds is not pod and _selects(ds, node) is None:
                        free = {k: v - ds.requests.get(k, 0.0) for k, v in free.items()}
                refusal = _fit_refusal(pod.requests, free)
            result[node.pool] = refusal
        out.append((pod, result))
    return out


@rule(
    id="k8s.scheduler-places-every-pod",
    system="Kubernetes scheduler / GKE",
    layer="pod-start",
    summary=(
        "Every pod the stack creates fits at least one node pool: node selectors and required node affinity "
        "against the pool's labels (GKE's own too), taints against tolerations (GKE's TPU, GPU and queued "
        "taints too), requests against allocatable after GKE's reservations and the DaemonSets on that node."
    ),
    source=(
        f"{SCHEDULER} (NodeAffinity, TaintToleration, NodeResourcesFit); "
        "https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes (allocatable); "
        "https://kueue.sigs.k8s.io/docs/concepts/resource_flavor/ (flavor nodeLabels and tolerations); "
        f"{FUSE_SIDECAR_DOC} (sidecar requests)"
    ),
    subject="manifest",
)
def _placed(objects: list[dict[str, Any]], ctx: Any) -> Iterator[Finding]:
    releases = {**ctx.stack_objects, ctx.name: objects}
    namespaces = {name: ctx.namespace_of(name) or ctx.namespace for name in releases}
    namespaces[ctx.name] = ctx.namespace
    _, unknown = nodes(ctx.stack)
    for pool in unknown:
        yield Finding(f"google_container_node_pool.{pool}", pool, "its machine type is not sized in the catalogue")
    pool_nodes = {n.pool: n for n in nodes(ctx.stack)[0]}
    for pod, result in verdicts(ctx.stack, releases, namespaces, only=ctx.name):
        if pod.kind == "DaemonSet":
            # A DaemonSet runs a pod on every node it selects: each such node must also have room for it.
            selected = [p for p in result if _selects(pod, pool_nodes[p]) is None]
            if not selected:
                yield Finding(pod.at, None, "selects no node pool: its pods would run nowhere")
            for pool in selected:
                if result[pool] is not None:
                    yield Finding(pod.at, pool, f"selects pool {pool} but does not fit there: {result[pool]}")
        elif not any(refusal is None for refusal in result.values()):
            reasons = "; ".join(f"{pool}: {refusal}" for pool, refusal in sorted(result.items()))
            yield Finding(pod.at, None, f"no node pool can take this pod ({reasons})")


def placement_report(
    stack: dict[str, Any], releases: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]
) -> tuple[str, int, int]:
    """(Markdown table of every pod and the pools that can take it, pods, pods that fit no pool), from the
    stack and its rendered releases (`infra.rules.run.stack_releases`)."""
    objects = {name: objs for name, (_, objs) in releases.items()}
    namespaces = {name: release["namespace"] for name, (release, _) in releases.items()}
    rows = ["| release | pod | requests | pools that can take it |", "|---|---|---|---|"]
    unplaced = 0
    results = verdicts(stack, objects, namespaces)
    for pod, result in results:
        fits = sorted(pool for pool, refusal in result.items() if refusal is None)
        unplaced += not fits
        asks = ", ".join(f"{k} {v:g}" for k, v in sorted(pod.requests.items()))
        rows.append(f"| {pod.release} | {pod.at} | {asks} | {', '.join(fits) or '**none**'} |")
    return "\n".join(rows) + "\n", len(results), unplaced


@rule(
    id="platform.tpu.one-workload-per-slice",
    system="GKE TPU slices",
    layer="pod-start",
    summary=(
        "A multi-host TPU slice's chips belong to one workload at a time: two workloads on one slice leave one "
        "pending forever (every host is taken whole)."
    ),
    source=(
        f"{PLAN_TPUS_DOC} (a multi-host slice is provisioned and used as one unit; pods request all chips of a host)"
    ),
    subject="environment",
)
def _one_workload(env: Environment) -> Iterator[Finding]:
    claims: dict[str, list[str]] = {}
    for path, key in _workloads(env):
        if key in env.slices and env.slices[key].slice.kind == "tpu":
            claims.setdefault(key, []).append(path)
    for key, paths in claims.items():
        if len(paths) > 1:
            yield Finding(
                paths[1], key, f"slice {key!r} is already used by {paths[0]}; give each workload its own slice"
            )


@rule(
    id="gke.pod-fits-a-node-of-its-pool",
    system="Kubernetes scheduler / GKE",
    layer="pod-start",
    summary="A checkpoint conversion Job's memory request fits the allocatable memory of one node of its CPU pool.",
    source=(
        "https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes#memory_reservations "
        "(allocatable = capacity - reserved); a bigger request stays Pending ('Insufficient memory')"
    ),
    subject="environment",
)
def _conversion_fits(env: Environment) -> Iterator[Finding]:
    from infra.config import JetStreamServing

    for name, d in env.serving.items():
        if not isinstance(d, JetStreamServing) or d.conversion is None:
            continue
        conversion = d.conversion
        pool = env.cpu_pools.get(conversion.pool)
        if pool is None:
            continue  # the model reports the unknown pool
        need = conversion_memory_gib(d.model.parameters_b)
        have = allocatable_memory_gib(pool.shape.memory_gib)
        if need > have:
            yield Finding(
                f"serving.{name}.conversion.pool",
                conversion.pool,
                f"the conversion of {d.model.parameters_b:g}B parameters requests {need} GiB; a {pool.machine_type} "
                f"node has about {have:.0f} GiB allocatable of {pool.shape.memory_gib:g} GiB",
            )


@rule(
    id="gke.requests-fit-their-pool",
    system="Kubernetes scheduler / GKE",
    layer="pod-start",
    summary=(
        "The Ray head's and workers' CPU and memory requests (with the FUSE sidecar's) fit one node of the pool "
        "they run on, after GKE's reservations and its DaemonSets."
    ),
    source=(
        "https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes (allocatable); "
        "https://kubernetes.io/docs/concepts/scheduling-eviction/kube-scheduler/ (a pod no node fits stays "
        "Pending: 'Insufficient cpu' / 'Insufficient memory')"
    ),
    subject="environment",
)
def _requests_fit(env: Environment) -> Iterator[Finding]:
    from infra.rules.scheduler import FUSE_DEFAULTS, quantity

    if env.training is None:
        return
    pods = [("worker", env.training.worker, env.slices[env.training.slice].slice.machine_type, "slice")]
    pods.append(("head", env.training.head, env.cluster.system_pool.machine_type, "system pool"))
    for name, size, machine, pool in pods:
        free = machine_allocatable(machine)
        if free is None:
            continue  # gce.machine-type-offered-in-zone names an uncatalogued machine
        for resource in ("cpu", "memory"):
            need = quantity(getattr(size, resource), resource) + FUSE_DEFAULTS[resource]
            if need > free[resource]:
                unit = " cores" if resource == "cpu" else " GiB"
                yield Finding(
                    f"training.{name}.{resource}",
                    getattr(size, resource),
                    f"requests {need:g}{unit} with the FUSE sidecar; a {machine} node of the {pool} has about "
                    f"{free[resource]:.1f}{unit} allocatable",
                )


@rule(
    id="platform.tpu.pod-pinned-to-its-pool",
    system="Kubernetes scheduler / GKE",
    layer="pod-start",
    summary=(
        "When two slice pools carry the same TPU labels, a TPU pod names its pool "
        "(cloud.google.com/gke-nodepool) or the ComputeClass over its tiers' pools; otherwise it can take another "
        "workload's slice."
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
        if len(twins) > 1 and _selected_pools(spec, ctx.pools()) is None:
            yield Finding(
                f"{at}.spec.nodeSelector",
                selector,
                f"pools {', '.join(sorted(twins))} all match: add {NODEPOOL_LABEL}: <its pool>",
            )
