"""Drift: what changed outside Terraform since the last apply, read from a real plan of the live state.

A resource drifted when its refresh (`resource_drift` in `terraform show -json`) changed what the configuration sets,
so the next apply would change it back (it is also in `resource_changes`). A refresh that changed only what the
configuration does not set (a resourceVersion, a server-side default, the order of a set) is planned as no change,
as Terraform's own plan shows no "changed outside" note for it. `make drift ENV=` reads the environment's real
plan, `make drift-local ENV=` deploy-local's; both report through `report` here.
"""

from __future__ import annotations

from collections.abc import Callable

from infra.review.model import Change, StackReview

# The fields an API server sets on every write: not what anyone changed.
SERVER_SET = ("metadata.resource_version", "metadata.generation", "metadata.uid")
NOTHING, DRIFTED = 0, 2


def drifted(review: StackReview) -> list[Change]:
    """The resources the review's plan found changed outside Terraform that its apply would change back."""
    repaired = {c.address for c in review.changes}
    return [c for c in review.drift if c.address in repaired]


def report(
    stack: str,
    review: StackReview,
    *,
    engine: str = "Terraform",
    next_apply: str = "the next apply",
    who: Callable[[Change], str] | None = None,
) -> tuple[int, list[str]]:
    """(0 nothing drifted or 2 something did, the lines to print): each drifted resource with the fields that
    changed, what the gate says of such a change (security weakened, data or capacity lost, a dependency cut) and,
    where `who` finds it, who changed it; then what `next_apply` would do."""
    found = drifted(review)
    if not found:
        return NOTHING, [
            f"drift: {stack}: nothing changed outside {engine} since the last apply ({len(review.drift)} "
            "resource(s) refreshed with server-side fields changed that the configuration does not set)"
        ]
    lines = [f"drift: {stack}: {len(found)} resource(s) changed outside {engine} since the last apply:"]
    for change in found:
        fields = [path for path, _, _ in change.values if path not in SERVER_SET] or list(change.attributes)
        changed = f" ({', '.join(fields)})" if fields else ""
        said = f": {change.blocked}" if change.blocked else ""
        by = f" [{who(change)}]" if who is not None else ""
        lines.append(
            f"  {'deleted' if change.action == 'delete' else change.action} {change.address}{changed}{said}{by}"
        )
    repairs = "; ".join(f"{c.action} {c.address}" for c in review.changes) or "nothing"
    lines.append(f"{next_apply} would: {repairs}")
    return DRIFTED, lines
