"""Whether each specific reservation the stack's node pools draw on holds them: its machine type, and as many
machines as every pool drawing on it takes at its max nodes (a slice's count makes one pool per slice, each
drawing on the same reservation). A pool that takes more than its reservation holds waits for nodes that never
come (GKE: a node pool consuming a specific reservation gets only the reservation's VMs,
https://cloud.google.com/kubernetes-engine/docs/how-to/consuming-reservations). Compute Engine
reservations.get: specificReservation.count, inUseCount, instanceProperties.machineType
(https://cloud.google.com/compute/docs/reference/rest/v1/reservations)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infra.config import Environment
from infra.preflight.quota import max_nodes
from infra.preflight.result import Result
from infra.preflight.transport import COMPUTE, Transport, error_line


@dataclass(frozen=True)
class Draw:
    """One node pool's draw on one specific reservation, at its max nodes."""

    project: str
    zone: str
    reservation: str
    pool: str
    machine_type: str
    nodes: int


def draws(stack: dict[str, Any], project: str) -> list[Draw]:
    """The stack's node pools that consume a specific reservation (a name: the environment's project; a path
    projects/<p>/reservations/<name>: a shared one's own project), each in its zone."""
    found: list[Draw] = []
    for pool in ((stack.get("resource") or {}).get("google_container_node_pool") or {}).values():
        config = pool.get("node_config") or {}
        affinity = config.get("reservation_affinity") or {}
        if affinity.get("consume_reservation_type") != "SPECIFIC_RESERVATION":
            continue
        zones = pool.get("node_locations") or ["?"]
        nodes = max_nodes(pool, len(zones))
        for value in affinity.get("values") or []:
            owner, _, name = str(value).rpartition("/reservations/")
            found.append(
                Draw(
                    owner.removeprefix("projects/") or project,
                    zones[0],
                    name,
                    str(pool.get("name", "?")),
                    str(config.get("machine_type", "")),
                    nodes,
                )
            )
    return found


def check_reservations(env: Environment, found: list[Draw], transport: Transport) -> Result:
    """Each reservation read once and held to what its pools take."""
    by_reservation: dict[tuple[str, str, str], list[Draw]] = {}
    for draw in found:
        by_reservation.setdefault((draw.project, draw.zone, draw.reservation), []).append(draw)
    lines: list[str] = []
    failed = False
    for (project, zone, name), group in sorted(by_reservation.items()):
        pools = ", ".join(sorted(d.pool for d in group))
        taken = sum(d.nodes for d in group)
        url = f"{COMPUTE}/projects/{project}/zones/{zone}/reservations/{name}"
        answer = transport.request("GET", url)
        if answer.status != 200:
            failed = True
            lines.append(f"reservation {name} ({project}, {zone}): not read: {error_line(answer)}")
            continue
        specific = answer.body.get("specificReservation") or {}
        held = int(specific.get("count", 0))
        machine = str((specific.get("instanceProperties") or {}).get("machineType", "")).rsplit("/", 1)[-1]
        wrong = sorted({d.machine_type for d in group if d.machine_type != machine})
        if wrong:
            failed = True
            lines.append(
                f"reservation {name} ({project}, {zone}) holds {machine or 'no machine type'}; pools {pools} ask "
                f"for {', '.join(wrong)}: GKE creates no node from it (reserve that machine type, or change the "
                "slice's)"
            )
        elif taken > held:
            failed = True
            lines.append(
                f"short: reservation {name} ({project}, {zone}) holds {held} x {machine}; pools {pools} take up to "
                f"{taken} (a slice's count makes one pool per slice, each drawing on it): the nodes beyond {held} "
                "never come; grow the reservation or lower the count"
            )
        else:
            used = specific.get("inUseCount")
            lines.append(
                f"reservation {name} ({project}, {zone}): {taken} x {machine} taken by pools {pools}, holds {held}"
                + (f", in use now {used}" if used is not None else "")
            )
    return Result("reservations", "fail" if failed else "ok", lines)
