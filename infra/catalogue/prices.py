"""What a node costs per hour on Google Cloud, where the platform knows it: the plan review's cost of every node
pool (per hour and per month, at its fewest and its most nodes) and of every group of GPU machines an
orchestrator would hold.

Dated third-party data, not Google's price list: rows of SkyPilot's catalogue (skypilot-org/skypilot-catalog
catalogs/v8/gcp/vms.csv at the commit below, which SkyPilot builds from the Cloud Billing Catalog API), copied
verbatim into `_ROWS` for the machines and regions the environments use. List prices in USD: no
committed-use or sustained-use discount, no GKE cluster fee, no disks or network.

How a node's price is read from the rows:
- a CPU machine: its machine row;
- a GPU machine: its machine row (vCPUs and memory) plus its GPUs' row (`H100-MEGA`, 8 for a3-megagpu-8g);
- a TPU machine: the chips it carries times the price per chip of its generation in the region, from a slice
  row (`tpu-v6e-4` is 4 chips, `tpu-v5litepod-4` 4, `tpu-v5p-8` 4: v5p counts TensorCores). The TPU VM's host
  is in that price (Cloud TPU bills per chip-hour, the VM included); SkyPilot's slice prices are linear in the
  chips in every row of the pinned file, so one row per generation and region is enough.

Provisioning, as the review prices it:
- on-demand: the Price column; spot: the SpotPrice column;
- flex-start and queued provisioning (the Dynamic Workload Scheduler): the on-demand price, an upper bound.
  Google bills DWS capacity at its own, lower rates ("up to 53%" below on-demand for GPUs,
  https://cloud.google.com/compute/docs/instance-groups/about-resize-requests-mig); the pinned source has no
  column for them;
- a reservation: the on-demand rate, which Google bills for the reserved capacity whether or not a node uses it
  (https://cloud.google.com/compute/docs/instances/reservations-overview); a committed-use discount on it is the
  account's, not here.

A price the rows do not give is missing, never 0: `node_price` says why. SkyPilot writes 700.0 (and 0.0 for
a4) where it has no price; those are refused as prices, not used. TPU7x (Ironwood) has no row in the pinned
file. Not checked against the Billing Catalog API (no network to it here): refresh the rows and the date
together (`PRICES_CHECKED`), which tests/test_prices.py holds to be at most `MAX_AGE_DAYS` old.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from datetime import date

from infra.catalogue.accelerators import accelerator_for_machine

PRICE_REPOSITORY = "skypilot-org/skypilot-catalog"
PRICE_PATH = "catalogs/v8/gcp/vms.csv"
PRICE_COMMIT = "006059e0f18acb1341e22a27751e9f80df6ba92f"
# The day the rows below were read from the pinned commit; the review prints it and the test ages it.
PRICES_CHECKED = date(2026, 11, 26)
MAX_AGE_DAYS = 180
# A month of a node left running, as Google's pricing calculator counts it.
HOURS_PER_MONTH = 730
PRICE_SOURCE = (
    f"SkyPilot catalogue {PRICE_PATH} @ {PRICE_COMMIT[:8]} (list prices in USD, read {PRICES_CHECKED.isoformat()})"
)

# Verbatim rows of the pinned file: one zone per region (the file's zones of a region carry one price).
_ROWS = """\
InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice
a3-highgpu-8g,208.0,1872.0,,,,us-central1,us-central1-a,9.46006,2.88933
a3-highgpu-8g,208.0,1872.0,,,,us-east5,us-east5-a,10.65487,2.32627
a3-megagpu-8g,208.0,1872.0,,,,us-central1,us-central1-a,9.46006,2.88933
a3-megagpu-8g,208.0,1872.0,,,,us-east5,us-east5-a,10.65487,2.32627
c4-highmem-288,288.0,2232.0,,,,us-central1,us-central1-a,18.76882,8.93477
c4-highmem-288,288.0,2232.0,,,,us-east5,us-east5-a,18.76882,8.55108
e2-standard-8,8.0,32.0,,,,us-central1,us-central1-a,0.26805,0.11758
e2-standard-8,8.0,32.0,,,,us-east5,us-east5-a,0.26805,0.06054
,,,H100,8,{'Gpus': [{'MemoryInfo': {'SizeInMiB': 81920}}]},us-central1,us-central1-a,33.60609,23.9408
,,,H100,8,{'Gpus': [{'MemoryInfo': {'SizeInMiB': 81920}}]},us-east5,us-east5-a,88.2708,19.2648
,,,H100-MEGA,8,{'Gpus': [{'MemoryInfo': {'SizeInMiB': 81920}}]},us-central1,us-central1-a,82.75421,25.2808
,,,H100-MEGA,8,{'Gpus': [{'MemoryInfo': {'SizeInMiB': 81920}}]},us-east5,us-east5-a,35.39149,18.064
,,,tpu-v5litepod-4,1,tpu-v5litepod-4,us-central1,us-central1-a,4.8,0.9797
,,,tpu-v5litepod-4,1,tpu-v5litepod-4,us-east5,us-east5-b,4.8,2.4
,,,tpu-v5p-11776,1,tpu-v5p-11776,us-central1,us-central1-a,24729.6,4920.60749
,,,tpu-v5p-11776,1,tpu-v5p-11776,us-east5,us-east5-a,24729.6,9891.84
,,,tpu-v6e-4,1,tpu-v6e-4,us-central1,us-central1-a,10.8,2.17683
,,,tpu-v6e-4,1,tpu-v6e-4,us-east5,us-east5-b,10.8,4.86
"""

# What SkyPilot writes where it has no price (tpu-v6e-1 in asia-east1: 700.0; a4-highgpu-8g: 0.0).
PLACEHOLDER_PRICES = frozenset({700.0, 0.0})

# A GPU row whose on-demand price is below this share of the same GPUs' highest row among the copied regions is
# taken for a catalogue anomaly, not a list price: the pinned file's H100-MEGA x8 in us-east5 is 35.39149 against
# 82.75421 in us-central1 (and 82.75424 in us-east4), the value the file repeats for several other regions, while
# A3 High costs more than A3 Mega there. Such a row is priced at the highest, and the review says so (an upper
# bound, rather than a price about 45 USD/node-hour low).
SUSPECT_BELOW = 0.5

# The GPUs' row of each GPU machine type: (AcceleratorName, AcceleratorCount).
GPU_ROWS: dict[str, tuple[str, int]] = {
    "a3-highgpu-8g": ("H100", 8),
    "a3-megagpu-8g": ("H100-MEGA", 8),
}

# Capacity types as the environments name them (infra/config), and the column each is priced from.
ON_DEMAND_PRICED = ("on-demand", "flex-start", "queued", "reservation")
CAPACITY_BASIS = {
    "on-demand": "on-demand",
    "spot": "spot",
    "flex-start": "flex-start, at on-demand (upper bound)",
    "queued": "queued (DWS), at on-demand (upper bound)",
    "reservation": "reservation, at on-demand",
}

# Generations with no row in the pinned file, and why.
NO_LIST_PRICE = {
    "tpu7x": "TPU7x (Ironwood) has no row in the pinned SkyPilot catalogue (no public per-chip list price in it)",
}


class PriceTableError(ValueError):
    """A row of `_ROWS` this module cannot read."""


@dataclass(frozen=True)
class Row:
    """One row of the pinned file: on-demand and spot USD per hour (None: no price there)."""

    price: float | None
    spot: float | None


def _money(text: str, where: str) -> float | None:
    if not text:
        return None
    try:
        value = float(text)
    except ValueError as err:
        raise PriceTableError(f"infra/catalogue/prices.py _ROWS {where}: {text!r} is not a number") from err
    return None if value in PLACEHOLDER_PRICES else value


def _read(rows: str) -> dict[tuple[str, str], Row]:
    """Rows by (machine type, GPU name and count, or TPU slice name; region)."""
    table: dict[tuple[str, str], Row] = {}
    for line in csv.DictReader(io.StringIO(rows)):
        if line["InstanceType"]:
            key = line["InstanceType"]
        elif line["AcceleratorName"].startswith("tpu-"):
            key = line["AcceleratorName"]
        else:
            key = f"{line['AcceleratorName']} x{line['AcceleratorCount']}"
        where = f"{key} {line['AvailabilityZone']}"
        row = Row(_money(line["Price"], where), _money(line["SpotPrice"], where))
        if (key, line["Region"]) in table and table[(key, line["Region"])] != row:
            raise PriceTableError(f"infra/catalogue/prices.py _ROWS: two prices for {key} in {line['Region']}")
        table[(key, line["Region"])] = row
    return table


ROWS = _read(_ROWS)
REGIONS = frozenset(region for _, region in ROWS)


def region_of(location: str) -> str:
    """The region of a zone (`us-east5-b`) or a region itself (`us-east5`)."""
    parts = location.split("-")
    return "-".join(parts[:2]) if len(parts) > 2 else location


def _tpu_chip_price(prefix: str, region: str) -> Row | None:
    """USD per chip-hour of a TPU generation in a region, from its slice row (None: no row)."""
    for (key, row_region), row in ROWS.items():
        if row_region != region or not key.startswith(f"tpu-{prefix}-"):
            continue
        cores = int(key.rsplit("-", 1)[1])
        chips = cores // 2 if prefix == "v5p" else cores  # v5p names count TensorCores, two per chip
        return Row(_times(row.price, 1 / chips), _times(row.spot, 1 / chips))
    return None


@dataclass(frozen=True)
class NodePrice:
    """USD per hour of one node under a capacity type, what it is priced as, and why there is none."""

    usd_per_hour: float | None
    basis: str
    missing: str = ""
    # Where the price is not the row's own (a catalogue anomaly priced at the highest region's row), why.
    note: str = ""


def node_price(machine_type: str, location: str, capacity: str) -> NodePrice:
    """One node of `machine_type` in `location` (zone or region) under `capacity` (the environment's capacity
    type); a missing price names the machine, region and reason."""
    region = region_of(location)
    basis = CAPACITY_BASIS.get(capacity, capacity)
    if capacity not in CAPACITY_BASIS:
        return NodePrice(None, capacity, f"capacity type {capacity!r} has no price column")
    found = accelerator_for_machine(machine_type)
    parts: list[tuple[Row | None, str]]
    if found is not None and found[0].kind == "tpu":
        acc, shape = found
        if acc.name in NO_LIST_PRICE:
            return NodePrice(None, basis, NO_LIST_PRICE[acc.name])
        per_chip = _tpu_chip_price(acc.slice_prefix, region)
        node = (
            None if per_chip is None else Row(_times(per_chip.price, shape.chips), _times(per_chip.spot, shape.chips))
        )
        parts = [(node, f"tpu-{acc.slice_prefix}")]
    else:
        parts = [(ROWS.get((machine_type, region)), machine_type)]
        if machine_type in GPU_ROWS:
            name, count = GPU_ROWS[machine_type]
            parts.append((ROWS.get((f"{name} x{count}", region)), f"{name} x{count}"))
        elif found is not None:
            return NodePrice(None, basis, f"{machine_type}: no GPU row is named for it (prices.GPU_ROWS)")
    total = 0.0
    notes: list[str] = []
    for row, what in parts:
        if row is None:
            return NodePrice(
                None,
                basis,
                f"no row for {what} in {region} in the table (rows are copied for {', '.join(sorted(REGIONS))})",
            )
        value = row.spot if capacity == "spot" else row.price
        if value is None:
            column = "SpotPrice" if capacity == "spot" else "Price"
            return NodePrice(None, basis, f"the pinned file gives {what} in {region} no {column}")
        gpus = machine_type in GPU_ROWS and what != machine_type  # the GPUs' row, not the machine's
        highest = _highest_price(what) if gpus and capacity != "spot" else None
        if highest is not None and value < SUSPECT_BELOW * highest[0]:
            notes.append(
                f"{what} in {region} at {highest[0]:g} ({highest[1]}): the source's {region} row, {value:g}, is below "
                f"half of it, a catalogue anomaly"
            )
            value = highest[0]
        total += value
    return NodePrice(round(total, 5), basis, note="; ".join(notes))


def _highest_price(key: str) -> tuple[float, str] | None:
    """The highest on-demand price of a row among the copied regions, and its region."""
    found = [(row.price, region) for (k, region), row in ROWS.items() if k == key and row.price is not None]
    return max(found) if found else None


def _times(value: float | None, n: float) -> float | None:
    return None if value is None else value * n


def hourly(machine_type: str, zone: str, capacity: str) -> float | None:
    """USD per hour of one machine under a capacity type (flex-start, queued and reservations at the on-demand
    list price), or None where the table has no price."""
    return node_price(machine_type, zone, capacity).usd_per_hour
