"""The first plan review: resources per type, accelerator inventory, protected resources."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from infra.catalogue.consequences import CAPACITY_LOST, DATA_LOST
from infra.cdk.layout import stack_file
from infra.review import accelerator_inventory, diff, render, review_stack
from tests.helpers import REPO


def _bucket_id(stack: dict[str, Any], key: str) -> str:
    return next(k for k in stack["resource"]["google_storage_bucket"] if k.startswith(f"bucket-{key}_"))


def test_dev_inventory_counts_every_slice_by_generation_and_zone(stacks: dict[str, dict[str, Any]]) -> None:
    # v6e: train 16 + serve 16 + prefill 8 + decode 8 + vllm 3 x 8 (its autoscaler's most servers, the tiers
    # counted once) + vllm-multihost 2 x 16 (its count: one slice per server);
    # v5e: two Saxml 4x8 slices.
    # An autoscaled (queued) pool counts at its maximum: what the plan can bring up.
    assert accelerator_inventory(stacks["dev"]) == {
        ("v6e", "us-east5-b"): 104,
        ("v5e", "us-east5-b"): 64,
        ("a3-mega", "us-east5-a"): 16,
    }


def test_review_without_baseline_lists_types_and_inventory(stacks: dict[str, dict[str, Any]]) -> None:
    text = render(review_stack("platform-dev", stacks["dev"], None))
    assert "| v6e | us-east5-b | 0 | 104 | +104 |" in text
    assert "| a3-mega | us-east5-a | 0 | 16 | +16 |" in text
    # 9 slices (the vllm slice's three capacity tiers: three pools; vllm-multihost's two), system, the conversion pool
    assert "| `google_container_node_pool` | 14 |" in text
    assert "## Blocking" not in text


def test_unchanged_stack_has_no_changes(stacks: dict[str, dict[str, Any]]) -> None:
    assert diff(stacks["prod"], stacks["prod"]) == []


def test_removing_a_bucket_blocks(stacks: dict[str, dict[str, Any]]) -> None:
    after = copy.deepcopy(stacks["prod"])
    bucket = _bucket_id(after, "checkpoints")
    del after["resource"]["google_storage_bucket"][bucket]
    review = review_stack("platform-prod", after, stacks["prod"])
    assert [(c.action, c.address) for c in review.blocking] == [("delete", f"google_storage_bucket.{bucket}")]
    assert f"**delete** `google_storage_bucket.{bucket}`" in render(review)


def test_moving_a_bucket_is_a_blocking_replacement_naming_the_attribute(stacks: dict[str, dict[str, Any]]) -> None:
    after = copy.deepcopy(stacks["dev"])
    bucket = _bucket_id(after, "checkpoints")
    after["resource"]["google_storage_bucket"][bucket]["location"] = "EUROPE-WEST4"
    review = review_stack("platform-dev", after, stacks["dev"])
    assert len(review.blocking) == 1
    assert review.blocking[0].action == "replace"
    assert review.blocking[0].replaced_by == ("location",)


def _pool(stack: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in stack["resource"]["google_container_node_pool"].values() if p["name"] == name)


def _address(stack: dict[str, Any], rtype: str, name: str) -> str:
    return next(f"{rtype}.{k}" for k, r in stack["resource"][rtype].items() if r.get("name") == name)


def test_resizing_a_slice_replaces_its_pool_and_blocks_until_confirmed(stacks: dict[str, dict[str, Any]]) -> None:
    """Before the fix the gate blocked buckets, the cluster and the registry only: a new topology replaced the
    running slice's pool (destroy first: the name is fixed) and passed."""
    after = copy.deepcopy(stacks["dev"])
    _pool(after, "train")["node_count"] = 8
    _pool(after, "train")["placement_policy"]["tpu_topology"] = "4x8"
    address = _address(after, "google_container_node_pool", "train")
    review = review_stack("platform-dev", after, stacks["dev"])
    assert "| v6e | us-east5-b | 104 | 120 | +16 |" in render(review)
    assert [(c.action, c.address, c.replaced_by) for c in review.blocking] == [
        ("replace", address, ("placement_policy.tpu_topology",))
    ]
    assert f"`CONFIRM_CHANGE={address}` for your own run" in render(review)
    confirmed = review_stack("platform-dev", after, stacks["dev"], confirmed=[address])
    assert confirmed.blocking == [] and [c.address for c in confirmed.gated] == [address]
    assert "**confirmed**" in render(confirmed)


