"""`make status ENV=` (and `--json`): what runs on an environment's cluster now, read from the cluster.

    python -m scripts.status <env> [--json]

One row per run or server: each object of the environment's namespaces that asks for TPUs or GPUs, or that Kueue
queues (a RayCluster or RayJob, a JobSet, a Job, a LeaderWorkerSet, a Deployment). For each: its Kueue queue and
state (running, waiting and why, reserved while an admission check is pending, evicted and why, paused, finished),
its pods, the slices it holds (TPU slices of the node's topology, or GPUs) and on which pools, since when, and what
those accelerator nodes cost per hour at list price and since then; a waiting run's place in line (Kueue's
visibility API), an admitted one's wait for its pods against Kueue's timeout (waitForPodsReady).
Under them, each of Kueue's ClusterQueues: its team, how many workloads wait, reserve quota and run, what it
holds of each flavor and how much of that is borrowed, and where fair sharing is on (teams.<team>.weight) its
weight and the weighted share Kueue lends and preempts by.

Read, not modelled: the states are Kueue's conditions and the pods' as the cluster holds them; the prices are the
review's (infra/catalogue/prices.py) for each node's machine type, location and capacity (its GKE labels: spot,
flex-start, else standard at the on-demand price). Counted are the nodes with TPUs or GPUs that the row's pods are
bound to, whole (a TPU or GPU node runs one workload's pod); a share of a CPU node (a Ray head) is not. A run that
records goodput (MaxText with training.goodput: its RayJob or JobSet names where, GOODPUT_WORKLOAD) gets it under its
row, read from Cloud Monitoring as MaxText last uploaded it (the reader's credentials; refused or unreachable: the
rows still, and a note why).

The cluster is reached as the deploy reaches it (gcloud's credentials through its DNS endpoint), or through
PLATFORM_KUBECONFIG (the local cluster's: .cache/cluster-local/kubeconfig).

Exit codes: 0 shown; 1 the cluster cannot be reached; 2 a refused environment.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any, overload

from infra.catalogue import prices
from infra.catalogue.accelerators import accelerator_for_machine
from infra.catalogue.cold_starts import PHASES, phases_text
from infra.catalogue.controllers import PodsReadyWait
from infra.catalogue.pod_owners import controller_of, template_of
from infra.config import ConfigError, Environment
from infra.derive.queues import pods_ready_timeout
from infra.synth.load import load_named
from scripts.cluster_access import ToolsMissing, Unreachable, cluster_env, kubectl_in
from scripts.goodput import GOODPUT_WORKLOAD, Goodput, duration, read_goodput
from scripts.parser import ArgumentParser, refuse
from scripts.status_queues import columns, money, queue_rows, queue_table, team_of

# kubectl's words for a kind the cluster does not serve (its CRD not installed).
NOT_SERVED = "the server doesn't have a resource type"
# The kinds a row can be, as `kubectl get` names them; the pods and what they need to be followed to a row.
KINDS = {
    "RayJob": "rayjobs.ray.io",
    "RayCluster": "rayclusters.ray.io",
    "JobSet": "jobsets.jobset.x-k8s.io",
    "Job": "jobs.batch",
    "LeaderWorkerSet": "leaderworkersets.leaderworkerset.x-k8s.io",
    "Deployment": "deployments.apps",
}
# The kinds that serve: their rows carry the last start of their pods (infra/catalogue/cold_starts.py).
SERVERS = ("LeaderWorkerSet", "Deployment")
READ = {**KINDS, "ReplicaSet": "replicasets.apps", "Pod": "pods", "Workload": "workloads.kueue.x-k8s.io"}
# Cluster-scoped, read once: Kueue's queues (a team's is named after it).
CLUSTER_QUEUES = "clusterqueues.kueue.x-k8s.io"
# Kueue's visibility API (pkg/visibility, on by default: VisibilityOnDemand): each ClusterQueue's waiting workloads in
# the order it admits them (apis/visibility/v1beta2 PendingWorkloadsSummary; up to 1000 each).
VISIBILITY = "/apis/visibility.kueue.x-k8s.io/v1beta2"
# Kueue's reason for evicting a workload whose pods were not all Ready within its wait
# (apis/kueue/v1beta2/workload_types.go WorkloadEvictedByPodsReadyTimeout @ v0.19.2).
PODS_READY_TIMEOUT = "PodsReadyTimeout"
ACCELERATORS = ("google.com/tpu", "nvidia.com/gpu")
POOL = "cloud.google.com/gke-nodepool"
# GKE's provisioning label (infra/derive/gke_nodes.py) -> the capacity type the price table knows.
CAPACITY = {"spot": "spot", "flex-start": "flex-start"}


@dataclass(frozen=True)
class Row:
    kind: str
    namespace: str
    name: str
    queue: str | None  # Kueue's LocalQueue, None when Kueue does not queue it
    team: str  # the team whose queue it is in (teams: in the environment file), else the platform's
    state: str  # running, admitted, starting, waiting, reserved, evicted, paused, finished, scaled to zero
    why: str  # Kueue's (or the scheduler's) words where it is not running
    pods: int
    ready: int
    holds: str  # "1 x v6e 4x4 (4 nodes)", "16 GPUs (2 nodes)", "" when it holds none
    pools: tuple[str, ...]
    since: str | None  # RFC 3339: admitted (Kueue), else its first pod started; waiting: since it was created
    usd_per_hour: float | None  # None: a node without a list price
    usd_so_far: float | None
    # A server's last start, from its pods' own timestamps (cold_start_of): node, image and serve seconds; None where
    # no pod of it has become ready. What infra/catalogue/cold_starts.py records.
    cold_start: dict[str, float] | None = None
    # A queued run's start as Kueue measures it for waitForPodsReady: seconds from its admission to every pod Ready
    # (its Workload's PodsReady condition, reason Started); None until then, and where Kueue does not wait for pods.
    pods_ready_s: float | None = None
    # Where MaxText records the run's goodput (the annotation GOODPUT_WORKLOAD of its RayJob or JobSet), and what
    # Cloud Monitoring says of it (read_goodput): None where the run records none, or it was not read.
    goodput_workload: str | None = None
    goodput: Goodput | None = None
    # A waiting run's place in its ClusterQueue as Kueue's visibility API says it (0: the next it admits), of how
    # many waiting there; None where it does not wait, or the API did not answer.
    queue_position: tuple[int, int] | None = None


def _accelerated(obj: dict[str, Any]) -> bool:
    """Whether any pod template of `obj` asks for TPUs or GPUs (every `containers` list in its spec)."""

    def walk(value: Any) -> Iterator[dict[str, Any]]:
        if isinstance(value, dict):
            if isinstance(value.get("containers"), list):
                yield from value["containers"]
            for child in value.values():
                yield from walk(child)
        elif isinstance(value, list):
            for child in value:
                yield from walk(child)

    for container in walk(obj.get("spec")):
        resources = container.get("resources") or {}
        asked = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
        if any(str(asked.get(a, "0")) not in ("0", "") for a in ACCELERATORS):
            return True
    return False


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def _kueue_state(workload: dict[str, Any]) -> tuple[str, str, str | None]:
    """(state, why, since) of a Kueue Workload, from its conditions as Kueue sets them."""
    conditions = _conditions(workload)

    def said(kind: str) -> str:
        c = conditions.get(kind, {})
        return f"{c.get('reason', '')}: {c.get('message', '')}".strip(": ")

    def at(kind: str) -> str | None:
        return conditions.get(kind, {}).get("lastTransitionTime")

    created = workload["metadata"].get("creationTimestamp")
    if conditions.get("Finished", {}).get("status") == "True":
        return "finished", said("Finished"), at("Finished")
    if (workload.get("spec") or {}).get("active") is False:
        return "paused", "spec.active is false (make training-resume gives it back)", at("Evicted") or created
    if conditions.get("Admitted", {}).get("status") == "True":
        return "running", "", at("Admitted")
    if conditions.get("Evicted", {}).get("status") == "True":
        return "evicted", said("Evicted"), at("Evicted")
    if conditions.get("QuotaReserved", {}).get("status") == "True":
        return "reserved", said("QuotaReserved") + " (waiting on its admission checks)", at("QuotaReserved")
    return "waiting", said("QuotaReserved") or "not yet considered by Kueue", created


def _node_price(node: dict[str, Any]) -> float | None:
    labels = node["metadata"].get("labels") or {}
    machine = labels.get("node.kubernetes.io/instance-type", "")
    where = labels.get("topology.kubernetes.io/zone") or labels.get("topology.kubernetes.io/region", "")
    capacity = CAPACITY.get(labels.get("cloud.google.com/gke-provisioning", ""), "on-demand")
    return prices.hourly(machine, where, capacity)


def _accelerator_nodes(nodes: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        n["metadata"]["name"]: n
        for n in nodes
        if any(str((n.get("status") or {}).get("capacity", {}).get(a, "0")) != "0" for a in ACCELERATORS)
    }


def _holds(bound: list[dict[str, Any]]) -> str:
    """What the accelerator nodes `bound` are: whole TPU slices of their topology per pool, or GPUs."""
    if not bound:
        return ""
    # A pool's nodes of one TPU topology: whole slices of that many hosts each.
    per_pool: dict[tuple[str, str, str], int] = {}
    for node in bound:
        labels = node["metadata"]["labels"]
        if "cloud.google.com/gke-tpu-topology" in labels:
            key = (
                labels[POOL],
                labels.get("node.kubernetes.io/instance-type", ""),
                labels["cloud.google.com/gke-tpu-topology"],
            )
            per_pool[key] = per_pool.get(key, 0) + 1
    slices: dict[tuple[str, str], int] = {}
    for (_, machine, topology), count in per_pool.items():
        found = accelerator_for_machine(machine)
        chips = math.prod(int(d) for d in topology.split("x"))
        hosts = max(1, chips // found[1].chips) if found else 1
        what = (found[0].name if found else machine, topology)
        slices[what] = slices.get(what, 0) + math.ceil(count / hosts)
    parts = [f"{n} x {acc} {topology}" for (acc, topology), n in sorted(slices.items())]
    gpus = sum(int(n["status"]["capacity"].get("nvidia.com/gpu", 0)) for n in bound)
    if gpus:
        parts.append(f"{gpus} GPUs")
    return f"{', '.join(parts)} ({len(bound)} node{'s' if len(bound) != 1 else ''})"


def _pods_ready(workload: dict[str, Any], now: datetime, wait: PodsReadyWait | None) -> tuple[float | None, str]:
    """(seconds from admission to every pod Ready, what Kueue's wait for pods means for it now) from the Workload's
    PodsReady condition (apis/kueue/v1beta2/workload_types.go: WaitForStart, WaitForRecovery, Started, Recovered)
    and the environment's waitForPodsReady (`wait`; None: Kueue does not wait for pods)."""
    if wait is None:
        return None, ""
    conditions = _conditions(workload)
    ready, admitted = conditions.get("PodsReady", {}), _time(conditions.get("Admitted", {}).get("lastTransitionTime"))
    since = _time(ready.get("lastTransitionTime"))
    if admitted is None or since is None:
        return None, ""
    if ready.get("status") == "True":
        started = ready.get("reason") == "Started"
        return (round((since - admitted).total_seconds(), 1) if started else None), ""
    if ready.get("reason") == "WaitForRecovery":
        limit, what = wait.recovery_s, "a pod of it stopped being Ready"
    else:
        limit, what, since = wait.timeout_s, "admitted", admitted
    elapsed = max(0, int((now - since).total_seconds()))
    return None, (
        f"{what} {elapsed} s ago: Kueue evicts it and queues it again once {limit} s pass without every pod Ready "
        "(waitForPodsReady)"
    )


def rows(
    objects: dict[str, list[dict[str, Any]]],
    nodes: list[dict[str, Any]],
    now: datetime,
    teams: Iterable[str] = (),
    wait: PodsReadyWait | None = None,
) -> list[Row]:
    """The rows of the objects read (`objects`: kind -> items, of KINDS and READ) and the cluster's nodes, at `now`;
    a row in the queue of one of `teams` (each team's queue is named after it) is that team's; `wait`: Kueue's wait
    for an admitted run's pods, where it has one."""
    teams = set(teams)
    owners = {
        (kind, o["metadata"]["namespace"], o["metadata"]["name"]): o
        for kind in (*KINDS, "ReplicaSet")
        for o in objects.get(kind, [])
    }
    positions = {
        (item["metadata"]["namespace"], item["metadata"]["name"]): (
            item["positionInClusterQueue"],
            len(summary["items"]),
        )
        for summary in objects.get("PendingWorkloads", [])
        for item in summary.get("items") or []
    }
    workloads: dict[tuple[str, str, str], dict[str, Any]] = {}
    for workload in objects.get("Workload", []):
        owner = controller_of(workload)
        if owner is not None:
            workloads[(owner[0], workload["metadata"]["namespace"], owner[1])] = workload
    # A RayCluster a RayJob made, a Job a JobSet made: shown as the object that made it.
    parent: dict[tuple[str, str, str], tuple[str, str, str]] = {}
    for (kind, namespace, name), obj in owners.items():
        owner = controller_of(obj)
        if owner is not None and owner[0] in KINDS:
            parent[(kind, namespace, name)] = (owner[0], namespace, owner[1])
    accelerator_nodes = _accelerator_nodes(nodes)
    pods_of: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for pod in objects.get("Pod", []):
        made_by = template_of(pod, owners).split(":", 1)[0]
        if "/" not in made_by:
            continue
        kind, name = made_by.split("/", 1)
        key = (kind, pod["metadata"]["namespace"], name)
        pods_of.setdefault(parent.get(key, key), []).append(pod)
    out = []
    for key, obj in sorted(owners.items(), key=lambda item: (item[0][1], item[0][0], item[0][2])):
        kind, namespace, name = key
        if kind not in KINDS or key in parent:
            continue
        made = [k for k, p in parent.items() if p == key]
        queued = workloads.get(key) or next((workloads[k] for k in made if k in workloads), None)
        if queued is None and not _accelerated(obj):
            continue
        pods = pods_of.get(key, [])
        ready = [p for p in pods if _conditions(p).get("Ready", {}).get("status") == "True"]
        bound = sorted({p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName") in accelerator_nodes})
        held = [accelerator_nodes[n] for n in bound]
        not_ready = [p for p in pods if p not in ready]
        waiting_pod = _pending_reason(not_ready[0]) if not_ready else ""
        pods_ready_s, position = None, None
        if queued is not None:
            state, why, since = _kueue_state(queued)
            queue = (queued.get("spec") or {}).get("queueName")
            if state == "waiting":
                position = positions.get((queued["metadata"]["namespace"], queued["metadata"]["name"]))
                why += f" (place {position[0] + 1} of {position[1]} waiting in its ClusterQueue)" if position else ""
            pods_ready_s, waits = _pods_ready(queued, now, wait) if state == "running" else (None, "")
            if state == "running" and (not pods or not_ready):
                # Admitted: it holds the quota; its pods are not all running yet (or a controller has yet to make them).
                state, why = "admitted", "; ".join(filter(None, (waiting_pod or "no pod yet", waits)))
        else:
            queue = None
            started = sorted(p["status"]["startTime"] for p in pods if (p.get("status") or {}).get("startTime"))
            state, why = ("running", "") if pods and not not_ready else ("starting", waiting_pod or "no pod yet")
            if not pods and (obj.get("spec") or {}).get("replicas") == 0:
                state, why = "scaled to zero", ""
            since = started[0] if started else obj["metadata"].get("creationTimestamp")
        per_hour = _sum([_node_price(n) for n in held])
        so_far = None
        if per_hour is not None and since and state in ("running", "admitted"):
            hours = max(0.0, (now - _time(since)).total_seconds() / 3600)
            so_far = round(per_hour * hours, 2)
        out.append(
            Row(
                kind, namespace, name, queue, team_of(queue, teams), state, why, len(pods), len(ready),
                _holds(held),
                tuple(sorted({n["metadata"]["labels"].get(POOL, "") for n in held})), since, per_hour, so_far,
                _last_start(ready) if kind in SERVERS else None, pods_ready_s=pods_ready_s,
                goodput_workload=(obj["metadata"].get("annotations") or {}).get(GOODPUT_WORKLOAD),
                queue_position=position,
            )
        )  # fmt: skip
    return out


@overload
def _time(value: str) -> datetime: ...
@overload
def _time(value: str | None) -> datetime | None: ...
def _time(value: str | None) -> datetime | None:
    """An RFC 3339 timestamp as the API server writes it (`Z` for UTC), or None."""
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def cold_start_of(pod: dict[str, Any]) -> dict[str, float] | None:
    """A ready pod's start in the phases infra/catalogue/cold_starts.py records, from its own timestamps: node
    (created to its PodScheduled condition: a node found or provisioned), image (to its last container's
    `startedAt`: the images pulled, the init containers run) and serve (to its Ready condition: weights, compile,
    warm-up). None for a pod not ready, or one whose timestamps say it restarted since (a container started after
    it became ready)."""
    conditions = _conditions(pod)
    created = _time(pod["metadata"].get("creationTimestamp"))
    scheduled = _time(conditions.get("PodScheduled", {}).get("lastTransitionTime"))
    ready = conditions.get("Ready", {})
    became_ready = _time(ready.get("lastTransitionTime")) if ready.get("status") == "True" else None
    started = [
        _time(((c.get("state") or {}).get("running") or {}).get("startedAt"))
        for c in (pod.get("status") or {}).get("containerStatuses") or []
    ]
    if not (created and scheduled and became_ready and started) or None in started:
        return None
    last_started = max(t for t in started if t is not None)
    if not created <= scheduled <= last_started <= became_ready:
        return None
    marks = (created, scheduled, last_started, became_ready)
    return {phase: (end - start).total_seconds() for phase, (start, end) in zip(PHASES, pairwise(marks), strict=True)}


def _last_start(ready: list[dict[str, Any]]) -> dict[str, float] | None:
    """The start of the server's pod that became ready last (in a multi-host group, the host it waited for)."""
    starts = [(p, s) for p in ready if (s := cold_start_of(p)) is not None]
    if not starts:
        return None
    return max(starts, key=lambda ps: _conditions(ps[0])["Ready"]["lastTransitionTime"])[1]


def _pending_reason(pod: dict[str, Any]) -> str:
    """Why a pod is not ready: its scheduling gates, the scheduler's message, or that it is bound and not ready."""
    gates = [g["name"] for g in pod["spec"].get("schedulingGates") or []]
    if gates:
        return f"pod {pod['metadata']['name']} held by scheduling gates: {', '.join(gates)}"
    if pod["spec"].get("nodeName"):
        return f"pod {pod['metadata']['name']} on {pod['spec']['nodeName']}: not ready"
    scheduled = _conditions(pod).get("PodScheduled", {})
    return f"pod {pod['metadata']['name']}: {scheduled.get('message') or 'not scheduled yet'}"


def _sum(values: list[float | None]) -> float | None:
    return None if any(v is None for v in values) else round(sum(v for v in values if v is not None), 2)


def _age(since: str | None, now: datetime) -> str:
    return duration((now - _time(since)).total_seconds()) if since else "-"


def table(found: list[Row], now: datetime, budgets: dict[str, float] | None = None) -> str:
    """The rows as a table a person reads, each row's reason on a line under it; the footer splits what is held now
    by team, beside a team's budget per hour (`budgets`: team -> USD a month) where it has one."""
    header = ("KIND", "NAMESPACE/NAME", "TEAM", "QUEUE", "STATE", "PODS", "HOLDS", "FOR", "USD/H", "USD SO FAR")
    lines = [header]
    notes: dict[int, str] = {}
    for row in found:
        lines.append(
            (
                row.kind, f"{row.namespace}/{row.name}", row.team, row.queue or "-", row.state,
                f"{row.ready}/{row.pods}", row.holds or "-", _age(row.since, now),
                money(row.usd_per_hour if row.holds else None), money(row.usd_so_far),
            )
        )  # fmt: skip
        if row.goodput is not None:
            notes[len(lines) - 1] = "; ".join(filter(None, (row.why, row.goodput.text())))
        elif row.why:
            notes[len(lines) - 1] = row.why
        elif row.cold_start:
            notes[len(lines) - 1] = (
                f"last start {sum(row.cold_start.values()):g} s from creation to ready: {phases_text(row.cold_start)}"
            )
        elif row.pods_ready_s is not None:
            notes[len(lines) - 1] = f"every pod Ready {row.pods_ready_s:g} s after its admission"
    text = columns(lines, notes)
    total = _sum([r.usd_per_hour for r in found if r.holds])
    by_team = {
        t: _sum([r.usd_per_hour for r in found if r.holds and r.team == t]) for t in sorted({r.team for r in found})
    }
    budgets = budgets or {}

    def share(team: str, held: float | None) -> str:
        said = f"{team} {money(held)}"
        if team in budgets:
            said += f" of its budget's {budgets[team] / prices.HOURS_PER_MONTH:,.2f}"
        return said

    shares = ", ".join(share(t, v) for t, v in by_team.items())
    text.append(f"held now: {money(total)} USD/h ({shares}) at list price ({prices.PRICE_SOURCE})")
    return "\n".join(text)


def measured_starts(env: Environment, found: list[Row]) -> dict[str, tuple[float, str]]:
    """Per queued slice (the training queue's, the batch slices), the slowest start of a run on it read now: its
    seconds from admission to every pod Ready (pods_ready_s) and the run."""
    slice_of = {pool: key for key in env.queued_slices for pool in env.slices[key].pools(key)}
    slowest: dict[str, tuple[float, str]] = {}
    for row in found:
        seconds = row.pods_ready_s
        if seconds is None:
            continue
        for key in {slice_of[p] for p in row.pools if p in slice_of}:
            if key not in slowest or seconds > slowest[key][0]:
                slowest[key] = (seconds, f"{row.namespace}/{row.name}")
    return slowest


def starts_to_record(env: Environment, measured: dict[str, tuple[float, str]], now: datetime,
                     found: Sequence[Row] = ()) -> list[str]:  # fmt: skip
    """What to add to the environment file for Kueue's wait for pods (slices.<key>.queued_start): each queued
    slice's start read now that is slower than the one recorded, or that has none; and the runs of `found` that Kueue
    evicted for not starting within its wait, whose start is never measured (it never ends) and so must be raised by
    hand, or each retry is evicted again."""
    lines = [
        f"  slices.{key}.queued_start: {{seconds: {math.ceil(seconds)}, measured: {now:%Y-%m-%d}, "
        f'source: "make status ENV={env.name}, {run}"}}'
        for key, (seconds, run) in sorted(measured.items())
        if (recorded := env.slices[key].queued_start) is None or recorded.seconds < seconds
    ]
    timed_out = [
        f"{r.namespace}/{r.name}" for r in found if r.state == "evicted" and r.why.startswith(PODS_READY_TIMEOUT)
    ]
    timeout = pods_ready_timeout(env)
    if timed_out and timeout is not None:
        lines.append(
            f"  none for {', '.join(timed_out)}: evicted for pods not all Ready within Kueue's wait "
            f"({timeout.durations()['timeout']}: {timeout.why}); a start that never ends is never measured, so raise "
            "its slice's queued_start by hand to half the start it needs or more, or Kueue evicts every retry again"
        )
    if not lines:
        return []
    return [
        f"starts to record in {env.name}.yaml, each the slowest read so far on its slice (Kueue's wait for a run's "
        "pods is twice the slowest once every queued slice has one: docs/operations.md):",
        *lines,
    ]


def with_goodput(found: list[Row], project: str, now: datetime, client: Any = None) -> tuple[list[Row], str]:
    """The rows with their runs' goodput read from Cloud Monitoring, and what to say where it could not be read
    (the rows as they were: `make status` still shows what runs)."""
    from google.api_core import exceptions
    from google.auth import exceptions as auth_exceptions

    runs = [r for r in found if r.goodput_workload]
    if not runs:
        return found, ""
    since = min((_time(r.since) for r in runs if r.since), default=now) - timedelta(hours=1)
    try:
        read = read_goodput(project, [r.goodput_workload or "" for r in runs], since, now, client)
    except (exceptions.GoogleAPIError, auth_exceptions.GoogleAuthError) as err:
        return found, f"goodput not read from Cloud Monitoring (project {project}): {' '.join(str(err).split())}"
    return [replace(r, goodput=read.get(r.goodput_workload or "")) for r in found], ""


def read(run: Callable[..., subprocess.CompletedProcess[str]], namespaces: list[str]) -> dict[str, list[Any]]:
    """Every object of READ in `namespaces` (one read per namespace), the cluster's nodes and Kueue's ClusterQueues;
    a kind the cluster does not serve (its controller is not installed) reads as none."""
    objects: dict[str, list[Any]] = {kind: [] for kind in READ}
    served = list(READ.values())
    for namespace in namespaces:
        while True:
            done = run("get", ",".join(served), "-n", namespace, "-o", "json")
            missing = re.search(NOT_SERVED + r' "([^"]+)"', done.stderr)
            if not done.returncode or missing is None or len(served) == 1:
                break
            # kubectl names the resource as given, or by its first part.
            served = [r for r in served if missing.group(1) not in (r, r.split(".")[0])]
        if done.returncode:
            raise Unreachable(" ".join(done.stderr.split()))
        for item in json.loads(done.stdout).get("items", []):
            objects.setdefault(item.get("kind", ""), []).append(item)
    done = run("get", "nodes", "-o", "json")
    if done.returncode:
        raise Unreachable(" ".join(done.stderr.split()))
    objects["Node"] = json.loads(done.stdout).get("items", [])
    done = run("get", CLUSTER_QUEUES, "-o", "json")
    if done.returncode and NOT_SERVED not in done.stderr:
        raise Unreachable(" ".join(done.stderr.split()))
    objects["ClusterQueue"] = [] if done.returncode else json.loads(done.stdout).get("items", [])
    objects["PendingWorkloads"] = []
    for queue in objects["ClusterQueue"]:
        done = run("get", "--raw", f"{VISIBILITY}/clusterqueues/{queue['metadata']['name']}/pendingworkloads")
        if done.returncode:
            objects["PendingWorkloads"] = [{"unread": " ".join(done.stderr.split())}]
            break
        objects["PendingWorkloads"].append({"queue": queue["metadata"]["name"], **json.loads(done.stdout)})
    return objects


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m scripts.status", description=__doc__.split("\n\n")[0])
    parser.add_argument("env", help="the environment (infra/environments/<env>.yaml)")
    parser.add_argument("--json", action="store_true", help="the rows as JSON (the same fields)")
    args = parser.parse_args(argv)
    try:
        env = load_named(args.env)
    except ConfigError as err:
        return refuse(err)
    try:
        with cluster_env(env) as run_env:
            objects = read(kubectl_in(run_env), env.namespaces)
    except (ToolsMissing, Unreachable) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    now = datetime.now(UTC)
    queues = queue_rows(objects.pop("ClusterQueue"), env.teams)
    timeout = pods_ready_timeout(env)
    found = rows(objects, objects.pop("Node"), now, env.teams, timeout.wait if timeout is not None else None)
    found, unread = with_goodput(found, env.project, now)
    unseen = next((p["unread"] for p in objects["PendingWorkloads"] if "unread" in p), "")
    for note in (unread, unseen and f"queue positions not read from Kueue's visibility API: {unseen}"):
        if note:
            print(f"note: {note}", file=sys.stderr)
    measured = measured_starts(env, found)
    if args.json:
        print(json.dumps({"environment": env.name, "read_at": now.isoformat(timespec="seconds"),
                          "rows": [asdict(r) for r in found], "queues": [asdict(q) for q in queues],
                          "measured_starts": {k: {"seconds": v[0], "run": v[1]} for k, v in measured.items()}},
                         indent=2))  # fmt: skip
    else:
        print(f"{env.name}: cluster {env.cluster.name}, read {now:%Y-%m-%d %H:%M} UTC")
        budgets = {n: float(t.budget.monthly_usd) for n, t in env.teams.items() if t.budget is not None}
        print(table(found, now, budgets))
        if queues:
            print("\n".join(queue_table(queues)))
        record = starts_to_record(env, measured, now, found)
        if record:
            print("\n".join(["", *record]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
