"""The real Terraform engine (infra/engine): OpenTofu and the three providers built from their checked sources, and
OpenTofu validating every environment's stack against the real providers' schemas."""

from __future__ import annotations

import copy
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from infra.catalogue.terraform_engine import PROVIDERS, REGISTRY_HOSTS, ProviderSource
from infra.engine import providers
from infra.engine.build import BuildError
from infra.engine.tofu import Workspace, cli_config, tofu
from scripts.tofu import diagnostics_text
from tests.helpers import REPO

SOURCES = providers.sources_dir()
HELM = PROVIDERS["helm"]


def _sources_with(tmp_path: Path, tarball: bytes, provider: ProviderSource, sums: str | None = None) -> Path:
    folder = tmp_path / "sources"
    folder.mkdir()
    (folder / provider.tarball).write_bytes(tarball)
    digest = hashlib.sha256(tarball).hexdigest()
    (folder / "SHA256SUMS").write_text(sums if sums is not None else f"{digest}  {provider.tarball}\n")
    return folder


def test_the_pinned_digests_are_the_shared_folders_checksums() -> None:
    listed = dict(reversed(line.split()) for line in (SOURCES / "SHA256SUMS").read_text().splitlines())
    assert {p.tarball: p.sha256 for p in PROVIDERS.values()} == listed


def test_a_tarball_whose_checksum_differs_is_refused_naming_it_and_nothing_is_built(tmp_path: Path) -> None:
    changed = (SOURCES / HELM.tarball).read_bytes() + b"\0"
    # SHA256SUMS updated to match the changed tarball: the pin in the repository still refuses it.
    sources = _sources_with(tmp_path, changed, HELM)
    mirror = tmp_path / "mirror"
    with pytest.raises(BuildError) as refused:
        providers.build(HELM, mirror=mirror, sources=sources)
    message = str(refused.value)
    assert str(sources / HELM.tarball) in message and HELM.sha256 in message and "nothing was built" in message
    assert "infra/catalogue/terraform_engine.py" in message
    assert not mirror.exists()


def test_a_tarball_its_sha256sums_does_not_list_is_refused(tmp_path: Path) -> None:
    sources = _sources_with(tmp_path, (SOURCES / HELM.tarball).read_bytes(), HELM, sums="")
    with pytest.raises(BuildError, match=r"SHA256SUMS: lists nothing for terraform-provider-helm-v3\.1\.2\.tar\.gz"):
        providers.verify(HELM, sources)


def test_a_missing_source_folder_or_tarball_names_it_and_where_the_sources_come_from(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match=r"no such folder.*vendor/terraform-providers/README\.md.*PLATFORM_PROVIDER"):
        providers.verify(HELM, tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BuildError, match=r"empty/terraform-provider-helm-v3\.1\.2\.tar\.gz: missing"):
        providers.verify(HELM, tmp_path / "empty")


def test_a_provider_that_fails_to_build_leaves_the_mirror_as_it_was(tmp_path: Path) -> None:
    """A source that does not compile: the compiler's words in the error, nothing in the mirror, no temporary
    folder left behind."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in {
            "go.mod": "module example.test/broken\n\ngo 1.26\n",
            "main.go": "package main\nfunc main() {",
        }.items():
            info = tarfile.TarInfo(name)
            info.size = len(text)
            archive.addfile(info, io.BytesIO(text.encode()))
    tarball = buffer.getvalue()
    broken = ProviderSource("broken", "hashicorp", "0.0.1", "0" * 40, hashlib.sha256(tarball).hexdigest())
    sources = _sources_with(tmp_path, tarball, broken)
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    with pytest.raises(
        BuildError, match=r"(?s)provider broken 0\.0\.1: go build failed.*unchanged:\n.*main\.go.*syntax error"
    ):
        providers.build(broken, mirror=mirror, sources=sources)
    assert list(mirror.iterdir()) == []


def test_the_cli_configuration_takes_the_three_providers_from_the_mirror_and_nothing_else(tmp_path: Path) -> None:
    text = cli_config(tmp_path / "mirror", tmp_path / "cache")
    for p in PROVIDERS.values():
        for host in REGISTRY_HOSTS:
            assert f'"{host}/hashicorp/{p.type}"' in text
    assert "filesystem_mirror" in text and "direct" in text and "exclude" in text


# --- OpenTofu with the real providers ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine() -> None:
    """OpenTofu and the providers, built (or found cached: `make test` builds them first)."""
    from scripts.tofu import build

    build()


@pytest.fixture(scope="module")
def example_stacks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Each environment of docs/examples (dev on two slices; dev with MaxText's local checkpoint tier) synthesized,
    by the example's folder name: stack pieces no shipped environment has (the add-on, a bucket with folders)."""
    from infra.cdk.layout import read_stack, stack_name
    from infra.synth.app import synth
    from infra.synth.load import load_environment

    found = {}
    for path in sorted((REPO / "docs" / "examples").glob("*/dev.yaml")):
        out = tmp_path_factory.mktemp(path.parent.name)
        synth({"dev": load_environment(path)}, out)
        found[f"example-{path.parent.name}"] = read_stack(out, stack_name("dev"))
    assert set(found) == {"example-multi-tier", "example-multislice"}
    return found


