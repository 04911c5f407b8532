"""Capacity that falls back: a slice's `capacity` as an ordered list of tiers becomes a node pool per tier and a
custom ComputeClass over them; the servers select the class; bad lists are refused at load; the rules hold the
class and its Pods to what GKE admits; the review prices each tier."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.config import ENVIRONMENTS_DIR, ConfigError, Environment
from infra.rules import RULES
from infra.rules.gke_versions import features_used
from infra.rules.manifest_subject import ReleaseContext
from infra.rules.run import stack_releases
from infra.synth.load import load_environment
from tests.helpers import by_name, one_of_kind, release_values, rendered

DEV = yaml.safe_load((ENVIRONMENTS_DIR / "dev.yaml").read_text())
TIERS = ["vllm", "vllm-flex-start", "vllm-on-demand"]


def _load(tmp_path: Path, **slices: Any) -> Environment:
    """Dev with these slices' entries replaced (None: removed)."""
    data = copy.deepcopy(DEV)
    for key, spec in slices.items():
        if spec is None:
            del data["slices"][key]
        else:
            data["slices"][key] = spec
    path = tmp_path / "dev.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_environment(path)


def _refusal(tmp_path: Path, field: str, **slices: Any) -> str:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, **slices)
    line = next((p for p in err.value.problems if p.startswith(field)), None)
    assert line is not None, f"no problem at {field}:\n{err.value}"
    return line


VLLM = {"accelerator": "v6e", "topology": "2x4", "machine_type": "ct6e-standard-8t"}


def test_the_tiers_keep_the_slices_pool_and_add_one_per_tier(envs: dict[str, Environment]) -> None:
    spec = envs["dev"].slices["vllm"]
    assert spec.falls_back and spec.primary.type == "spot"
    assert [(pool, tier.type) for pool, tier in spec.tier_pools("vllm")] == list(
        zip(TIERS, ["spot", "flex-start", "on-demand"], strict=True)
    )
    # Each tier's pool from zero to a host per server (the autoscaler's most).
    assert envs["dev"].slice_node_range("vllm") == (0, 3)
    # A repeated type is numbered; one capacity is no list.
    reservations = [{"type": "reservation", "reservation": "r1"}, {"type": "reservation", "reservation": "r2"}]
    two = {**VLLM, "capacity": reservations}
    env = Environment.model_validate({**copy.deepcopy(DEV), "slices": {**DEV["slices"], "vllm": two}})
    assert [p for p, _ in env.slices["vllm"].tier_pools("vllm")] == ["vllm", "vllm-reservation-2"]
    assert not envs["prod"].slices["vllm"].falls_back


def test_the_stack_makes_a_pool_per_tier_and_the_class_over_them(stacks: dict[str, dict[str, Any]]) -> None:
    pools = by_name(stacks["dev"], "google_container_node_pool")
    assert pools["vllm"]["node_config"]["spot"] is True
    flex = pools["vllm-flex-start"]
    assert flex["node_config"]["flex_start"] is True and flex["node_config"]["max_run_duration"] == "604800s"
    assert flex["management"]["auto_repair"] is False  # GKE does not repair the Dynamic Workload Scheduler's nodes
    assert "spot" not in pools["vllm-on-demand"]["node_config"]
    (cls,) = [o for o in rendered(stacks["dev"], "compute-classes") if o["kind"] == "ComputeClass"]
    assert cls["metadata"]["name"] == "slice-vllm"
    assert cls["spec"]["priorities"] == [{"nodepools": [p]} for p in TIERS]
    assert cls["spec"]["activeMigration"] == {"optimizeRulePriority": True}
    assert cls["spec"]["whenUnsatisfiable"] == "DoNotScaleUp"
    assert cls["spec"]["nodePoolAutoCreation"] == {"enabled": False}
    # The class is applied once its tiers' pools exist.
    release, _ = release_values(stacks["dev"], "compute-classes")
    assert sorted(d.split(".")[1].rsplit("_pool_", 1)[0] for d in release["depends_on"]) == sorted(
        f"slice-{p}" for p in TIERS
    )
    # prod's slices have one capacity each: no class, no release.
    assert not [r for r in by_name(stacks["prod"], "helm_release") if r == "compute-classes"]


