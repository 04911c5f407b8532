"""A `confirm:` entry is spent by the apply that carries out its change, not by an earlier one: the documented way to
confirm a loss of data (the entry merged first, in a pull request of its own, then the change) left the entry spent
by the first pull request's own apply, and the change blocked for good (review of #54, item 2)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from infra.cdk.layout import read_stack
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
    stack = read_stack(bare, "platform-dev")
    (name,) = [n for n in stack["resource"]["google_storage_bucket"] if n.startswith("bucket-datasets")]
    address = f"google_storage_bucket.{name}"
    now = Confirmation(address=address, config_sha256=config_sha256(stack, address), reason="kept as it is")
    ahead = Confirmation(address=address, config_sha256="1" * 64, reason="the change to come")
    synth({"dev": dev.model_copy(update={"confirm": [now, ahead]})}, tmp_path / "out")
    written = read_stack(tmp_path / "out", "platform-dev")
    assert written["output"][APPLIED_CONFIRMATIONS]["value"] == [now.key]
    assert stack["output"][APPLIED_CONFIRMATIONS]["value"] == []


def test_an_entry_the_next_apply_would_forget_is_refused_until_it_is_removed() -> None:
    """A bucket's deletion confirmed and applied (the state records `<bucket>@absent`); a later pull request
    re-creates it with the entry still in the file. That apply would record nothing for it, and a third pull request
    deleting the bucket again would be confirmed by the first one's entry: the gate refuses the second apply until
    the entry is removed."""
    from infra.delivery.confirmations import forgotten

    bucket = "google_storage_bucket.models"
    gone = Confirmation(address=bucket, config_sha256="absent", reason="the old models bucket goes")
    deleted: dict[str, Any] = {"resource": {}, "output": {APPLIED_CONFIRMATIONS: {"value": []}}}
    assert record_carried_out(deleted, [gone]) is True
    again = {"resource": {"google_storage_bucket": {"models": {"name": "models"}}}}
    env = SimpleNamespace(name="dev", confirm=[gone])
    (line,) = forgotten(env, again, _prior(deleted))  # type: ignore[arg-type]
    assert line.startswith(f"dev.yaml: confirm: {bucket}: carried out by an earlier apply") and "remove it" in line
    # Still deleted (the entry matches, and is only spent), removed from the file, or never applied: nothing to say.
    assert forgotten(env, deleted, _prior(deleted)) == []  # type: ignore[arg-type]
    assert forgotten(SimpleNamespace(name="dev", confirm=[]), again, _prior(deleted)) == []  # type: ignore[arg-type]
    assert forgotten(env, again, {}) == []  # type: ignore[arg-type]


def test_the_gate_at_the_apply_blocks_while_such_an_entry_is_in_the_file(
    tmp_path: Path, monkeypatch: Any, capsys: Any, shown: dict[str, Any]
) -> None:
    """scripts/apply.py plan_and_gate, with Terraform's plan showing the state's record: blocked, saying which entry
    to remove; without the record, the same stack goes through."""
    from infra.review import BLOCKED
    from scripts import apply

    bucket = "google_storage_bucket.models"
    gone = Confirmation(address=bucket, config_sha256="absent", reason="the old models bucket goes")
    stack = {"resource": {"google_storage_bucket": {"models": {"name": "models"}}}, "output": {}}
    (tmp_path / "cdk.tf.json").write_text(json.dumps(stack))
    monkeypatch.setattr(apply, "cluster_holds", lambda *a: {})
    monkeypatch.setattr(apply, "slurm_blueprint", lambda env: None)
    env = SimpleNamespace(name="dev", confirm=[gone])
    assert apply.plan_and_gate(tmp_path, "platform-dev", [], env=env)[0] == 0  # type: ignore[arg-type]
    shown["prior_state"] = {"values": {"outputs": {APPLIED_CONFIRMATIONS: {"value": [gone.key]}}}}
    assert apply.plan_and_gate(tmp_path, "platform-dev", [], env=env)[0] == BLOCKED  # type: ignore[arg-type]
    assert f"BLOCKING: dev.yaml: confirm: {bucket}: carried out by an earlier apply" in capsys.readouterr().err


def _pool_update(before_zones: list[str]) -> dict[str, Any]:
    """A real plan's update of the train pool's zones, from `before_zones` in the state to us-east5-a."""
    config = [{"machine_type": "ct6e-standard-4t"}]
    before = {"name": "train", "node_locations": before_zones, "node_config": config}
    after = {"name": "train", "node_locations": ["us-east5-a"], "node_config": config}
    change = {"actions": ["update"], "before": before, "after": after}
    return {"address": POOL, "type": "google_container_node_pool", "change": change}


def test_an_entry_confirms_the_change_from_the_values_it_was_written_for_and_not_one_from_a_drifted_state(
    tmp_path: Path, monkeypatch: Any, capsys: Any, shown: dict[str, Any]
) -> None:
    """The gate's refusal prints the entry with the gated values before the change; the apply holds the plan to
    them. The pool moved by hand in between (the state's zones are not those the author read), the same
    configuration is another change: the entry confirms nothing, and the apply says why (review of #54, item 2)."""
    import yaml

    from infra.review import BLOCKED
    from scripts import apply

    (tmp_path / "cdk.tf.json").write_text(json.dumps(AFTER))
    monkeypatch.setattr(apply, "cluster_holds", lambda *a: {})
    monkeypatch.setattr(apply, "slurm_blueprint", lambda env: None)
    shown["resource_changes"] = [_pool_update(["us-east5-b"])]
    env = SimpleNamespace(name="dev", confirm=[])
    assert apply.plan_and_gate(tmp_path, "platform-dev", [], env=env)[0] == BLOCKED  # type: ignore[arg-type]
    said = capsys.readouterr().err
    printed = yaml.safe_load(said[said.index("confirm:\n") :].split("\n    reason:")[0] + "\n    reason: moved")
    (written,) = printed["confirm"]
    assert written["before"] == {"node_locations": "us-east5-b"}, said
    entry = Confirmation(**written)
    env = SimpleNamespace(name="dev", confirm=[entry])
    assert apply.plan_and_gate(tmp_path, "platform-dev", [], env=env)[0] == 0  # type: ignore[arg-type]
    capsys.readouterr()
    shown["resource_changes"] = [_pool_update(["us-east5-c"])]  # moved by hand since
    assert apply.plan_and_gate(tmp_path, "platform-dev", [], env=env)[0] == BLOCKED  # type: ignore[arg-type]
    said = capsys.readouterr().err
    assert (
        f"dev.yaml: confirm: {POOL}: written for the change from node_locations 'us-east5-b'; the plan changes "
        "it from node_locations 'us-east5-c' (changed outside Terraform since?): it confirms nothing" in said
    ), said


def test_a_replacement_binds_its_entry_to_the_values_of_the_paths_that_force_it() -> None:
    """Of a replacement, only what forces it: the attributes the provider computes anew (the id, the instance group
    URLs) differ too, but bind nothing."""
    from infra.review import review_plan

    before = {"name": "train", "id": "p/1", "node_config": [{"machine_type": "ct6e-standard-4t", "disk_size_gb": 100}]}
    after = {"name": "train", "id": None, "node_config": [{"machine_type": "ct6e-standard-8t", "disk_size_gb": 100}]}
    change = {"actions": ["delete", "create"], "before": before, "after": after}
    change["replace_paths"] = [["node_config", 0, "machine_type"]]
    plan = {"format_version": "1.2", "resource_changes": [{"address": POOL, "type": "google_container_node_pool"}]}
    plan["resource_changes"][0]["change"] = change
    (replaced,) = review_plan("platform-dev", plan).changes
    assert replaced.action == "replace" and replaced.before_values == {"node_config.machine_type": "ct6e-standard-4t"}
