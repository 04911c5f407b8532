"""`make rehearse-local ENV=`: a contention rehearsal on the local cluster. Every Kueue queue of the environment is
filled with runs of its own shapes, and the real Kueue decides, as it would on GKE, who runs, who waits and how long,
who is preempted; then what each team held per hour at list price. Fairness settings (quotas, borrowing, preemption)
are reviewed by what they do, not by reading them.

    python -m scripts.rehearse <env> [--dir .cache/cluster-local] [--runs 2] [--hold 20] [--for 300] [--json]

The shapes, from the environment file:
- each team's queue: its guaranteed share of each batch slice (`teams.<t>.quota`), and where it may borrow the
  training slice (`borrow_training`), the whole training slice;
- the platform's batch queue (`batch.queue`): what the teams leave of each batch slice;
- the training queue, where each run is a job (`training.runs: jobs`): one run's slice.
`--runs` of each are submitted in turns (the first of every shape, then the second ...), the teams' before the
platform's and training's, so a borrower is in before the queue it borrows from. Each run is a stand-in, a Job
(`rehearsal-*`, in the queue's namespace) of a pod per host with the host's accelerators: Kueue admits on quota
alone, as it does for the real job of that shape, and the pods are held before scheduling (nothing runs; KWOK would
finish them at once). A run admitted for `--hold` seconds ends (the rehearsal deletes it); a preempted one goes back
in line and holds its full time again when it is admitted again (its work since the last checkpoint lost). What
already runs stays and counts (a standing training cluster holds its slice).

The rehearsal stands in for one Google component: GKE's Dynamic Workload Scheduler, which provisions a queued slice.
It grants each ProvisioningRequest Kueue makes for a run (capacity always found), as GKE does when it finds the
machines; on GKE a queued slice can wait hours for them.

The cluster is the local one (`make cluster-local`, `make deploy-local ENV=` first): a rehearsal on GKE would preempt
real work. Each run it made is deleted when it ends, also when it is interrupted.

Exit codes: 0 rehearsed; 1 the local cluster is not up or refused a run; 2 a refused environment (no queue to fill).
"""

from __future__ import annotations

import json
import math
import secrets
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from infra.catalogue import prices
from infra.catalogue.pod_owners import controller_of
from infra.config import ConfigError, Environment
from infra.constructs.releases import lends_training
from infra.derive.queues import queue_shares
from infra.localcluster.cluster import Cluster, ClusterError
from infra.synth.load import load_named
from scripts.parser import ArgumentParser, refuse
from scripts.status import ACCELERATORS, _conditions, _kueue_state, _node_price
from scripts.status_queues import PLATFORM, columns, money

LABEL = "platform.local/rehearsal"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
WORKLOADS = "workloads.kueue.x-k8s.io"
PROVISIONING = "provisioningrequests.autoscaling.x-k8s.io"
# Each stand-in pod: the host's accelerators and a little of its CPU and memory, as the team's job in
# tests/test_localcluster.py asks; restricted Pod Security, as every namespace of the platform enforces.
POD_CPU, POD_MEMORY = "1", "1Gi"
HELD = "platform.local/held"
# How long the next run waits for Kueue's word on the one before; what a waiting run says before Kueue has looked.
DECIDE_S = 30
UNDECIDED = ("no Kueue Workload yet", "not yet considered by Kueue")


@dataclass(frozen=True)
class Shape:
    """What one run of a queue asks for: `pods` pods, each with `per_pod` of the accelerator `resource`."""

    queue: str
    namespace: str
    team: str
    slice: str  # the slice's key in the environment file
    resource: str
    pods: int
    per_pod: int

    @property
    def asks(self) -> str:
        return f"{self.slice}: {self.pods} x {self.per_pod} {self.resource}"


