"""`make status`'s queues (Kueue's ClusterQueues as their status says them) and its text: the table columns and
the money figures `make status` and `make rehearse-local` print."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The team of what no team's queue holds.
PLATFORM = "platform"


@dataclass(frozen=True)
class QueueRow:
    """One of Kueue's ClusterQueues as its status says it now (apis/kueue/v1beta2/clusterqueue_types.go)."""

    name: str
    team: str  # as Row.team: the team the queue is named after, else the platform's
    weight: str | None  # spec.fairSharing.weight where set (Kueue weighs a queue without one 1)
    waiting: int  # status.pendingWorkloads
    reserving: int  # status.reservingWorkloads: quota reserved (admitted, or waiting on admission checks)
    admitted: int  # status.admittedWorkloads
    holds: tuple[str, ...]  # per flavor and resource reserved: "a3mega nvidia.com/gpu 14 (6 borrowed)"
    share: int | None  # status.fairSharing.weightedShare: None where fair sharing is off


def team_of(queue: str | None, teams: set[str]) -> str:
    """The team whose queue `queue` is (each team's queue is named after it), else the platform's."""
    return queue if queue in teams else PLATFORM


def queue_rows(queues: list[dict[str, Any]], teams: Iterable[str] = ()) -> list[QueueRow]:
    """The ClusterQueues read, by name; a queue named after one of `teams` is that team's."""
    teams = set(teams)
    out = []
    for queue in sorted(queues, key=lambda q: q["metadata"]["name"]):
        name, spec, state = queue["metadata"]["name"], queue.get("spec") or {}, queue.get("status") or {}
        holds = tuple(
            f"{flavor['name']} {r['name']} {r['total']}"
            + (f" ({r['borrowed']} borrowed)" if r.get("borrowed", "0") != "0" else "")
            for flavor in state.get("flavorsReservation") or []
            for r in flavor.get("resources") or []
            if str(r.get("total", "0")) != "0"
        )
        fair = state.get("fairSharing")
        out.append(
            QueueRow(
                name, team_of(name, teams), (spec.get("fairSharing") or {}).get("weight"),
                int(state.get("pendingWorkloads", 0)), int(state.get("reservingWorkloads", 0)),
                int(state.get("admittedWorkloads", 0)), holds, None if fair is None else int(fair["weightedShare"]),
            )
        )  # fmt: skip
    return out


def queue_table(found: list[QueueRow]) -> list[str]:
    """The queues as lines a person reads, under the rows' table; the weight and share columns only where fair
    sharing is on (a queue carries a weighted share)."""
    fair = any(q.share is not None for q in found)
    header = ("QUEUE", "TEAM", *(("WEIGHT",) if fair else ()), "WAITING", "RESERVING", "ADMITTED", "HOLDS",
              *(("SHARE",) if fair else ()))  # fmt: skip
    lines = [header]
    for q in found:
        weight = ((q.weight or "1"),) if fair else ()
        share = (("-" if q.share is None else str(q.share)),) if fair else ()
        lines.append((q.name, q.team, *weight, str(q.waiting), str(q.reserving), str(q.admitted),
                      ", ".join(q.holds) or "-", *share))  # fmt: skip
    said = (
        "queues (Kueue's ClusterQueues; fair sharing on: a queue's share is what it borrows over what its cohort "
        "lends, divided by its weight, and Kueue lends to the lowest and preempts the highest)"
        if fair
        else "queues (Kueue's ClusterQueues)"
    )
    return [said, *columns(lines)]


def money(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def columns(lines: Sequence[tuple[str, ...]], notes: Mapping[int, str] | None = None) -> list[str]:
    """`lines` (the header first) in aligned columns, each note (line index -> text) on a line under its line."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    out = []
    for i, line in enumerate(lines):
        out.append("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
        if notes and i in notes:
            out.append(f"    {notes[i]}")
    return out