def test_a_replacement_inside_a_nested_block_is_seen(stacks: dict[str, dict[str, Any]]) -> None:
    """Spot on or off is node_config.spot, ForceNew in the provider's schema: before the fix the offline review
    compared top-level keys and called it an update of node_config."""
    after = copy.deepcopy(stacks["dev"])
    _pool(after, "a3mega")["node_config"]["spot"] = True
    (change,) = review_stack("platform-dev", after, stacks["dev"]).changes
    assert (change.action, change.replaced_by) == ("replace", ("node_config.spot",))
    assert change.blocked.startswith("capacity or work lost: an accelerator slice pool (a3-mega")


def test_the_replacements_are_the_pinned_providers_own() -> None:
    """google 7.x made a cluster's private nodes switchable in place and a node pool's sandbox and subnetwork
    ForceNew (hashicorp/terraform-provider-google v6.50.0 -> v7.45.0): the review follows the provider the stacks
    pin."""
    from infra.catalogue.terraform_google import PROVIDER, forces_replacement

    assert PROVIDER.endswith("v7.45.0")
    assert not forces_replacement("google_container_cluster", "private_cluster_config.enable_private_nodes")
    assert forces_replacement("google_container_cluster", "dataplane_optimization_mode")
    assert forces_replacement("google_container_node_pool", "node_config.sandbox_config.sandbox_type")
    assert forces_replacement("google_container_node_pool", "network_config.subnetwork")


def test_a_machine_type_change_is_an_update_in_place_that_recreates_the_pools_nodes(
    stacks: dict[str, dict[str, Any]],
) -> None:
    """The system pool runs every controller, webhook and router: its nodes recreated is work lost (review 9, N1)."""
    after = copy.deepcopy(stacks["dev"])
    _pool(after, "system")["node_config"]["machine_type"] = "n2-standard-8"
    (change,) = review_stack("platform-dev", after, stacks["dev"]).changes
    assert change.action == "update" and change.kinds == (CAPACITY_LOST,)
    assert "recreates every node of the pool" in change.blocked and change.confirmable
    assert change.values == (("node_config.machine_type", "e2-standard-8", "n2-standard-8"),)


def test_deleting_a_namespace_or_a_release_blocks(stacks: dict[str, dict[str, Any]]) -> None:
    after = copy.deepcopy(stacks["dev"])
    namespace = next(iter(after["resource"]["kubernetes_namespace_v1"]))
    del after["resource"]["kubernetes_namespace_v1"][namespace]
    release = _address(after, "helm_release", "serve-canary")
    del after["resource"]["helm_release"][release.split(".", 1)[1]]
    blocking = {c.address: c.blocked for c in review_stack("platform-dev", after, stacks["dev"]).blocking}
    assert "Secrets made by hand" in blocking[f"kubernetes_namespace_v1.{namespace}"]
    assert "uninstalled" in blocking[release]


def test_depends_on_alone_changes_nothing_and_values_show_before_and_after(stacks: dict[str, dict[str, Any]]) -> None:
    """Terraform plans no change for a new depends_on; a Helm value shows as its path and both values."""
    after = copy.deepcopy(stacks["dev"])
    release = _address(after, "helm_release", "serve-canary").split(".", 1)[1]
    body = after["resource"]["helm_release"][release]
    body["depends_on"] = [*body.get("depends_on", []), "google_container_node_pool.x"]
    assert review_stack("platform-dev", after, stacks["dev"]).changes == []
    values = json.loads(body["values"][0])
    values["replicas"] = int(values.get("replicas", 1)) + 1
    values["apiKey"] = "s3cret"
    body["values"] = [json.dumps(values)]
    (change,) = review_stack("platform-dev", after, stacks["dev"]).changes
    shown = {path: (b, a) for path, b, a in change.values}
    assert shown["values.replicas"][1] == values["replicas"]
    assert shown["values.apiKey"] == (None, "***")
    assert "s3cret" not in render(review_stack("platform-dev", after, stacks["dev"]))


