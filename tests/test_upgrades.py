"""Upgrades the API server would refuse, found at plan: the upgrade rules (infra/rules/upgrades.py) on their failing
examples, and the review blocking a release whose Helm upgrade would fail, rendered from its baseline's own chart."""

from __future__ import annotations

import base64
import copy
import gzip
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.cdk.layout import stack_file
from infra.charts.cel import evaluate_update
from infra.review import write_reviews
from infra.review.upgrades import helm_record_objects
from infra.rules import check_upgrade
from infra.rules.run import render_release, stack_releases
from tests.helpers import REPO, charts_with_fixed_jetstream_name, of_type, one_of_kind
from tests.refused import UPGRADE_REFUSED

DIGEST = "sha256:" + "3" * 64


@pytest.fixture(scope="module")
def releases(stacks: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    return {name: objects for name, (_, objects) in stack_releases(stacks["dev"]).items()}


@pytest.mark.parametrize("case", sorted(UPGRADE_REFUSED))
def test_an_upgrade_rule_refuses_its_example(case: str, releases: dict[str, list[dict[str, Any]]]) -> None:
    release, edit, (kind, field), rule_id, fragment = UPGRADE_REFUSED[case]
    old = releases[release]
    assert check_upgrade(old, copy.deepcopy(old)) == [], "the same objects again: nothing to refuse"
    new = copy.deepcopy(old)
    edit(new)
    found = check_upgrade(old, new)
    assert any(v.field.startswith(f"{kind}/") and v.field.endswith(f": {field}") for v in found), [
        v.line() for v in found
    ]
    assert all(v.rule.id == rule_id and fragment in v.message for v in found), [v.line() for v in found]


def test_an_object_renamed_is_created_anew_not_upgraded(releases: dict[str, list[dict[str, Any]]]) -> None:
    """What the charts do for their JobSets: a new name for new replicated jobs, which Helm creates (and deletes the
    old one), so no upgrade of it is refused."""
    old = releases["gpu-training"]
    new = copy.deepcopy(old)
    jobset = one_of_kind(new, "JobSet")
    jobset["metadata"]["name"] = "gpu-training-0badcafe"
    jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["image"] = "x"
    assert check_upgrade(old, new) == []


def test_a_helm_hook_is_created_when_it_runs_not_upgraded() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "migrate"}, "spec": {"template": {"a": 1}}}
    changed = copy.deepcopy(job)
    changed["spec"]["template"] = {"a": 2}
    assert [v.rule.id for v in check_upgrade([job], [changed])] == ["k8s.workload-fields-immutable"]
    for obj in (job, changed):
        obj["metadata"]["annotations"] = {"helm.sh/hook": "pre-upgrade"}
    assert check_upgrade([job], [changed]) == []


def test_a_suspended_jobset_takes_kueues_placement_but_not_a_new_image(
    releases: dict[str, list[dict[str, Any]]],
) -> None:
    """JobSet's webhook lets a suspended JobSet's pod template change where Kueue places it (node selector,
    tolerations, labels), nothing else."""
    old = copy.deepcopy(releases["gpu-training"])
    one_of_kind(old, "JobSet")["spec"]["suspend"] = True
    placed = copy.deepcopy(old)
    pod = one_of_kind(placed, "JobSet")["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    pod["spec"]["nodeSelector"] = {**pod["spec"].get("nodeSelector", {}), "cloud.google.com/gke-nodepool": "flavor-a"}
    pod["spec"]["tolerations"] = [{"key": "flavor", "operator": "Exists", "effect": "NoSchedule"}]
    pod.setdefault("metadata", {}).setdefault("labels", {})["kueue.x-k8s.io/podset"] = "node"
    assert check_upgrade(old, placed) == []
    pod["spec"]["containers"][0]["image"] = "registry.example/trainer@sha256:" + "2" * 64
    assert [v.rule.id for v in check_upgrade(old, placed)] == ["jobset.replicated-jobs-immutable"]


def test_transition_rules_run_on_the_items_a_map_list_correlates_by_key() -> None:
    """A `map` list's items are matched by their keys (reordering is no change; a new item has no old value); an
    atomic list's items are never correlated."""
    item = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "size": {"type": "integer"}},
        "x-kubernetes-validations": [{"rule": "self.size == oldSelf.size", "message": "size is immutable"}],
    }
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "byKey": {
                "type": "array",
                "items": item,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
            },
            "atomic": {"type": "array", "items": item},
        },
    }
    old = {"byKey": [{"name": "a", "size": 1}, {"name": "b", "size": 2}], "atomic": [{"name": "a", "size": 1}]}
    reordered = {"byKey": [{"name": "b", "size": 2}, {"name": "a", "size": 1}, {"name": "c", "size": 9}]}
    assert evaluate_update(old, {**reordered, "atomic": [{"name": "a", "size": 5}]}, schema) == []
    (failure,) = evaluate_update(old, {"byKey": [{"name": "b", "size": 3}]}, schema)
    assert (failure.path, failure.message) == ("byKey[0]", "size is immutable")