def _validate(tmp_path: Path, name: str, stack: dict[str, Any]) -> list[dict[str, Any]]:
    workspace = Workspace(tmp_path / name, stack)
    workspace.init(backend=False)
    return workspace.validate()


@pytest.mark.slow
def test_every_environments_stack_is_valid_for_the_real_providers(
    engine: None, stacks: dict[str, dict[str, Any]], example_stacks: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """`tofu validate` with the providers the stacks pin: every attribute the prebuilt bindings write (helm's are
    3.2.0's, the provider built and pinned is 3.1.2) is one the provider's schema has, with a value of its type; the
    documented examples' too."""
    for name, stack in {**stacks, **example_stacks}.items():
        found = _validate(tmp_path, name, stack)
        assert [d for d in found if d["severity"] == "error"] == [], "\n".join(diagnostics_text(name, found))


@pytest.mark.slow
def test_validate_refuses_an_attribute_the_provider_does_not_have(
    engine: None, stacks: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    stack = copy.deepcopy(stacks["dev"])
    release = next(iter(stack["resource"]["helm_release"].values()))
    release["wait_for_everything"] = True
    lines = diagnostics_text("dev", _validate(tmp_path, "dev", stack))
    assert any("error: Extraneous JSON object property" in line and "wait_for_everything" in line for line in lines), (
        lines
    )


def test_the_workspace_keeps_the_stack_as_synthesized_and_overrides_only_its_backend(tmp_path: Path) -> None:
    stack = {"terraform": {"backend": {"gcs": {"bucket": "b"}}}, "resource": {}}
    workspace = Workspace(tmp_path / "w", stack)
    assert json.loads((workspace.folder / "cdk.tf.json").read_text()) == stack
    override = json.loads((workspace.folder / "platform_override.tf.json").read_text())
    assert override == {"terraform": {"backend": {"local": {"path": "terraform.tfstate"}}}}


@pytest.mark.slow
def test_the_real_plan_of_each_environment_creates_what_the_stack_declares_and_the_gate_reads_it(
    engine: None, stacks: dict[str, dict[str, Any]], example_stacks: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """`tofu plan` with the real providers, offline (a token that is no credential, no refresh), from an empty
    state: every resource of the stack is one create in OpenTofu's own plan, and the review's gate reads that plan
    as the apply's gate does (`platform review --plan`), with the same addresses and actions. The multi-tier
    example's too: the local checkpoint tier's add-on and bucket with folders are in the provider's planned values
    (the multislice example's second pool and worker group are of kinds dev's plan holds: validated above)."""
    from infra.review import review_plan
    from scripts.tofu import plan_all, summary

    # Three folders below the repository, as make deploy's (the charts' ../../../ paths), one per test process.
    work = REPO / ".cache" / f"tofu-test-{os.getpid()}"
    plans = {}
    for name, declaring in {
        "dev": stacks["dev"],
        "prod": stacks["prod"],
        "multi-tier": example_stacks["example-multi-tier"],
    }.items():
        stack = f"platform-{name}"
        try:
            plan_all({stack: declaring}, work, tmp_path / "out")
        finally:
            shutil.rmtree(work, ignore_errors=True)
        planned = plans[name] = json.loads((tmp_path / "out" / f"{stack}.plan.json").read_text())
        declared = {f"{t}.{k}" for t, items in declaring["resource"].items() for k in items}
        actions = {e["address"]: e["change"]["actions"] for e in planned["resource_changes"]}
        assert actions == {address: ["create"] for address in declared}
        assert summary(planned) == f"Plan: {len(declared)} to add, 0 to change, 0 to destroy."
        review = review_plan(stack, planned)
        assert {c.address: c.action for c in review.changes} == dict.fromkeys(declared, "create")
        assert review.blocking == []

    after = {e["address"]: e["change"]["after"] for e in plans["multi-tier"]["resource_changes"]}
    (cluster,) = [v for a, v in after.items() if a.startswith("google_container_cluster.")]
    assert cluster["addons_config"][0]["high_scale_checkpointing_config"] == [{"enabled": True}]
    (backups,) = [v for a, v in after.items() if a.startswith("google_storage_bucket.bucket-mtc-backups")]
    assert backups["hierarchical_namespace"] == [{"enabled": True}] and backups["uniform_bucket_level_access"]


# --- the providers' plan of a change, against a stand-in state (infra/engine/state.py) ------------------------------


@pytest.fixture(scope="module")
def settled_prod(engine: None, stacks: dict[str, dict[str, Any]]) -> Any:
    """Prod's stand-in state: every resource as if applied; the stack's own plan against it is empty."""
    from infra.engine.state import settle
    from infra.localcluster.apply import registry_charts

    work = REPO / ".cache" / f"tofu-state-{os.getpid()}" / "platform-prod"
    workspace = Workspace(work, stacks["prod"], overrides=registry_charts(stacks["prod"], work))
    try:
        assert 1 <= settle(workspace) <= 6
        yield workspace
    finally:
        shutil.rmtree(work.parent, ignore_errors=True)


def _resource(stack: dict[str, Any], rtype: str, prefix: str) -> tuple[str, dict[str, Any]]:
    (name,) = [n for n in stack["resource"][rtype] if n.startswith(prefix)]
    return f"{rtype}.{name}", stack["resource"][rtype][name]


@pytest.mark.slow
def test_the_gate_stops_each_class_of_change_in_the_real_providers_plan(
    settled_prod: Workspace, stacks: dict[str, dict[str, Any]]
) -> None:
    """Review 9's attacks that passed the old gate, applied to prod's stack and planned by the pinned providers
    against the stand-in state: the providers decide each action (a namespace renamed is replaced, a machine type is
    updated in place), and the gate names each change's consequence; a change nobody gates stays harmless. The
    offline review plans each resource as they do."""
    from infra.catalogue.consequences import CAPACITY_LOST, DATA_LOST, DEPENDENCY_CUT, SECURITY_WEAKENED
    from infra.engine.state import plan_change
    from infra.review import diff, review_plan
    from infra.review.real_plan import disagreements

    stack = copy.deepcopy(stacks["prod"])
    expected: dict[str, tuple[str, set[str]]] = {}

    def change(rtype: str, prefix: str, action: str, kinds: set[str], mutate: Any) -> None:
        address, body = _resource(stack, rtype, prefix)
        mutate(body)
        expected[address] = (action, kinds)

    change(
        "google_container_node_pool",
        "system",
        "update",
        {CAPACITY_LOST},
        lambda b: b["node_config"].update(machine_type="e2-standard-4"),
    )
    change(
        "google_container_node_pool",
        "slice-serve",
        "update",
        {CAPACITY_LOST},
        lambda b: b["node_config"].update(gvnic={"enabled": True}),
    )
    change(
        "google_container_cluster",
        "gke",
        "update",
        {SECURITY_WEAKENED, DEPENDENCY_CUT},
        lambda b: (
            b.update(deletion_protection=False, enable_shielded_nodes=False),
            b["addons_config"]["gcs_fuse_csi_driver_config"].update(enabled=False),
        ),
    )
    change(
        "google_storage_bucket",
        "bucket-checkpoints",
        "update",
        {SECURITY_WEAKENED},
        lambda b: b.update(public_access_prevention="inherited", uniform_bucket_level_access=False),
    )
    change(
        "google_compute_firewall",
        "webhooks",
        "update",
        {SECURITY_WEAKENED},
        lambda b: b.update(source_ranges=["0.0.0.0/0"]),
    )
    change(
        "kubernetes_namespace_v1",
        "namespaces_ml-serving",
        "update",
        {SECURITY_WEAKENED},
        lambda b: b["metadata"]["labels"].update({"pod-security.kubernetes.io/enforce": "privileged"}),
    )
    change(
        "kubernetes_namespace_v1",
        "namespaces_ml-training",
        "replace",
        {DATA_LOST},
        lambda b: b["metadata"].update(name="ml-training-2"),
    )
    change("helm_release", "serve-llama70b-vllm_", "update", {CAPACITY_LOST}, lambda b: b.update(force_update=True))
    change("helm_release", "serve-canary", "replace", {CAPACITY_LOST}, lambda b: b.update(name="canary"))
    for rtype, prefix, kind in (
        ("kubernetes_network_policy_v1", "network-policies_ml-serving-default-deny", SECURITY_WEAKENED),
        ("google_compute_router_nat", "network_nat", DEPENDENCY_CUT),
        ("google_artifact_registry_repository_iam_member", "registry_reader-0", DEPENDENCY_CUT),
    ):
        address, _ = _resource(stack, rtype, prefix)
        del stack["resource"][rtype][address.split(".", 1)[1]]
        if not stack["resource"][rtype]:
            del stack["resource"][rtype]
        expected[address] = ("delete", {kind})
    # Harmless: a label on a slice's nodes.
    _resource(stack, "google_container_node_pool", "slice-train")[1]["node_config"]["labels"]["team"] = "research"

    planned = plan_change(settled_prod, stack)
    review = review_plan("platform-prod", planned)
    found = {c.address: (c.action, set(c.kinds)) for c in review.changes}
    harmless = {a: v for a, v in found.items() if a not in expected}
    assert {a: found.get(a) for a in expected} == expected
    assert all(not kinds for _, kinds in harmless.values()), harmless
    assert {c.address for c in review.blocking} == set(expected)
    # The offline review of the same change plans every resource as the providers do.
    assert disagreements(diff(stacks["prod"], stack), review.changes) == []


def _cidr(body: dict[str, Any], grow: int) -> None:
    network, bits = body["ip_cidr_range"].split("/")
    body["ip_cidr_range"] = f"{network}/{int(bits) - grow}"


# dev's changes, one per resource: (type, name prefix, what the change is, the change). Each is one a pull request
# makes; the review's action for each, and for whatever reads what it changes, is held to the real providers' plan.
DEV_CHANGES: list[tuple[str, str, str, Any]] = [
    ("google_compute_subnetwork", "gpudirect_subnet-1", "a subnet range shrunk", lambda b: _cidr(b, -1)),
    ("google_compute_subnetwork", "gpudirect_subnet-2", "a subnet range grown", lambda b: _cidr(b, 1)),
    ("google_compute_subnetwork", "network_subnet", "a secondary range grown",
     lambda b: b["secondary_ip_range"][1].update(ip_cidr_range="10.20.0.0/19")),
    ("google_container_node_pool", "slice-decode", "a pool's machine type",
     lambda b: b["node_config"].update(machine_type="ct6e-standard-8t")),
    ("google_container_node_pool", "slice-prefill", "a pool off spot", lambda b: b["node_config"].update(spot=False)),
    ("google_container_node_pool", "slice-sax-b", "a pool's zone", lambda b: b.update(node_locations=["us-east5-a"])),
    # Optional and computed: left out, the pool keeps what the state holds (infra/catalogue/optional_computed.json).
    ("google_container_node_pool", "slice-train", "a pool's node count left out", lambda b: b.pop("node_count")),
    # prevent_destroy lifted (a meta-argument, no part of the plan): the engine's own refusal is the next test.
    ("google_storage_bucket", "bucket-datasets", "a bucket's location",
     lambda b: b.update(location="US-CENTRAL1", lifecycle={"prevent_destroy": False})),
    ("google_storage_bucket", "bucket-models", "a bucket's storage class",
     lambda b: b.update(storage_class="NEARLINE")),
    ("kubernetes_namespace_v1", "namespaces_ml-gpu", "a namespace renamed",
     lambda b: b["metadata"].update(name="ml-gpu-2")),
    ("google_service_account", "converter", "a service account renamed", lambda b: b.update(account_id="wi-conv-2")),
    ("google_service_account", "serving", "a service account's display name", lambda b: b.update(display_name="x")),
    ("google_project_iam_member", "metrics-adapter", "a grant's role",
     lambda b: b.update(role="roles/monitoring.editor")),
    ("google_compute_firewall", "webhooks", "a firewall port opened", lambda b: b["allow"][0]["ports"].append("8443")),
    ("google_compute_network", "gpudirect_vpc-3", "a network renamed", lambda b: b.update(name=b["name"] + "-b")),
    ("google_compute_instance_template", "vms-a3mega", "a VM template's description",
     lambda b: b.update(description="changed")),
    ("helm_release", "jobset", "a release moved to another namespace", lambda b: b.update(namespace="jobset-2")),
    ("helm_release", "gpu-training", "a release's timeout", lambda b: b.update(timeout=1234)),
    ("helm_release", "kueue_release", "a controller's version", lambda b: (b.update(version="0.17.3"),
                                                                   b["postrender"]["args"].__setitem__(2, "0.17.3"))),
    ("kubernetes_network_policy_v1", "network-policies_ml-gpu-default-deny", "a policy's types",
     lambda b: b["spec"].update(policy_types=["Ingress", "Egress"])),
]  # fmt: skip


@pytest.mark.slow
def test_the_attributes_the_offline_review_lets_the_provider_keep_are_the_real_schemas(
    engine: None, stacks: dict[str, dict[str, Any]]
) -> None:
    """infra/catalogue/optional_computed.json is what the real providers' schemas mark optional and computed, for
    every resource type the stacks declare (`python -m scripts.tofu computed --write` writes it)."""
    from infra.catalogue.optional_computed import CATALOGUE_FILE
    from infra.engine.computed import catalogue, read_schemas, stack_types

    found = catalogue(read_schemas(stacks["dev"]), stack_types(stacks.values()))
    assert "node_count" in found["google_container_node_pool"]
    assert found == json.loads(CATALOGUE_FILE.read_text()), "run `python -m scripts.tofu computed --write`"


@pytest.mark.slow
def test_the_offline_review_plans_each_change_as_the_real_providers_plan_it(
    engine: None, stacks: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """dev's changes above, planned by the real providers against the stand-in state of dev as it is (the path
    `make plan BASE_REF=` takes: scripts/tofu.py plan_changes, the plan written with its subject), and reviewed
    offline: the two plan the same action for every resource, the changed ones and each one that reads what they
    change (a network renamed replaces its subnets and firewalls; a service account renamed replaces its grants).
    A row where they differ is a defect of the offline review (its table of the providers' ForceNew fields)."""
    from infra.review import diff, real_plan, review_plan
    from scripts.tofu import plan_changes

    before = stacks["dev"]
    after = copy.deepcopy(before)
    changed = {}
    for rtype, prefix, what, mutate in DEV_CHANGES:
        address, body = _resource(after, rtype, prefix)
        mutate(body)
        changed[address] = what
    work = REPO / ".cache" / f"tofu-change-{os.getpid()}"
    try:
        assert plan_changes({"platform-dev": before}, {"platform-dev": after}, work, tmp_path, gate=False) == 0
    finally:
        shutil.rmtree(work, ignore_errors=True)
    planned = real_plan.read(tmp_path, "platform-dev", after, before)
    assert planned is not None
    real = {c.address: c.action for c in review_plan("platform-dev", planned).changes}
    offline = diff(before, after)
    assert real_plan.disagreements(offline, review_plan("platform-dev", planned).changes) == []
    actions = {changed[a]: real.get(a, "no change") for a in changed}
    assert actions == {
        "a subnet range shrunk": "replace", "a subnet range grown": "update", "a secondary range grown": "update",
        "a pool's machine type": "update", "a pool off spot": "replace", "a pool's zone": "update",
        "a pool's node count left out": "no change",
        "a bucket's location": "replace", "a bucket's storage class": "update", "a namespace renamed": "replace",
        "a service account renamed": "replace", "a service account's display name": "update",
        "a grant's role": "replace", "a firewall port opened": "update", "a network renamed": "replace",
        "a VM template's description": "replace",
        "a release moved to another namespace": "replace", "a release's timeout": "update",
        "a controller's version": "update", "a policy's types": "update",
    }  # fmt: skip
    # A controller's bump (here a rollback) reads as its version moving, with what it does to the CRDs, not as its
    # chart swapped: the engine plans the charts from local copies named after the version.
    (bump,) = [
        c for c in review_plan("platform-dev", planned).changes if changed.get(c.address) == "a controller's version"
    ]
    assert "controller kueue 0.19.2 -> 0.17.3 changes the CRDs" in bump.blocked and "swapped" not in bump.blocked
    # What reads a changed value changes with it: the renamed network's subnet, and the A3 Mega pool on it, are
    # replaced, its firewall rule updated; the renamed account's grants replaced, the Kubernetes account that
    # names it updated; the VM group takes its new template.
    follows = {(a.split(".")[0], action) for a, action in real.items() if a not in changed}
    assert follows == {
        ("google_compute_subnetwork", "replace"), ("google_container_node_pool", "replace"),
        ("google_compute_firewall", "update"), ("google_service_account_iam_member", "replace"),
        ("google_storage_bucket_iam_member", "replace"), ("kubernetes_service_account_v1", "update"),
        ("google_compute_instance_group_manager", "update"),
    }  # fmt: skip


@pytest.mark.slow
def test_the_engine_itself_refuses_to_plan_a_guarded_resource_away(
    settled_prod: Workspace, stacks: dict[str, dict[str, Any]]
) -> None:
    """A bucket renamed is a replacement the stack's prevent_destroy refuses: OpenTofu stops the plan."""
    from infra.engine.state import plan_change
    from infra.engine.tofu import EngineError

    stack = copy.deepcopy(stacks["prod"])
    address, bucket = _resource(stack, "google_storage_bucket", "bucket-checkpoints")
    bucket["name"] += "-2"
    with pytest.raises(EngineError, match=f"(?s)Resource instance cannot be destroyed.*{address}"):
        plan_change(settled_prod, stack)


# --- OpenTofu applying to the local control plane ------------------------------------------------------------------

PROBE_CHART = {
    "Chart.yaml": "apiVersion: v2\nname: probe\nversion: 0.1.0\n",
    "templates/objects.yaml": (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: probe}\ndata: {ok: 'yes'}\n"
        "{{- if .Values.refused }}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: Not_A_Name}\n{{- end }}\n"
        # A Deployment no node can take (the cluster has none): the install's wait holds until its timeout.
        "{{- if .Values.held }}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: held}\nspec:\n"
        "  selector: {matchLabels: {app: held}}\n  template:\n    metadata: {labels: {app: held}}\n"
        "    spec: {containers: [{name: c, image: 'example.invalid/held@sha256:" + "0" * 64 + "'}]}\n{{- end }}\n"
    ),
}


def _probe_workspace(
    folder: Path, chart: Path, kubeconfig: Path, name: str, values: dict[str, Any], upgrade_install: bool = True
) -> Workspace:
    """A stack of one release of the probe chart, with the helm provider the stacks pin, in `folder`."""
    from infra.catalogue.terraform_engine import HELM_PROVIDER_PIN

    stack = {
        "terraform": {"required_providers": {"helm": {"source": "helm", "version": HELM_PROVIDER_PIN}}},
        "provider": {"helm": [{"kubernetes": {"config_path": str(kubeconfig)}, "helm_driver": "configmap"}]},
        "resource": {
            "helm_release": {
                "probe": {
                    "name": name,
                    "chart": str(chart),
                    "namespace": name,
                    "values": [json.dumps(values)],
                    "upgrade_install": upgrade_install,
                    "timeout": 600,
                }
            }
        },
    }
    workspace = Workspace(folder, stack)
    workspace.init()
    return workspace


def _probe_chart(folder: Path) -> Path:
    for name, text in PROBE_CHART.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


@pytest.mark.slow
def test_a_failed_first_install_is_recorded_by_helm_only_and_upgrade_install_recovers_it(
    engine: None, tmp_path: Path
) -> None:
    """The helm provider the stacks pin, under OpenTofu, against the real API server: a release whose first install
    fails (the API server refuses one of its objects) leaves Helm's record, status failed, and nothing in
    OpenTofu's state. Once the chart is mended, the next apply installs again: without upgrade_install Helm refuses
    ("cannot re-use a name that is still in use"), every apply after it too; with upgrade_install, which every
    release of the stacks sets (rule helm.first-install-recoverable), it upgrades the failed record."""
    from infra.localcluster.cluster import Cluster

    chart = _probe_chart(tmp_path / "chart")
    cluster = Cluster(tmp_path / "cluster")
    try:
        cluster.up({}, "us-east5")
        for upgrade_install in (False, True):
            name = f"probe-{str(upgrade_install).lower()}"
            cluster.kubectl("create", "namespace", name)

            def apply(refused: bool, upgrade_install: bool = upgrade_install, name: str = name) -> Any:
                values = {"refused": refused}
                workspace = _probe_workspace(tmp_path / name, chart, cluster.kubeconfig, name, values, upgrade_install)
                return workspace, workspace.run("apply", "-auto-approve", "-no-color", check=False)

            workspace, first = apply(refused=True)
            assert first.returncode == 1 and "Not_A_Name" in first.stderr, first.stderr[-2000:]
            assert workspace.run("state", "list", check=False).stdout.strip() == ""
            records = cluster.get("configmaps", "-n", name, "-l", "owner=helm")["items"]
            assert [r["metadata"]["labels"]["status"] for r in records] == ["failed"]
            _, second = apply(refused=False)
            if upgrade_install:
                assert second.returncode == 0, second.stderr[-2000:]
                assert "Apply complete! Resources: 1 added, 0 changed, 0 destroyed." in second.stdout
                assert cluster.get("configmap", "probe", "-n", name)["data"] == {"ok": "yes"}
            else:
                assert second.returncode == 1 and "cannot re-use a name that is still in use" in second.stderr
    finally:
        cluster.down(quiet=True)


@pytest.mark.slow
def test_an_apply_killed_during_an_install_blocks_the_next_until_deploy_local_sets_the_record_back(
    engine: None, tmp_path: Path
) -> None:
    """`tofu apply` killed while a release installs (a cancelled job, a lost runner) leaves Helm's record
    pending-install and nothing in the state; the next apply of the mended release, upgrade_install and all, fails
    "another operation (install/upgrade/rollback) is in progress", and so would every one after it. deploy-local
    sets such a record back before it applies (recover_interrupted), and the apply installs the release."""
    import signal

    from infra.localcluster.apply import recover_interrupted
    from infra.localcluster.cluster import Cluster

    chart = _probe_chart(tmp_path / "chart")
    cluster = Cluster(tmp_path / "cluster")
    try:
        cluster.up({}, "us-east5")
        cluster.kubectl("create", "namespace", "probe")
        held = _probe_workspace(tmp_path / "probe", chart, cluster.kubeconfig, "probe", {"held": True})
        apply = subprocess.Popen(
            [str(tofu()), "apply", "-auto-approve", "-no-color"], cwd=held.folder, env=held.env(),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip

        def status() -> list[str]:
            records = cluster.get("configmaps", "-n", "probe", "-l", "owner=helm")["items"]
            return [r["metadata"]["labels"]["status"] for r in records]

        deadline = time.monotonic() + 300
        while status() != ["pending-install"] and time.monotonic() < deadline:
            time.sleep(0.5)
        assert status() == ["pending-install"]
        os.killpg(apply.pid, signal.SIGKILL)  # OpenTofu and its provider
        apply.wait()
        mended = _probe_workspace(tmp_path / "probe", chart, cluster.kubeconfig, "probe", {})
        refused = mended.run("apply", "-auto-approve", "-no-color", check=False)
        assert refused.returncode == 1, refused.stdout[-2000:]
        assert "another operation (install/upgrade/rollback) is in progress" in refused.stderr, refused.stderr
        (said,) = recover_interrupted(cluster, mended.stack)
        assert said.startswith("release probe/probe was left pending-install by an interrupted apply"), said
        done = mended.run("apply", "-auto-approve", "-no-color", check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "Apply complete! Resources: 1 added, 0 changed, 0 destroyed." in done.stdout
        assert status()[-1] == "deployed" and recover_interrupted(cluster, mended.stack) == []
    finally:
        cluster.down(quiet=True)
