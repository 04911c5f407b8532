"""Delivery: plan review of real plans, promotion dev -> prod, image builds, user workflows."""

from __future__ import annotations

import copy
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.config import ConfigError
from infra.delivery.images import plan_build
from infra.delivery.promote import PromotionError, promote
from infra.review import PlanFormatError, render, review_plan
from infra.synth.load import load_environment
from tests.helpers import REPO

PLANS = REPO / "tests" / "fixtures" / "plans"
DIGEST = "sha256:" + "ab" * 32


def _plan(name: str) -> dict[str, Any]:
    return json.loads((PLANS / name).read_text())


def _review_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scripts.review", *args], cwd=REPO, capture_output=True, text=True)


# --- plan review ---------------------------------------------------------------------------------------------


def test_review_of_a_plan_replacing_the_checkpoint_bucket_blocks_and_names_it() -> None:
    result = _review_cli("--plan", str(PLANS / "replace-checkpoint-bucket.json"), "--stack", "platform-prod")
    assert result.returncode == 3, result.stderr
    blocking = result.stdout.split("## Blocking", 1)[1].split("##", 1)[0]
    assert "google_storage_bucket.bucket-checkpoints_bucket_2429A4B3" in blocking
    assert "forced by location" in blocking
    assert "| replace | 1 |" in result.stdout
    assert "update `google_container_node_pool.slice-train_pool_11E2D2E2`: management" in result.stdout


def test_the_same_plan_without_the_bucket_change_passes() -> None:
    result = _review_cli("--plan", str(PLANS / "update-node-pool.json"))
    assert result.returncode == 0, result.stderr
    assert "## Blocking" not in result.stdout


@pytest.mark.parametrize(
    ("rtype", "actions", "blocks"),
    [
        ("google_storage_bucket", ["delete"], True),
        ("google_storage_bucket", ["delete", "create"], True),
        ("google_storage_bucket", ["create", "delete"], True),
        ("google_container_cluster", ["delete"], True),
        ("google_container_cluster", ["delete", "create"], True),
        ("google_artifact_registry_repository", ["create", "delete"], True),
        ("google_storage_bucket", ["update"], False),
        ("google_storage_bucket", ["create"], False),
        # Not protected, but every node of it goes: gated by its consequence (capacity lost), confirmable.
        ("google_container_node_pool", ["delete", "create"], True),
        ("google_container_cluster", ["no-op"], False),
        ("google_container_cluster", ["read"], False),
    ],
)
def test_every_action_form_of_a_protected_resource(rtype: str, actions: list[str], blocks: bool) -> None:
    before = None if actions == ["create"] else {"name": "x", "location": "US"}
    after = None if actions == ["delete"] else {"name": "x", "location": "EU"}
    plan = {
        "format_version": "1.2",
        "resource_changes": [
            {"address": f"{rtype}.r", "type": rtype, "change": {"actions": actions, "before": before, "after": after}}
        ],
    }
    review = review_plan("platform-dev", plan)
    assert bool(review.blocking) == blocks


def test_resizing_a_slice_shows_chips_moving_and_the_forcing_attribute() -> None:
    text = render(review_plan("platform-dev", _plan("resize-slice.json")))
    assert "| v6e | us-east5-b | 16 | 64 | +48 |" in text
    assert "replacement forced by placement_policy.0.tpu_topology" in text


def test_drift_is_reported() -> None:
    text = render(review_plan("platform-prod", _plan("replace-checkpoint-bucket.json")))
    assert "## Drift" in text
    assert "update `google_storage_bucket.bucket-datasets_bucket_13E1B35D`: labels" in text


def test_a_plan_of_an_unknown_format_major_is_refused(tmp_path: Path) -> None:
    plan = _plan("update-node-pool.json")
    plan["format_version"] = "2.0"
    with pytest.raises(PlanFormatError, match=r"'2\.0' is not supported"):
        review_plan("platform-dev", plan)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    result = _review_cli("--plan", str(path))
    assert result.returncode == 2
    assert "format_version '2.0'" in result.stderr


