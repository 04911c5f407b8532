"""Plan review: what a change does, in Markdown, for the pull request.

Offline (no credentials) it compares the synthesized stacks of this checkout
with a baseline `cdktf.out` by resource address. It reports counts per
action, every change, the accelerator inventory before and after (chips per
generation and zone), and a blocking section for any destroy or replacement
of a protected stateful resource.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.accelerators import accelerator_for_machine

# Stateful resources whose loss loses data or the platform itself.
PROTECTED_TYPES = ("google_storage_bucket", "google_container_cluster", "google_artifact_registry_repository")

# Attributes whose change makes Terraform replace the resource (google provider 6.x).
FORCES_REPLACEMENT: Mapping[str, tuple[str, ...]] = {
    "google_storage_bucket": ("name", "location", "project"),
    "google_container_cluster": ("name", "location", "project", "network", "subnetwork", "private_cluster_config"),
    "google_artifact_registry_repository": ("repository_id", "location", "format", "project"),
    "google_container_node_pool": ("name", "location", "cluster", "node_locations", "placement_policy", "project"),
}

BLOCKED = 3


@dataclass(frozen=True)
class Change:
    action: str  # create | update | delete | replace
    address: str
    attributes: tuple[str, ...] = ()
    replaced_by: tuple[str, ...] = ()

    @property
    def resource_type(self) -> str:
        return self.address.split(".", 1)[0]


@dataclass
class StackReview:
    stack: str
    changes: list[Change]
    types_after: Counter[str]
    inventory_before: Counter[tuple[str, str]]
    inventory_after: Counter[tuple[str, str]]
    has_baseline: bool
    blocking: list[Change] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.blocking = [
            c for c in self.changes if c.resource_type in PROTECTED_TYPES and c.action in ("delete", "replace")
        ]


def resources(stack_json: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Resources by address (`type.name`), without cdktf's metadata."""
    out: dict[str, dict[str, Any]] = {}
    for rtype, items in (stack_json.get("resource") or {}).items():
        for name, body in items.items():
            out[f"{rtype}.{name}"] = {k: v for k, v in body.items() if k != "//"}
    return out


def accelerator_inventory(stack_json: Mapping[str, Any]) -> Counter[tuple[str, str]]:
    """Chips per (accelerator generation, zone) that the stack's node pools hold."""
    inventory: Counter[tuple[str, str]] = Counter()
    for body in (stack_json.get("resource") or {}).get("google_container_node_pool", {}).values():
        found = accelerator_for_machine(str((body.get("node_config") or {}).get("machine_type", "")))
        if found is None:
            continue
        acc, shape = found
        nodes = body.get("node_count")
        if nodes is None:
            nodes = (body.get("autoscaling") or {}).get("total_max_node_count", 0)
        zones = body.get("node_locations") or [body.get("location", "?")]
        for zone in zones:
            inventory[(acc.name, zone)] += int(nodes) * shape.chips
    return inventory


def diff(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> list[Change]:
    old = resources(before or {})
    new = resources(after)
    changes: list[Change] = []
    for address in sorted(old.keys() | new.keys()):
        if address not in old:
            changes.append(Change("create", address))
        elif address not in new:
            changes.append(Change("delete", address))
        elif old[address] != new[address]:
            changed = tuple(
                sorted(
                    k for k in old[address].keys() | new[address].keys() if old[address].get(k) != new[address].get(k)
                )
            )
            forcing = tuple(a for a in changed if a in FORCES_REPLACEMENT.get(address.split(".")[0], ()))
            changes.append(Change("replace" if forcing else "update", address, changed, forcing))
    return changes


def review_stack(stack: str, after: Mapping[str, Any], before: Mapping[str, Any] | None) -> StackReview:
    return StackReview(
        stack=stack,
        changes=diff(before, after),
        types_after=Counter(a.split(".")[0] for a in resources(after)),
        inventory_before=accelerator_inventory(before or {}),
        inventory_after=accelerator_inventory(after),
        has_baseline=before is not None,
    )


def render(review: StackReview) -> str:
    lines = [f"# Plan review: {review.stack}", ""]
    basis = "against the baseline" if review.has_baseline else "with no baseline: every resource is new"
    lines += [f"Offline review of the synthesized configuration, {basis}.", ""]
    counts = Counter(c.action for c in review.changes)
    lines += ["| action | resources |", "|---|---|"]
    lines += [f"| {action} | {counts.get(action, 0)} |" for action in ("create", "update", "replace", "delete")]
    lines.append("")
    if review.blocking:
        lines += ["## Blocking", "", "Protected stateful resources would be destroyed or replaced:", ""]
        for c in review.blocking:
            why = f" (forced by {', '.join(c.replaced_by)})" if c.replaced_by else ""
            lines.append(f"- **{c.action}** `{c.address}`{why}")
        lines.append("")
    lines += [
        "## Accelerator inventory",
        "",
        "| accelerator | zone | chips before | chips after | change |",
        "|---|---|---|---|---|",
    ]
    keys = sorted(review.inventory_before.keys() | review.inventory_after.keys())
    for key in keys:
        b, a = review.inventory_before.get(key, 0), review.inventory_after.get(key, 0)
        lines.append(f"| {key[0]} | {key[1]} | {b} | {a} | {a - b:+d} |")
    if not keys:
        lines.append("| (none) | | 0 | 0 | +0 |")
    lines += ["", "## Resources by type", "", "| type | count |", "|---|---|"]
    lines += [f"| `{t}` | {n} |" for t, n in sorted(review.types_after.items())]
    if review.has_baseline:
        lines += ["", "## Changes", ""]
        for c in review.changes:
            attrs = f": {', '.join(c.attributes)}" if c.attributes else ""
            lines.append(f"- {c.action} `{c.address}`{attrs}")
        if not review.changes:
            lines.append("No changes.")
    return "\n".join(lines) + "\n"


def _load_stacks(outdir: Path) -> dict[str, dict[str, Any]]:
    stacks_dir = outdir / "stacks"
    return {p.parent.name: json.loads(p.read_text()) for p in sorted(stacks_dir.glob("*/cdk.tf.json"))}


def write_reviews(outdir: Path, baseline: Path | None = None) -> list[StackReview]:
    """Write `<outdir>/review/<env>.md` for every synthesized stack; return the reviews."""
    current = _load_stacks(outdir)
    if not current:
        raise FileNotFoundError(f"no synthesized stacks under {outdir}/stacks; run `make synth` first")
    base = _load_stacks(baseline) if baseline else None
    review_dir = outdir / "review"
    review_dir.mkdir(exist_ok=True)
    reviews = []
    for stack, body in current.items():
        review = review_stack(stack, body, base.get(stack, {}) if base is not None else None)
        env = stack.removeprefix("platform-")
        (review_dir / f"{env}.md").write_text(render(review))
        reviews.append(review)
    return reviews
