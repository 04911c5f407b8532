"""A `confirm:` entry is spent by the apply that carries out its change, not by an earlier one: the documented way to
confirm a loss of data (the entry merged first, in a pull request of its own, then the change) left the entry spent
by the first pull request's own apply, and the change blocked for good (review of #54, item 2)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from infra.config.delivery import APPLIED_CONFIRMATIONS, Confirmation, carried_out, config_sha256, record_carried_out
from infra.delivery.confirmations import spent
from infra.synth.app import synth
from infra.synth.load import load_named

POOL = "google_container_node_pool.slice-train"
BEFORE: dict[str, Any] = {
    "resource": {"google_container_node_pool": {"slice-train": {"name": "train", "node_locations": ["us-east5-b"]}}},
    "output": {APPLIED_CONFIRMATIONS: {"value": []}},
}
AFTER = copy.deepcopy(BEFORE)
AFTER["resource"]["google_container_node_pool"]["slice-train"]["node_locations"] = ["us-east5-a"]
ENTRY = Confirmation(address=POOL, config_sha256=config_sha256(AFTER, POOL), reason="the slice moves zones")


def _prior(stack: dict[str, Any]) -> dict[str, Any]:
    """A plan whose prior state is what an apply of `stack` left (its outputs)."""
    return {"prior_state": {"values": {"outputs": {k: dict(v) for k, v in stack["output"].items()}}}}


def spent_lines(plan: dict[str, Any]) -> list[str]:
    """What the gate at the apply says of the entry against this plan: nothing (it confirms), or spent."""
    left, lines = spent(SimpleNamespace(name="dev", confirm=[ENTRY]), [POOL], plan)  # type: ignore[arg-type]
    assert left == ([] if lines else [POOL])
    return [line.split(" (the state")[0] for line in lines]


def test_an_entry_merged_before_its_change_is_carried_out_by_the_changes_apply_not_its_own() -> None:
    first = copy.deepcopy(BEFORE)  # pull request 1: the entry alone; the pool as it is
    assert record_carried_out(first, [ENTRY]) is False and first["output"][APPLIED_CONFIRMATIONS]["value"] == []
    # Pull request 2 brings the change: the entry is not spent (the first apply did not carry it out) ...
    assert spent_lines(_prior(first)) == []
    second = copy.deepcopy(AFTER)
    assert record_carried_out(second, [ENTRY]) is True
    assert second["output"][APPLIED_CONFIRMATIONS]["value"] == [ENTRY.key]
    # ... and once that apply is done, the same configuration replaced again (drift) is another change.
    assert spent_lines(_prior(second)) == [f"dev.yaml: confirm: {POOL}: carried out by an earlier apply"]


def test_only_entries_written_for_the_stacks_configuration_are_carried_out() -> None:
    other = Confirmation(address=POOL, config_sha256="0" * 64, reason="another change")
    gone = Confirmation(address="google_storage_bucket.old", config_sha256="absent", reason="removed")
    assert carried_out([ENTRY, other, gone], AFTER) == sorted([ENTRY.key, gone.key])
    assert carried_out([ENTRY, other], BEFORE) == []


def test_the_synthesized_stack_records_the_entries_its_apply_carries_out(tmp_path: Path) -> None:
    """Through the real synthesis: dev with one entry for the configuration its stack has and one ahead of it."""
    dev = load_named("dev")
    bare = tmp_path / "bare"
    synth({"dev": dev}, bare)
    stack = json.loads((bare / "stacks" / "platform-dev" / "cdk.tf.json").read_text())
    (name,) = [n for n in stack["resource"]["google_storage_bucket"] if n.startswith("bucket-datasets")]
    address = f"google_storage_bucket.{name}"
    now = Confirmation(address=address, config_sha256=config_sha256(stack, address), reason="kept as it is")
    ahead = Confirmation(address=address, config_sha256="1" * 64, reason="the change to come")
    synth({"dev": dev.model_copy(update={"confirm": [now, ahead]})}, tmp_path / "out")
    written = json.loads((tmp_path / "out" / "stacks" / "platform-dev" / "cdk.tf.json").read_text())
    assert written["output"][APPLIED_CONFIRMATIONS]["value"] == [now.key]
    assert stack["output"][APPLIED_CONFIRMATIONS]["value"] == []