def test_review_command_exits_3_when_blocked(synth_dir: Path, tmp_path: Path) -> None:
    current = tmp_path / "current"
    shutil.copytree(synth_dir / "stacks", current / "stacks")
    path = stack_file(current, "platform-prod")
    stack = json.loads(path.read_text())
    del stack["resource"]["google_container_cluster"]
    path.write_text(json.dumps(stack))
    command = [sys.executable, "-m", "scripts.review", "--outdir", str(current)]
    blocked = subprocess.run([*command, "--base", str(synth_dir)], cwd=REPO, capture_output=True, text=True)
    assert blocked.returncode == 3, blocked.stderr
    assert "BLOCKING: delete google_container_cluster." in blocked.stderr
    assert "## Blocking" in (current / "review" / "prod.md").read_text()
    clean = subprocess.run([*command, "--base", str(current)], cwd=REPO, capture_output=True, text=True)
    assert clean.returncode == 0, clean.stderr


def test_make_review_names_a_replaced_slice_and_lets_a_confirmed_one_through(synth_dir: Path, tmp_path: Path) -> None:
    current = tmp_path / "current"
    shutil.copytree(synth_dir / "stacks", current / "stacks")
    path = stack_file(current, "platform-dev")
    stack = json.loads(path.read_text())
    _pool(stack, "serve")["node_locations"] = ["us-east5-a"]
    _pool(stack, "serve")["placement_policy"]["tpu_topology"] = "2x8"
    path.write_text(json.dumps(stack))
    address = _address(stack, "google_container_node_pool", "serve")
    argv = ["make", "--no-print-directory", "review", f"OUT={current}", f"BASE={synth_dir}"]
    blocked = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    assert blocked.returncode != 0
    assert f"BLOCKING: replace {address} (platform-dev): capacity or work lost: an accelerator slice pool (v6e" in (
        blocked.stderr
    )
    assert f"confirm with CONFIRM_CHANGE={address}" in blocked.stderr
    confirmed = subprocess.run([*argv, f"CONFIRM_CHANGE={address}"], cwd=REPO, capture_output=True, text=True)
    assert confirmed.returncode == 0, confirmed.stderr
    assert f"confirmed: replace {address}" in confirmed.stderr


def test_the_review_counts_the_gpus_each_orchestrator_would_hold(
    stacks: dict[str, dict[str, Any]], envs: dict[str, Any], tmp_path: Path
) -> None:
    from infra.review import write_reviews
    from infra.slurm.blueprint import blueprint
    from infra.vertex.job import custom_job, job_names

    for name, env in envs.items():
        stack_dir = tmp_path / "stacks" / f"platform-{name}"
        stack_dir.mkdir(parents=True)
        (stack_dir / "cdk.tf.json").write_text(json.dumps(stacks[name]))
        (tmp_path / "slurm" / name).mkdir(parents=True)
        (tmp_path / "slurm" / name / "blueprint.yaml").write_text(json.dumps(blueprint(env)))
        (tmp_path / "vertex" / name).mkdir(parents=True)
        for job in job_names(env):
            (tmp_path / "vertex" / name / f"{job}.json").write_text(json.dumps(custom_job(env, job)))
    reviews = {r.stack: r for r in write_reviews(tmp_path)}
    dev = reviews["platform-dev"]
    assert [(h.orchestrator, h.what, h.gpus) for h in dev.holdings] == [
        ("GKE", "node pool a3mega", 16),
        ("Slurm", "nodeset a3mega", 16),
        ("Vertex AI", "job nccl-test", 16),
        ("Vertex AI", "job train", 16),
        ("VMs", "group dev-a3mega", 16),
    ]
    text = (tmp_path / "review" / "dev.md").read_text()
    dynamic = "| Slurm | nodeset a3mega | 16 | a3-megagpu-8g x2: 0 static, 2 created for jobs and deleted when idle |"
    assert dynamic in text and "| total | | 80 | |" in text
    assert "| Vertex AI | job train | 16 | a3-megagpu-8g x2, FLEX_START: only while the job runs" in text
    prod = (tmp_path / "review" / "prod.md").read_text()
    assert "| Slurm | nodeset a3mega | 16 | a3-megagpu-8g x2: 2 static |" in prod


