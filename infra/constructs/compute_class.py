"""Values of the `compute-classes` chart: a custom ComputeClass per slice whose capacity is a list of tiers, each
tier a node pool of the stack (infra/stacks/compute.py makes them, with the class's label and taint)."""

from __future__ import annotations

from typing import Any

from infra.config import Environment
from infra.derive.names import compute_class


def fallback_slices(env: Environment) -> list[str]:
    """The GKE slices that fall back through capacity tiers (one ComputeClass each)."""
    return [key for key, spec in env.gke_slices.items() if spec.falls_back]


def compute_class_values(env: Environment) -> dict[str, Any]:
    classes = []
    for key in fallback_slices(env):
        spec = env.slices[key]
        tiers = spec.tier_pools(key)
        classes.append(
            {
                "name": compute_class(key),
                "description": f"slice {key} ({spec.slice.name}): " + ", then ".join(t.label for _, t in tiers),
                "pools": [pool for pool, _ in tiers],
            }
        )
    return {"classes": classes}
