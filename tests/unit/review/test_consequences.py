"""The gate judges a change by its consequence: the crafted plans of review 9 (../shared/research/review-9-10.md,
"Gate attacks": 17 of 39 stopped before), more of each class, and controls that must pass.

Each plan is prod's own resource bodies in `terraform show -json` shape (format 1.2, nested blocks as one-element
lists, a replacement with its replace_paths), fed to `review_plan`, the function the apply's gate calls
(scripts/apply.py plan_and_gate); "stopped" means it blocks the apply.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from infra.catalogue.consequences import CAPACITY_LOST, DATA_LOST, DEPENDENCY_CUT, SECURITY_WEAKENED
from infra.review import PlanFormatError, diff, review_plan, review_stack
from tests.helpers import REPO

# Attributes whose value is a map, not a nested block: they stay objects in a plan's JSON.
_MAPS = {"labels", "annotations", "match_labels", "data", "binary_data", "parameters", "resource_labels", "metadata_"}


def plan_shape(value: Any, key: str = "") -> Any:
    """A synthesized body as `terraform show -json` writes it: each nested block a one-element list."""
    if isinstance(value, dict):
        inner = {k: plan_shape(v, k) for k, v in value.items() if k not in ("//", "depends_on", "lifecycle")}
        return inner if key in _MAPS or not key else [inner]
    if isinstance(value, list):
        return [plan_shape(v) for v in value]  # a list of blocks is the list itself
    return value


def _find(stack: dict[str, Any], rtype: str, prefix: str) -> tuple[str, dict[str, Any]]:
    (name,) = [n for n in stack["resource"][rtype] if n.startswith(prefix)]
    return f"{rtype}.{name}", stack["resource"][rtype][name]


def _entry(address: str, actions: list[str], before: Any, after: Any, replace: list[str] = ()) -> dict[str, Any]:
    change = {"actions": actions, "before": before, "after": after}
    if replace:
        change["replace_paths"] = [[p] for p in replace]
    return {"address": address, "type": address.split(".", 1)[0], "change": change}


Craft = Callable[[dict[str, Any]], dict[str, Any]]


def _update(rtype: str, prefix: str, mutate: Callable[[dict[str, Any]], Any]) -> Craft:
    def craft(stack: dict[str, Any]) -> dict[str, Any]:
        address, body = _find(stack, rtype, prefix)
        after = copy.deepcopy(body)
        mutate(after)
        return _entry(address, ["update"], plan_shape(body), plan_shape(after))

    return craft


def _delete(rtype: str, prefix: str, actions: tuple[str, ...] = ("delete",), replace: tuple[str, ...] = ()) -> Craft:
    def craft(stack: dict[str, Any]) -> dict[str, Any]:
        address, body = _find(stack, rtype, prefix)
        after = None if actions == ("delete",) else plan_shape(body)
        return _entry(address, list(actions), plan_shape(body), after, list(replace))

    return craft


def _create(address: str, body: dict[str, Any]) -> Craft:
    return lambda stack: _entry(address, ["create"], None, plan_shape(body))


def _object(rtype: str, body: dict[str, Any], actions: list[str], after: dict[str, Any] | None = None) -> Craft:
    """A Kubernetes object the stacks do not declare today (review 9's P16-P19: the provider's shape)."""
    return lambda stack: _entry(f"{rtype}.x", actions, plan_shape(body), plan_shape(after) if after else None)


def _node(body: dict[str, Any]) -> dict[str, Any]:
    return body["node_config"]


def _rule_without_state(body: dict[str, Any]) -> None:
    rule = next(r for r in body["lifecycle_rule"] if r["action"]["type"] == "Delete")
    rule["condition"].pop("with_state", None)
    rule["condition"]["age"] = 1


PVC = {"metadata": {"name": "data", "namespace": "ml-training"}, "spec": {"storage_class_name": "premium-rwo"}}
STORAGE_CLASS = {
    "metadata": {"name": "keep"},
    "storage_provisioner": "pd.csi.storage.gke.io",
    "reclaim_policy": "Retain",
}
SECRET = {"metadata": {"name": "hf-token", "namespace": "ml-serving"}, "data": {"token": "x"}, "type": "Opaque"}
CONFIG = {"metadata": {"name": "serving-config", "namespace": "ml-serving"}, "data": {"model": "llama"}}
PUBLIC_RULE = {"name": "https", "network": "n", "source_ranges": ["0.0.0.0/0"],
               "allow": [{"protocol": "tcp", "ports": ["443"]}]}  # fmt: skip
KSA = {
    "metadata": {
        "name": "app",
        "namespace": "ml-serving",
        "annotations": {"iam.gke.io/gcp-service-account": "app@p.iam.gserviceaccount.com"},
    }
}
POOL = "google_container_node_pool"
CLUSTER = "google_container_cluster"
BUCKET = "google_storage_bucket"
NP = "kubernetes_network_policy_v1"

# name: (craft, the consequence the gate must name, whether a person may confirm it at all)
ATTACKS: dict[str, tuple[Craft, str, bool]] = {
    # Review 8's and the brief's (P1-P19; P13, the offline renames, is its own test below).
    "P1 slice image type": (_update(POOL, "slice-serve", lambda b: _node(b).update(image_type="UBUNTU_CONTAINERD")),
                            CAPACITY_LOST, True),
    "P2 slice machine type": (_update(POOL, "slice-serve", lambda b: _node(b).update(machine_type="ct6e-standard-8t")),
                              CAPACITY_LOST, True),
    "P3 slice to zero nodes": (_update(POOL, "slice-serve", lambda b: b.update(node_count=0)), CAPACITY_LOST, True),
    "P4 slice node version": (_update(POOL, "slice-serve", lambda b: b.update(version="1.35.9-gke.1")),
                              CAPACITY_LOST, True),
    "P5 slice service account": (_delete(POOL, "slice-serve", ("delete", "create"), ("node_config",)),
                                 CAPACITY_LOST, True),
    "P6 slice created first": (_delete(POOL, "slice-serve", ("create", "delete"), ("node_config",)),
                               CAPACITY_LOST, True),
    "P7 namespace renamed": (_delete("kubernetes_namespace_v1", "namespaces_ml-serving", ("delete", "create")),
                             DATA_LOST, True),
    "P8 release moved": (_delete("helm_release", "serve-llama70b-vllm_", ("delete", "create"), ("namespace",)),
                         CAPACITY_LOST, True),
    "P9 bucket renamed": (_delete(BUCKET, "bucket-checkpoints", ("delete", "create"), ("name",)), DATA_LOST, False),
    "P10 bucket purged": (_update(BUCKET, "bucket-checkpoints", lambda b: (
        b.update(force_destroy=True), b["versioning"].update(enabled=False),
        b["soft_delete_policy"].update(retention_duration_seconds=0),
    )), DATA_LOST, True),
    "P11 registry deletes any tag": (_update("google_artifact_registry_repository", "", lambda b: b[
        "cleanup_policies"].append({"id": "all", "action": "DELETE", "condition": {"tag_state": "ANY"}})),
        DATA_LOST, True),
    "P12 cluster DNS cache": (_update(CLUSTER, "", lambda b: b["addons_config"].update(
        dns_cache_config={"enabled": True})), CAPACITY_LOST, True),
    "P14 slice gVNIC": (_update(POOL, "slice-serve", lambda b: _node(b).update(gvnic={"enabled": True})),
                        CAPACITY_LOST, True),
    "P15 cluster network": (_delete(CLUSTER, "", ("delete", "create"), ("network",)), DATA_LOST, False),
    "P16 PVC storage class": (_object("kubernetes_persistent_volume_claim_v1", PVC, ["delete", "create"], PVC),
                              DATA_LOST, True),
    "P17 reclaim Retain to Delete": (_object("kubernetes_storage_class_v1", STORAGE_CLASS, ["delete", "create"],
                                             {**STORAGE_CLASS, "reclaim_policy": "Delete"}), DATA_LOST, True),
    "P18 Secret deleted": (_object("kubernetes_secret_v1", SECRET, ["delete"]), DATA_LOST, True),
    "P19 ConfigMap emptied": (_object("kubernetes_config_map_v1", CONFIG, ["update"], {**CONFIG, "data": {}}),
                              DEPENDENCY_CUT, True),
    # Review 9's new ones (N1-N20).
    "N1 system machine type": (_update(POOL, "system", lambda b: _node(b).update(machine_type="e2-standard-4")),
                               CAPACITY_LOST, True),
    "N2 system pool deleted": (_delete(POOL, "system"), CAPACITY_LOST, True),
    "N3 GCS FUSE off": (_update(CLUSTER, "", lambda b: b["addons_config"]["gcs_fuse_csi_driver_config"].update(
        enabled=False)), DEPENDENCY_CUT, True),
    "N4 Workload Identity removed": (_update(CLUSTER, "", lambda b: b.pop("workload_identity_config")),
                                     DEPENDENCY_CUT, True),
    "N5 deletion protection off": (_update(CLUSTER, "", lambda b: b.update(deletion_protection=False)),
                                   SECURITY_WEAKENED, True),
    "N6 public access prevention off": (_update(BUCKET, "bucket-checkpoints", lambda b: b.update(
        public_access_prevention="inherited", uniform_bucket_level_access=False)), SECURITY_WEAKENED, True),
    "N7 models bucket public": (_create("google_storage_bucket_iam_member.public", {
        "bucket": "models", "role": "roles/storage.objectViewer", "member": "allUsers"}), SECURITY_WEAKENED, True),
    "N8 default deny deleted": (_delete(NP, "network-policies_ml-serving-default-deny"), SECURITY_WEAKENED, True),
    "N9 Pod Security to privileged": (_update("kubernetes_namespace_v1", "namespaces_ml-serving", lambda b: b[
        "metadata"]["labels"].update({"pod-security.kubernetes.io/enforce": "privileged"})),
        SECURITY_WEAKENED, True),
    "N10 webhook firewall open": (_update("google_compute_firewall", "webhooks", lambda b: b.update(
        source_ranges=["0.0.0.0/0"])), SECURITY_WEAKENED, True),
    "N11 serving GSA deleted": (_delete("google_service_account", "serving_gsa"), DEPENDENCY_CUT, True),
    "N12 chart swapped": (_update("helm_release", "serve-llama70b-vllm_", lambda b: b.update(
        chart="../../../workloads/charts/canary-server")), CAPACITY_LOST, True),
    "N13 Delete rule widened": (_update(BUCKET, "bucket-checkpoints", _rule_without_state), DATA_LOST, True),
    "N14 versioning and soft delete removed": (_update(BUCKET, "bucket-checkpoints", lambda b: (
        b.pop("versioning"), b.pop("soft_delete_policy"))), DATA_LOST, True),
    "N15 registry keep policy removed": (_update("google_artifact_registry_repository", "", lambda b: b.update(
        cleanup_policies=[p for p in b["cleanup_policies"] if p["action"] != "KEEP"])), DATA_LOST, True),
    "N16 force_update on": (_update("helm_release", "serve-llama70b-vllm_", lambda b: b.update(force_update=True)),
                            CAPACITY_LOST, True),
    "N17 Cloud NAT deleted": (_delete("google_compute_router_nat", ""), DEPENDENCY_CUT, True),
    "N18 nodes' registry grant deleted": (
        _delete("google_artifact_registry_repository_iam_member", "registry_reader-0"), DEPENDENCY_CUT, True),
    "N19 shielded nodes off": (_update(CLUSTER, "", lambda b: b.update(enable_shielded_nodes=False)),
                               SECURITY_WEAKENED, True),
    "N20 system pool gVNIC": (_update(POOL, "system", lambda b: _node(b).update(gvnic={"enabled": False})),
                              CAPACITY_LOST, True),
    # More of each class, this review's own.
    "a CPU pool's maximum lowered": (_update(POOL, "system", lambda b: b["autoscaling"].update(
        total_max_node_count=2)), CAPACITY_LOST, True),
    "a release's chart repository changed": (_update("helm_release", "lws", lambda b: b.update(
        repository="oci://example.invalid/charts")), CAPACITY_LOST, True),
    "a PVC deleted": (_object("kubernetes_persistent_volume_claim_v1", PVC, ["delete"]), DATA_LOST, True),
    "a Secret's key removed": (_object("kubernetes_secret_v1", SECRET, ["update"], {**SECRET, "data": {}}),
                               DATA_LOST, True),
    "control plane open to the internet": (_update(CLUSTER, "", lambda b: b["master_authorized_networks_config"]
        .update(cidr_blocks=[{"cidr_block": "0.0.0.0/0"}])), SECURITY_WEAKENED, True),
    "private endpoint off": (_update(CLUSTER, "", lambda b: b["private_cluster_config"].update(
        enable_private_endpoint=False)), SECURITY_WEAKENED, True),
    "Binary Authorization off": (_update(CLUSTER, "", lambda b: b["binary_authorization"].update(
        evaluation_mode="DISABLED")), SECURITY_WEAKENED, True),
    "a NetworkPolicy admits everyone": (_update(NP, "network-policies_ml-serving-default-deny", lambda b: b[
        "spec"].update(ingress=[{"from": []}])), SECURITY_WEAKENED, True),
    "the deny-all firewall deleted": (_delete("google_compute_firewall", "network_deny-ingress"),
                                      SECURITY_WEAKENED, True),
    "a project role for anyone": (_create("google_project_iam_member.anyone", {
        "project": "p", "role": "roles/viewer", "member": "allAuthenticatedUsers"}), SECURITY_WEAKENED, True),
    "the persistent disk driver off": (_update(CLUSTER, "", lambda b: b["addons_config"][
        "gce_persistent_disk_csi_driver_config"].update(enabled=False)),
        DEPENDENCY_CUT, True),
    "the webhook firewall deleted": (_delete("google_compute_firewall", "webhooks"), DEPENDENCY_CUT, True),
    "a Kubernetes service account deleted": (_delete("kubernetes_service_account_v1", "serving_ksa"),
                                             DEPENDENCY_CUT, True),
    "a NetworkPolicy rule removed": (_update(NP, "network-policies_ml-serving-from-load-balancers", lambda b: b[
        "spec"].update(ingress=[])), DEPENDENCY_CUT, True),
    "a ConfigMap deleted": (_object("kubernetes_config_map_v1", CONFIG, ["delete"]), DEPENDENCY_CUT, True),
    "an API disabled on destroy": (lambda s: _entry("google_project_service.x", ["delete"], {
        "service": "storage.googleapis.com", "disable_on_destroy": True}, None), DEPENDENCY_CUT, True),
    # Found by the audit of this stop: each passed the gate before.
    "a new firewall rule from the internet": (_create("google_compute_firewall.open", {
        "name": "open", "network": "n", "direction": "INGRESS", "source_ranges": ["0.0.0.0/0"],
        "allow": [{"protocol": "tcp", "ports": ["22"]}]}), SECURITY_WEAKENED, True),
    "an internet-facing rule opened to every port": (_object("google_compute_firewall", PUBLIC_RULE, ["update"], {
        **PUBLIC_RULE, "allow": [{"protocol": "all"}]}), SECURITY_WEAKENED, True),
    "the deny-all firewall disabled": (_update("google_compute_firewall", "network_deny-ingress", lambda b: b.update(
        disabled=True)), SECURITY_WEAKENED, True),
    "the control plane's authorized networks removed": (_update(CLUSTER, "", lambda b: b.pop(
        "master_authorized_networks_config")), SECURITY_WEAKENED, True),
    "Binary Authorization's policy deleted": (_delete("google_binary_authorization_policy", ""),
                                              SECURITY_WEAKENED, True),
    "Binary Authorization admits every image": (_update("google_binary_authorization_policy", "", lambda b: b[
        "default_admission_rule"].update(evaluation_mode="ALWAYS_ALLOW")), SECURITY_WEAKENED, True),
    "token creation granted to a person": (_create("google_service_account_iam_member.someone", {
        "service_account_id": "projects/p/serviceAccounts/a@p.iam.gserviceaccount.com",
        "role": "roles/iam.serviceAccountTokenCreator", "member": "user:someone@example.com"}),
        SECURITY_WEAKENED, True),
    "a project's ownership granted to a group": (_create("google_project_iam_member.owners", {
        "project": "p", "role": "roles/owner", "member": "group:contractors@example.com"}), SECURITY_WEAKENED, True),
    "a Kubernetes service account renamed": (_delete("kubernetes_service_account_v1", "serving_ksa",
                                                     ("delete", "create"), ("metadata",)), DEPENDENCY_CUT, True),
    "the nodes' registry grant moved to another account": (_delete(
        "google_artifact_registry_repository_iam_member", "registry_reader-0", ("delete", "create"), ("member",)),
        DEPENDENCY_CUT, True),
    "the GPU VM group deleted": (_delete("google_compute_instance_group_manager", ""), CAPACITY_LOST, True),
    "a ConfigMap value emptied": (_object("kubernetes_config_map_v1", CONFIG, ["update"], {
        **CONFIG, "data": {"model": ""}}), DEPENDENCY_CUT, True),
    # Found by make drift-local: an annotation edited by hand passed as a plain metadata update.
    "a Kubernetes service account bound to another Google account": (_update("kubernetes_service_account_v1",
        "trainer_ksa", lambda b: b["metadata"]["annotations"].update({
            "iam.gke.io/gcp-service-account": "attacker@elsewhere.iam.gserviceaccount.com"})), SECURITY_WEAKENED, True),
    "a Kubernetes service account's Google account removed": (_object("kubernetes_service_account_v1", KSA,
        ["update"], {**KSA, "metadata": {**KSA["metadata"], "annotations": {}}}), DEPENDENCY_CUT, True),
}  # fmt: skip

# Changes a platform team makes every week: none may stop the apply (review 9's C1-C3 and more).
CONTROLS: dict[str, Craft] = {
    "C1 a node label on a slice": _update(POOL, "slice-serve", lambda b: _node(b).setdefault("labels", {}).update(
        team="serving")),
    "C2 a SetStorageClass age": _update(BUCKET, "bucket-checkpoints", lambda b: b["lifecycle_rule"].append(
        {"action": {"type": "SetStorageClass", "storage_class": "NEARLINE"}, "condition": {"age": 45}})),
    "C3 a release's image digest": _update("helm_release", "serve-canary", lambda b: b.update(
        values=[json.dumps({"image": {"digest": "sha256:" + "1" * 64}})])),
    "a firewall narrowed": _update("google_compute_firewall", "proxy-only", lambda b: b.update(
        source_ranges=["10.30.18.0/24"])),
    "Pod Security tightened": _update("kubernetes_namespace_v1", "namespaces_ml-serving", lambda b: b["metadata"][
        "labels"].update({"pod-security.kubernetes.io/enforce": "restricted"})),
    "a CPU pool allowed more nodes": _update(POOL, "system", lambda b: b["autoscaling"].update(
        total_max_node_count=9)),
    "a grant to a service account": _create("google_project_iam_member.new", {
        "project": "p", "role": "roles/logging.logWriter", "member": "serviceAccount:a@p.iam.gserviceaccount.com"}),
    "a NetworkPolicy created": _create(f"{NP}.new", {"metadata": {"name": "n"}, "spec": {"policy_types": ["Ingress"]}}),
    "a Kubernetes service account created with its Google account": _create(
        "kubernetes_service_account_v1.new", {"metadata": {"name": "n", "namespace": "ml-training", "annotations": {
            "iam.gke.io/gcp-service-account": "n@p.iam.gserviceaccount.com"}}}),
    "a deny rule's source widened": _update("google_compute_firewall", "network_deny-ingress", lambda b: b.update(
        source_ranges=["0.0.0.0/0", "::/0"])),
    "a new internal firewall rule": _create("google_compute_firewall.internal", {
        "name": "internal", "network": "n", "source_ranges": ["10.8.0.0/28"],
        "allow": [{"protocol": "tcp", "ports": ["8443"]}]}),
    "a webhook port opened from the control plane": _update("google_compute_firewall", "webhooks", lambda b: b[
        "allow"][0]["ports"].append("8443")),
    "every port between the control plane and the nodes": _update("google_compute_firewall", "webhooks", lambda b: b
        .update(allow=[{"protocol": "tcp"}])),
    "SSH through IAP": _create("google_compute_firewall.iap", {"name": "iap", "network": "n", "source_ranges": [
        "35.235.240.0/20"], "allow": [{"protocol": "tcp", "ports": ["22"]}]}),
    "token creation granted to a service account of the platform": _create("google_service_account_iam_member.ci", {
        "service_account_id": "projects/p/serviceAccounts/a@p.iam.gserviceaccount.com",
        "role": "roles/iam.serviceAccountTokenCreator", "member": "serviceAccount:ci@p.iam.gserviceaccount.com"}),
    "a ConfigMap value changed": _object("kubernetes_config_map_v1", CONFIG, ["update"], {
        **CONFIG, "data": {"model": "gemma"}}),
}  # fmt: skip


def _review(stack: dict[str, Any], craft: Craft) -> Any:
    return review_plan("platform-prod", {"format_version": "1.2", "resource_changes": [craft(stack)]})


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_every_crafted_plan_is_stopped_naming_its_consequence(stacks: dict[str, dict[str, Any]], name: str) -> None:
    craft, kind, confirmable = ATTACKS[name]
    review = _review(stacks["prod"], craft)
    ((change,),) = [review.blocking]
    assert kind in change.kinds, (change.kinds, change.blocked)
    assert change.blocked.startswith(change.kinds[0] + ": ") or f"{kind}: " in change.blocked, change.blocked
    assert change.confirmable == confirmable


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_ordinary_changes_pass(stacks: dict[str, dict[str, Any]], name: str) -> None:
    review = _review(stacks["prod"], CONTROLS[name])
    assert len(review.changes) == 1 and review.blocking == [], [c.blocked for c in review.changes]


def test_the_count_of_the_review(stacks: dict[str, dict[str, Any]]) -> None:
    """Review 9's 39: 38 plans here (P13 is the offline review's, below), every one stopped."""
    reviews = [name for name in ATTACKS if name[0] in "PN" and name[1].isdigit()]
    assert len(reviews) == 38
    assert all(_review(stacks["prod"], ATTACKS[name][0]).blocking for name in reviews)


def test_renames_in_the_offline_review_are_what_terraform_plans(stacks: dict[str, dict[str, Any]]) -> None:
    """P13: a namespace renamed, a release's namespace moved and a release renamed read as replacements (the
    providers' ForceNew and RequiresReplace), each gated, not as three harmless updates."""
    before = stacks["prod"]
    after = copy.deepcopy(before)
    _, namespace = _find(after, "kubernetes_namespace_v1", "namespaces_ml-serving")
    namespace["metadata"]["name"] = "ml-serving-2"
    _, moved = _find(after, "helm_release", "serve-llama70b-vllm_")
    moved["namespace"] = "ml-serving-2"
    _, renamed = _find(after, "helm_release", "serve-canary")
    renamed["name"] = "canary"
    changes = {c.address.split(".")[0] + "." + c.address.split(".")[1][:20]: c for c in diff(before, after)}
    assert {c.action for c in changes.values()} == {"replace"}, changes
    review = review_stack("platform-prod", after, before)
    assert {c.kinds for c in review.blocking} == {(DATA_LOST,), (CAPACITY_LOST,)}
    assert len(review.blocking) == 3


