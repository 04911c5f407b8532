"""The Slurm cluster through Cluster Toolkit: the blueprint `make plan` writes, validated offline against the
pinned module interfaces the way `gcluster` validates one, and held to the platform stack and the catalogue."""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.catalogue.cluster_toolkit import (
    GCLUSTER_GOOGLE_PROVIDER_RANGE,
    GOOGLE_PROVIDER_VERSION,
    PACKER_VERSION,
    TERRAFORM_VERSION,
)
from infra.catalogue.gpudirect import GPU_HOSTS, TCPXO, nccl_env
from infra.config import ConfigError, Environment
from infra.rules import cluster_toolkit as ctk_rules
from infra.slurm import interfaces
from infra.slurm.blueprint import blueprint, deployment, nodeset_name
from infra.slurm.constraints import admits
from infra.slurm.jobs import jobs
from infra.slurm.types import conform, parse_type
from infra.slurm.validate import Versions, validate
from infra.synth.load import load_environment
from scripts.slurm import VERSIONS
from tests.helpers import REPO, by_name, of_type

IN_CI = os.environ.get("CI") == "true"
needs_interfaces = pytest.mark.skipif(
    not IN_CI and not interfaces.available(),
    reason="Cluster Toolkit's pinned module interfaces not available: run `make cluster-toolkit`",
)
DEV = (REPO / "infra" / "environments" / "dev.yaml").read_text()
EXAMPLE = "examples/machine-learning/a3-megagpu-8g"


def _root() -> Path:
    return interfaces.locate()


def _modules(bp: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["id"]: m for g in bp["deployment_groups"] for m in g["modules"]}


def _check(bp: dict[str, Any], dep: dict[str, Any] | None = None, versions: Versions = VERSIONS) -> list[str]:
    report = validate(bp, dep, root=_root(), versions=versions)
    return [f"{f.path}: {f.message}" for f in report.findings]


def test_ci_has_the_pinned_interfaces() -> None:
    """In CI a missing interface file fails the run; nothing is validated against a guess."""
    if not IN_CI:
        pytest.skip("checked where CI=true; locally `make cluster-toolkit` fetches them")
    interfaces.locate()