# --- promotion -----------------------------------------------------------------------------------------------


@pytest.fixture
def environments(tmp_path: Path) -> Path:
    directory = tmp_path / "environments"
    shutil.copytree(REPO / "infra" / "environments", directory)
    return directory


GPU_DIGEST = "sha256:" + "cd" * 32


OTHER_IMAGES = ["checkpoint-converter", "server", "trainer-gpu", "vllm-tpu"]


def _pin_dev(environments: Path, image: str) -> None:
    """Pin dev's trainer at `image` and every other image at a good digest of its own."""
    path = environments / "dev.yaml"
    text = path.read_text()
    images = load_environment(path).release.images
    assert sorted(images) == sorted(["trainer", *OTHER_IMAGES])
    text = text.replace(images["trainer"], image)
    for name in OTHER_IMAGES:
        text = text.replace(
            images[name], f"us-east5-docker.pkg.dev/acme-ml-platform-dev/ml-platform/{name}@{GPU_DIGEST}"
        )
    path.write_text(text)


def _snapshot(directory: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(directory.iterdir())}


REGISTRY = "us-east5-docker.pkg.dev/acme-ml-platform-dev/ml-platform"


@pytest.mark.parametrize(
    ("image", "message"),
    [
        (f"{REGISTRY}/trainer:v1", "pinned by digest"),
        # A digest cut short is told so, not to pin by digest (it is).
        (
            "us-east5-docker.pkg.dev/acme-ml-platform-dev/ml-platform/trainer@sha256:abc123",
            "'sha256:abc123' is not a whole digest",
        ),
        # Refused at load (release.images.trainer: not this environment's registry), before promote.
        (f"us-east5-docker.pkg.dev/someone-else/images/trainer@{DIGEST}", "not (in dev's|this environment's) registry"),
        (f"us-east5-docker.pkg.dev/acme-ml-platform-dev/ml-platform/trainer@sha256:{'0' * 64}", "placeholder"),
    ],
)
def test_promotion_refuses_anything_but_a_digest_from_the_source_registry(
    environments: Path, image: str, message: str
) -> None:
    _pin_dev(environments, image)
    before = _snapshot(environments)
    calls: list[list[str]] = []
    with pytest.raises((ConfigError, PromotionError), match=message):
        promote("dev", "prod", dry_run=False, run=lambda c: calls.append(list(c)), environments=environments)
    assert calls == []
    assert _snapshot(environments) == before


def test_promotion_into_an_environment_that_does_not_promote_from_the_source_is_refused(environments: Path) -> None:
    """Its deployer could not read the source's registry (bootstrap grants only `delivery.promotes_from`'s): the
    copy would fail after nothing useful; the refusal names the field and the fix."""
    _pin_dev(environments, f"us-east5-docker.pkg.dev/acme-ml-platform-dev/ml-platform/trainer@{DIGEST}")
    path = environments / "prod.yaml"
    path.write_text(path.read_text().replace("  promotes_from: dev\n", ""))
    before = _snapshot(environments)
    with pytest.raises(PromotionError, match=r"prod.yaml: delivery.promotes_from is None, not 'dev'.*bootstrap-prod"):
        promote("dev", "prod", dry_run=False, run=lambda c: pytest.fail("copied"), environments=environments)
    assert _snapshot(environments) == before


def test_promotion_refuses_when_the_source_pins_nothing(environments: Path) -> None:
    for name in ("dev", "prod"):
        path = environments / f"{name}.yaml"
        data = yaml.safe_load(path.read_text())
        data["release"]["images"] = {}
        del data["training"], data["serving"]
        data["slices"]["vllm-multihost"].pop("count", None)  # a slice per server of the vLLM deployment removed
        for team in (data.get("teams") or {}).values():
            team.pop("borrow_training", None)  # no training cluster to borrow from
        data["batch"].pop("training", None)
        data["slurm"].pop("training", None)
        data["vertex"].pop("training", None)
        path.write_text(yaml.safe_dump(data))
    with pytest.raises(PromotionError, match="pins no images"):
        promote("dev", "prod", dry_run=True, run=lambda c: None, environments=environments)