def test_a_change_that_loses_data_or_weakens_security_is_not_confirmed_by_its_own_pull_request(
    stacks: dict[str, dict[str, Any]],
) -> None:
    """The change's own environment-file entry lets a capacity change through, not a purge or a weakening; a
    person's CONFIRM_CHANGE or an entry merged before the change does."""
    plan = {
        "format_version": "1.2",
        "resource_changes": [
            ATTACKS[n][0](stacks["prod"]) for n in ("N2 system pool deleted", "N7 models bucket public")
        ],
    }
    pool, public = (e["address"] for e in plan["resource_changes"])
    own = review_plan("platform-prod", plan, in_change=[pool, public])
    assert [c.address for c in own.blocking] == [public]
    assert review_plan("platform-prod", plan, confirmed=[public], in_change=[pool]).blocking == []


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        ({"format_version": "1.2", "resource_changes": [{"address": "a.b", "change": {"actions": ["purge"]}}]},
         r"a\.b: actions \['purge'\] are none Terraform plans"),
        ({"format_version": "1.2", "resource_changes": [{"address": "a.b", "change": {}}]},
         "a.b: a resource change without a list of actions"),
        ({"format_version": "1.2", "resource_changes": [{"address": "a.b"}]},
         "a.b: a resource change without a list of actions"),
        # Shapes no plan has: each refused by name, none a crash.
        ({"format_version": "1.2", "resource_changes": "abc"}, "resource_changes is a str, not a list"),
        ({"format_version": "1.2", "resource_changes": [["a.b"]]}, r"resource_changes\[0\] is a list, not an object"),
        ({"format_version": "1.2", "resource_changes": [{"change": {"actions": ["delete"]}}]},
         r"resource_changes\[0\] has no address"),
        ({"format_version": "1.2", "resource_changes": [{"address": "a.b", "change": {
            "actions": ["update"], "before": "x", "after": {}}}]}, "a.b: its before is a str, not an object or null"),
        ({"format_version": "1.2", "resource_changes": [{"address": "a.b", "change": "x"}]},
         "a.b: its change is a str, not an object"),
        ({"format_version": "1.2", "resource_drift": {"a": 1}}, "resource_drift is a dict, not a list"),
        ({"format_version": "1.2", "resource_changes": [{"address": "a.b", "change": {
            "actions": ["update", "delete"], "after": {}}}]}, r"a\.b: actions \['update', 'delete'\]"),
    ],
)  # fmt: skip
def test_a_plan_the_gate_cannot_read_is_refused(plan: dict[str, Any], message: str) -> None:
    with pytest.raises(PlanFormatError, match=message):
        review_plan("platform-prod", plan)