def shapes(env: Environment) -> list[Shape]:
    """The shapes of every queue of `env`, the teams' first, then the platform's batch queue, then training's."""
    teams: list[Shape] = []
    platform: list[Shape] = []
    for share in queue_shares(env):
        team = share.name if share.name in env.teams else PLATFORM
        for key, amounts in share.nominal.items():
            slice_ = env.slices[key].slice
            amount = amounts.get(slice_.resource_name, 0)
            if amount <= 0 or not share.namespace:
                continue
            pods = math.ceil(amount / slice_.chips_per_host)  # a pod per host its share spans
            shape = Shape(share.name, share.namespace, team, key, slice_.resource_name, pods, amount // pods)
            (teams if team != PLATFORM else platform).append(shape)
    training = env.training
    trained: list[Shape] = []
    if training is not None and training.queue is not None:
        slice_ = env.slices[training.slice].slice
        whole = (training.slice, slice_.resource_name, slice_.hosts, slice_.chips_per_host)
        if lends_training(env):
            for name, borrower in sorted(env.teams.items()):
                if borrower.borrow_training:
                    teams.append(Shape(name, borrower.namespace, name, *whole))
        if training.runs == "jobs":
            namespace = env.identities[training.identity].namespace
            trained.append(Shape(training.queue, namespace, PLATFORM, *whole))
    return [*teams, *platform, *trained]


def stand_in(shape: Shape, name: str, rehearsal: str) -> dict[str, Any]:
    """The Job standing for one run of `shape`: suspended until Kueue admits it, its pods held before scheduling."""
    container = {
        "name": "work",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {
            "requests": {"cpu": POD_CPU, "memory": POD_MEMORY, shape.resource: str(shape.per_pod)},
            "limits": {shape.resource: str(shape.per_pod)},
        },
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                            "runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
    }  # fmt: skip
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": shape.namespace,
            "labels": {QUEUE_LABEL: shape.queue, LABEL: rehearsal},
        },
        "spec": {
            "suspend": True,
            "parallelism": shape.pods,
            "completions": shape.pods,
            "template": {
                "metadata": {"labels": {LABEL: rehearsal}},
                "spec": {
                    "restartPolicy": "Never",
                    "schedulingGates": [{"name": HELD}],
                    "containers": [container],
                },
            },
        },
    }


@dataclass
class Run:
    """One run of the rehearsal, as it went: seconds from the start."""

    name: str
    shape: Shape
    submitted: float
    admitted_first: float | None = None
    admitted_since: float | None = None  # in its current admission
    ran: float = 0.0
    lost: int = 0  # admissions it was seen to lose before it ended
    ended: float | None = None
    state: str = "waiting"
    why: str = ""
    evictions: set[str] = field(default_factory=set)

    @property
    def decided(self) -> bool:
        """Whether Kueue has said what it does with the run: admitted it, reserved its quota, or said why it waits."""
        return self.state != "waiting" or self.why not in UNDECIDED

    @property
    def preempted(self) -> int:
        """The same preemptions seen two ways: admissions lost between two readings, and the times Kueue's
        conditions give (which also show one readmitted before the next reading, or cleared since)."""
        return max(self.lost, len(self.evictions))

    @property
    def waited(self) -> float | None:
        return None if self.admitted_first is None else self.admitted_first - self.submitted


def preemptions(workload: dict[str, Any]) -> set[str]:
    """When Kueue preempted `workload`, as far as its conditions still say (a Preempted condition, or Evicted for
    preemption): each a transition time."""
    found = set()
    for kind, condition in _conditions(workload).items():
        preempted = kind == "Preempted" or (kind == "Evicted" and condition.get("reason") == "Preempted")
        if preempted and condition.get("status") == "True" and condition.get("lastTransitionTime"):
            found.add(condition["lastTransitionTime"])
    return found


