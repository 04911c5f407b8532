"""Where a trainer process stands in its job: the coordinator, how many processes, its own rank.

One function per orchestrator, each reading what that orchestrator really gives a process; every one returns
the same `ProcessGroup`, which `jax.distributed.initialize(coordinator, processes, process_id)` takes.

- JobSet (GKE): Kubernetes gives an Indexed Job's pod its index in `JOB_COMPLETION_INDEX`; JobSet adds no
  variable, so the chart passes the coordinator (pod 0's stable DNS name) and the process count.
- Slurm: `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_STEP_NODELIST` and `SLURM_JOB_ID` of the step's task; the
  coordinator is the step's first node, on JAX's own port for the job (jax/_src/clusters/slurm_cluster.py).
- Vertex AI: `CLUSTER_SPEC`, its distributed-training JSON: pool 0 holds the primary replica, pool 1 the
  workers (https://cloud.google.com/vertex-ai/docs/training/distributed-training); JAX has no Vertex detector.
- Compute Engine: no orchestrator, no variable; the group's hosts in rank order come from the instance's
  metadata attribute `platform-hosts` (the bulkInsert request writes it; the launcher exports it as
  `PLATFORM_HOSTS`), and the rank is this host's place in that list.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass

# The coordinator's port where the orchestrator does not give one (JobSet, Compute Engine).
COORDINATOR_PORT = 8476
ORCHESTRATORS = ("jobset", "slurm", "vertex", "gce")


class DiscoveryError(ValueError):
    """The environment does not say where this process stands (a variable missing or malformed)."""


@dataclass(frozen=True)
class ProcessGroup:
    coordinator: str
    processes: int
    process_id: int
    orchestrator: str

    def __post_init__(self) -> None:
        if not 0 <= self.process_id < self.processes:
            raise DiscoveryError(f"{self.orchestrator}: process {self.process_id} is outside 0..{self.processes - 1}")


def _need(environ: Mapping[str, str], name: str, orchestrator: str) -> str:
    value = environ.get(name)
    if value is None or value == "":
        raise DiscoveryError(f"{orchestrator}: {name} is not set; is this process started by {orchestrator}?")
    return value


def _int(environ: Mapping[str, str], name: str, orchestrator: str) -> int:
    value = _need(environ, name, orchestrator)
    if not value.isdigit():
        raise DiscoveryError(f"{orchestrator}: {name}={value!r} is not a number")
    return int(value)


def from_jobset(environ: Mapping[str, str], *, coordinator: str, processes: int) -> ProcessGroup:
    return ProcessGroup(coordinator, processes, _int(environ, "JOB_COMPLETION_INDEX", "jobset"), "jobset")


def first_host(nodelist: str) -> str:
    """The first host of a Slurm host list: `node001`, `node[001-004,009],gpu1` -> `node001`."""
    match = re.match(r"^([^,\[]+)(?:\[([^\],-]+))?", nodelist.strip())
    if match is None or not match.group(1):
        raise DiscoveryError(f"slurm: cannot read the host list {nodelist!r}")
    return match.group(1) + (match.group(2) or "")


def slurm_port(job_id: int) -> int:
    """The coordinator port JAX picks for a Slurm job: one of the top 4,096 ports, by job id."""
    return job_id % 2**12 + (65535 - 2**12 + 1)


def from_slurm(environ: Mapping[str, str]) -> ProcessGroup:
    job = _int(environ, "SLURM_JOB_ID", "slurm")
    nodes = _need(environ, "SLURM_STEP_NODELIST", "slurm")
    return ProcessGroup(
        coordinator=f"{first_host(nodes)}:{slurm_port(job)}",
        processes=_int(environ, "SLURM_NTASKS", "slurm"),
        process_id=_int(environ, "SLURM_PROCID", "slurm"),
        orchestrator="slurm",
    )


def from_vertex(environ: Mapping[str, str]) -> ProcessGroup:
    raw = _need(environ, "CLUSTER_SPEC", "vertex")
    try:
        spec = json.loads(raw)
        cluster = spec["cluster"]
        task = spec["task"]
        pools = {name: list(hosts) for name, hosts in cluster.items()}
        kind, index = str(task["type"]), int(task["index"])
    except (ValueError, KeyError, TypeError) as err:
        raise DiscoveryError(f"vertex: CLUSTER_SPEC is not the distributed-training JSON: {err}") from None
    primary = pools.get("workerpool0") or []
    if len(primary) != 1:
        raise DiscoveryError(f"vertex: workerpool0 must hold the one primary replica, found {primary}")
    workers = pools.get("workerpool1") or []
    if kind == "workerpool0":
        rank = 0
    elif kind == "workerpool1":
        rank = 1 + index
    else:
        raise DiscoveryError(f"vertex: task type {kind!r} is not a training replica (workerpool0 or workerpool1)")
    return ProcessGroup(primary[0], 1 + len(workers), rank, "vertex")


def from_gce(environ: Mapping[str, str], hostname: str | None = None) -> ProcessGroup:
    hosts = [h.strip() for h in _need(environ, "PLATFORM_HOSTS", "gce").split(",") if h.strip()]
    me = (hostname or socket.gethostname()).split(".", 1)[0]
    if me not in hosts:
        raise DiscoveryError(f"gce: this host {me!r} is not one of the group's hosts {hosts}")
    return ProcessGroup(f"{hosts[0]}:{COORDINATOR_PORT}", len(hosts), hosts.index(me), "gce")


def discover(orchestrator: str, environ: Mapping[str, str]) -> ProcessGroup:
    """The process group as `orchestrator` describes it in `environ` (JobSet needs its given values: use
    `from_jobset`)."""
    if orchestrator == "slurm":
        return from_slurm(environ)
    if orchestrator == "vertex":
        return from_vertex(environ)
    if orchestrator == "gce":
        return from_gce(environ)
    raise DiscoveryError(f"unknown orchestrator {orchestrator!r}; known: {', '.join(ORCHESTRATORS)}")