def test_the_review_says_what_each_group_costs_per_hour_where_the_price_is_known(
    stacks: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """Two A3 Mega VMs in us-east5-a at the catalogue's list price (its GPUs at us-central1's row: us-east5's is an
    anomaly, prices.SUSPECT_BELOW); a region without a price shows none."""
    from infra.review import Holding, vm_holdings

    (group,) = vm_holdings(stacks["dev"])
    assert group.hourly == round(2 * (10.65487 + 82.75421), 2) == 186.82
    spot = Holding("VMs", "g", 16, "", 2, "a3-megagpu-8g", "us-east5-a", "spot")
    assert spot.hourly == round(2 * (2.32627 + 18.064), 2)
    assert Holding("VMs", "g", 16, "", 2, "a3-megagpu-8g", "europe-west4-b", "spot").hourly is None
    assert Holding("Vertex AI", "job", 16, "", 2, "a3-megagpu-8g", "", "").hourly is None


def _cost_row(text: str, pool: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"| {pool} | "))


def test_the_review_prices_every_pool_per_hour_and_month_at_its_fewest_and_most_nodes(
    stacks: dict[str, dict[str, Any]],
) -> None:
    """Before, dev's 144 TPU chips had no price; now every pool has one, per hour and per 730-hour month."""
    text = render(review_stack("platform-dev", stacks["dev"], None))
    assert "## Cost" in text and "730 hours" in text
    assert _cost_row(text, "train") == "| train | ct6e-standard-4t | on-demand | 4 | 10.80 | 43.20 | 31,536.00 |"
    assert _cost_row(text, "sax-a") == "| sax-a | ct5lp-hightpu-4t | spot | 8 | 2.40 | 19.20 | 14,016.00 |"
    assert _cost_row(text, "a3mega").startswith(
        "| a3mega | a3-megagpu-8g | queued (DWS), at on-demand (upper bound) | 0-2 |"
    )
    assert "| 0.00-186.82 | 0.00-136,377.26 |" in _cost_row(text, "a3mega")
    assert "No price" not in text and "Cost change" not in text
    assert "- a3mega: H100-MEGA x8 in us-east5 at 82.7542 (us-central1): the source's us-east5 row, 35.3915" in text


def test_a_change_of_node_count_and_price_shows_each_cost_before_and_after(stacks: dict[str, dict[str, Any]]) -> None:
    after = copy.deepcopy(stacks["dev"])
    _pool(after, "system")["autoscaling"]["total_max_node_count"] = 6
    del _pool(after, "serve")["node_config"]["spot"]  # spot -> on-demand
    text = render(review_stack("platform-dev", after, stacks["dev"]))
    assert _cost_row(text, "serve") == (
        "| serve | ct6e-standard-4t | spot \u2192 on-demand | 4 | 4.86 \u2192 10.80 | 19.44 \u2192 43.20 "
        "| 14,191.20 \u2192 31,536.00 |"
    )
    assert "| 1-5 \u2192 1-6 |" in _cost_row(text, "system")
    # 4 x (10.80 - 4.86) + 0.26805 for the sixth system node, at the most nodes (the vllm slice's three capacity
    # tiers count once: 0 nodes at the fewest, 3 on-demand at the most).
    assert "- at the most nodes: 431.09 \u2192 455.12 USD/hour (+24.03)" in text
    assert "- at the fewest nodes: 120.75 \u2192 144.51 USD/hour (+23.76)" in text
    # What the pools' fewest nodes leave out: the autoscalers' fewest servers, one v6e-8 host on the vllm slice's
    # cheapest tier (9.72) and one whole v6e-16 slice of the multi-host server (4 x 4.86), whose pools all start
    # at zero.
    assert "fewest servers hold 29.16 USD/hour (21,286.80 USD/month) more than their pools' fewest nodes" in text
    assert "At the fewest servers, the node pools cost 173.67 USD/hour" in text