def test_the_servers_select_the_class_and_tolerate_its_taint(stacks: dict[str, dict[str, Any]]) -> None:
    objects = rendered(stacks["dev"], "serve-llama70b-vllm")
    pod = one_of_kind(objects, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    assert pod["nodeSelector"]["cloud.google.com/compute-class"] == "slice-vllm"
    assert "cloud.google.com/gke-nodepool" not in pod["nodeSelector"]
    assert {"key": "cloud.google.com/compute-class", "operator": "Equal", "value": "slice-vllm",
            "effect": "NoSchedule"} in pod["tolerations"]  # fmt: skip
    # GKE moves them back up the tiers one at a time: it respects their disruption budget.
    (budget,) = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "server"
    # The servers are deployed after their class: a Pod that selects a class GKE does not know stays Pending.
    release, _ = release_values(stacks["dev"], "serve-llama70b-vllm")
    assert any(d.startswith("helm_release.compute-classes_") for d in release["depends_on"])


@pytest.mark.parametrize(
    ("slices", "field", "fragment"),
    [
        (
            {"vllm": {**VLLM, "capacity": [{"type": "spot"}, {"type": "queued"}]}},
            "slices.vllm.capacity",
            "'queued' cannot be a tier of a list",
        ),
        (
            {"vllm": {**VLLM, "capacity": [{"type": "spot"}, {"type": "spot"}]}},
            "slices.vllm.capacity",
            "tier 'spot' is listed twice",
        ),
        (
            {
                "vllm-multihost": {
                    "accelerator": "v6e",
                    "topology": "4x4",
                    "machine_type": "ct6e-standard-4t",
                    "capacity": [{"type": "spot"}, {"type": "on-demand"}],
                }
            },
            "slices.vllm-multihost",
            "a capacity list on a multi-host slice",
        ),
        (
            {
                "a3mega-slurm": {
                    "accelerator": "a3-mega",
                    "nodes": 1,
                    "zone": "us-east5-a",
                    "capacity": [{"type": "flex-start", "max_run_hours": 24}, {"type": "spot"}],
                }
            },
            "slices.a3mega-slurm.capacity",
            "slurm (slurm.partitions",
        ),
        (
            {"train": {**VLLM, "capacity": [{"type": "spot"}, {"type": "on-demand"}]}},
            "slices.train.capacity",
            "a capacity list on a slice training.slice places per node pool",
        ),
        (
            {
                "vllm": {**VLLM, "capacity": [{"type": "on-demand"}, {"type": "spot"}]},
                "vllm-spot": {**VLLM, "capacity": {"type": "spot"}},
            },
            "slices.vllm.capacity",
            "its pool 'vllm-spot' is the name of another pool",
        ),
        (
            {"vllm": {**VLLM, "capacity": [{"type": "spot"}, {"type": "flex-start"}]}},
            "slices.vllm.capacity[1]",
            "capacity type 'flex-start' needs `max_run_hours`",
        ),
    ],
    ids=["queued", "twice", "multi-host", "slurm", "ray-training", "pool-name", "tier-field"],
)
def test_a_list_a_class_cannot_hold_is_refused_naming_the_field(
    slices: dict[str, Any], field: str, fragment: str, tmp_path: Path
) -> None:
    line = _refusal(tmp_path, field, **slices)
    assert fragment in line, line
    assert "tiers" not in line.split(":")[0] and "one" not in line.split(":")[0], "pydantic's tag in the path"


def test_the_class_needs_gke_1_30_3(envs: dict[str, Environment]) -> None:
    dev = envs["dev"]
    assert features_used(dev)["compute-class"] == "slices.vllm.capacity"
    assert "compute-class" not in features_used(envs["prod"])
    older = dev.model_copy(update={"cluster": dev.cluster.model_copy(update={"min_master_version": "1.30.2-gke.100"})})
    found = [f.line() for f in RULES["gke.features-need-versions"].run(older)]
    assert any("slices.vllm.capacity needs GKE 1.30.3-gke.1451000 or newer (compute-class" in f for f in found), found


@pytest.fixture(scope="module")
def context(stacks: dict[str, dict[str, Any]]) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    objects = {n: objs for n, (_, objs) in stack_releases(stacks["dev"]).items()}
    return objects, stacks["dev"]


def _run(rule: str, release: str, objects: dict[str, list[dict[str, Any]]], stack: dict[str, Any]) -> list[str]:
    ctx = ReleaseContext(release, "kube-system", stack, objects)
    return [f.line() for f in RULES[rule].run(objects[release], ctx)]


def _class(objects: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    return one_of_kind(objects["compute-classes"], "ComputeClass")


def test_the_class_rule_names_each_thing_gke_would_refuse(
    context: tuple[dict[str, list[dict[str, Any]]], dict[str, Any]],
) -> None:
    objects, stack = copy.deepcopy(context[0]), copy.deepcopy(context[1])
    assert _run("gke.compute-class-tiers", "compute-classes", objects, stack) == []
    cls = _class(objects)
    cls["metadata"]["name"] = "gke-vllm"
    del cls["spec"]["whenUnsatisfiable"]
    cls["spec"]["priorities"].append({"nodepools": ["vllm-reserved"]})
    pools = stack["resource"]["google_container_node_pool"]
    on_demand = next(p for p in pools.values() if p["name"] == "vllm-on-demand")
    on_demand["node_config"]["taint"] = []
    on_demand["autoscaling"]["min_node_count"] = 1
    found = "\n".join(_run("gke.compute-class-tiers", "compute-classes", objects, stack))
    assert "names starting gke or autopilot are GKE's" in found
    assert "whenUnsatisfiable" in found and "the default changed in GKE 1.33" in found
    assert "'vllm-reserved': no node pool of the stack has that name" in found
    # The pools now join slice-vllm, not the renamed class; the on-demand tier also lost its taint and keeps a node.
    assert "the pool lacks node label cloud.google.com/compute-class=gke-vllm" in found
    assert "keeps 1 node(s) at least: active migration cannot move servers off a lower tier" in found


def test_a_pool_in_two_classes_is_refused(context: tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]) -> None:
    objects, stack = copy.deepcopy(context[0]), copy.deepcopy(context[1])
    twin = copy.deepcopy(_class(objects))
    twin["metadata"]["name"] = "slice-vllm-2"
    objects["compute-classes"].append(twin)
    found = _run("gke.compute-class-tiers", "compute-classes", objects, stack)
    assert any("in several classes (slice-vllm, slice-vllm-2)" in line for line in found), found


def test_a_pod_that_selects_an_undeclared_class_is_refused(
    context: tuple[dict[str, list[dict[str, Any]]], dict[str, Any]],
) -> None:
    objects, stack = copy.deepcopy(context[0]), copy.deepcopy(context[1])
    assert _run("gke.compute-class-pod-selector", "serve-llama70b-vllm", objects, stack) == []
    lws = one_of_kind(objects["serve-llama70b-vllm"], "LeaderWorkerSet")
    lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["nodeSelector"]["cloud.google.com/compute-class"] = (
        "slice-other"
    )
    (line,) = _run("gke.compute-class-pod-selector", "serve-llama70b-vllm", objects, stack)
    assert "'slice-other': no ComputeClass of the stack has that name: ['slice-vllm']" in line


def test_the_review_prices_each_tier_and_counts_the_class_once(synth_dir: Path, tmp_path: Path) -> None:
    import shutil

    from infra.review import write_reviews

    out = tmp_path / "out"
    shutil.copytree(synth_dir / "stacks", out / "stacks")
    write_reviews(out)
    text = (out / "review" / "dev.md").read_text()
    assert "## Capacity that falls back" in text
    assert "| 1 | vllm | spot | 9.72 | 29.16 |" in text
    assert "| 3 | vllm-on-demand | on-demand | 21.60 | 64.80 |" in text
    assert "29.16 USD/hour on the first tier, up to 64.80 USD/hour if GKE falls back to the priciest" in text
    (fallback,) = json.loads((out / "review" / "dev.json").read_text())["fallback"]
    assert fallback["compute_class"] == "slice-vllm"
    assert [t["pool"] for t in fallback["tiers"]] == TIERS
    assert fallback["usd_per_hour_at_most"] == {"first_tier": 29.16, "priciest_tier": 64.8}
    assert "| v6e | us-east5-b | 0 | 104 | +104 |" in text  # the three tiers' 3 hosts count once: 24 chips