def test_promotion_updates_prod_keeping_comments_and_a_second_run_changes_nothing(environments: Path) -> None:
    _pin_dev(environments, f"us-east5-docker.pkg.dev/acme-ml-platform-dev/ml-platform/trainer@{DIGEST}")
    prod = environments / "prod.yaml"
    comments = [line for line in prod.read_text().splitlines() if line.lstrip().startswith("#")]
    calls: list[list[str]] = []
    first = promote("dev", "prod", dry_run=False, run=lambda c: calls.append(list(c)), environments=environments)
    assert first.changed
    assert f"+    trainer: us-east5-docker.pkg.dev/acme-ml-platform-prod/ml-platform/trainer@{DIGEST}" in first.diff
    # One copy per image, in name order, each to prod's registry under the digest's tag.
    assert calls == [
        [
            "gcloud", "container", "images", "add-tag", "--quiet",
            f"us-east5-docker.pkg.dev/acme-ml-platform-dev/ml-platform/{name}@{digest}",
            f"us-east5-docker.pkg.dev/acme-ml-platform-prod/ml-platform/{name}:promoted-{digest[7:19]}",
        ]
        for name, digest in sorted([("trainer", DIGEST)] + [(n, GPU_DIGEST) for n in OTHER_IMAGES])
    ]  # fmt: skip
    assert load_environment(prod).release.images["trainer"].endswith(DIGEST)
    assert [line for line in prod.read_text().splitlines() if line.lstrip().startswith("#")] == comments
    after_first = prod.read_text()
    second = promote("dev", "prod", dry_run=False, run=lambda c: calls.append(list(c)), environments=environments)
    assert not second.changed
    assert prod.read_text() == after_first
    assert len(calls) == 1 + len(OTHER_IMAGES)  # each image copied once: the second run copies nothing


def test_promotion_dry_run_writes_nothing_and_runs_nothing(environments: Path) -> None:
    _pin_dev(environments, f"us-east5-docker.pkg.dev/acme-ml-platform-dev/ml-platform/trainer@{DIGEST}")
    before = _snapshot(environments)
    promotion = promote("dev", "prod", dry_run=True, run=lambda c: pytest.fail("ran"), environments=environments)
    assert promotion.changed and promotion.copies
    assert _snapshot(environments) == before