def test_a_pool_created_or_deleted_costs_from_or_to_none(stacks: dict[str, dict[str, Any]]) -> None:
    after = copy.deepcopy(stacks["dev"])
    pools = after["resource"]["google_container_node_pool"]
    convert = next(k for k, p in pools.items() if p["name"] == "convert")
    pools["copy-of-train"] = {**copy.deepcopy(_pool(after, "train")), "name": "train2"}
    del pools[convert]
    text = render(review_stack("platform-dev", after, stacks["dev"]))
    assert _cost_row(text, "train2").startswith("| train2 | none \u2192 ct6e-standard-4t |")
    assert _cost_row(text, "convert").startswith("| convert | c4-highmem-288 \u2192 none |")


def test_an_unpriced_pool_is_listed_with_its_reason_and_left_out_of_the_total(
    stacks: dict[str, dict[str, Any]],
) -> None:
    after = copy.deepcopy(stacks["dev"])
    _pool(after, "train")["node_config"]["machine_type"] = "tpu7x-standard-4t"
    text = render(review_stack("platform-dev", after, stacks["dev"]))
    assert "| 10.80 \u2192 \u2014 |" in _cost_row(text, "train")
    assert "- train: TPU7x (Ironwood) has no row in the pinned SkyPilot catalogue" in text
    assert "- at the most nodes: 431.09 \u2192 387.89 USD/hour (-43.20)" in text


def test_a_real_plan_shows_the_cost_change(stacks: dict[str, dict[str, Any]]) -> None:
    """A plan's values hold blocks as lists and every field: the same pool, its count 2 -> 4 and spot -> on-demand."""
    from infra.review import review_plan

    def pool(nodes: int, spot: bool) -> dict[str, Any]:
        return {
            "name": "prefill",
            "location": "us-east5",
            "node_locations": ["us-east5-b"],
            "node_count": nodes,
            "autoscaling": [],
            "queued_provisioning": [{"enabled": False}],
            "node_config": [{"machine_type": "ct6e-standard-4t", "spot": spot, "reservation_affinity": []}],
        }

    entry = {
        "address": "google_container_node_pool.prefill",
        "type": "google_container_node_pool",
        "change": {"actions": ["delete", "create"], "before": pool(2, True), "after": pool(4, False)},
    }
    text = render(review_plan("platform-dev", {"format_version": "1.2", "resource_changes": [entry]}))
    assert _cost_row(text, "prefill") == (
        "| prefill | ct6e-standard-4t | spot \u2192 on-demand | 2 \u2192 4 | 4.86 \u2192 10.80 | 9.72 \u2192 43.20 "
        "| 7,095.60 \u2192 31,536.00 |"
    )
    assert "- at the most nodes: 9.72 \u2192 43.20 USD/hour (+33.48)" in text


def _cluster(stack: dict[str, Any]) -> dict[str, Any]:
    return next(iter(stack["resource"]["google_container_cluster"].values()))


def _registry(stack: dict[str, Any]) -> dict[str, Any]:
    return next(iter(stack["resource"]["google_artifact_registry_repository"].values()))


def _checkpoints(stack: dict[str, Any]) -> dict[str, Any]:
    return stack["resource"]["google_storage_bucket"][_bucket_id(stack, "checkpoints")]


