"""Kueue's wait for an admitted run's pods (waitForPodsReady), set from the starts measured on the queued slices.

From 0.19 Kueue always waits: a run whose pods are not all Ready within the timeout after its admission is evicted
and queued again. Its default, 30 minutes, holds an idle slice that long when a run's pods cannot start, and evicts
a run whose real start is longer (a multi-GB image on a new node, Ray's start). Once every slice Kueue admits onto
has a measured start (`make status` prints each run's, pods_ready_s), the wait is twice the slowest, at least 10
minutes; until then Kueue's own default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.catalogue.controllers import KUEUE_WAIT_FOR_PODS_READY
from infra.config import ConfigError
from infra.constructs.releases import kueue_controller_values
from infra.derive.queues import pods_ready_timeout
from infra.synth.load import load_environment
from tests.helpers import dev_edited

TRAIN = "    machine_type: ct6e-standard-4t\n    capacity:\n      type: on-demand\n"
A3MEGA = "    zone: us-east5-a\n    capacity:\n      type: queued\n"


def _start(seconds: float | str) -> str:
    return f"    queued_start: {{seconds: {seconds}, measured: 2026-12-05, source: 'make status ENV=dev, run r1'}}\n"


def _wait(tmp_path: Path, *edits: tuple[str, str]) -> tuple[dict[str, Any], str]:
    env = load_environment(dev_edited(tmp_path, *edits))
    values = kueue_controller_values(env)
    assert values is not None
    config = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    timeout = pods_ready_timeout(env)
    assert timeout is not None
    return config["waitForPodsReady"], timeout.why


def test_kueue_waits_twice_the_slowest_measured_start_once_every_queued_slice_has_one(tmp_path: Path) -> None:
    wait, why = _wait(tmp_path, (TRAIN, TRAIN + _start(400)), (A3MEGA, A3MEGA + _start(700)))
    kueue = KUEUE_WAIT_FOR_PODS_READY["0.19.2"]
    # 2 x 700 s = 1,400 s, rounded up to the minute: 24 minutes, after a first start and after a failed pod alike.
    assert wait == {**kueue, "timeout": "24m", "recoveryTimeout": "24m"}
    assert why == "2 x the slowest measured start, 700 s on a3mega (2026-12-05), at least 10 minutes"


def test_a_queued_slice_without_a_measured_start_keeps_kueues_default(tmp_path: Path) -> None:
    """A slice whose runs were never measured may need all of Kueue's 30 minutes: one measured slice does not
    shorten the wait of the other."""
    wait, why = _wait(tmp_path, (TRAIN, TRAIN + _start(120)))
    assert wait == KUEUE_WAIT_FOR_PODS_READY["0.19.2"]
    assert why == "Kueue's default: no measured start of a run on a3mega"


@pytest.mark.parametrize(("slowest", "timeout"), [(60, "10m"), (1500, "50m")])
def test_the_wait_is_never_under_ten_minutes_and_grows_past_kueues_default(
    tmp_path: Path, slowest: float, timeout: str
) -> None:
    """A fast start does not make a run's next start on a cold node an eviction; a start slower than 15 minutes
    (a 70B image on a new node) gets more than Kueue's 30, which would evict it on every try."""
    wait, _ = _wait(tmp_path, (TRAIN, TRAIN + _start(slowest)), (A3MEGA, A3MEGA + _start(30)))
    assert (wait["timeout"], wait["recoveryTimeout"]) == (timeout, timeout)


def test_a_measured_start_on_a_slice_no_queue_admits_onto_is_refused(tmp_path: Path) -> None:
    serve = "  serve:\n    accelerator: v6e\n    topology: 4x4\n    capacity: {type: spot}\n"
    path = dev_edited(tmp_path, (serve, serve + _start(300)))
    with pytest.raises(ConfigError) as refused:
        load_environment(path)
    assert (
        "slices.serve.queued_start: 300.0: no Kueue queue admits runs onto this slice, so no run's start on it sets "
        "Kueue's wait; queued slices: train, a3mega"
    ) in str(refused.value)


@pytest.mark.parametrize("seconds", ["0", "-5"])
def test_a_start_of_no_time_is_refused(tmp_path: Path, seconds: str) -> None:
    path = dev_edited(tmp_path, (TRAIN, TRAIN + _start(seconds)))
    with pytest.raises(ConfigError, match=rf"slices\.train\.queued_start\.seconds: {seconds}: Input should be greater"):
        load_environment(path)


def test_the_review_says_how_long_kueue_waits_for_a_runs_pods(tmp_path: Path) -> None:
    from infra.cdk.layout import read_stack
    from infra.review import review_stack
    from infra.review.render import render
    from infra.synth.app import synth

    env = load_environment(dev_edited(tmp_path, (TRAIN, TRAIN + _start(400)), (A3MEGA, A3MEGA + _start(700))))
    synth({"dev": env}, tmp_path / "out")
    said = render(review_stack("platform-dev", read_stack(tmp_path / "out", "platform-dev"), None))
    assert (
        "Kueue evicts an admitted run whose pods are not all Ready 24m after its admission, or 24m after one of them "
        "failed, and queues it again (waitForPodsReady: 2 x the slowest measured start, 700 s on a3mega (2026-12-05), "
        "at least 10 minutes)."
    ) in said, "where the wait comes from, as the release's Configuration says it"


def test_an_environment_without_teams_is_told_kueues_wait_too() -> None:
    """prod has no teams, so no queue table; its runs are evicted all the same."""
    import json

    from infra.review import review_stack
    from infra.review.render import render
    from tests.helpers import REPO

    prod = json.loads((REPO / "tests" / "snapshots" / "platform-prod.json").read_text())
    said = render(review_stack("platform-prod", prod, None))
    assert "## Batch queues" in said and "| queue |" not in said
    assert "Kueue evicts an admitted run whose pods are not all Ready 30m after its admission" in said
    assert "(waitForPodsReady: Kueue's default: no measured start of a run on train, a3mega)" in said
