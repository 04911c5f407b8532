"""Training runs launched as JobSets of MaxText's own trainer (training.launcher: jobset), with GKE's multi-tier
checkpointing (training.resilience.local_tier): what the deploy renders, what the stack makes, what a run is, what
the review says, and what is refused at load. The queued run against the real Kueue and JobSet controllers is in
tests/test_localcluster.py (test_a_jobset_run_is_admitted_whole_and_makes_one_job_per_slice)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from infra.charts.check import render
from infra.charts.runs import per_run
from infra.config import ENVIRONMENTS_DIR, ConfigError, Environment
from infra.constructs.releases import ray_training_values
from infra.rules import check_environment
from infra.synth.load import load_environment
from scripts import train
from tests.helpers import REPO, by_name, dev_edited, of_type, training_objects
from workloads.trainer import __main__ as trainer
from workloads.trainer.recipes import RecipeError
from workloads.trainer.recovery import recovery_lines

EXAMPLE = REPO / "docs/examples/multi-tier/dev.yaml"


def test_the_example_is_dev_with_two_slices_a_jobset_launcher_and_a_local_tier() -> None:
    dev = yaml.safe_load((ENVIRONMENTS_DIR / "dev.yaml").read_text())
    example = yaml.safe_load(EXAMPLE.read_text())
    assert example["buckets"].pop("mtc-backups")["hierarchical_namespace"] is True
    assert example["slices"]["train"].pop("count") == 2
    assert example["training"].pop("recipe") == "llama3-8b-2-slices" and dev["training"].pop("recipe")
    assert (example["training"].pop("runs"), example["training"].pop("launcher")) == ("jobs", "jobset")
    assert example["training"].pop("resilience")["local_tier"]["bucket"] == "mtc-backups"
    assert example == dev


def _example_beside_the_others(tmp_path: Path, *edits: tuple[str, str]) -> Path:
    """The example as dev.yaml (with `edits`) beside the other environments, for `make train` to read."""
    text = EXAMPLE.read_text()
    path = dev_edited(tmp_path)
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    path.write_text(text)
    return path


@pytest.fixture
def env(tmp_path: Path) -> Environment:
    return load_environment(_example_beside_the_others(tmp_path))


def test_the_deploy_renders_the_checkpoint_configuration_and_no_cluster(env: Environment) -> None:
    deployed = render("ray-training", ray_training_values(env), name="ray-training", namespace="ml-training")
    assert {o["kind"] for o in deployed} == {"ResourceFlavor", "ClusterQueue", "LocalQueue", "CheckpointConfiguration"}
    (config,) = [o for o in deployed if o["kind"] == "CheckpointConfiguration"]
    assert config["apiVersion"] == "checkpointing.gke.io/v1" and "namespace" not in config["metadata"]
    spec = config["spec"]
    assert spec["cloudStorageBucketName"] == env.bucket_name("mtc-backups")
    assert spec["inMemoryVolumeSize"] == "32Gi"
    # The add-on's agent runs on the training slices' nodes, past their TPU taint.
    assert spec["nodeSelector"] == dict(env.slices["train"].slice.node_selector)
    assert spec["tolerations"] == [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert "implicit-dirs" in spec["gcsFuseMountOptions"]


def test_the_plan_holds_a_jobset_of_one_job_per_slice_that_joins_the_slices_and_mounts_the_ram_disk(
    env: Environment,
) -> None:
    (jobset,) = [o for o in training_objects(env) if per_run(o)]
    assert jobset["kind"] == "JobSet"
    assert jobset["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"
    spec = jobset["spec"]
    assert spec["failurePolicy"]["maxRestarts"] == 5
    assert spec["failurePolicy"]["rules"][0]["action"] == "FailJobSet"
    # One replicated Job of a Job per slice (multi-tier checkpointing numbers the processes of such a JobSet only),
    # each Job alone on a pool.
    assert jobset["metadata"]["annotations"]["alpha.jobset.sigs.k8s.io/exclusive-topology"] == (
        "cloud.google.com/gke-nodepool"
    )
    (job,) = spec["replicatedJobs"]
    assert (job["name"], job["replicas"]) == ("slice", 2)
    template = job["template"]["spec"]
    assert (template["parallelism"], template["completions"]) == (4, 4)  # one pod per host
    exit_rule = template["podFailurePolicy"]["rules"][0]["onExitCodes"]
    assert exit_rule["operator"] == "NotIn" and 42 in exit_rule["values"] and 137 in exit_rule["values"]
    # The release's pods reach each other (its NetworkPolicy `<release>-within` selects the instance label).
    assert template["template"]["metadata"]["labels"]["app.kubernetes.io/instance"] == "ray-training"
    pod = template["template"]["spec"]
    assert pod["nodeSelector"] == dict(env.slices["train"].slice.node_selector)
    # Only the training slices' pools: the serving pool of the same shape matches the labels too.
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [
        {"key": "cloud.google.com/gke-nodepool", "operator": "In", "values": ["train", "train-1"]}
    ]
    (container,) = pod["containers"]
    variables = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert variables["MEGASCALE_NUM_SLICES"] == "2"
    assert variables["MEGASCALE_SLICE_ID"] == {
        "fieldRef": {"fieldPath": "metadata.annotations['jobset.sigs.k8s.io/job-index']"}
    }
    assert variables["MEGASCALE_COORDINATOR_ADDRESS"] == "run-slice-0-0.run:8081"
    assert container["resources"]["limits"]["google.com/tpu"] == "4"
    assert {"name": "local-tier", "mountPath": "/local"} in container["volumeMounts"]
    assert {"name": "local-tier", "csi": {"driver": "multitier-checkpoint.csi.storage.gke.io"}} in pod["volumes"]


def test_the_training_queue_admits_every_slice_of_a_jobset_run_in_one_flavor(env: Environment) -> None:
    (queue,) = [o for o in training_objects(env) if o["kind"] == "ClusterQueue"]
    ((flavor,),) = [g["flavors"] for g in queue["spec"]["resourceGroups"]]
    quota = {r["name"]: r["nominalQuota"] for r in flavor["resources"]}
    assert (flavor["name"], quota["google.com/tpu"], quota["cpu"]) == ("training-slices", "32", "192")
    (rf,) = [o for o in training_objects(env) if o["kind"] == "ResourceFlavor"]
    assert rf["spec"]["nodeLabels"] == dict(env.slices["train"].slice.node_selector)


def test_make_train_submits_a_jobset_whose_pods_run_maxtext_with_the_local_tier(
    env: Environment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLATFORM_ENVIRONMENTS_DIR", str(tmp_path / "environments"))
    plan = trainer.cluster_plan(trainer.parser().parse_args(["args", "--env", "dev"]))
    assert plan["launcher"] == "jobset"
    tier = [a for a in plan["maxtext_args"] if "checkpoint" in a and ("local" in a or "multi_tier" in a)]
    assert tier == [
        "enable_multi_tier_checkpointing=true",
        "local_checkpoint_directory=/local",
        "local_checkpoint_period=25",
        "multi_tier_checkpointing_backup_interval_steps=100",
    ]
    job = train.run_job(env, "llama3-8b-dev-1202-000000-abcd", trainer.run_command(plan))
    assert job["kind"] == "JobSet"
    (container,) = job["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
    # Each pod carries the run's plan (its image holds no environment file) and runs MaxText's trainer with it.
    assert container["command"][:5] == ["python", "-m", "workloads.trainer", "run", "--plan"]
    assert json.loads(container["command"][5]) == plan


def test_a_canary_recipe_is_refused_for_a_jobset_run_before_anything_is_submitted(
    env: Environment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLATFORM_ENVIRONMENTS_DIR", str(tmp_path / "environments"))
    args = trainer.parser().parse_args(["args", "--env", "dev", "--recipe", "canary"])
    with pytest.raises(RecipeError, match=r"JobSets \(training.launcher: jobset\).*for the canary engine"):
        trainer.cluster_plan(args)


def test_the_review_says_which_tiers_a_restart_reads(env: Environment) -> None:
    lines = "\n".join(recovery_lines(env))
    assert "training (JobSet, slice train: 2 x v6e-16)" in lines
    assert "RAM disk (32Gi) every 25 steps" in lines and "every 100 steps" in lines
    assert "from its own RAM disk, else a peer's, else the bucket" in lines
    assert "the restart restores from them, not the bucket" in lines


def test_every_environment_rule_passes_the_jobset_environment(env: Environment) -> None:
    assert check_environment(env) == []


def test_the_stack_turns_the_add_on_on_makes_the_bucket_with_folders_and_lets_the_agent_back_up(
    env: Environment, tmp_path: Path
) -> None:
    """Synthesized and held to every rule (environment, Terraform, the rendered releases): nothing is refused."""
    from infra.rules.run import run
    from infra.synth.app import synth

    synth({"dev": env}, tmp_path / "out")
    assert run({"dev": env}, tmp_path / "out" / "stacks").lines == []
    (path,) = (tmp_path / "out" / "stacks").glob("*/cdk.tf.json")
    stack = json.loads(path.read_text())
    (cluster,) = of_type(stack, "google_container_cluster").values()
    addons = cluster["addons_config"]
    assert addons["high_scale_checkpointing_config"] == {"enabled": True}
    assert addons["gcs_fuse_csi_driver_config"] == {"enabled": True}  # the add-on's backups go through it
    buckets = by_name(stack, "google_storage_bucket")
    assert buckets[env.bucket_name("mtc-backups")]["hierarchical_namespace"] == {"enabled": True}
    assert "hierarchical_namespace" not in buckets[env.bucket_name("checkpoints")]
    (grant,) = [m for m in of_type(stack, "google_storage_bucket_iam_member").values() if
                "gke-managed-checkpointing" in m["member"]]  # fmt: skip
    assert grant["role"] == "roles/storage.objectUser"
    assert grant["member"] == (
        f"principal://iam.googleapis.com/projects/{env.project_number}/locations/global/workloadIdentityPools/"
        f"{env.workload_pool}/subject/ns/gke-managed-checkpointing/sa/gke-checkpointing-multitier-node"
    )


def test_a_ram_disk_that_cannot_hold_two_saves_of_the_recipe_is_refused_naming_what_it_needs(tmp_path: Path) -> None:
    path = _example_beside_the_others(tmp_path, ("ram_disk: 32Gi}", "ram_disk: 16Gi}"))
    with pytest.raises(ConfigError) as err:
        load_environment(path)
    (problem,) = err.value.problems
    assert "training.resilience.local_tier.ram_disk: '16Gi'" in problem
    assert "holds less than 2 saves of 'llama3-8b-2-slices' per host" in problem and "give 26Gi or more" in problem
