"""A release an interrupted apply left pending in Helm's records: found from the records, and held at the gate of
`make deploy` with the next step (the local cluster's deploy sets it back itself: tests/test_engine.py)."""

from __future__ import annotations

from typing import Any

from infra.catalogue.helm_records import interrupted_record
from scripts.apply import interrupted_releases


def _records(*statuses: str) -> dict[str, Any]:
    return {
        "items": [
            {"metadata": {"name": f"sh.helm.release.v1.kueue.v{v}", "labels": {"version": str(v), "status": s}}}
            for v, s in enumerate(statuses, start=1)
        ]
    }


def test_the_newest_record_pending_is_an_interrupted_operation_and_an_older_one_is_not() -> None:
    assert interrupted_record(_records("pending-install")) == ("sh.helm.release.v1.kueue.v1", "pending-install")
    assert interrupted_record(_records("deployed", "pending-upgrade")) == (
        "sh.helm.release.v1.kueue.v2",
        "pending-upgrade",
    )
    assert interrupted_record(_records("pending-upgrade", "deployed")) is None
    assert interrupted_record(_records("superseded", "deployed")) is None
    assert interrupted_record({"items": []}) is None


def test_the_deploys_gate_holds_a_pending_release_with_the_command_that_sets_it_back() -> None:
    body = {"resource": {"helm_release": {"kueue_1": {"name": "kueue", "namespace": "kueue-system"}}}}
    pending = {("kueue", "kueue-system"): interrupted_record(_records("deployed", "pending-upgrade"))}
    held = interrupted_releases(body, ["helm_release.kueue_1"], lambda n, ns: pending.get((n, ns)))
    why, confirmable = held["helm_release.kueue_1"]
    assert not confirmable
    assert "release kueue-system/kueue is pending-upgrade" in why
    assert "kubectl delete configmap sh.helm.release.v1.kueue.v2 -n kueue-system" in why
    assert interrupted_releases(body, ["helm_release.kueue_1"], lambda n, ns: None) == {}