# Updates the provider makes in place that recreate a running slice's (or every) node or make a bucket's or the
# registry's data deletable (the review of main, section B, attacks 1-4 and 10-12; each passed before the fix).
DESTRUCTIVE: dict[str, Callable[[dict[str, Any]], Any]] = {
    "slice image type": lambda s: _pool(s, "serve")["node_config"].update(image_type="UBUNTU_CONTAINERD"),
    "slice machine type": lambda s: _pool(s, "serve")["node_config"].update(machine_type="ct6e-standard-8t"),
    "slice node count": lambda s: _pool(s, "train").update(node_count=0),
    "slice node version": lambda s: _pool(s, "train").update(version="1.35.4-gke.100"),
    "cluster DNS cache": lambda s: _cluster(s).setdefault("addons_config", {}).update(dns_cache_config={"enabled": 1}),
    "bucket soft delete off": lambda s: _checkpoints(s)["soft_delete_policy"].update(retention_duration_seconds=0),
    "bucket versioning off": lambda s: _checkpoints(s)["versioning"].update(enabled=False),
    "bucket Delete rule": lambda s: _checkpoints(s)["lifecycle_rule"].append({"action": {"type": "Delete"}}),
    "bucket force_destroy": lambda s: _checkpoints(s).update(force_destroy=True),
    "registry cleanup for real": lambda s: _registry(s).update(cleanup_policy_dry_run=False),
}


@pytest.mark.parametrize("case", sorted(DESTRUCTIVE))
def test_an_update_in_place_that_destroys_blocks_until_confirmed(stacks: dict[str, dict[str, Any]], case: str) -> None:
    mutate = DESTRUCTIVE[case]
    before = copy.deepcopy(stacks["prod"])
    if case == "registry cleanup for real":
        _registry(before)["cleanup_policy_dry_run"] = True
    after = copy.deepcopy(before)
    mutate(after)
    review = review_stack("platform-prod", after, before)
    ((change,),) = [review.blocking]
    assert change.action == "update" and "an in-place update that destroys: " in change.blocked, change
    assert change.kinds == ((DATA_LOST,) if case.startswith(("bucket", "registry")) else (CAPACITY_LOST,))
    assert change.confirmable
    assert review_stack("platform-prod", after, before, confirmed=[change.address]).blocking == []


def test_harmless_updates_of_the_same_resources_pass(stacks: dict[str, dict[str, Any]]) -> None:
    """Node labels on a slice, a CPU pool allowed more nodes, a longer soft delete, versioning turned on: no gate."""
    before = copy.deepcopy(stacks["prod"])
    _checkpoints(before)["versioning"]["enabled"] = False
    after = copy.deepcopy(before)
    _pool(after, "serve")["node_config"].setdefault("labels", {})["team"] = "serving"
    _pool(after, "system")["autoscaling"]["total_max_node_count"] += 2
    _checkpoints(after)["soft_delete_policy"]["retention_duration_seconds"] *= 2
    _checkpoints(after)["versioning"]["enabled"] = True
    review = review_stack("platform-prod", after, before)
    assert len(review.changes) == 3 and review.blocking == [], [(c.address, c.blocked) for c in review.changes]


def test_a_real_plans_nested_blocks_are_read_as_lists(stacks: dict[str, dict[str, Any]]) -> None:
    """terraform show -json writes nested blocks as one-element lists: the image type is still found."""
    from infra.review import review_plan

    pool = copy.deepcopy(_pool(stacks["prod"], "serve"))
    before = {**pool, "node_config": [pool["node_config"]]}
    after = copy.deepcopy(before)
    after["node_config"][0]["image_type"] = "UBUNTU_CONTAINERD"
    address = _address(stacks["prod"], "google_container_node_pool", "serve")
    plan = {
        "format_version": "1.2",
        "resource_changes": [
            {"address": address, "type": "google_container_node_pool",
             "change": {"actions": ["update"], "before": before, "after": after}},
        ],
    }  # fmt: skip
    (change,) = review_plan("platform-prod", plan).blocking
    assert "node_config.image_type: recreates every node of the slice" in change.blocked


