"""Where Cloud Storage keeps a bucket: its multi-regions, predefined dual-regions and regions.

Checked 2026-11-26 against https://cloud.google.com/storage/docs/locations (multi-regions ASIA, EU, US;
predefined dual-regions ASIA1, EUR4, EUR5, EUR7, EUR8, NAM4; a region is any Google Cloud region, the same
names as Compute Engine's, infra/catalogue/zones.yaml). Locations are case-insensitive; Cloud Storage reports
them in upper case. Configurable dual-regions (two regions of one continent) are not taken here.
"""

from __future__ import annotations

from infra.catalogue.zones import REGIONS

CHECKED = "2026-11-26"
SOURCE = "https://cloud.google.com/storage/docs/locations"
MULTI_REGIONS = ("ASIA", "EU", "US")
DUAL_REGIONS = ("ASIA1", "EUR4", "EUR5", "EUR7", "EUR8", "NAM4")


def location_problem(location: str) -> str | None:
    """What is wrong with a bucket location, or None."""
    if location.upper() in MULTI_REGIONS or location.upper() in DUAL_REGIONS or location.lower() in REGIONS:
        return None
    return (
        f"not a Cloud Storage location: a region (like us-east5), a multi-region ({', '.join(MULTI_REGIONS)}) or "
        f"a predefined dual-region ({', '.join(DUAL_REGIONS)})"
    )
