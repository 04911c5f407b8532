"""The gate: which change stops the apply until a person confirms it, and why (a protected resource is never
confirmable here)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from infra.catalogue.accelerators import accelerator_for_machine
from infra.catalogue.controller_crds import crd_changes
from infra.catalogue.controllers import CONTROLLERS
from infra.catalogue.destructive_updates import destructive
from infra.review.model import PROTECTED_TYPES


def _machine(body: Mapping[str, Any] | None) -> str:
    config = (body or {}).get("node_config") or {}
    if isinstance(config, list):
        config = config[0] if config else {}
    return str(config.get("machine_type", ""))


def gate(
    rtype: str, action: str, paths: Iterable[str], before: Mapping[str, Any] | None, after: Mapping[str, Any] | None
) -> tuple[str, bool]:
    """(why the gate stops this change, whether CONFIRM_CHANGE may let it through), or ("", True)."""
    if action not in ("delete", "replace", "update"):
        return "", True
    losing = action in ("delete", "replace")
    if rtype in PROTECTED_TYPES and losing:
        return "a protected stateful resource would be destroyed", False
    if rtype == "google_container_node_pool":
        found = accelerator_for_machine(_machine(before or after))
        moved = action == "update" and any(p == "node_locations" for p in paths)
        if found is not None and (losing or moved):
            what = (
                "replaced (destroyed, then created: its name is fixed)"
                if action == "replace"
                else ("deleted" if action == "delete" else "moved to other zones (its nodes are recreated)")
            )
            return (
                f"an accelerator slice pool ({found[0].name}, {_machine(before or after)}) would be {what}: its "
                "capacity is released, and on-demand or spot capacity may not come back"
            ), True
    if rtype in ("kubernetes_namespace_v1", "kubernetes_namespace") and losing:
        return "a namespace would be deleted, with every object in it (the Secrets made by hand too)", True
    if rtype == "helm_release" and losing:
        return "a Helm release would be uninstalled: its objects go (a controller's, every object of its kinds)", True
    if rtype == "helm_release" and action == "update" and "version" in paths:
        return _controller_bump(before or {}, after or {}), True
    if action == "update":
        slice_pool = rtype == "google_container_node_pool" and accelerator_for_machine(_machine(before or after))
        rows = destructive(rtype, list(paths), before, after, accelerator_pool=bool(slice_pool))
        if rows:
            # The resource stays; what it holds goes (infra/catalogue/destructive_updates.py, with sources).
            what = "; ".join(f"{', '.join(hits)}: {row.what}" for row, hits in rows)
            return f"an in-place update that destroys: {what}", True
    return "", True


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
