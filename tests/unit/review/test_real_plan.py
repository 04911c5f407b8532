"""The offline review plans as Terraform does (a replacement makes what reads it unknown; a subnet may only grow in
place), and where the real providers' plan of the same change is at hand, its actions are the review's and the
review names each resource it planned otherwise (infra/review/real_plan.py). The real providers' own plans of these
changes: tests/test_engine.py."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema

from infra.cdk.layout import stack_file
from infra.review import diff, real_plan, write_reviews
from tests.helpers import REPO

SA = "google_service_account.converter"
STACK: dict[str, Any] = {
    "resource": {
        "google_service_account": {"converter": {"account_id": "wi-converter", "project": "p"}},
        "google_project_iam_member": {
            "logs": {"member": "serviceAccount:${google_service_account.converter.email}", "project": "p",
                     "role": "roles/logging.logWriter"},
            "by-name": {"member": "serviceAccount:${google_service_account.converter.account_id}@p", "project": "p",
                        "role": "roles/logging.logWriter"},
        },
        "kubernetes_service_account_v1": {
            "converter": {"metadata": {"name": "converter", "namespace": "ml",
                                       "annotations": {"iam.gke.io/gcp-service-account":
                                                       "${google_service_account.converter.email}"}}},
        },
        "google_compute_subnetwork": {"nodes": {"name": "nodes", "ip_cidr_range": "10.10.0.0/20", "region": "r",
                                                "network": "n"}},
    }
}  # fmt: skip


def _changed(**edits: Any) -> dict[str, Any]:
    after = copy.deepcopy(STACK)
    for path, value in edits.items():
        rtype, name, attribute = path.split("__")
        after["resource"][rtype][name][attribute] = value
    return after


def test_a_replaced_resource_replaces_or_updates_what_reads_its_new_values() -> None:
    """A service account renamed gets a new email: the IAM member that names it by email is replaced (member forces
    it), the Kubernetes account that annotates it is updated in place, and the member built from the account_id it
    is given (known before the apply) changes as that value does."""
    changes = {c.address: c for c in diff(STACK, _changed(google_service_account__converter__account_id="wi-conv"))}
    assert {a: c.action for a, c in changes.items()} == {
        SA: "replace",
        "google_project_iam_member.logs": "replace",
        "google_project_iam_member.by-name": "replace",
        "kubernetes_service_account_v1.converter": "update",
    }
    assert changes["google_project_iam_member.logs"].values == (
        ("member", "${google_service_account.converter.email}", "(known after apply)"),
    )
    assert changes["google_project_iam_member.by-name"].values == (
        ("member", "${google_service_account.converter.account_id}", f"(as {SA}.account_id changes)"),
    )


def test_an_update_in_place_changes_nothing_that_reads_the_resource() -> None:
    changes = diff(STACK, _changed(google_service_account__converter__display_name="the converter"))
    assert [(c.address, c.action) for c in changes] == [(SA, "update")]


def test_a_subnet_range_grown_is_updated_in_place_and_one_shrunk_or_moved_replaces_the_subnet() -> None:
    address = "google_compute_subnetwork.nodes"
    for cidr, action in (("10.10.0.0/19", "update"), ("10.10.0.0/21", "replace"), ("10.11.0.0/20", "replace")):
        (change,) = diff(STACK, _changed(google_compute_subnetwork__nodes__ip_cidr_range=cidr))
        assert (change.address, change.action) == (address, action), cidr


def test_an_attribute_lifecycle_ignore_changes_names_is_no_change() -> None:
    """A VM group's size is left to its autoscaler (ignore_changes): a new size in the configuration plans nothing,
    as Terraform plans it; a change of anything else still shows."""
    group = {"name": "g", "target_size": 0, "lifecycle": {"ignore_changes": ["target_size"]}}
    before = {"resource": {"google_compute_instance_group_manager": {"g": group}}}
    after = copy.deepcopy(before)
    after["resource"]["google_compute_instance_group_manager"]["g"]["target_size"] = 3
    assert diff(before, after) == []
    after["resource"]["google_compute_instance_group_manager"]["g"]["name"] = "g2"
    assert [c.action for c in diff(before, after)] == ["replace"]
    after["resource"]["google_compute_instance_group_manager"]["g"]["lifecycle"]["ignore_changes"] = "all"
    assert diff(before, after) == []


def _plan(*changes: tuple[str, list[str]]) -> dict[str, Any]:
    """A plan as `tofu show -json` writes it, with these (address, actions)."""
    return {
        "format_version": "1.2",
        "resource_changes": [
            {"address": a, "type": a.split(".")[0], "name": a.split(".")[1], "mode": "managed",
             "change": {"actions": actions, "before": {}, "after": {}}}
            for a, actions in changes
        ],
    }  # fmt: skip


def _outdirs(tmp_path: Path, before: dict[str, Any], after: dict[str, Any]) -> tuple[Path, Path]:
    out, base = tmp_path / "cdktf.out", tmp_path / "base"
    for folder, stack in ((out, after), (base, before)):
        (folder / "stacks" / "platform-dev").mkdir(parents=True)
        stack_file(folder, "platform-dev").write_text(json.dumps(stack))
    return out, base


def test_the_review_takes_the_real_plans_actions_and_names_each_resource_it_planned_otherwise(tmp_path: Path) -> None:
    """The offline review plans the display name as an update; the real plan (here: one the providers might make)
    replaces the account and updates a member: the review shows the real plan's actions, and says where and how
    its own differed, in Markdown and in JSON (docs/review.schema.json)."""
    after = _changed(google_service_account__converter__display_name="the converter")
    out, base = _outdirs(tmp_path, STACK, after)
    planned = _plan((SA, ["delete", "create"]), ("kubernetes_service_account_v1.converter", ["update"]))
    real_plan.write(out / "tofu", "platform-dev", planned, after, STACK)

    (review,) = write_reviews(out, base)
    assert [(c.address, c.action) for c in review.changes] == [
        (SA, "replace"),
        ("kubernetes_service_account_v1.converter", "update"),
    ]
    assert review.real_plan == "tofu/platform-dev.plan.json"
    assert [(d.address, d.offline, d.real) for d in review.disagreements] == [
        (SA, "update", "replace"),
        ("kubernetes_service_account_v1.converter", "no change", "update"),
    ]
    markdown = (out / "review" / "dev.md").read_text()
    assert "The actions are OpenTofu's" in markdown
    assert f"| `{SA}` | update | replace |" in markdown
    document = json.loads((out / "review" / "dev.json").read_text())
    jsonschema.validate(document, json.loads((REPO / "docs" / "review.schema.json").read_text()))
    assert document["disagreements"][0] == {"address": SA, "offline": "update", "real": "replace"}


def test_a_real_plan_of_another_change_is_not_read(tmp_path: Path) -> None:
    """A plan written for an earlier version of the change (its subject is another stack) is left unread: the
    review's actions are its own, and it says how to get the real plan's."""
    after = _changed(google_service_account__converter__display_name="the converter")
    out, base = _outdirs(tmp_path, STACK, after)
    real_plan.write(out / "tofu", "platform-dev", _plan((SA, ["delete", "create"])), STACK, STACK)

    (review,) = write_reviews(out, base)
    assert [(c.address, c.action) for c in review.changes] == [(SA, "update")]
    assert review.real_plan is None and review.disagreements == []
    assert "The actions are the offline review's" in (out / "review" / "dev.md").read_text()