# --- the review -------------------------------------------------------------------------------------------------


def _baseline(tmp_path: Path, synth_dir: Path, charts: Path | None) -> Path:
    """A baseline cdktf.out as the plan job makes one: a checkout's output, `charts` three folders up from each stack
    (None: copied away from its checkout, no charts beside it)."""
    out = tmp_path / "base" / "cdktf.out"
    shutil.copytree(synth_dir / "stacks", out / "stacks")
    if charts is not None:
        (tmp_path / "base" / "workloads").mkdir()
        (tmp_path / "base" / "workloads" / "charts").symlink_to(charts)
    return out


def _edit_values(out: Path, release: str, edit: Callable[[dict[str, Any]], None]) -> str:
    """Edit the values of dev's `release` in the stack under `out`; its helm_release address."""
    path = stack_file(out, "platform-dev")
    stack = json.loads(path.read_text())
    key, body = next((k, r) for k, r in of_type(stack, "helm_release").items() if r["name"] == release)
    values = json.loads(body["values"][0])
    edit(values)
    body["values"][0] = json.dumps(values)
    path.write_text(json.dumps(stack))
    return f"helm_release.{key}"


def _review(current: Path, base: Path, confirmed: list[str] | None = None) -> Any:
    (dev,) = [r for r in write_reviews(current, base, confirmed=confirmed or []) if r.stack == "platform-dev"]
    return dev


@pytest.fixture
def current(synth_dir: Path, tmp_path: Path) -> Path:
    out = tmp_path / "current"
    shutil.copytree(synth_dir / "stacks", out / "stacks")
    return out


@pytest.fixture
def fixed_name_charts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The charts with the JetStream chart as it was (0.3.0), for the baseline and for this checkout."""
    from infra.charts import check

    charts = charts_with_fixed_jetstream_name(tmp_path / "charts")
    monkeypatch.setattr(check, "CHARTS", charts)
    return charts


def test_the_review_blocks_a_release_whose_upgrade_the_api_server_refuses(
    synth_dir: Path, tmp_path: Path, current: Path, fixed_name_charts: Path
) -> None:
    """The baseline's JetStream server had 2 hosts per slice; the change makes it 4 under the same LeaderWorkerSet
    (the chart as it was), which LWS's webhook refuses: blocked, and no confirmation lets it through. The vLLM
    server's new image in the same change is an upgrade LWS takes."""
    base = _baseline(tmp_path, synth_dir, fixed_name_charts)
    reshaped = _edit_values(base, "serve-llama405b", lambda v: v.update(subGroupSize=2))
    bumped = _edit_values(base, "serve-llama70b-vllm", lambda v: v.update(image=f"registry.example/vllm@{DIGEST}"))

    dev = _review(current, base, confirmed=[reshaped, bumped])

    (blocked,) = dev.blocking
    assert (blocked.address, blocked.action, blocked.confirmable) == (reshaped, "update", False)
    assert "LeaderWorkerSet/serve-llama405b: spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize" in blocked.blocked
    assert "field is immutable (was 2)" in blocked.blocked and "lws.subgroup-size-immutable" in blocked.blocked
    assert "Replace a release on purpose" in blocked.blocked
    assert [c.action for c in dev.changes if c.address == bumped] == ["update"]
    assert (current / "review" / "dev.md").read_text().count("subGroupSize: field is immutable (was 2)") == 1


def test_a_reshaped_jetstream_slice_gets_a_new_leaderworkerset_not_a_refused_upgrade(
    synth_dir: Path, tmp_path: Path, current: Path
) -> None:
    """The chart names its LeaderWorkerSet after the hosts per slice: the same reshape makes a new one, which Helm
    creates (and deletes the old), so nothing blocks."""
    base = _baseline(tmp_path, synth_dir, REPO / "workloads" / "charts")
    reshaped = _edit_values(base, "serve-llama405b", lambda v: v.update(subGroupSize=2))
    dev = _review(current, base)
    assert [c.action for c in dev.changes if c.address == reshaped] == ["update"]
    assert dev.blocking == []