def test_the_review_command_stops_a_crafted_plan_and_refuses_a_truncated_one(
    stacks: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    plan = tmp_path / "platform-prod.json"
    plan.write_text(
        json.dumps(
            {"format_version": "1.2", "resource_changes": [ATTACKS["N10 webhook firewall open"][0](stacks["prod"])]}
        )
    )
    command = [sys.executable, "-m", "scripts.review", "--plan", str(plan)]
    stopped = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    assert stopped.returncode == 3, stopped.stderr
    assert "security weakened: the firewall rule admits connections from more addresses" in stopped.stderr
    plan.write_text(plan.read_text()[:200])
    truncated = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    assert truncated.returncode == 2 and f"error: {plan}:" in truncated.stderr, truncated.stderr
    plan.write_text(json.dumps({"format_version": "1.2", "resource_changes": [{"address": "a.b", "change": "x"}]}))
    odd = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    assert odd.returncode == 2 and "a.b: its change is a str" in odd.stderr and "Traceback" not in odd.stderr


def test_an_entry_confirms_a_loss_only_where_it_was_merged_before_the_change(
    stacks: dict[str, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """confirmations.settled reads the environment file at PLATFORM_CONFIRMED_AT: an entry there settles the change;
    one the change's own commit adds does not; a ref that is no commit is refused naming the variable."""
    from infra.config import environments_dir
    from infra.delivery import confirmations
    from infra.settings import SettingError
    from infra.synth.load import load_all

    dev = load_all(environments_dir())["dev"]
    stack = stacks["dev"]
    address = next(f"google_storage_bucket.{n}" for n in stack["resource"]["google_storage_bucket"])
    folder = tmp_path / "repo" / "environments"
    folder.mkdir(parents=True)
    original = (environments_dir() / "dev.yaml").read_text()

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True)

    git("init", "-q")
    git("config", "user.email", "t@example.invalid")
    git("config", "user.name", "t")
    (folder / "dev.yaml").write_text(original)
    git("add", ".")
    git("commit", "-qm", "base")
    (folder / "dev.yaml").write_text(
        original + "\n" + confirmations.entry("dev", stack, address).replace("<why this change is meant>", "x") + "\n"
    )
    git("commit", "-qam", "the entry")
    monkeypatch.setenv("PLATFORM_ENVIRONMENTS_DIR", str(folder))
    assert confirmations.settled(dev, [address], stack, "HEAD^") == [], "added with the change: not settled"
    assert confirmations.settled(dev, [address], stack, "HEAD") == [address], "merged before the change"
    monkeypatch.setenv("PLATFORM_CONFIRMED_AT", "no-such-ref")
    with pytest.raises(SettingError, match="PLATFORM_CONFIRMED_AT=no-such-ref: not a commit"):
        confirmations.settled(dev, [address], stack)


def test_an_entry_the_state_records_as_carried_out_confirms_nothing_more() -> None:
    """confirmations.spent: an entry whose `<address>@<sha>` the stack's output holds in the plan's prior_state was
    carried out by an earlier apply; an entry for another configuration, or a state without the output, is not."""
    from infra.config import environments_dir
    from infra.config.delivery import APPLIED_CONFIRMATIONS, Confirmation
    from infra.delivery import confirmations
    from infra.synth.load import load_all

    entries = [
        Confirmation(address=f"google_storage_bucket.b{i}", config_sha256=str(i) * 64, reason="r") for i in (1, 2)
    ]
    dev = load_all(environments_dir())["dev"].model_copy(update={"confirm": entries})
    matched = [e.address for e in entries]

    def plan(applied: object) -> dict[str, Any]:
        return {"prior_state": {"values": {"outputs": {APPLIED_CONFIRMATIONS: {"value": applied}}}}}

    assert confirmations.spent(dev, matched, {}) == (matched, [])
    assert confirmations.spent(dev, matched, plan("not a list")) == (matched, [])
    assert confirmations.spent(dev, matched, plan([f"google_storage_bucket.b1@{'9' * 64}"])) == (matched, [])
    left, said = confirmations.spent(dev, matched, plan([entries[0].key]))
    assert left == ["google_storage_bucket.b2"]
    assert said == [
        "dev.yaml: confirm: google_storage_bucket.b1: carried out by an earlier apply (the state records it): it "
        "confirms nothing now, a change the plan shows of it is another one; remove it"
    ]