def test_make_review_refuses_files_that_are_not_what_it_reads(synth_dir: Path, tmp_path: Path) -> None:
    """a JSON list as PLAN and a truncated baseline ended in tracebacks; a state as PLAN reviewed as an
    empty plan and a BASE with no stacks reviewed everything as new, both exit 0."""
    cases = {
        "list.json": ("[1, 2]", "a JSON list, not a plan"),
        "state.json": (
            json.dumps({"format_version": "1.0", "terraform_version": "1.12.2", "values": {"root_module": {}}}),
            "this is a state (terraform show -json of a state file), not a plan",
        ),
    }
    for name, (text, said) in cases.items():
        (tmp_path / name).write_text(text)
        done = subprocess.run(
            [sys.executable, "-m", "scripts.review", "--plan", str(tmp_path / name)],
            cwd=REPO, capture_output=True, text=True,
        )  # fmt: skip
        assert done.returncode == 2 and f"error: {tmp_path / name}: {said}" in done.stderr, done.stderr
    truncated = tmp_path / "base" / "stacks" / "platform-dev"
    truncated.mkdir(parents=True)
    (truncated / "cdk.tf.json").write_text('{"resource": {')
    for base, said in (
        (tmp_path / "base", f"{truncated / 'cdk.tf.json'}: not JSON"),
        (tmp_path / "none", "no synthesized stacks"),
    ):
        out = tmp_path / "out"
        shutil.copytree(synth_dir / "stacks", out / "stacks", dirs_exist_ok=True)
        done = subprocess.run(
            [sys.executable, "-m", "scripts.review", "--outdir", str(out), "--base", str(base)],
            cwd=REPO, capture_output=True, text=True,
        )  # fmt: skip
        assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_the_json_review_holds_the_markdowns_facts_and_its_schema(synth_dir: Path, tmp_path: Path) -> None:
    """`cdktf.out/review/<env>.json` beside the Markdown, validated against docs/review.schema.json,
    saying the same: the counts, every change, what blocks, the cost totals."""
    import jsonschema

    from infra.review import write_reviews

    current = tmp_path / "current"
    shutil.copytree(synth_dir / "stacks", current / "stacks")
    path = stack_file(current, "platform-dev")
    stack = json.loads(path.read_text())
    _pool(stack, "train")["placement_policy"]["tpu_topology"] = "4x8"  # a replaced slice: gated
    _pool(stack, "system")["autoscaling"]["total_max_node_count"] = 6  # an update
    path.write_text(json.dumps(stack))
    write_reviews(current, synth_dir)
    schema = json.loads((REPO / "docs" / "review.schema.json").read_text())
    for env in ("dev", "prod"):
        facts = json.loads((current / "review" / f"{env}.json").read_text())
        jsonschema.validate(facts, schema)
        markdown = (current / "review" / f"{env}.md").read_text()
        for action, n in facts["counts"].items():
            assert f"| {action} | {n} |" in markdown
        for change in facts["changes"]:
            assert f"`{change['address']}`" in markdown or change["address"].split(".", 1)[1] in markdown
        for address in facts["blocking"]:
            assert f"`{address}`" in markdown and f"CONFIRM_CHANGE={address}" in markdown
        after, before = facts["cost"]["after"], facts["cost"]["before"]
        hour = f"{after['usd_per_hour']['fewest']:,.2f}-{after['usd_per_hour']['most']:,.2f}"
        old = f"{before['usd_per_hour']['fewest']:,.2f}-{before['usd_per_hour']['most']:,.2f}"
        assert (f"| {hour} |" if hour == old else f"{old} \u2192 {hour}") in markdown
        for engine in facts["engines"]:  # each argument on its own line under its release
            block = markdown.split(f"- `{engine['release']}`, {engine['engine']}:", 1)[1].split("```")[1]
            assert block.split() == engine["args"], engine["release"]
    dev = json.loads((current / "review" / "dev.json").read_text())
    vllm = next(e for e in dev["engines"] if e["release"] == "serve-llama70b-vllm")
    # The vLLM deployment's arguments, the platform's and then the file's extra_args, are in the review.
    assert vllm["args"][0] == "--model=gs://acme-ml-platform-dev-models/hf/Llama-3.3-70B-Instruct"
    assert "--max-num-batched-tokens=512" in vllm["args"] and {e["engine"] for e in dev["engines"]} == {
        "vLLM (`vllm serve`)",
        "JetStream (MaxText)",
    }
    train = _address(stack, "google_container_node_pool", "train")
    assert dev["blocking"] == [train] and dev["counts"] == {"create": 0, "update": 1, "replace": 1, "delete": 0}
    (replaced,) = [c for c in dev["changes"] if c["action"] == "replace"]
    assert replaced["gate"]["confirmable"] and not replaced["gate"]["confirmed"]
    assert replaced["replaced_by"] == ["placement_policy.tpu_topology"]