def test_promotion_dry_run_refuses_a_result_the_write_would_refuse(
    environments: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real promotion writes prod.yaml only if the result loads (every environment rule): its dry run holds the
    result to the same loader. The loader is made to refuse here; which pins a rule refuses is the rules' tests'."""
    from infra.delivery import release_file

    _pin_dev(environments, f"us-east5-docker.pkg.dev/acme-ml-platform-dev/ml-platform/trainer@{DIGEST}")
    before = _snapshot(environments)

    def refuse(path: Path) -> None:
        raise ConfigError(path, ["release.controllers.kueue: '9.9.9': refused by a stand-in rule"])

    monkeypatch.setattr(release_file, "load_environment", refuse)
    with pytest.raises(ConfigError, match="refused by a stand-in rule"):
        promote("dev", "prod", dry_run=True, run=lambda c: pytest.fail("ran"), environments=environments)
    assert _snapshot(environments) == before


def test_make_promote_refuses_a_tag_through_the_command_line(tmp_path: Path) -> None:
    clone = tmp_path / "repo"
    shutil.copytree(REPO / "infra" / "environments", clone / "infra" / "environments")
    dev = clone / "infra" / "environments" / "dev.yaml"
    current = load_environment(dev).release.images["trainer"]
    dev.write_text(dev.read_text().replace(current, current.split("@")[0] + ":v1"))
    prod_before = (clone / "infra" / "environments" / "prod.yaml").read_text()
    result = subprocess.run(
        [sys.executable, "-m", "scripts.promote", "dev", "prod"],
        cwd=REPO,
        env={**os.environ, "PLATFORM_ENVIRONMENTS_DIR": str(clone / "infra" / "environments")},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "release.images.trainer" in result.stderr and "trainer:v1" in result.stderr
    assert "nothing was changed" in result.stderr
    assert (clone / "infra" / "environments" / "prod.yaml").read_text() == prod_before


# --- images --------------------------------------------------------------------------------------------------


def test_image_dry_run_prints_cloud_build_commands_for_the_dev_registry_and_the_pin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import scripts.image

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text("#!/bin/sh\nexit 1\n")  # no engine answers
    docker.chmod(docker.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    # A clean tree (others' uncommitted work in this checkout would be refused: tests/test_image_command.py).
    monkeypatch.setattr(scripts.image, "uncommitted", lambda: [])
    assert scripts.image.main(["trainer", "dev", "--dry-run"]) == 0
    out = capsys.readouterr().out
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout
    image = f"us-east5-docker.pkg.dev/acme-ml-platform-dev/ml-platform/trainer:{commit.strip()}"
    assert "gcloud builds submit . --project=acme-ml-platform-dev --region=us-east5" in out
    assert image in out
    assert "--build-arg" not in out  # MaxText comes from the engine lock, not a build argument
    assert "would pin in" in out
    assert "release.images.trainer: us-east5-docker.pkg.dev/acme-ml-platform-dev/ml-platform/trainer@" in out


def test_image_with_a_local_engine_builds_pushes_and_pins_the_digest(environments: Path) -> None:
    plan = plan_build("trainer", "dev", commit="0123456789ab", use_docker=True, environments=environments)
    assert plan.commands[0][:3] == ["docker", "build", "--file"]
    assert plan.commands[1] == ["docker", "push", plan.image]
    from infra.delivery.images import build

    outputs = iter(["", "", f"{plan.image.split(':')[0]}@{DIGEST}\n"])
    pin, change = build(plan, run=lambda c: next(outputs), dry_run=False)
    assert pin == f"us-east5-docker.pkg.dev/acme-ml-platform-dev/ml-platform/trainer@{DIGEST}"
    assert load_environment(environments / "dev.yaml").release.images["trainer"] == pin
    assert f"+    trainer: {pin}" in change


# --- workflows -----------------------------------------------------------------------------------------------


def test_user_workflows_pass_actionlint() -> None:
    actionlint = Path(sys.executable).with_name("actionlint")
    workflows = sorted((REPO / ".github" / "workflows").glob("*.yml"))
    assert {w.name for w in workflows} >= {"pull-request.yml", "main.yml", "promote.yml"}
    result = subprocess.run([str(actionlint), "-no-color", *map(str, workflows)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


# The Node 24 majors (hosted runners dropped Node 20 in September 2026), each `runs.using: node24` in its
# action.yml at that tag: read from the action repositories at these commits.
NODE24_ACTIONS = {
    "actions/checkout": ("3d3c42e5aac5ba805825da76410c181273ba90b1", "v7.0.1"),
    "actions/setup-python": ("5fda3b95a4ea91299a34e894583c3862153e4b97", "v7.0.0"),
    "actions/setup-node": ("820762786026740c76f36085b0efc47a31fe5020", "v7.0.0"),
    "google-github-actions/auth": ("7c6bc770dae815cd3e89ee6cdf493a5fab2cc093", "v3.0.0"),
    "hashicorp/setup-terraform": ("dfe3c3f87815947d99a8997f908cb6525fc44e9e", "v4.0.1"),
    # google-github-actions/setup-gcloud tag v3.0.1 (action.yml: using node24).
    "google-github-actions/setup-gcloud": ("aa5489c8933f4cc7a4f7d45035b3b1440c9c10db", "v3.0.1"),
}


def test_every_action_is_pinned_by_commit_to_its_node24_release() -> None:
    """A tag can be moved; a commit cannot. Node 20 actions no longer start on hosted runners."""
    import re

    seen = set()
    for workflow in sorted((REPO / ".github" / "workflows").glob("*.yml")):
        for line in workflow.read_text().splitlines():
            found = re.search(r"uses: ([\w.-]+/[\w.-]+)@(\S+)(?: # (v[\d.]+))?", line)
            if not found:
                continue
            action, ref, tag = found.groups()
            assert action in NODE24_ACTIONS, f"{workflow.name}: {action} has no known Node 24 pin"
            assert (ref, tag) == NODE24_ACTIONS[action], f"{workflow.name}: {line.strip()}"
            seen.add(action)
    assert seen == set(NODE24_ACTIONS)


def test_pull_request_comment_is_updated_not_duplicated() -> None:
    workflow = (REPO / ".github" / "workflows" / "pull-request.yml").read_text()
    assert "<!-- platform-plan-review -->" in workflow
    assert "--method PATCH" in workflow
    assert copy.copy(workflow).count("gh pr comment") == 1


def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    actionlint = Path(sys.executable).with_name("actionlint")
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\njobs:\n  x:\n    runs_on: ubuntu-24.04\n    steps:\n      - run: echo ${{ github.evnt }}\n"
    )
    result = subprocess.run([str(actionlint), "-no-color", str(broken)], capture_output=True, text=True)
    assert result.returncode != 0


def test_make_promote_with_digests_updates_prod_once(tmp_path: Path, environments: Path) -> None:
    _pin_dev(environments, f"us-east5-docker.pkg.dev/acme-ml-platform-dev/ml-platform/trainer@{DIGEST}")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "gcloud.log"
    gcloud = bin_dir / "gcloud"
    gcloud.write_text(f'#!/bin/sh\necho "$@" >> {log}\n')  # stands in for the real copy
    gcloud.chmod(gcloud.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PLATFORM_ENVIRONMENTS_DIR": str(environments)}
    command = ["make", "-s", "promote", "FROM=dev", "TO=prod"]
    first = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert "+    trainer: us-east5-docker.pkg.dev/acme-ml-platform-prod/ml-platform/trainer@" in first.stdout
    assert log.read_text().count("add-tag") == 1 + len(OTHER_IMAGES)  # every image, once
    after = (environments / "prod.yaml").read_text()
    second = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    assert second.returncode == 0, second.stderr
    assert "nothing to change" in second.stdout
    assert (environments / "prod.yaml").read_text() == after
    assert log.read_text().count("add-tag") == 1 + len(OTHER_IMAGES)


def test_a_confirmation_holds_for_the_configuration_it_was_written_for_only(stacks: dict[str, Any]) -> None:
    """The entry the gate prints loads as the environment file's field, confirms that configuration of the resource,
    and nothing once the resource changes or is gone; one that confirms no gated change of a plan is named."""
    from infra.config import environments_dir
    from infra.config.delivery import Confirmation
    from infra.delivery import confirmations
    from infra.synth.load import load_all

    dev = load_all(environments_dir())["dev"]
    stack = copy.deepcopy(stacks["dev"])
    address = "google_container_node_pool.slice-train_pool_11E2D2E2"
    printed = yaml.safe_load(confirmations.entry("dev", stack, address).replace("<why this change is meant>", "x"))
    with_entry = dev.model_copy(update={"confirm": [Confirmation(**printed["confirm"][0])]})
    assert confirmations.from_file(with_entry, stack) == ([address], [])
    assert confirmations.unused(with_entry, [address], [address]) == []
    assert "the plan has no gated change of it" in confirmations.unused(with_entry, [address], [])[0]
    stack["resource"]["google_container_node_pool"]["slice-train_pool_11E2D2E2"]["node_count"] = 8
    matched, stale = confirmations.from_file(with_entry, stack)
    assert matched == [] and "it confirms nothing" in stale[0]
    del stack["resource"]["google_container_node_pool"]["slice-train_pool_11E2D2E2"]
    assert confirmations.config_sha256(stack, address) == "absent"