def test_a_baseline_without_its_charts_blocks_a_release_update_until_confirmed(
    synth_dir: Path, tmp_path: Path, current: Path
) -> None:
    """A baseline copied away from its checkout: the old objects cannot be rendered, so the update is held for a
    person to check and confirm, never passed unchecked."""
    base = _baseline(tmp_path, synth_dir, None)
    bumped = _edit_values(base, "serve-llama70b-vllm", lambda v: v.update(image=f"registry.example/vllm@{DIGEST}"))

    (held,) = _review(current, base).blocking
    assert held.address == bumped and held.confirmable
    assert "the baseline's chart is not at" in held.blocked and "checked by hand" in held.blocked
    assert _review(current, base, confirmed=[bumped]).blocking == []


# --- at the apply: from the revision the cluster runs ------------------------------------------------------------


def helm_record(name: str, objects: list[dict[str, Any]], version: int = 1) -> dict[str, Any]:
    """A ConfigMap as Helm's configmap driver writes a deployed revision: the release as base64 of its gzipped JSON,
    labelled owner, name, status and version (helm v3.18.4 pkg/storage/driver/cfgmaps.go, util.go)."""
    release = {"name": name, "version": version, "manifest": "".join(f"---\n{yaml.safe_dump(o)}" for o in objects)}
    data = base64.b64encode(gzip.compress(json.dumps(release).encode())).decode()
    labels = {"owner": "helm", "name": name, "status": "deployed", "version": str(version)}
    return {"kind": "ConfigMap", "metadata": {"name": f"sh.helm.release.v1.{name}.v{version}", "labels": labels},
            "data": {"release": data}}  # fmt: skip


def test_helms_record_gives_the_objects_of_the_newest_deployed_revision() -> None:
    old, new = [{"kind": "ConfigMap", "metadata": {"name": "a"}}], [{"kind": "ConfigMap", "metadata": {"name": "b"}}]
    records = {"items": [helm_record("r", new, version=3), helm_record("r", old, version=2)]}
    assert helm_record_objects(records, "ns/r") == new
    with pytest.raises(ValueError, match="no deployed revision of release ns/r"):
        helm_record_objects({"items": []}, "ns/r")


def _apply_folder(tmp_path: Path, synth_dir: Path, charts: Path) -> Path:
    """Dev's stack in a folder as the apply opens it: its charts three folders up (infra/delivery/apply_paths)."""
    shutil.copytree(synth_dir / "stacks" / "platform-dev", tmp_path / "out" / "stacks" / "platform-dev")
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "charts").symlink_to(charts)
    return tmp_path / "out" / "stacks" / "platform-dev"


def _plan_updating(address: str) -> dict[str, Any]:
    """A real plan's JSON (terraform show -json) whose one change is an in-place update of `address`."""
    change = {"actions": ["update"], "before": {"version": "0.3.0"}, "after": {"version": "0.3.0"}}
    return {"format_version": "1.2", "resource_changes": [{"address": address, "type": "helm_release",
                                                           "change": change}]}  # fmt: skip


def _stand_in(folder: Path, name: str, script: str) -> str:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)
    return str(path)