class Rehearsal:
    """The runs and the teams' spending, followed from what the cluster says (`observe`) at seconds `now`."""

    def __init__(self, env: Environment, runs: list[Run], hold: float) -> None:
        self.runs = {r.name: r for r in runs}
        self.hold = hold
        self.changed = 0.0  # when a run last changed state
        self.teams = sorted({PLATFORM, *env.teams})
        self.usd = dict.fromkeys(self.teams, 0.0)
        self.peak = dict.fromkeys(self.teams, 0.0)
        self.last: float | None = None
        self.held = dict.fromkeys(self.teams, 0.0)
        self.duration = 0.0

    def observe(self, now: float, workloads: list[dict[str, Any]], price: Callable[[dict[str, Any]], float]) -> None:
        """Take one reading: each run's state, and what each team's admitted workloads cost since the last one."""
        held = dict.fromkeys(self.teams, 0.0)
        seen = set()
        for workload in workloads:
            state, why, _ = _kueue_state(workload)
            owner = controller_of(workload)
            run = self.runs.get(owner[1]) if owner else None
            if run is not None and run.ended is not None:
                continue  # ended: its Job is being deleted
            if state == "running":
                queue = (workload.get("spec") or {}).get("queueName", "")
                held[queue if queue in self.usd else PLATFORM] += price(workload)
            if run is None:
                continue
            seen.add(run.name)
            run.evictions |= preemptions(workload)
            if state == "running":
                if run.admitted_since is None:
                    run.admitted_since = now
                    run.admitted_first = now if run.admitted_first is None else run.admitted_first
            elif run.admitted_since is not None:
                run.ran += now - run.admitted_since
                run.admitted_since = None
                run.lost += 1
            self._set(run, now, *(("admitted", "") if state == "running" else (state, why)))
        for run in self.runs.values():
            if run.ended is None and run.name not in seen:
                self._set(run, now, "waiting", UNDECIDED[0])
        # What was held at the last reading is taken to have been held until this one.
        if self.last is not None:
            for team, per_hour in self.held.items():
                self.usd[team] += per_hour * (now - self.last) / 3600
        for team, per_hour in held.items():
            self.peak[team] = max(self.peak[team], per_hour)
        self.last = self.duration = now
        self.held = held

    def add(self, run: Run) -> None:
        self.runs[run.name] = run
        self.changed = run.submitted

    def _set(self, run: Run, now: float, state: str, why: str) -> None:
        if (run.state, run.why) != (state, why):
            self.changed = now
        run.state, run.why = state, why

    def settled(self, now: float) -> bool:
        """Nothing of the rehearsal holds an admission and nothing changed for twice the hold (at least 30 s): what
        still waits, waits on something the rehearsal does not end (a standing training cluster's slice)."""
        holding = any(r.admitted_since is not None for r in self.runs.values())
        return not holding and now - self.changed >= max(2 * self.hold, 30)

    def due(self, now: float) -> list[Run]:
        """The runs that have held their admission `hold` seconds: to end now."""
        return [r for r in self.runs.values() if r.admitted_since is not None and now - r.admitted_since >= self.hold]

    def end(self, run: Run, now: float) -> None:
        assert run.admitted_since is not None
        run.ran += now - run.admitted_since
        run.admitted_since, run.ended = None, now
        self._set(run, now, "done", "")

    @property
    def finished(self) -> bool:
        return all(r.ended is not None for r in self.runs.values())

    def stop(self, now: float) -> None:
        """The rehearsal's time is up: what still holds its admission counts its time so far."""
        for run in self.runs.values():
            if run.admitted_since is not None:
                run.ran += now - run.admitted_since
                run.admitted_since = None

    def summary(self) -> dict[str, Any]:
        """Per run and per team, as the table and --json show them."""
        runs = [
            {
                "run": r.name, "team": r.shape.team, "queue": r.shape.queue, "asks": r.shape.asks,
                "submitted_s": round(r.submitted, 1), "waited_s": None if r.waited is None else round(r.waited, 1),
                "preempted": r.preempted, "ran_s": round(r.ran, 1), "end": r.state, "why": r.why,
            }
            for r in self.runs.values()
        ]  # fmt: skip
        teams = []
        hours = self.duration / 3600
        for team in self.teams:
            mine = [r for r in self.runs.values() if r.shape.team == team]
            waits = [r.waited for r in mine if r.waited is not None]
            teams.append(
                {
                    "team": team,
                    "runs": len(mine),
                    "done": sum(r.ended is not None for r in mine),
                    "never_admitted": sum(r.waited is None for r in mine),
                    "waited_median_s": round(statistics.median(waits), 1) if waits else None,
                    "waited_max_s": round(max(waits), 1) if waits else None,
                    "preempted": sum(r.preempted for r in mine),
                    "usd_per_hour_mean": round(self.usd[team] / hours, 2) if hours else 0.0,
                    "usd_per_hour_peak": round(self.peak[team], 2),
                }
            )
        return {"runs": runs, "teams": teams, "seconds": round(self.duration, 1)}


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}s"


