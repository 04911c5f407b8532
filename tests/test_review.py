"""The first plan review: resources per type, accelerator inventory, protected resources."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from infra.review import accelerator_inventory, diff, render, review_stack
from tests.conftest import REPO


def _bucket_id(stack: dict[str, Any], key: str) -> str:
    return next(k for k in stack["resource"]["google_storage_bucket"] if k.startswith(f"bucket-{key}_"))


def test_dev_inventory_counts_every_slice_by_generation_and_zone(stacks: dict[str, dict[str, Any]]) -> None:
    # v6e: train 16 + serve 16 + prefill 8 + decode 8 + vllm 2 x 8 (two replicas) + vllm-multihost 16;
    # v5e: two Saxml 4x8 slices.
    # An autoscaled (queued) pool counts at its maximum: what the plan can bring up.
    assert accelerator_inventory(stacks["dev"]) == {
        ("v6e", "us-east5-b"): 80,
        ("v5e", "us-east5-b"): 64,
        ("a3-mega", "us-east5-a"): 16,
    }


def test_review_without_baseline_lists_types_and_inventory(stacks: dict[str, dict[str, Any]]) -> None:
    text = render(review_stack("platform-dev", stacks["dev"], None))
    assert "| v6e | us-east5-b | 0 | 80 | +80 |" in text
    assert "| a3-mega | us-east5-a | 0 | 16 | +16 |" in text
    assert "| `google_container_node_pool` | 11 |" in text  # 9 slices, system, the conversion pool
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


def test_resizing_a_slice_shows_in_the_inventory_without_blocking(stacks: dict[str, dict[str, Any]]) -> None:
    after = copy.deepcopy(stacks["dev"])
    for pool in after["resource"]["google_container_node_pool"].values():
        if pool["name"] == "train":
            pool["node_count"] = 8
            pool["placement_policy"]["tpu_topology"] = "4x8"
    review = review_stack("platform-dev", after, stacks["dev"])
    assert review.blocking == []
    assert "| v6e | us-east5-b | 80 | 96 | +16 |" in render(review)
    assert [c.action for c in review.changes] == ["replace"]


def test_review_command_exits_3_when_blocked(synth_dir: Path, tmp_path: Path) -> None:
    current = tmp_path / "current"
    shutil.copytree(synth_dir / "stacks", current / "stacks")
    path = current / "stacks" / "platform-prod" / "cdk.tf.json"
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
    """Two A3 Mega VMs in us-east5-a at the catalogue's list price; a zone without a price shows none."""
    from infra.catalogue import prices
    from infra.review import Holding, vm_holdings

    (group,) = vm_holdings(stacks["dev"])
    one = prices.PRICES[("a3-megagpu-8g", "us-east5-a")]
    assert group.hourly == round(2 * (one.on_demand[0] + one.on_demand[1]), 2) == 92.09
    spot = Holding("VMs", "g", 16, "", 2, "a3-megagpu-8g", "us-east5-a", "spot")
    assert spot.hourly == round(2 * (one.spot[0] + one.spot[1]), 2)
    assert Holding("VMs", "g", 16, "", 2, "a3-megagpu-8g", "us-central1-a", "spot").hourly is None
    assert Holding("Vertex AI", "job", 16, "", 2, "a3-megagpu-8g", "", "").hourly is None