def test_the_apply_holds_an_upgrade_from_the_revision_the_cluster_runs(
    synth_dir: Path,
    tmp_path: Path,
    fixed_name_charts: Path,
    envs: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The apply's real plan updates the JetStream release; Helm's record in the cluster (read with kubectl, through
    the environment's credentials) says the deployed LeaderWorkerSet has 2 hosts per group, the chart the apply
    opens makes 4 under the same name: the gate blocks it, not confirmable, naming the field and the rule."""
    from infra.review import review_plan
    from scripts.apply import cluster_holds

    stack_dir = _apply_folder(tmp_path, synth_dir, fixed_name_charts)
    body = json.loads((stack_dir / "cdk.tf.json").read_text())
    key, release = next((k, r) for k, r in of_type(body, "helm_release").items() if r["name"] == "serve-llama405b")
    values = json.loads(release["values"][0])
    deployed = render_release({**release, "values": [json.dumps({**values, "subGroupSize": 2})]}, fixed_name_charts)
    record = tmp_path / "record.json"
    record.write_text(json.dumps({"items": [helm_record("serve-llama405b", deployed)]}))
    calls = tmp_path / "kubectl.calls"
    monkeypatch.setenv("PLATFORM_GCLOUD", _stand_in(tmp_path, "gcloud", "exit 0"))
    monkeypatch.setenv("PLATFORM_KUBECTL", _stand_in(tmp_path, "kubectl", f'echo "$*" >> {calls}\ncat {record}'))
    env = envs["dev"]
    plan = _plan_updating(f"helm_release.{key}")

    (blocked,) = review_plan(
        "platform-dev", plan, [f"helm_release.{key}"], cluster_holds(stack_dir, body, plan, env)
    ).blocking
    assert not blocked.confirmable
    assert "LeaderWorkerSet/serve-llama405b: spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize" in blocked.blocked
    assert "lws.subgroup-size-immutable" in blocked.blocked
    assert calls.read_text().splitlines()[0].split() == [
        "get", "configmaps", "-n", release["namespace"], "-l", "owner=helm,name=serve-llama405b,status=deployed",
        "-o", "json",
    ]  # fmt: skip

    # The same record, now at 4 hosts: the upgrade the chart makes is one LWS takes.
    record.write_text(
        json.dumps({"items": [helm_record("serve-llama405b", render_release(release, fixed_name_charts))]})
    )
    assert review_plan("platform-dev", plan, [], cluster_holds(stack_dir, body, plan, env)).blocking == []

    # A cluster it cannot reach: held for a person, never passed unchecked.
    monkeypatch.setenv("PLATFORM_GCLOUD", _stand_in(tmp_path, "gcloud", "echo 'permission denied' >&2; exit 1"))
    (held,) = review_plan("platform-dev", plan, [], cluster_holds(stack_dir, body, plan, env)).blocking
    assert held.confirmable and "cannot be read" in held.blocked and "permission denied" in held.blocked


def test_the_apply_holds_a_release_whose_fields_the_clusters_own_crd_would_drop(
    synth_dir: Path, tmp_path: Path, envs: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """GKE's Ray operator add-on serves the RayCluster CRD at a KubeRay no file pins: one older than 1.5.1 has no
    spec.authOptions, and the API server would drop it without a word (the cluster running without token
    authentication). The gate reads the CRDs the cluster serves and refuses the training release; the CRD as
    pinned passes."""
    from infra.charts.crds import locate
    from infra.review import review_plan
    from scripts.apply import cluster_holds

    stack_dir = _apply_folder(tmp_path, synth_dir, REPO / "workloads" / "charts")
    body = json.loads((stack_dir / "cdk.tf.json").read_text())
    key, release = next((k, r) for k, r in of_type(body, "helm_release").items() if r["name"] == "ray-training")
    crd = yaml.safe_load((locate() / "ray.io_rayclusters.yaml").read_text())
    served = tmp_path / "crds.json"
    served.write_text(json.dumps({"items": [crd]}))
    record = tmp_path / "record.json"
    record.write_text(
        json.dumps({"items": [helm_record("ray-training", render_release(release, REPO / "workloads" / "charts"))]})
    )
    answer = f'case "$2" in crds) cat {served};; *) cat {record};; esac'
    monkeypatch.setenv("PLATFORM_GCLOUD", _stand_in(tmp_path, "gcloud", "exit 0"))
    monkeypatch.setenv("PLATFORM_KUBECTL", _stand_in(tmp_path, "kubectl", answer))
    plan = _plan_updating(f"helm_release.{key}")
    assert review_plan("platform-dev", plan, [], cluster_holds(stack_dir, body, plan, envs["dev"])).blocking == []

    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    del v1["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["authOptions"]
    served.write_text(json.dumps({"items": [crd]}))
    (held,) = review_plan("platform-dev", plan, [], cluster_holds(stack_dir, body, plan, envs["dev"])).blocking
    assert held.address == f"helm_release.{key}" and not held.confirmable
    assert "spec.authOptions" in held.blocked and "field-pruning" in held.blocked


def test_a_release_the_gate_cannot_render_is_held_not_passed_unchecked(synth_dir: Path, tmp_path: Path) -> None:
    """Values Helm refuses (here the chart's schema): the apply would fail at that release, so the gate says so
    instead of passing it to Terraform."""
    from infra.review.served import dropped_fields

    stack_dir = _apply_folder(tmp_path, synth_dir, REPO / "workloads" / "charts")
    body = json.loads((stack_dir / "cdk.tf.json").read_text())
    key, release = next((k, r) for k, r in of_type(body, "helm_release").items() if r["name"] == "ray-training")
    release["values"] = [json.dumps({**json.loads(release["values"][0]), "unknownValue": 1})]
    ((why, confirmable),) = dropped_fields(stack_dir, body, [f"helm_release.{key}"], {}).values()
    assert not confirmable and why.startswith("it could not be rendered") and "unknownValue" in why
