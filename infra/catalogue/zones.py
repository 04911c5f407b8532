"""Where Compute Engine offers what: regions, their zones, and the zones of each machine family the
platform uses. Dated data (`zones.yaml`) with its sources, read at load by rule `gce.machine-type-offered-in-zone`.

Checked 2026-11-23 against stored copies of:
- `gcloud compute regions list` / `machine-types list` output committed daily by
  Cyclenerd/google-cloud-pricing-cost-calculator (tools/regions.csv 2026-01-09, tools/machinetyperegion.csv
  2026-08-17): the 43 regions, and which machine types each region lists;
- skypilot-org/skypilot-catalog catalogs/v8/gcp/vms.csv @ 006059e0 (built from the Compute Engine and TPU
  APIs): the zones of each machine type;
- https://cloud.google.com/tpu/docs/regions-zones (TPU zones; TPU7x in us-central1-c and us-central1-ai1a)
  and https://cloud.google.com/compute/docs/regions-zones/ai-zones (AI zones).
A TPU family's zones are those the docs name and those its API lists. Not checkable offline: what a given
project is offered today (`gcloud compute machine-types list --filter=zone:<zone>`); quotas and stock are
never known ahead.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

import yaml

_DATA = yaml.safe_load((Path(__file__).with_name("zones.yaml")).read_text())
ZONES_CHECKED: date = _DATA["checked"]
REGIONS: dict[str, tuple[str, ...]] = {r: tuple(z) for r, z in _DATA["regions"].items()}
AI_ZONES: dict[str, tuple[str, ...]] = {r: tuple(z) for r, z in _DATA["ai_zones"].items()}
FAMILY_ZONES: dict[str, frozenset[str]] = {f: frozenset(z) for f, z in _DATA["families"].items()}


def zone_exists(zone: str) -> bool:
    return any(zone in zones for zones in (*REGIONS.values(), *AI_ZONES.values()))


def region_of(zone: str) -> str | None:
    for region, zones in (*REGIONS.items(), *AI_ZONES.items()):
        if zone in zones:
            return region
    return None


def zones_offering(machine_type: str) -> frozenset[str] | None:
    """The zones that offer `machine_type` (its family's), or None when the catalogue does not know it."""
    for family in sorted(FAMILY_ZONES, key=len, reverse=True):
        if machine_type == family or (family.endswith("-") and machine_type.startswith(family)):
            return FAMILY_ZONES[family]
    return None