@needs_interfaces
def test_a_changed_or_missing_interface_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy_root = tmp_path / "ctk"
    for name in interfaces.pins():
        (copy_root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(_root() / name, copy_root / name)
    assert interfaces.problems(copy_root) == []
    nodeset = "community/modules/compute/schedmd-slurm-gcp-v6-nodeset/variables.tf"
    with (copy_root / nodeset).open("a") as f:
        f.write('variable "made_up" {}\n')
    (copy_root / "modules/network/pre-existing-vpc/metadata.yaml").unlink()
    found = interfaces.problems(copy_root)
    assert any(nodeset in p and "is not the pinned" in p for p in found)
    assert any("pre-existing-vpc/metadata.yaml: missing" in p for p in found)
    monkeypatch.setenv("PLATFORM_CTK_DIR", str(copy_root))
    with pytest.raises(interfaces.InterfacesMissing, match="make cluster-toolkit"):
        interfaces.locate()


@needs_interfaces
def test_fetch_writes_the_nested_files_verified_and_a_bad_checksum_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _root()
    monkeypatch.setattr(interfaces, "url", lambda name: f"file://{source / name}")
    target = tmp_path / "fetched"
    assert interfaces.fetch(target) == len(interfaces.pins())
    assert interfaces.problems(target) == []
    bad = {**interfaces.pins(), "modules/network/pre-existing-vpc/metadata.yaml": "0" * 64}
    monkeypatch.setattr(interfaces, "pins", lambda: bad)
    with pytest.raises(ValueError, match="is not the pinned"):
        interfaces.fetch(target)
    monkeypatch.undo()
    assert interfaces.problems(target) == [], "a failed fetch leaves the previous files as they were"


# --- the validator, held against gcluster's own example -------------------------------------------------------


def _example() -> tuple[dict[str, Any], dict[str, Any]]:
    """The toolkit's A3 Mega example with the values its deployment file asks a user for, and disk_size_gb, which
    its blueprint uses without defining (the toolkit's CI passes it: tools/cloud-build/daily-tests)."""
    bp = yaml.safe_load((_root() / EXAMPLE / "a3mega-slurm-blueprint.yaml").read_text())
    dep = yaml.safe_load((_root() / EXAMPLE / "a3mega-slurm-deployment.yaml").read_text())
    dep["vars"].update(
        deployment_name="a3mega",
        project_id="acme-hpc-123",
        region="us-east5",
        zone="us-east5-a",
        network_name_system="sys-net",
        subnetwork_name_system="sys-subnet",
        slurm_cluster_name="a3mega",
        a3mega_cluster_size=2,
        a3mega_reservation_name="a3mega-reservation",
        disk_size_gb=100,
    )
    return bp, dep


@needs_interfaces
def test_the_toolkits_own_a3_mega_example_passes_with_no_finding() -> None:
    bp, dep = _example()
    report = validate(bp, dep, root=_root(), versions=VERSIONS)
    assert report.findings == []
    assert (report.modules, report.validators) == (15, 49)
    assert report.typed >= 60 and report.constraints >= 50


@needs_interfaces
def test_the_example_as_shipped_is_refused_for_what_a_user_must_fill_in() -> None:
    bp = yaml.safe_load((_root() / EXAMPLE / "a3mega-slurm-blueprint.yaml").read_text())
    dep = yaml.safe_load((_root() / EXAMPLE / "a3mega-slurm-deployment.yaml").read_text())
    found = _check(bp, dep)
    assert 'vars.project_id: deployment variable "project_id" was not set' in found
    assert any('references unknown global variable "disk_size_gb"' in f for f in found)


@needs_interfaces
def test_dws_flex_on_the_example_is_refused_by_the_nodesets_own_validator() -> None:
    """What gcluster refuses once the example's flex-start switch is turned on: compact placement (on by
    default) with DWS flex is for A3 Ultra, A4 and H4D only. The platform's blueprint turns placement off."""
    bp, dep = _example()
    dep["vars"].update(a3mega_reservation_name="", a3mega_dws_flex_enabled=True)
    (finding,) = _check(bp, dep)
    assert "Compact placement with DWS Flex is only supported for A3 Ultra, A4, and H4D machine types" in finding
    assert "schedmd-slurm-gcp-v6-nodeset/metadata.yaml: validator conditional_regex" in finding


@needs_interfaces
def test_gclusters_own_packer_and_an_old_terraform_are_refused_by_the_modules_versions() -> None:
    bp, dep = _example()
    found = _check(bp, dep, Versions("1.11.4", "1.15.0", {"google": "6.50.0", "google-beta": "6.50.0"}))
    assert any(
        "modules/packer/custom-image/versions.pkr.hcl: packer '>= 1.15.3, < 2.0.0' does not admit the pinned "
        "packer 1.15.0" in f
        for f in found
    )
    assert any("schedmd-slurm-gcp-v6-controller/versions.tf: terraform '>= 1.12.2'" in f for f in found)
    old_google = _check(bp, dep, Versions(TERRAFORM_VERSION, PACKER_VERSION, {"google": "6.40.0"}))
    assert any("google '>= 6.41' does not admit the pinned google 6.40.0" in f for f in old_google)


# --- the platform's blueprint --------------------------------------------------------------------------------


@needs_interfaces
def test_make_plans_slurm_step_writes_and_validates_every_environments_blueprint(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "scripts.slurm", "write", str(tmp_path)], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    for env in ("dev", "prod"):
        assert re.search(
            rf"slurm: .*/slurm/{env}/blueprint.yaml: Cluster Toolkit v1.95.0 interfaces: 10 modules, \d+ settings "
            r"\(\d+ type-checked\), \d+ module validators and \d+ version constraints checked: valid",
            done.stdout,
        ), done.stdout
    written = tmp_path / "slurm" / "dev"
    assert sorted(p.name for p in written.rglob("*") if p.is_file()) == [
        "blueprint.yaml",
        "check-bandwidth.sh",
        "deployment.yaml",
        "nccl-test.sbatch",
        "train.sbatch",
    ]
    prod = yaml.safe_load((tmp_path / "slurm" / "prod" / "blueprint.yaml").read_text())
    nodeset = _modules(prod)["a3mega"]["settings"]
    assert (nodeset["reservation_name"], nodeset["node_count_static"]) == ("ml-platform-a3mega-hpc", 2)


def _dev_blueprint(envs: dict[str, Environment]) -> dict[str, Any]:
    return blueprint(envs["dev"])


@needs_interfaces
def test_a_misspelled_setting_is_refused_naming_the_module_file_and_its_variables(
    envs: dict[str, Environment],
) -> None:
    bp = _dev_blueprint(envs)
    settings = _modules(bp)["a3mega"]["settings"]
    settings["node_count_dynamic_maximum"] = settings.pop("node_count_dynamic_max")
    found = _check(bp, deployment(envs["dev"]))
    assert any(
        "(a3mega: community/modules/compute/schedmd-slurm-gcp-v6-nodeset).settings.node_count_dynamic_maximum: "
        'a setting was added that is not found in the module (did you mean "node_count_dynamic_max"?): no '
        "variable 'node_count_dynamic_maximum' in community/modules/compute/schedmd-slurm-gcp-v6-nodeset/"
        "variables.tf" in f
        for f in found
    ), found


@needs_interfaces
def test_a_wrong_type_is_refused_naming_the_variable_its_file_and_type(envs: dict[str, Environment]) -> None:
    bp = _dev_blueprint(envs)
    _modules(bp)["a3mega"]["settings"]["node_count_static"] = "two"
    _modules(bp)["a3mega"]["settings"]["dws_flex"]["enabeld"] = True
    found = _check(bp, deployment(envs["dev"]))
    assert any(
        'unsuitable value for variable "node_count_static" (community/modules/compute/'
        "schedmd-slurm-gcp-v6-nodeset/variables.tf:42, type number): a number is required, not the string 'two'" in f
        for f in found
    ), found
    assert any("dws_flex" in f and "enabeld: not an attribute of object(" in f for f in found), found


@needs_interfaces
def test_a_missing_required_input_is_refused_naming_the_variable_and_where_it_is_declared(
    envs: dict[str, Environment],
) -> None:
    bp = _dev_blueprint(envs)
    del _modules(bp)["bucket"]["settings"]["remote_mount"]
    found = _check(bp, deployment(envs["dev"]))
    assert any(
        '(bucket: modules/file-system/pre-existing-network-storage).settings: a required setting "remote_mount" is '
        'missing: variable "remote_mount" (modules/file-system/pre-existing-network-storage/variables.tf:23' in f
        for f in found
    ), found


@needs_interfaces
def test_a_shell_substitution_not_escaped_for_gcluster_is_refused(envs: dict[str, Environment]) -> None:
    """gcluster reads every `$(` as a blueprint expression: a script's `$(date)` must be written `\\$(date)`."""
    bp = _dev_blueprint(envs)
    _modules(bp)["compute_startup"]["settings"]["runners"][0]["content"] += "echo $(date)\n"
    found = _check(bp, deployment(envs["dev"]))
    assert any("Expected reference formats: $(vars.var_name) or $(module_id.output_name)" in f for f in found)
    assert _check(_dev_blueprint(envs), deployment(envs["dev"])) == []


def test_the_blueprint_reuses_the_stacks_network_gpu_networks_bucket_and_accounts(
    envs: dict[str, Environment], stacks: dict[str, dict[str, Any]]
) -> None:
    env, stack = envs["dev"], stacks["dev"]
    modules = _modules(blueprint(env))
    vpcs = by_name(stack, "google_compute_network")
    subnets = by_name(stack, "google_compute_subnetwork")
    network = modules["network"]["settings"]
    assert network["network_name"] in vpcs and network["subnetwork_name"] in subnets
    nics = modules["a3mega"]["settings"]["additional_networks"]
    assert len(nics) == TCPXO.extra_nics == 8
    for n, nic in enumerate(nics, start=1):
        # The very network and subnet the stack creates for GPU NIC n, which GKE's A3 Mega pool uses too.
        assert vpcs[nic["network"]]["mtu"] == 8244
        assert subnets[nic["subnetwork"]]["ip_cidr_range"] == f"192.168.{n}.0/24"
        assert nic["nic_type"] == "GVNIC"
    pool = by_name(stack, "google_container_node_pool")["a3mega"]
    gke_subnets = [c["subnetwork"] for c in pool["network_config"]["additional_node_network_configs"]]
    assert [of_type(stack, "google_compute_subnetwork")[ref.split(".")[1]]["name"] for ref in gke_subnets] == [
        nic["subnetwork"] for nic in nics
    ]
    buckets = by_name(stack, "google_storage_bucket")
    assert modules["bucket"]["settings"]["remote_mount"] in buckets
    accounts = {a["account_id"] for a in of_type(stack, "google_service_account").values()}
    for module in ("a3mega", "login", "controller"):
        email = modules[module]["settings"]["service_account_email"]
        assert email.split("@")[0] in accounts
    firewalls = [f for f in of_type(stack, "google_compute_firewall").values() if f.get("target_tags")]
    tags = {t for f in firewalls for t in f["target_tags"]}
    assert all(modules[m]["settings"]["tags"] == ["slurm-mlp-dev"] for m in ("a3mega", "login", "controller"))
    assert "slurm-mlp-dev" in tags
    # No second set: the blueprint creates no network, no bucket.
    assert not any(m["source"] in ("modules/network/vpc", "modules/network/multivpc") for m in modules.values())


def test_the_blueprint_takes_its_node_counts_capacity_and_tcpxo_pair_from_the_slice_and_catalogue(
    envs: dict[str, Environment],
) -> None:
    env = envs["dev"]
    slice_ = env.slices["a3mega-slurm"].slice
    modules = _modules(blueprint(env))
    nodeset = modules["a3mega"]["settings"]
    assert (nodeset["node_count_static"], nodeset["node_count_dynamic_max"]) == (0, slice_.hosts) == (0, 2)
    assert nodeset["machine_type"] == slice_.machine_type == "a3-megagpu-8g"
    assert nodeset["dws_flex"] == {"enabled": True, "max_run_duration": 24 * 3600}
    assert nodeset["enable_placement"] is False and "reservation_name" not in nodeset
    assert nodeset["node_conf"] == {"CoresPerSocket": 52, "ThreadsPerCore": 2}
    prolog = modules["controller_startup"]["settings"]["runners"][0]["content"]
    assert TCPXO.installer_image in prolog and TCPXO.daemon_image in prolog
    assert "raw.githubusercontent.com" not in yaml.safe_dump(blueprint(env)), "nothing fetched from a branch head"
    assert blueprint(env)["vars"]["enable_slurm_auth"] is True
    assert blueprint(env)["terraform_providers"]["google"]["version"] == GOOGLE_PROVIDER_VERSION


def test_a_seed_projects_deployer_names_the_environments_project_as_the_slurm_clusters_quota_project(
    envs: dict[str, Environment],
) -> None:
    """prod's deployer is a seed project's account (delivery.seed): a client-based API charges its calls to the seed,
    where the cluster's APIs are not enabled, unless the provider names the environment's project, as the platform
    stack's does. dev's accounts are its own project's: nothing to name."""
    for name, named in (("prod", True), ("dev", False)):
        for provider in blueprint(envs[name])["terraform_providers"].values():
            configuration = provider["configuration"]
            assert (configuration.get("billing_project") == "$(vars.project_id)") is named, name
            assert configuration.get("user_project_override", False) is named, name


def test_a_reservation_gives_static_nodes_and_spot_gives_spot_vms(tmp_path: Path) -> None:
    text = DEV.replace(
        "    capacity: {type: flex-start, max_run_hours: 24}\n",
        "    capacity: {type: reservation, reservation: hpc-a3mega}\n",
        1,  # the Slurm slice alone: one orchestrator per reservation (gce.reservation-consumed-by-one-orchestrator)
    ).replace("      slice: a3mega-slurm\n      default: true\n", "      slice: a3mega-slurm\n      static_nodes: 2\n")
    path = tmp_path / "dev.yaml"
    path.write_text(text)
    env = load_environment(path)
    modules = _modules(blueprint(env))
    nodeset, partition = modules["a3mega"]["settings"], modules["a3mega_partition"]["settings"]
    assert nodeset["reservation_name"] == "hpc-a3mega"
    assert (nodeset["node_count_static"], nodeset["node_count_dynamic_max"]) == (2, 0)
    assert partition["exclusive"] is False, "static nodes need a partition that is not exclusive"
    path.write_text(
        DEV.replace("    capacity: {type: flex-start, max_run_hours: 24}\n", "    capacity: {type: spot}\n")
    )
    spot = _modules(blueprint(load_environment(path)))["a3mega"]["settings"]
    assert spot["enable_spot_vm"] is True and "dws_flex" not in spot


def test_the_provider_and_terraform_pins_are_the_ones_the_platform_runs() -> None:
    # The Slurm blueprint's google provider is one gcluster v1.95.0 is tested with (its default range); the
    # platform stack's newer provider (its bindings') is outside that range, so the two pins differ.
    assert admits(GCLUSTER_GOOGLE_PROVIDER_RANGE, GOOGLE_PROVIDER_VERSION)
    for workflow in (REPO / ".github" / "workflows").glob("*.yml"):
        for version in re.findall(r'terraform_version: "([^"]+)"', workflow.read_text()):
            assert version == TERRAFORM_VERSION, workflow.name


@needs_interfaces
def test_the_rules_patterns_and_bounds_are_the_module_files_own() -> None:
    root = _root()
    controller = (root / ctk_rules.CONTROLLER / "variables.tf").read_text()
    assert f'can(regex("{ctk_rules.SLURM_CLUSTER_NAME}", var.slurm_cluster_name))' in controller
    partition = (root / ctk_rules.PARTITION / "variables.tf").read_text()
    assert f'can(regex("{ctk_rules.PARTITION_NAME}", var.partition_name))' in partition
    nodeset = (root / ctk_rules.NODESET / "variables.tf").read_text()
    low, high = ctk_rules.DWS_MAX_RUN_DURATION
    assert f"var.dws_flex.max_run_duration >= {low} && var.dws_flex.max_run_duration <= {high}" in nodeset
    assert high == 168 * 3600, "capacity.max_run_hours allows 1..168: the nodeset's bound"
    outputs = (root / ctk_rules.NODESET / "outputs.tf").read_text()
    assert all(f'"{pair}"' in outputs for pair in ctk_rules.REFUSED_DISKS)
    assert 'substr(replace(var.name, "/[^a-z0-9]/", ""), 0, 14)' in (root / ctk_rules.NODESET / "main.tf").read_text()


BAD_SLURM = {
    "a cluster name over 20 characters": (
        [("  name: mlp-dev\n", "  name: mlp-dev-with-a-long-name\n")],
        "slurm.name",
        "must match ^[a-z]([-a-z0-9]{0,19})$",
    ),
    "a partition name with an underscore": (
        [("    a3mega:\n      slice: a3mega-slurm\n", "    a3_mega:\n      slice: a3mega-slurm\n"),
         ("partition: a3mega, min", "partition: a3_mega, min"),
         ("partition: a3mega, image", "partition: a3_mega, image")],
        "slurm.partitions.a3_mega",
        "a partition name must match ^[a-z](?:[a-z0-9-]*)$",
    ),
    "queued provisioning for Slurm": (
        [("    capacity: {type: flex-start, max_run_hours: 24}\n", "    capacity: {type: queued}\n")],
        "slices.a3mega-slurm.capacity.type",
        "Slurm has no queued provisioning",
    ),
    "a GKE slice in a partition": (
        [("      slice: a3mega-slurm\n", "      slice: a3mega\n")],
        "slurm.partitions.a3mega.slice",
        "also used on GKE by batch.slices[0]",
    ),
    "more static nodes than the slice has": (
        [("      default: true\n", "      default: true\n      static_nodes: 3\n")],
        "slurm.partitions.a3mega.static_nodes",
        "has 2 nodes",
    ),
    "static flex-start nodes": (
        [("      default: true\n", "      default: true\n      static_nodes: 1\n")],
        "slurm.partitions.a3mega.static_nodes",
        "come and go with the jobs",
    ),
    "a job on a partition that does not exist": (
        [("  nccl_test: {partition: a3mega,", "  nccl_test: {partition: gpu,")],
        "slurm.nccl_test.partition",
        "not in slurm.partitions: a3mega",
    ),
    "a bucket that does not exist": (
        [("  bucket: checkpoints\n  partitions", "  bucket: ckpts\n  partitions")],
        "slurm.bucket",
        "not in buckets",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BAD_SLURM))
def test_a_bad_slurm_section_is_refused_at_load(tmp_path: Path, case: str) -> None:
    edits, field, fragment = BAD_SLURM[case]
    text = DEV
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    path = tmp_path / "dev.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_environment(path)
    hits = [p for p in err.value.problems if p.startswith(field)]
    assert any(fragment in p for p in hits), err.value.problems


def test_nodeset_names_that_collide_after_slurm_gcps_rewrite_are_refused(tmp_path: Path) -> None:
    assert nodeset_name("a3mega-one") == nodeset_name("a3mega_one") == "a3megaone"
    text = DEV.replace(
        "      slice: a3mega-slurm\n      default: true\n",
        "      slice: a3mega-slurm\n      default: true\n    a3megagpupartition1:\n      slice: extra\n"
        "    a3megagpupartition2:\n      slice: extra2\n",
    ).replace(
        "  a3mega-slurm:\n",
        "  extra:\n    accelerator: a3-mega\n    nodes: 1\n    zone: us-east5-a\n    capacity: {type: spot}\n"
        "  extra2:\n    accelerator: a3-mega\n    nodes: 1\n    zone: us-east5-a\n    capacity: {type: spot}\n"
        "  a3mega-slurm:\n",
    )
    path = tmp_path / "dev.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"slurm.partitions.a3megagpupartition2: .*'a3megagpuparti'"):
        load_environment(path)


# --- Terraform's types and version constraints ------------------------------------------------------------


def test_terraform_type_constraints_convert_as_go_cty_does() -> None:
    number, boolean = parse_type("number"), parse_type("bool")
    assert conform("5", number) == [] and conform(5, number) == []
    assert conform("five", number) == ["a number is required, not the string 'five'"]
    assert conform(True, number) == ["a number is required, not a bool"]
    assert conform("true", boolean) == [] and conform("True", boolean) != []
    assert conform(3, parse_type("string")) == [] and conform([1], parse_type("string")) != []
    networks = parse_type(
        '${list(object({network = optional(string), subnetwork = string, network_ip = optional(string, ""), '
        "access_config = optional(list(object({nat_ip = string, network_tier = string})), [])}))}"
    )
    assert conform([{"subnetwork": "s"}], networks) == []
    assert conform([{"network": "n"}], networks) == ["[0].subnetwork: attribute 'subnetwork' is required"]
    assert conform([{"subnetwork": "s", "nic": "GVNIC"}], networks)[0].startswith("[0].nic: not an attribute of")
    assert conform({"subnetwork": "s"}, networks) == ["a list of object({network = optional(string), subnetwork = "
                                                      "string, network_ip = optional(string), access_config = "
                                                      "optional(list(object({nat_ip = string, network_tier = "
                                                      "string})))}) is required, not an object"]  # fmt: skip
    assert conform({"a": "1", "b": 2}, parse_type("map(string)")) == []
    assert conform(None, number) == [] and conform({"x": [1]}, parse_type("any")) == []


def test_version_constraints_read_as_terraform_reads_them() -> None:
    assert admits(">= 1.12.2", "1.12.2") and not admits(">= 1.12.2", "1.11.4")
    assert admits(">= 6.9.0, <= 7.36.0", "6.50.0") and not admits(">= 6.9.0, <= 7.36.0", "7.37.0")
    assert admits("~> 3.0", "3.9.1") and not admits("~> 3.0", "4.0.0")
    assert admits("~> 1.2.5", "1.2.9") and not admits("~> 1.2.5", "1.3.0")
    assert admits("= 1.12.2", "1.12.2") and not admits("1.12.2", "1.12.3")
    with pytest.raises(ValueError, match="not a version constraint"):
        admits(">= one", "1.0.0")


# --- the jobs ----------------------------------------------------------------------------------------------


def test_the_batch_jobs_use_the_slice_the_slurm_images_nic_names_and_the_same_gate(
    envs: dict[str, Environment],
) -> None:
    env = envs["dev"]
    written = jobs(env)
    nccl, train = written["nccl-test.sbatch"], written["train.sbatch"]
    gate = REPO / "workloads/charts/gpu-jobset/files/check-bandwidth.sh"
    assert written["check-bandwidth.sh"] == gate.read_text(), "the GKE JobSet's gate, unchanged"
    for script in (nccl, train):
        assert "#SBATCH --partition=a3mega\n#SBATCH --nodes=2\n" in script
        assert "#SBATCH --gpus-per-node=8" in script and "set -euo pipefail" in script
        for name, value in nccl_env(TCPXO, GPU_HOSTS["ubuntu"]).items():
            assert f"export {name}={value}\n" in script
    assert "NCCL_FASTRAK_IFNAME=enp6s0,enp7s0,enp13s0,enp14s0,enp134s0,enp135s0,enp141s0,enp142s0" in train
    assert "#SBATCH --ntasks-per-node=8" in nccl and "--mpi=pmi2" in nccl
    assert 'check-bandwidth.sh "nccl-${SLURM_JOB_ID}.log" 185' in nccl
    assert "#SBATCH --ntasks-per-node=1" in train
    assert "python -m workloads.trainer slurm --steps 200 --checkpoint-dir /gcs/checkpoints/slurm/dev-train" in train
    image = env.release.images["trainer-gpu"]
    assert f"--container-image={image.replace('/', '#', 1)}" in train


def test_the_jobs_pass_bashs_syntax_check(envs: dict[str, Environment], tmp_path: Path) -> None:
    for name, content in jobs(envs["dev"]).items():
        script = tmp_path / name
        script.write_text(content)
        done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert done.returncode == 0, (name, done.stderr)
    from infra.slurm.blueprint import rxdm_prolog

    prolog = tmp_path / "rxdm"
    prolog.write_text(rxdm_prolog(envs["dev"].slices["a3mega-slurm"].slice))
    assert subprocess.run(["bash", "-n", str(prolog)]).returncode == 0


def test_the_blueprint_as_written_is_the_blueprint_validated(tmp_path: Path, envs: dict[str, Environment]) -> None:
    """What gcluster reads is the YAML file: it loads back to exactly the derived blueprint."""
    from scripts.slurm import dump

    text = dump(blueprint(envs["dev"]), "# header\n")
    assert "&id" not in text and "*id" not in text, "no YAML anchors"
    assert yaml.safe_load(text) == copy.deepcopy(blueprint(envs["dev"]))


# --- the generated scripts on their hosts (findings 4, 5, 10, 11, 13) ------------------------------------


def _scripts(envs: dict[str, Environment], name: str = "dev") -> dict[str, Any]:
    from infra.shell import generated_scripts

    return {s.name: s for s in generated_scripts(envs[name]) if s.name.startswith("slurm/")}


@pytest.mark.parametrize("job", ["nccl-test.sbatch", "train.sbatch"])
def test_the_batch_jobs_run_to_their_end_with_the_tcpxo_profile(envs: dict[str, Environment], job: str) -> None:
    """Both jobs once sourced TCPXO v1.0.15's nccl-env-profile.sh under `set -u` before NCCL_LIB_DIR was set
    (the profile's `: "${NCCL_LIB_DIR:?...}"`), and it expands LD_LIBRARY_PATH without a default: exit 1. Run here
    under bash -euo pipefail with the pinned profile (the real file where fetched, else its record's stand-in)."""
    from infra.rules import check_script
    from infra.shell.run import run_script

    script = _scripts(envs)[f"slurm/jobs/{job}"]
    outcome = run_script(script)
    assert outcome.ok, outcome.summary()
    assert [c.split()[0] for c in outcome.calls if c.startswith("srun")], "the job reaches its srun"
    if job == "nccl-test.sbatch":
        assert "PASS" in outcome.output, "the bandwidth gate read the test's table"
    assert [v.line() for v in check_script(script) if v.rule.id == "host.command-on-path"] == []


def test_the_image_lifts_ubuntus_user_namespace_restriction_as_the_toolkits_example_does(
    envs: dict[str, Environment],
) -> None:
    """Ubuntu 24.04 blocks unprivileged user namespaces, so enroot/Pyxis (`srun --container-image`) cannot
    start a container; Cluster Toolkit's A3 Mega example turns it off in its image ("Required for enroot/pyxis")."""
    from infra.rules import RULES
    from infra.shell.run import run_script

    scripts = _scripts(envs)
    jobs_ = [s for name, s in scripts.items() if name.startswith("slurm/jobs/")]
    assert jobs_ and all(s.userns_lifted for s in jobs_)
    assert [v.line() for s in jobs_ for v in RULES["host.containers-need-userns"].run(s)] == []
    runner = scripts["slurm/image_script/fix_enroot_env.sh"]
    outcome = run_script(runner)
    assert outcome.ok and "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0" in outcome.calls, outcome.summary()
    example = (_root() / EXAMPLE / "a3mega-slurm-blueprint.yaml").read_text() if (_root() / EXAMPLE).exists() else ""
    for line in ("sysctl -w kernel.apparmor_restrict_unprivileged_userns=0", "/etc/sysctl.d/90-enroot-namespaces.conf"):
        assert line in runner.text and (not example or line in example)


def test_the_prologs_docker_gpus_finds_the_nvidia_container_toolkit_on_the_image(envs: dict[str, Environment]) -> None:
    """The prolog runs `docker run --gpus all`, which needs nvidia-container-runtime-hook (package
    nvidia-container-toolkit; moby registers its GPU driver only when the hook is on PATH): the image installs it."""
    from infra.rules import RULES

    scripts = _scripts(envs)
    prolog = scripts["slurm/a3mega/rxdm.prolog_slurmd"]
    assert "--gpus all" in prolog.text
    assert "nvidia-container-runtime-hook" in prolog.image_commands
    assert RULES["host.docker-gpus-needs-toolkit"].run(prolog) == []
    bp = blueprint(envs["dev"])
    runners = _modules(bp)["image_script"]["settings"]["runners"]
    pin = next(r for r in runners if r["destination"] == "/etc/apt/preferences.d/block-broken-nvidia-container")
    assert "Pin: version 1.17.7-1" in pin["content"], "the toolkit's example blocks the release that breaks enroot"


@pytest.mark.parametrize("context", ["prolog_slurmd", "epilog_slurmd"])
def test_the_prolog_and_epilog_run_to_their_end_with_the_path_slurmd_gives_them(
    envs: dict[str, Environment], context: str
) -> None:
    """slurmd runs a prolog with no PATH (bash's default, without /snap/bin) and Ubuntu's gcloud is the snap's
    /snap/bin/gcloud: `gcloud auth configure-docker` by name is `command not found` under set -e."""
    from infra.rules import check_script
    from infra.shell.run import run_script

    script = _scripts(envs)[f"slurm/a3mega/rxdm.{context}"]
    outcome = run_script(script)
    assert outcome.ok, outcome.summary()
    assert [v.line() for v in check_script(script)] == []
    if context == "prolog_slurmd":
        assert "gcloud auth configure-docker --quiet us-docker.pkg.dev" in outcome.calls
        assert any(c.startswith("docker run --detach") for c in outcome.calls)
    else:
        assert [c for c in outcome.calls if c.startswith("docker")] == ["docker container stop rxdm-4242"]


def test_enroot_runs_on_local_ssd_only_on_the_nodes_that_have_one(envs: dict[str, Environment]) -> None:
    """The image's /etc/enroot/enroot.conf puts enroot's paths on /mnt/localssd, which only the A3 Mega
    compute nodes mount; the login and controller machines have none. The toolkit's example removes the file there
    (controller_startup reset_enroot.sh, login_startup_script: `rm -f /etc/enroot/enroot.conf`)."""
    from infra.slurm.blueprint import LOCAL_SSD

    modules = _modules(blueprint(envs["dev"]))
    image = {r["destination"]: r["content"] for r in modules["image_script"]["settings"]["runners"]}
    assert LOCAL_SSD in image["/etc/enroot/enroot.conf"]
    compute = modules["compute_startup"]["settings"]
    assert compute["local_ssd_filesystem"]["mountpoint"] == LOCAL_SSD
    controller_runs = [
        r["content"] for r in modules["controller_startup"]["settings"]["runners"] if r["type"] == "shell"
    ]
    login = modules["controller"]["settings"].get("login_startup_script", "")
    for where, scripts_ in (("controller", controller_runs), ("login", [login])):
        assert any("rm -f /etc/enroot/enroot.conf" in s for s in scripts_), (
            f"the {where} keeps the local-SSD enroot.conf"
        )
    for name in ("slurm/controller_startup/reset_enroot.sh", "slurm/login/login_startup_script"):
        from infra.shell.run import run_script

        assert run_script(_scripts(envs)[name]).ok


def test_no_slurm_user_gets_roots_docker_socket(envs: dict) -> None:
    """Before the fix the blueprint made Docker's socket world-writable on the image and the
    nodes: every Slurm user could run a privileged container, root on the node."""
    from infra.slurm.blueprint import blueprint

    for env in envs.values():
        if env.slurm is None:
            continue
        settings = [m.get("settings") or {} for group in blueprint(env)["deployment_groups"] for m in group["modules"]]
        dockers = [s["docker"] for s in settings if "docker" in s]
        assert dockers and all(d.get("world_writable") is False for d in dockers), env.name


def test_a_host_file_is_filled_with_exactly_its_placeholders() -> None:
    """The node image's files keep the values an environment decides as @NAME@: each filled, none left over, and a
    value for a placeholder the file does not have is refused (a renamed placeholder cannot pass unnoticed)."""
    from infra.slurm.files import fill

    text = fill("image/enroot.conf", LOCAL_SSD="/mnt/ssd")
    assert "ENROOT_DATA_PATH       /mnt/ssd/${UID}/enroot/data" in text and "@" not in text
    with pytest.raises(KeyError, match="placeholders \\['LOCAL_SSD'\\], values given for \\[\\]"):
        fill("image/enroot.conf")
    with pytest.raises(KeyError, match="values given for \\['LOCAL_SSD', 'OTHER'\\]"):
        fill("image/enroot.conf", LOCAL_SSD="/mnt/ssd", OTHER="x")