def table(summary: dict[str, Any]) -> str:
    """The runs, each never-admitted run's reason under it, then the teams."""
    header = ("RUN", "TEAM", "QUEUE", "ASKS", "SUBMITTED", "WAITED", "PREEMPTED", "RAN", "END")
    lines = [header]
    notes = {}
    for r in summary["runs"]:
        lines.append((r["run"], r["team"], r["queue"], r["asks"], _seconds(r["submitted_s"]), _seconds(r["waited_s"]),
                      str(r["preempted"]), _seconds(r["ran_s"]), r["end"]))  # fmt: skip
        if r["why"]:
            notes[len(lines) - 1] = r["why"]
    teams = [("TEAM", "RUNS", "DONE", "NEVER ADMITTED", "WAITED (MEDIAN, MAX)", "PREEMPTED", "USD/H (MEAN, PEAK)")]
    for t in summary["teams"]:
        teams.append((t["team"], str(t["runs"]), str(t["done"]), str(t["never_admitted"]),
                      f"{_seconds(t['waited_median_s'])}, {_seconds(t['waited_max_s'])}", str(t["preempted"]),
                      f"{money(t['usd_per_hour_mean'])}, {money(t['usd_per_hour_peak'])}"))  # fmt: skip
    return "\n".join([*columns(lines, notes), "", *columns(teams)])


