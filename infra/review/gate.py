"""The gate: which change stops the apply until it is confirmed, and why, by consequence (data lost, capacity or
work lost, security weakened, a dependency cut: infra/catalogue/consequences.py); a protected resource's loss is
never confirmable here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from infra.catalogue.accelerators import accelerator_for_machine
from infra.catalogue.consequences import CAPACITY_LOST, DATA_LOST, KINDS, consequences
from infra.catalogue.controller_crds import crd_changes
from infra.catalogue.controllers import CONTROLLERS
from infra.catalogue.destructive_updates import destructive
from infra.review.model import PROTECTED_TYPES


def _machine(body: Mapping[str, Any] | None) -> str:
    config = (body or {}).get("node_config") or {}
    if isinstance(config, list):
        config = config[0] if config else {}
    return str(config.get("machine_type", ""))


class Verdict(NamedTuple):
    """What the gate says of one change: why it stops the apply ("" where it does not), whether it may be confirmed
    at all, and the consequences it names (infra/catalogue/consequences.py KINDS)."""

    why: str
    confirmable: bool
    kinds: tuple[str, ...] = ()


PASS = Verdict("", True)


def gate(
    rtype: str, action: str, paths: Iterable[str], before: Mapping[str, Any] | None, after: Mapping[str, Any] | None
) -> Verdict:
    """The gate's verdict on one planned change: every consequence it has (data lost, capacity or work lost,
    security weakened, a dependency cut), each named; a protected resource's loss cannot be confirmed here."""
    if action not in ("delete", "replace", "update", "create"):
        return PASS
    paths = list(paths)
    losing = action in ("delete", "replace")
    if rtype in PROTECTED_TYPES and losing:
        return Verdict("data lost: a protected stateful resource would be destroyed", False, (DATA_LOST,))
    found: list[tuple[str, str]] = []
    slice_pool = rtype == "google_container_node_pool" and accelerator_for_machine(_machine(before or after))
    if slice_pool:
        moved = action == "update" and any(p == "node_locations" for p in paths)
        if losing or moved:
            what = (
                "replaced (destroyed, then created: its name is fixed)"
                if action == "replace"
                else ("deleted" if action == "delete" else "moved to other zones (its nodes are recreated)")
            )
            found.append((
                CAPACITY_LOST,
                f"an accelerator slice pool ({slice_pool[0].name}, {_machine(before or after)}) would be {what}: its "
                "capacity is released, and on-demand or spot capacity may not come back",
            ))  # fmt: skip
    if rtype in ("kubernetes_namespace_v1", "kubernetes_namespace") and losing:
        found.append(
            (DATA_LOST, "a namespace would be deleted, with every object in it (the Secrets made by hand too)")
        )
    if rtype == "helm_release" and losing:
        found.append(
            (
                CAPACITY_LOST,
                "a Helm release would be uninstalled: its objects go (a controller's, every object of its kinds)",
            )
        )
    if rtype == "helm_release" and action == "update" and "version" in paths:
        bump = _controller_bump(before or {}, after or {})
        if bump:
            found.append((CAPACITY_LOST, bump))
    if action == "update":
        # The resource stays; what it holds goes (infra/catalogue/destructive_updates.py, with sources).
        for update, hits in destructive(rtype, paths, before, after, accelerator_pool=bool(slice_pool)):
            found.append((update.kind, f"an in-place update that destroys: {', '.join(hits)}: {update.what}"))
    for row in consequences(rtype, action, paths, before, after):
        if slice_pool and losing and row.kind == CAPACITY_LOST:
            continue  # said above, with the slice's name
        found.append((row.kind, row.what))
    if not found:
        return PASS
    kinds = tuple(k for k in KINDS if any(kind == k for kind, _ in found))
    return Verdict("; ".join(f"{kind}: {what}" for kind, what in found), True, kinds)


def _controller_bump(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    """Why a controller's version change stops the apply: what it does to the CRDs the platform applies from the
    pinned files (infra/catalogue/controller_crds.py); "" when it changes none of them, or is no controller."""
    name = str(after.get("name", ""))
    controller = CONTROLLERS.get(name)
    if controller is None or after.get("repository") != controller.repository:
        return ""
    old, new = str(before.get("version")), str(after.get("version"))
    changes = crd_changes(name, old, new)
    if not changes:
        return ""
    return (
        f"controller {name} {old} -> {new} changes the CRDs of {controller.api_group} that every existing object "
        f"is read through: {'; '.join(changes)}. Check the objects against the new schema and the controller's "
        'release notes first (docs/operations.md, "Upgrade a controller")'
    )