def test_the_review_holds_the_budget_against_the_node_pools(stacks: dict[str, dict[str, Any]]) -> None:
    text = render(review_stack("platform-dev", stacks["dev"], None))
    assert (
        "- Budget: 320,000 USD/month on billing account 01A2B3-C4D5E6-F7A8B9, alerting at 50%, 90%, 100%, 100% "
        "forecast of the month's spend." in text
    )
    # 109,432.88 (the pools' fewest nodes, and the servers the autoscalers keep at their fewest: the vllm slice's
    # pools all start at zero) is under half of 320,000; 314,693.68 is past 90% of it.
    assert (
        "The node pools alone, at list prices: at their fewest nodes 109,432.88 USD/month, within its first "
        "threshold; at their most nodes 314,693.68 USD/month, past its 90% threshold." in text
    )
    smaller = copy.deepcopy(stacks["dev"])
    (budget,) = smaller["resource"]["google_billing_budget"].values()
    budget["amount"]["specified_amount"]["units"] = "100000"
    text = render(review_stack("platform-dev", smaller, None))
    assert "at their fewest nodes 109,432.88 USD/month, past its 100% threshold" in text


def test_an_autoscaled_slice_pools_creation_size_is_not_a_reason_to_replace_it(stacks: dict[str, Any]) -> None:
    """`initial_node_count` is read only when a pool is created, and ForceNew in the provider: the autoscaled slice
    pools ignore it (lifecycle), so a minimum that moves, or a fixed pool that comes to autoscale, is an update of
    its autoscaling, not a replacement that loses its nodes and what runs there."""
    after = copy.deepcopy(stacks["dev"])
    pool = _pool(after, "vllm-multihost")
    pool["initial_node_count"], pool["autoscaling"]["min_node_count"] = 4, 4
    address = _address(after, "google_container_node_pool", "vllm-multihost")
    (change,) = [c for c in review_stack("platform-dev", after, stacks["dev"]).changes if c.address == address]
    assert (change.action, change.attributes) == ("update", ("autoscaling",))


def test_an_attribute_the_provider_keeps_is_no_change_when_the_configuration_leaves_it_out(
    stacks: dict[str, Any],
) -> None:
    """A node pool's `node_count` is optional and computed in the provider's schema (infra/catalogue/
    optional_computed.json, read from the real providers): left out, the pool keeps the nodes the state holds, and
    Terraform plans nothing. The offline review read it as a change to no nodes, which the gate names as capacity
    lost; a fixed pool that comes to autoscale is an update of its autoscaling alone. A new count is a change."""
    address = _address(stacks["dev"], "google_container_node_pool", "train")
    left_out = copy.deepcopy(stacks["dev"])
    del _pool(left_out, "train")["node_count"]
    assert [c for c in review_stack("platform-dev", left_out, stacks["dev"]).changes if c.address == address] == []
    autoscaled = copy.deepcopy(left_out)
    _pool(autoscaled, "train")["autoscaling"] = {"total_min_node_count": 0, "total_max_node_count": 4}
    (change,) = [c for c in review_stack("platform-dev", autoscaled, stacks["dev"]).changes if c.address == address]
    assert change.attributes == ("autoscaling",)
    resized = copy.deepcopy(stacks["dev"])
    _pool(resized, "train")["node_count"] = 8
    (change,) = [c for c in review_stack("platform-dev", resized, stacks["dev"]).changes if c.address == address]
    assert change.attributes == ("node_count",)