def pricer(cluster: Cluster) -> Callable[[dict[str, Any]], float]:
    """USD per hour of what an admitted Workload holds at list price: for each pod set, the nodes of the flavor its
    accelerators were assigned (the ResourceFlavor's node labels), as many as its accelerators fill."""
    flavors = {f["metadata"]["name"]: (f.get("spec") or {}).get("nodeLabels") or {}
               for f in cluster.get("resourceflavors.kueue.x-k8s.io")["items"]}  # fmt: skip
    nodes = cluster.get("nodes")["items"]

    def node_of(labels: dict[str, str], resource: str) -> tuple[float, int] | None:
        for node in nodes:
            own = node["metadata"].get("labels") or {}
            per_node = int(str(((node.get("status") or {}).get("capacity") or {}).get(resource, "0")))
            if per_node and labels and all(own.get(k) == v for k, v in labels.items()):
                return _node_price(node) or 0.0, per_node
        return None

    def price(workload: dict[str, Any]) -> float:
        total = 0.0
        for assigned in ((workload.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
            for resource, flavor in (assigned.get("flavors") or {}).items():
                if resource not in ACCELERATORS:
                    continue  # the CPU and memory that go with them are the same nodes'
                found = node_of(flavors.get(flavor, {}), resource)
                usage = int(str((assigned.get("resourceUsage") or {}).get(resource, "0")))
                if found and usage:
                    total += found[0] * math.ceil(usage / found[1])
        return total

    return price


def grant_provisioning(cluster: Cluster, namespaces: list[str], granted: set[str]) -> None:
    """Stand in for GKE's Dynamic Workload Scheduler: each new ProvisioningRequest Kueue made is provisioned."""
    for namespace in namespaces:
        for request in cluster.get(PROVISIONING, "-n", namespace)["items"]:
            key = f"{namespace}/{request['metadata']['name']}"
            if key in granted:
                continue
            at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            conditions = [
                {"type": kind, "status": "True", "reason": "Rehearsal", "lastTransitionTime": at,
                 "message": "granted by make rehearse-local, standing in for the Dynamic Workload Scheduler"}
                for kind in ("Accepted", "Provisioned")
            ]  # fmt: skip
            done = cluster.kubectl("patch", PROVISIONING, request["metadata"]["name"], "-n", namespace,
                                   "--subresource=status", "--type=merge",
                                   "-p", json.dumps({"status": {"conditions": conditions}}), check=False)  # fmt: skip
            # Kueue deletes a request whose workload no longer needs it (finished, evicted, or a new attempt made):
            # one gone between the list and the patch has nothing left to grant.
            if done.returncode and "(NotFound)" not in done.stderr:
                raise ClusterError(f"kubectl patch {PROVISIONING} {key}: {done.stderr.strip()}")
            granted.add(key)


def rehearse(env: Environment, cluster: Cluster, runs: int, hold: float, limit: float) -> dict[str, Any]:
    """Submit the runs one at a time, each once Kueue has decided on the one before; end each run that has held its
    admission `hold` seconds; stop when every run has ended, when nothing changes any more (settled), or at `limit`
    seconds. The runs are removed however it stops."""
    rehearsal = secrets.token_hex(3)
    planned = shapes(env)
    namespaces = sorted({s.namespace for s in planned} | set(env.namespaces))
    price = pricer(cluster)
    queue = [
        (f"{f'rehearsal-{shape.queue}-{shape.slice}'[:50].rstrip('-')}-{turn + 1}", shape)
        for turn in range(runs)
        for shape in planned
    ]
    state = Rehearsal(env, [], hold)
    granted: set[str] = set()
    started = time.monotonic()
    try:
        while True:
            now = time.monotonic() - started
            last = list(state.runs.values())[-1] if state.runs else None
            # The next run once Kueue has said what it does with the one before (or after DECIDE_S without a word).
            if queue and (last is None or last.decided or now - last.submitted > DECIDE_S):
                name, shape = queue.pop(0)
                cluster.kubectl("create", "-f", "-", input=json.dumps(stand_in(shape, name, rehearsal)))
                state.add(Run(name, shape, now))
            grant_provisioning(cluster, namespaces, granted)
            workloads = [w for ns in namespaces for w in cluster.get(WORKLOADS, "-n", ns)["items"]]
            state.observe(now, workloads, price)
            for run in state.due(now):
                cluster.kubectl("delete", "job", run.name, "-n", run.shape.namespace, "--wait=false")
                state.end(run, now)
            if not queue and (state.finished or state.settled(now) or now >= limit):
                state.stop(now)
                break
            time.sleep(1)
        return {"environment": env.name, "rehearsal": rehearsal, "runs_per_shape": runs, "hold_s": hold,
                **state.summary()}  # fmt: skip
    finally:
        for namespace in namespaces:
            cluster.kubectl("delete", "jobs", "-n", namespace, "-l", f"{LABEL}={rehearsal}", "--wait=true", check=False)


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m scripts.rehearse", description=__doc__.split("\n\n")[0])
    parser.add_argument("env", help="the environment (infra/environments/<env>.yaml), deployed with make deploy-local")
    parser.add_argument("--dir", type=Path, default=Path(".cache/cluster-local"), help="the local cluster's folder")
    parser.add_argument("--runs", type=int, default=2, help="runs of each queue's shapes (default 2)")
    parser.add_argument("--hold", type=float, default=20, help="seconds each run holds its admission (default 20)")
    parser.add_argument("--for", dest="limit", type=float, default=300, help="seconds at most (default 300)")
    parser.add_argument("--json", action="store_true", help="the runs and the teams as JSON (the same fields)")
    args = parser.parse_args(argv)
    for flag, value, least in (("--runs", args.runs, 1), ("--hold", args.hold, 1), ("--for", args.limit, 10)):
        if value < least:
            return refuse(f"{flag} {value:g}: at least {least}", then="nothing was submitted")
    try:
        env = load_named(args.env)
    except ConfigError as err:
        return refuse(err, then="nothing was submitted")
    if not shapes(env):
        return refuse(
            f"ENV={args.env!r}: no Kueue queue to fill: {args.env}.yaml has no teams, no batch slices and no training "
            "runs as jobs (teams:, batch:, training.runs: jobs)",
            then="nothing was submitted",
        )
    cluster = Cluster(args.dir.resolve())
    if not cluster.ready():
        print(f"error: the local cluster in {args.dir} is not up: make cluster-local, then make deploy-local "
              f"ENV={env.name}; nothing was submitted", file=sys.stderr)  # fmt: skip
        return 1
    try:
        found = rehearse(env, cluster, args.runs, args.hold, args.limit)
    except ClusterError as err:
        print(f"error: rehearse-local: {err}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    print(
        f"{env.name}: rehearsal {found['rehearsal']} on the local cluster: {args.runs} run(s) of each queue's shapes, "
        f"each held {args.hold:g} s once admitted; {found['seconds']:.0f} s in all"
    )
    print(table(found))
    print(f"USD/H: what each team's admitted workloads held at list price ({prices.PRICE_SOURCE}), the rehearsal's "
          "standing ones included (a standing training cluster is the platform's)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
