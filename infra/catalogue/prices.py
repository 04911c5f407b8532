"""What a GPU machine costs per hour on Compute Engine, where the platform knows it: the plan review's
"cost per hour if left running" of every group of GPU machines an orchestrator would hold.

Dated third-party data, not Google's price list: SkyPilot's catalogue (skypilot-org/skypilot-catalog
catalogs/v8/gcp/vms.csv @ 006059e0, which SkyPilot builds from the Cloud Billing Catalog API). A machine's
price there is two rows, the machine (vCPUs and memory) and its GPUs; the table below adds them. List prices:
no committed-use discount, and none for flex-start, which Google bills "up to 53%" below on-demand
(https://cloud.google.com/compute/docs/instance-groups/about-resize-requests-mig). A reservation is billed at
the on-demand rate whether or not a VM uses it. Vertex AI training bills its own rates (not here). The figures
were not checked against the Billing Catalog API (no network to it here): the review says where they come
from, and a zone or machine without a row shows no figure rather than a guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

PRICE_SOURCE = "SkyPilot catalogue catalogs/v8/gcp/vms.csv @ 006059e0 (list prices, USD)"


@dataclass(frozen=True)
class MachinePrice:
    """USD per hour of one machine in one zone: (machine row, GPU row) for on-demand and for Spot."""

    on_demand: tuple[float, float]
    spot: tuple[float, float]

    def hourly(self, provisioning: Literal["on-demand", "spot"]) -> float:
        host, gpus = self.on_demand if provisioning == "on-demand" else self.spot
        return round(host + gpus, 5)


# (machine type, zone) -> price. Rows `a3-megagpu-8g,208.0,1872.0,,,,us-east5,us-east5-a,10.65487,2.32627` and
# `,,,H100-MEGA,8,...,us-east5,us-east5-a,35.39149,18.064`.
PRICES: dict[tuple[str, str], MachinePrice] = {
    ("a3-megagpu-8g", "us-east5-a"): MachinePrice(on_demand=(10.65487, 35.39149), spot=(2.32627, 18.064)),
}


def hourly(machine_type: str, zone: str, capacity: str) -> float | None:
    """USD per hour of one machine under a capacity type (flex-start and reservations at the on-demand list
    price), or None where the table has no row."""
    price = PRICES.get((machine_type, zone))
    if price is None:
        return None
    return price.hourly("spot" if capacity == "spot" else "on-demand")
