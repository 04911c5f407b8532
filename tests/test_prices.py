"""The price table: dated, read from its pinned rows as documented, every pool of every environment priced, a
missing price said with its reason and never 0."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest

from infra.catalogue import prices
from infra.review import pool_costs, stack_pools


def test_the_price_table_is_not_older_than_its_stated_age() -> None:
    """Measured against today's date: prices move, and a table read long ago misleads the review."""
    age = (date.today() - prices.PRICES_CHECKED).days
    assert age <= prices.MAX_AGE_DAYS, (
        f"infra/catalogue/prices.py: the price rows were read on {prices.PRICES_CHECKED} ({age} days ago; at most "
        f"{prices.MAX_AGE_DAYS} allowed). Refresh them: take the newest commit of {prices.PRICE_REPOSITORY}, copy "
        f"the rows of {prices.PRICE_PATH} for every machine and region in _ROWS (and any region an environment "
        "now uses) verbatim into _ROWS, set PRICE_COMMIT to that commit and PRICES_CHECKED to the day you read "
        "them, then regenerate docs/review-example.md (python -m scripts.review_example)"
    )
    assert age >= 0, f"PRICES_CHECKED {prices.PRICES_CHECKED} is in the future"


def test_every_node_pool_of_every_environment_has_a_price(stacks: dict[str, dict[str, Any]]) -> None:
    """Every region and machine the environments use is in the table (dev's 144 TPU chips included)."""
    for env, stack in stacks.items():
        costs = pool_costs(stack_pools(stack))
        assert costs, env
        missing = {c.pool: c.price.missing for c in costs.values() if c.price.usd_per_hour is None}
        assert missing == {}, f"{env}: {missing}"


def test_a_tpu_node_is_its_chips_times_the_per_chip_price_of_its_generation() -> None:
    # tpu-v6e-4 in us-east5: 10.8 on demand, 4.86 spot, for 4 chips.
    assert prices.node_price("ct6e-standard-4t", "us-east5-b", "on-demand").usd_per_hour == 10.8
    assert prices.node_price("ct6e-standard-8t", "us-east5-b", "spot").usd_per_hour == pytest.approx(2 * 4.86)
    assert prices.node_price("ct6e-standard-1t", "us-east5-b", "on-demand").usd_per_hour == pytest.approx(2.7)
    # tpu-v5litepod-4: 4.8 and 2.4 for 4 chips.
    assert prices.node_price("ct5lp-hightpu-4t", "us-east5", "spot").usd_per_hour == 2.4
    # v5p names count TensorCores: tpu-v5p-11776 is 5,888 chips, 24,729.6 USD: 4.2 per chip, 16.8 per 4-chip VM.
    assert prices.node_price("ct5p-hightpu-4t", "us-east5-a", "on-demand").usd_per_hour == pytest.approx(16.8)


def test_a_gpu_node_is_its_machine_row_plus_its_gpu_row() -> None:
    one = prices.node_price("a3-megagpu-8g", "us-central1-a", "on-demand")
    assert one.usd_per_hour == pytest.approx(9.46006 + 82.75421) and one.note == ""
    assert prices.node_price("a3-megagpu-8g", "us-east5-a", "spot").usd_per_hour == pytest.approx(2.32627 + 18.064)


def test_a_gpu_row_far_below_its_other_regions_is_priced_at_the_highest_and_said() -> None:
    """The pinned file's A3 Mega GPUs in us-east5 cost 35.39 on demand against 82.75 in us-central1 (before: the
    review priced dev's and prod's A3 Mega nodes at 46.05 USD/hour and called it an upper bound)."""
    mega = prices.node_price("a3-megagpu-8g", "us-east5-a", "on-demand")
    assert mega.usd_per_hour == pytest.approx(10.65487 + 82.75421)
    assert mega.note.startswith("H100-MEGA x8 in us-east5 at 82.7542 (us-central1): the source's us-east5 row, 35.3915")
    assert prices.node_price("a3-megagpu-8g", "us-east5-a", "flex-start").usd_per_hour == mega.usd_per_hour
    # A CPU or TPU row is never compared: its regions' prices are the file's own.
    assert prices.node_price("ct6e-standard-4t", "us-east5-b", "on-demand").note == ""


def test_each_capacity_type_is_priced_from_its_column() -> None:
    on_demand = prices.node_price("ct6e-standard-4t", "us-east5-b", "on-demand").usd_per_hour
    for capacity in ("flex-start", "queued", "reservation"):
        priced = prices.node_price("ct6e-standard-4t", "us-east5-b", capacity)
        assert priced.usd_per_hour == on_demand and "on-demand" in priced.basis, capacity
    assert prices.node_price("ct6e-standard-4t", "us-east5-b", "spot").usd_per_hour == 4.86
    odd = prices.node_price("ct6e-standard-4t", "us-east5-b", "preemptible")
    assert odd.usd_per_hour is None and "'preemptible'" in odd.missing


def test_a_missing_price_says_which_and_why_and_is_never_zero() -> None:
    ironwood = prices.node_price("tpu7x-standard-4t", "us-central1-c", "on-demand")
    assert ironwood.usd_per_hour is None and "TPU7x" in ironwood.missing
    elsewhere = prices.node_price("ct6e-standard-4t", "europe-west4-a", "spot")
    assert elsewhere.usd_per_hour is None
    assert "tpu-v6e in europe-west4" in elsewhere.missing and "us-east5" in elsewhere.missing
    unknown = prices.node_price("n2-standard-4", "us-east5-a", "on-demand")
    assert unknown.usd_per_hour is None and "n2-standard-4" in unknown.missing


def test_skypilot_placeholders_and_blanks_are_no_price() -> None:
    """SkyPilot writes 700.0 (tpu-v6e-1 in asia-east1) and 0.0 (a4-highgpu-8g) where it has no price."""
    rows = prices._read(
        "InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice\n"
        ",,,tpu-v6e-1,1,tpu-v6e-1,asia-east1,asia-east1-c,700.0,700.0\n"
        "a4-highgpu-8g,224.0,3968.0,,,,us-east1,us-east1-b,0.0,0.0\n"
        ",,,tpu-v3-8,1,tpu-v3-8,us-east1,us-east1-d,8.0,\n"
    )
    assert rows[("tpu-v6e-1", "asia-east1")] == prices.Row(None, None)
    assert rows[("a4-highgpu-8g", "us-east1")] == prices.Row(None, None)
    assert rows[("tpu-v3-8", "us-east1")] == prices.Row(8.0, None)


def test_two_prices_for_one_machine_in_one_region_are_refused() -> None:
    with pytest.raises(prices.PriceTableError, match="two prices for e2-standard-8 in us-east5"):
        prices._read(
            "InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,"
            "SpotPrice\n"
            "e2-standard-8,8.0,32.0,,,,us-east5,us-east5-a,0.26805,0.06054\n"
            "e2-standard-8,8.0,32.0,,,,us-east5,us-east5-b,0.3,0.06054\n"
        )
    with pytest.raises(prices.PriceTableError, match="'n/a' is not a number"):
        prices._read(
            "InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,"
            "SpotPrice\n"
            "e2-standard-8,8.0,32.0,,,,us-east5,us-east5-a,n/a,0.06054\n"
        )


def test_the_table_names_its_source_commit_and_day() -> None:
    assert len(prices.PRICE_COMMIT) == 40
    assert prices.PRICE_COMMIT[:8] in prices.PRICE_SOURCE
    assert prices.PRICES_CHECKED.isoformat() in prices.PRICE_SOURCE
    assert prices.HOURS_PER_MONTH == 730
