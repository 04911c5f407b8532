"""In-cluster security: what the stacks declare, and bad edits of each class refused
by the rules step `make plan` runs (`python -m scripts.rules <stacks>`, scripts/plan.py)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from infra.catalogue import upstream
from infra.catalogue.pod_security import PRIVILEGED_CONTAINERS, PRIVILEGED_NAMESPACES
from infra.constructs.network import HEALTH_CHECK_RANGES
from infra.review.posture import security_posture
from infra.rules.run import stack_releases
from tests.helpers import REPO, of_type


def _policies(stack: dict[str, Any], namespace: str) -> dict[str, dict[str, Any]]:
    return {
        p["metadata"]["name"]: p["spec"]
        for p in of_type(stack, "kubernetes_network_policy_v1").values()
        if p["metadata"]["namespace"] == namespace
    }


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_every_workload_namespace_enforces_pod_security_and_denies_ingress_by_default(
    env: str, stacks: dict[str, dict[str, Any]]
) -> None:
    namespaces = {
        n["metadata"]["name"]: n["metadata"]["labels"] for n in of_type(stacks[env], "kubernetes_namespace_v1").values()
    }
    assert set(namespaces) == {"ml-gpu", "ml-serving", "ml-training"}
    for name, labels in namespaces.items():
        expected = "privileged" if name in PRIVILEGED_NAMESPACES else "baseline"
        assert labels["pod-security.kubernetes.io/enforce"] == expected, name
        assert labels["pod-security.kubernetes.io/warn"] == "restricted", name
        deny = _policies(stacks[env], name)["default-deny-ingress"]
        assert deny["policy_types"] == ["Ingress"] and not deny.get("ingress"), name
        assert not deny["pod_selector"].get("match_labels"), name


def test_the_ray_head_takes_connections_from_its_own_cluster_only(stacks: dict[str, dict[str, Any]]) -> None:
    """Ray's Jobs API (8265), client port (10001) and GCS (6379) run code for whoever reaches them
    (docs.ray.io/en/latest/ray-security): only the RayCluster's own pods may."""
    policies = _policies(stacks["dev"], "ml-training")
    assert set(policies) == {"default-deny-ingress", "from-monitoring", "ray-training-within"}
    within = policies["ray-training-within"]
    assert within["pod_selector"]["match_labels"] == {"app.kubernetes.io/instance": "ray-training"}
    (rule,) = within["ingress"]
    assert rule["from"][0] == {"pod_selector": {"match_labels": {"app.kubernetes.io/instance": "ray-training"}}}
    (_, objects) = stack_releases(stacks["dev"])["ray-training"]
    head = next(o for o in objects if o["kind"] == "RayCluster")["spec"]["headGroupSpec"]["template"]["metadata"]
    assert head["labels"]["app.kubernetes.io/instance"] == "ray-training"


def test_managed_prometheus_reaches_the_metrics_ports_only(stacks: dict[str, dict[str, Any]]) -> None:
    """Review N3: the default-deny policies refused Managed Prometheus's collectors (pods in gmp-system),
    so the cluster's Ray monitoring collected nothing. They reach the metrics ports, never Ray's Jobs API (8265),
    client port (10001) or GCS (6379)."""
    for namespace in ("ml-training", "ml-serving", "ml-gpu"):
        (rule,) = _policies(stacks["dev"], namespace)["from-monitoring"]["ingress"]
        assert rule["from"] == [{"namespace_selector": {"match_labels": {"kubernetes.io/metadata.name": "gmp-system"}}}]
        ports = {int(p["port"]) for p in rule["ports"]}
        assert ports == {8000, 8080, 9090} and not ports & {8265, 10001, 6379, 8081}
    # 8081 on the Ray workers is the multislice coordinator (review 10 L2: it was called TPU metrics and opened to
    # the collectors), reached by the RayCluster's own pods only.
    (_, objects) = stack_releases(stacks["dev"])["ray-training"]
    workers = next(o for o in objects if o["kind"] == "RayCluster")["spec"]["workerGroupSpecs"]
    ports = {p["name"]: p["containerPort"] for g in workers for c in g["template"]["spec"]["containers"]
             for p in c.get("ports", [])}  # fmt: skip
    assert ports.get("megascale") == 8081 and "tpu-metrics" not in ports


def test_servers_take_the_load_balancers_and_saxml_the_subnet(stacks: dict[str, dict[str, Any]]) -> None:
    stack = stacks["dev"]
    policies = _policies(stack, "ml-serving")
    (lb,) = policies["from-load-balancers"]["ingress"]
    proxy_only = next(
        s["ip_cidr_range"]
        for s in of_type(stack, "google_compute_subnetwork").values()
        if s.get("purpose") == "REGIONAL_MANAGED_PROXY"
    )
    assert [f["ip_block"]["cidr"] for f in lb["from"]] == [proxy_only, *HEALTH_CHECK_RANGES]
    assert sorted(p["port"] for p in lb["ports"]) == ["8000", "9002"]
    (sax,) = policies["serve-saxml-from-vpc"]["ingress"]
    assert policies["serve-saxml-from-vpc"]["pod_selector"]["match_labels"]["app.kubernetes.io/name"] == "sax-http"
    assert sax["ports"] == [{"port": str(upstream.SAXML_HTTP_PORT), "protocol": "TCP"}]


def test_saxml_model_servers_run_unprivileged(stacks: dict[str, dict[str, Any]]) -> None:
    """Before the fix the chart set privileged: true, which the TPU tutorials needed before GKE 1.28 only."""
    (_, objects) = stack_releases(stacks["dev"])["serve-saxml"]
    text = json.dumps(objects)
    assert '"privileged": true' not in text
    assert "sax-model-server" in text


def test_every_privileged_container_is_on_the_reasoned_list(stacks: dict[str, dict[str, Any]]) -> None:
    from infra.rules import containers, pod_templates

    found = set()
    for name, (_, objects) in stack_releases(stacks["dev"]).items():
        for o in objects:
            for _, template in pod_templates(o):
                for _, c in containers(template.get("spec") or {}):
                    if (c.get("securityContext") or {}).get("privileged"):
                        found.add((name, c["name"]))
    assert found == set(PRIVILEGED_CONTAINERS)


def test_the_binary_authorization_policy_denies_what_is_not_the_registry_or_pinned(
    stacks: dict[str, dict[str, Any]],
) -> None:
    (policy,) = of_type(stacks["dev"], "google_binary_authorization_policy").values()
    assert policy["default_admission_rule"]["evaluation_mode"] == "ALWAYS_DENY"
    assert policy["global_policy_evaluation_mode"] == "ENABLE"
    patterns = [p["name_pattern"] for p in policy["admission_whitelist_patterns"]]
    assert patterns[0] == "us-east5-docker.pkg.dev/acme-ml-platform-dev/ml-platform/**"
    assert sorted(patterns[1:]) == sorted(upstream.BY_DIGEST)
    assert all("@sha256:" in p for p in patterns[1:])
    # Dry run (audit log only) while an upstream image the platform runs still waits for its digest.
    assert upstream.AWAITING_DIGEST
    assert policy["default_admission_rule"]["enforcement_mode"] == "DRYRUN_AUDIT_LOG_ONLY"


def test_the_privileged_host_setup_image_is_pinned_by_digest() -> None:
    """Before the fix: a floating ubuntu:24.04 ran privileged in the node's namespaces on every A3 Mega node."""
    assert upstream.HOST_SETUP.startswith("ubuntu:24.04@sha256:")
    assert upstream.HOST_SETUP not in upstream.AWAITING_DIGEST


def test_image_references_split_into_registry_repository_and_tag() -> None:
    from scripts.image_digests import split

    assert split("ubuntu:24.04") == ("registry-1.docker.io", "library/ubuntu", "24.04")
    assert split("registry.k8s.io/gateway-api-inference-extension/epp:v1.5.0") == (
        "registry.k8s.io",
        "gateway-api-inference-extension/epp",
        "v1.5.0",
    )
    assert split("nvcr.io/nvidia/pytorch:24.04-py3") == ("nvcr.io", "nvidia/pytorch", "24.04-py3")


# --- a bad edit of each class, refused by the rules step of `make plan` ------------------------------------------


def _release(stack: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in of_type(stack, "helm_release").values() if r["name"] == name)


def _image_by_tag(stack: dict[str, Any]) -> None:
    release = _release(stack, "serve-saxml")
    values = json.loads(release["values"][0])
    values["images"]["http"] = "us-docker.pkg.dev/cloud-tpu-images/inference/sax-http:v1.0.1"
    release["values"] = [json.dumps(values)]


def _privileged_elsewhere(stack: dict[str, Any]) -> None:
    releases = of_type(stack, "helm_release")
    key = next(k for k, r in releases.items() if r["name"] == "gpu-networking")
    releases["gpu-networking-copy"] = {**copy.deepcopy(releases[key]), "name": "gpu-networking-copy"}


def _namespace_without_default_deny(stack: dict[str, Any]) -> None:
    policies = of_type(stack, "kubernetes_network_policy_v1")
    for key in [k for k, p in policies.items() if p["metadata"]["name"] == "default-deny-ingress"]:
        if policies[key]["metadata"]["namespace"] == "ml-serving":
            del policies[key]


def _grant_wider_than_its_prefix(stack: dict[str, Any]) -> None:
    grants = of_type(stack, "google_storage_bucket_iam_member")
    next(g for k, g in grants.items() if k.startswith("vertex_bucket-")).pop("condition")


def _slurm_grant_on_the_whole_bucket(stack: dict[str, Any]) -> None:
    grants = of_type(stack, "google_storage_bucket_iam_member")
    next(g for k, g in grants.items() if k.startswith("slurm-identity_bucket")).pop("condition")


def _conversion_grant_on_the_whole_bucket(stack: dict[str, Any]) -> None:
    grants = of_type(stack, "google_storage_bucket_iam_member")
    next(g for k, g in grants.items() if k.startswith("converter_models-objectUser")).pop("condition")


def _instance_admin_on_the_project(stack: dict[str, Any]) -> None:
    grants = of_type(stack, "google_project_iam_member")
    next(g for g in grants.values() if g["role"] == "roles/compute.instanceAdmin.v1").pop("condition")


BAD_EDITS: dict[str, tuple[Callable[[dict[str, Any]], None], str, str]] = {
    "a grant wider than its prefix": (
        _grant_wider_than_its_prefix,
        "gcs.grant-within-its-prefix",
        "vertex-jobs writes under vertex/ only",
    ),
    "a Slurm grant wider than its prefix": (
        _slurm_grant_on_the_whole_bucket,
        "gcs.grant-within-its-prefix",
        "slurm-mlp-dev writes under slurm/ only",
    ),
    "a conversion grant wider than its outputs": (
        _conversion_grant_on_the_whole_bucket,
        "gcs.grant-within-its-prefix",
        "wi-converter writes under maxtext/llama3.1-405b/, maxtext/llama2-70b/ only",
    ),
    "an instance admin over the whole project": (
        _instance_admin_on_the_project,
        "gce.instance-admin-held-to-its-instances",
        "roles/compute.instanceAdmin.v1 on the whole project",
    ),
    "a new image by tag": (_image_by_tag, "binauthz.images-pinned-by-digest", "sax-http:v1.0.1"),
    "a privileged container outside the reasoned list": (
        _privileged_elsewhere,
        "k8s.privileged-only-where-reasoned",
        "('gpu-networking-copy', 'host-setup') has no reason to run privileged",
    ),
    "a namespace without a default-deny policy": (
        _namespace_without_default_deny,
        "k8s.namespace-default-deny-ingress",
        "kubernetes_namespace_v1.ml-serving",
    ),
}


@pytest.mark.parametrize("edit", sorted(BAD_EDITS))
def test_the_rules_step_of_make_plan_refuses_a_bad_edit(edit: str, synth_dir: Path, tmp_path: Path) -> None:
    mutate, rule_id, fragment = BAD_EDITS[edit]
    stacks = tmp_path / "stacks"
    for path in sorted((synth_dir / "stacks").glob("*/cdk.tf.json")):
        stack = json.loads(path.read_text())
        if path.parent.name == "platform-dev":
            mutate(stack)
        (stacks / path.parent.name).mkdir(parents=True)
        (stacks / path.parent.name / "cdk.tf.json").write_text(json.dumps(stack))
    done = subprocess.run(
        [sys.executable, "-m", "scripts.rules", str(stacks)], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    refusals = [line for line in done.stderr.splitlines() if line.startswith("error:") and rule_id in line]
    assert refusals and any(fragment in line for line in refusals), done.stderr[-3000:]
    assert all("platform-dev" in line for line in refusals)


def test_the_plan_review_shows_the_security_posture(stacks: dict[str, dict[str, Any]]) -> None:
    """What is privileged and why, each namespace's Pod Security level, who reaches what."""
    from infra.review import render, review_stack

    review = review_stack("platform-dev", stacks["dev"], None)
    review.posture = security_posture(stacks["dev"])
    page = render(review)
    section = page[page.index("## Security posture") :]
    assert "| ml-gpu | privileged | GPUDirect-TCPXO pods mount" in section
    assert "| ml-serving | baseline |" in section
    assert "`gpu-networking` / `host-setup`: runs `nsenter -t 1`" in section
    assert "`ml-training/ray-training-within`: app.kubernetes.io/instance=ray-training \u2190 pods" in section
    assert "Binary Authorization: default ALWAYS_DENY (DRYRUN_AUDIT_LOG_ONLY)" in section


def test_a_stack_without_network_policies_says_every_pod_is_reachable() -> None:
    lines = security_posture({"resource": {}})
    assert "- no NetworkPolicy: every pod takes connections from anywhere in the cluster and the VPC" in lines
    assert "- none" in lines


def test_vertex_jobs_write_their_own_output_directory_only(stacks: dict[str, dict[str, Any]]) -> None:
    """Before the fix: objectUser on the whole checkpoints bucket, which GKE training writes too ."""
    from infra.constructs.vertex import prefix_condition

    (grant,) = [g for k, g in of_type(stacks["dev"], "google_storage_bucket_iam_member").items() if "vertex" in k]
    assert grant["role"] == "roles/storage.objectUser"
    expression = grant["condition"]["expression"]
    assert 'objects/vertex/dev-train/")' in expression
    assert "objectListPrefix" in expression
    text = prefix_condition("b", "vertex/dev-train")
    # The object names Cloud Storage FUSE looks up on the way down, and nothing beside them.
    assert text.count('resource.name == "projects/_/buckets/b/objects/') == 3
    for name in ("vertex", "vertex/", "vertex/dev-train"):
        assert f'resource.name == "projects/_/buckets/b/objects/{name}"' in text


def test_the_endpoint_picker_reaches_its_model_servers(stacks: dict[str, dict[str, Any]]) -> None:
    """The picker reads each vLLM server's /metrics; its pods carry only `inferencepool`, not the release label."""
    (_, objects) = stack_releases(stacks["dev"])["serve-llama70b-vllm"]
    epp = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-epp"))
    labels = epp["spec"]["template"]["metadata"]["labels"]
    (rule,) = _policies(stacks["dev"], "ml-serving")["serve-llama70b-vllm-within"]["ingress"]
    pickers = [
        p["pod_selector"]["match_labels"] for p in rule["from"] if "inferencepool" in p["pod_selector"]["match_labels"]
    ]
    assert pickers == [{"inferencepool": labels["inferencepool"]}]


# --- bucket and project grants no wider than the work ------------------------------------------------


def _grants(stack: dict[str, Any], rtype: str = "google_storage_bucket_iam_member") -> list[dict[str, Any]]:
    """Every grant of `rtype`, with the account id it names (`account`, None for a principal) and the bucket's key
    (`bucket_key`: checkpoints, models, ...)."""
    import re

    accounts = {k: a["account_id"] for k, a in of_type(stack, "google_service_account").items()}
    out = []
    for grant in of_type(stack, rtype).values():
        m = re.search(r"\$\{google_service_account\.([^.}]+)\.", str(grant.get("member", "")))
        b = re.search(r"\$\{google_storage_bucket\.bucket-([a-z0-9-]+)_", str(grant.get("bucket", "")))
        out.append({**grant, "account": accounts.get(m.group(1)) if m else None, "bucket_key": b and b.group(1)})
    return out


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_model_servers_only_read_the_models_and_the_conversion_writes_its_outputs(
    env: str, stacks: dict[str, dict[str, Any]]
) -> None:
    """Before the fix: the conversion Jobs ran as the model servers' identity, which held
    objectUser on the whole models bucket, so any server could overwrite or delete every model's weights."""
    stack = stacks[env]
    models = [g for g in _grants(stack) if g["bucket_key"] == "models"]
    pathways = f"ml-platform-{env}-pathways"
    servers = {(g["account"], g["role"]) for g in models if g["account"] in ("wi-serving", pathways)}
    assert servers == {("wi-serving", "roles/storage.objectViewer"), (pathways, "roles/storage.objectViewer")}
    converter = {g["role"]: g["condition"]["expression"] for g in models if g["account"] == "wi-converter"}
    assert set(converter) == {"roles/storage.objectUser", "roles/storage.objectViewer"}
    writes, reads = converter["roles/storage.objectUser"], converter["roles/storage.objectViewer"]
    for output in ("maxtext/llama3.1-405b", "maxtext/llama2-70b"):
        assert f'/objects/{output}/")' in writes
    for source in ("meta/Llama3.1-405B-Instruct", "meta/Llama-2-70b-chat"):
        assert f'/objects/{source}/")' in reads and source not in writes
    # Nothing else may write the models bucket.
    writers = {g["account"] for g in models if g["role"] != "roles/storage.objectViewer"}
    assert writers == {"wi-converter"}
    # The Jobs run as the converter's Kubernetes service account, annotated with its Google service account.
    ksa = next(
        s for s in of_type(stack, "kubernetes_service_account_v1").values()
        if s["metadata"]["name"] == "checkpoint-converter"
    )  # fmt: skip
    assert ksa["metadata"]["namespace"] == "ml-serving"
    assert "converter_gsa" in ksa["metadata"]["annotations"]["iam.gke.io/gcp-service-account"]
    for release in ("serve-llama405b", "serve-llama70b-disagg"):
        (_, objects) = stack_releases(stack)[release]
        job = next(o for o in objects if o["kind"] == "Job")
        assert job["spec"]["template"]["spec"]["serviceAccountName"] == "checkpoint-converter"
        lws = next(o for o in objects if o["kind"] == "LeaderWorkerSet")
        leader = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
        assert leader["serviceAccountName"] == "model-server"


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_slurm_nodes_write_the_slurm_prefix_only(env: str, stacks: dict[str, dict[str, Any]]) -> None:
    """Before the fix: every Slurm user holds the nodes' token through the metadata server, and
    the nodes held objectUser on the whole checkpoints bucket GKE training and Vertex AI write too."""
    slurm = [g for g in _grants(stacks[env]) if str(g["account"]).startswith("slurm-")]
    assert [(g["account"], g["bucket_key"], g["role"]) for g in slurm] == [
        (f"slurm-mlp-{env}", "checkpoints", "roles/storage.objectUser")
    ]
    expression = slurm[0]["condition"]["expression"]
    assert 'objects/slurm/")' in expression and "objectListPrefix" in expression


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_the_slurm_controller_manages_its_own_instances_only(env: str, stacks: dict[str, dict[str, Any]]) -> None:
    """Before the fix: roles/compute.instanceAdmin.v1 on the whole project let the controller
    stop, reset or delete any VM of the project, GKE's TPU and GPU nodes included; then, held to its own instances,
    it still held every disk, template, instance group manager and resource policy of the project, GKE's slice
    MIGs included (review 9, R8-N7): each named type the role manages is held to the cluster's names."""
    (grant,) = [
        g for g in _grants(stacks[env], "google_project_iam_member") if g["role"] == "roles/compute.instanceAdmin.v1"
    ]
    assert grant["account"] == f"slurm-mlp-{env}-ctl"
    expression = grant["condition"]["expression"]
    for kind, collection in (
        ("Instance", "instances"), ("Disk", "disks"), ("InstanceTemplate", "instanceTemplates"),
        ("InstanceGroupManager", "instanceGroupManagers"), ("InstanceGroup", "instanceGroups"),
        ("ResourcePolicy", "resourcePolicies"),
    ):  # fmt: skip
        clause = (
            f'(resource.type != "compute.googleapis.com/{kind}" || '
            f'resource.name.extract("/{collection}/{{name}}").startsWith("mlp-{env}-"))'
        )
        assert clause in expression.split(" && "), kind
    assert expression.count(" && ") == 5 and " || resource.type" not in expression


def test_a_prefix_grant_lets_its_holder_list_inside_its_prefix() -> None:
    """A writer lists its own directory (Cloud Storage FUSE's readdir, a checkpoint manager finding its last step):
    the list's prefix is then longer than the granted one, and must pass too."""
    from infra.constructs.storage import prefix_condition

    text = prefix_condition("b", ["slurm", "vertex/dev-train"])
    assert 'api.getAttribute("storage.googleapis.com/objectListPrefix", "-").startsWith("slurm/")' in text
    assert 'api.getAttribute("storage.googleapis.com/objectListPrefix", "-").startsWith("vertex/dev-train/")' in text
    assert 'resource.name.startsWith("projects/_/buckets/b/objects/slurm/")' in text


# --- image provenance --------------------------------------------------------------------------------


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_cloud_build_runs_as_the_builder_with_only_what_a_build_needs(
    env: str, stacks: dict[str, dict[str, Any]]
) -> None:
    """Before the fix: `make image` on Cloud Build named no service account, so the build ran
    as whatever the project's default was (the Compute Engine default account, project Editor, in new projects)."""
    stack = stacks[env]
    (builder,) = [k for k, a in of_type(stack, "google_service_account").items() if a["account_id"] == "image-builder"]
    member = f"serviceAccount:${{google_service_account.{builder}.email}}"
    granted = sorted(
        (rtype, g["role"])
        for rtype in (
            "google_project_iam_member",
            "google_artifact_registry_repository_iam_member",
            "google_storage_bucket_iam_member",
            "google_service_account_iam_member",
        )
        for g in of_type(stack, rtype).values()
        if g.get("member") == member
    )
    assert granted == [
        ("google_artifact_registry_repository_iam_member", "roles/artifactregistry.writer"),
        ("google_project_iam_member", "roles/logging.logWriter"),
        ("google_storage_bucket_iam_member", "roles/storage.objectViewer"),
    ]
    (writer,) = [
        g for g in of_type(stack, "google_artifact_registry_repository_iam_member").values() if g["member"] == member
    ]
    assert writer["repository"].startswith("${google_artifact_registry_repository.registry_repository")
    (staging,) = [g for g in of_type(stack, "google_storage_bucket_iam_member").values() if g["member"] == member]
    bucket = next(
        b
        for k, b in of_type(stack, "google_storage_bucket").items()
        if staging["bucket"] == f"${{google_storage_bucket.{k}.name}}"
    )
    assert bucket["name"] == f"acme-ml-platform-{env}-build-staging"
    assert bucket["public_access_prevention"] == "enforced" and bucket["uniform_bucket_level_access"]
    services = {s["service"] for s in of_type(stack, "google_project_service").values()}
    assert {"cloudbuild.googleapis.com", "containerscanning.googleapis.com"} <= services


def test_make_image_on_cloud_build_runs_as_the_builder_and_asks_for_provenance() -> None:
    from infra.delivery.images import plan_build

    plan = plan_build("trainer", "dev", commit="0123456789ab", use_docker=False)
    assert plan.cloudbuild is not None
    account = "image-builder@acme-ml-platform-dev.iam.gserviceaccount.com"
    assert plan.cloudbuild["serviceAccount"] == f"projects/acme-ml-platform-dev/serviceAccounts/{account}"
    # A user-specified account's logs go to Cloud Logging (its logWriter role); the build fails unless Cloud Build
    # generates and uploads its provenance for the pushed image.
    assert plan.cloudbuild["options"] == {"logging": "CLOUD_LOGGING_ONLY", "requestedVerifyOption": "VERIFIED"}
    assert "--gcs-source-staging-dir=gs://acme-ml-platform-dev-build-staging/source" in plan.commands[0]


def test_every_base_image_is_pinned_by_digest_or_named_with_why_not() -> None:
    """Before the fix: the Dockerfiles' FROM lines (and BuildKit's `# syntax` frontend) were tags that a registry can
    move, and nothing said so."""
    from infra.catalogue.images import base_images

    bases = base_images()
    assert {"python:3.12.12-slim-bookworm", "rayproject/ray:2.60.0-py312", "docker/dockerfile:1.7"} <= set(bases)
    for image, used_by in bases.items():
        assert used_by, image
        assert "@sha256:" in image or image in upstream.BASE_AWAITING_DIGEST, image
    assert all(reason.strip() for reason in upstream.BASE_AWAITING_DIGEST.values())
    assert set(upstream.BASE_AWAITING_DIGEST) <= set(bases), "a stale entry: no Dockerfile uses it"


def test_a_new_base_image_by_tag_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The environment rule `make plan` runs at load: a Dockerfile of an image the environment releases that starts
    FROM an image by tag, not in BASE_AWAITING_DIGEST, is refused (naming the Dockerfile and the image)."""
    import infra.catalogue.images as images
    from infra.rules import RULES
    from infra.synth.load import load_environment

    env = load_environment(REPO / "infra" / "environments" / "dev.yaml")
    rule = RULES["docker.base-images-pinned-by-digest"]
    assert rule.run(env) == []
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("# syntax=docker/dockerfile:1.7\nFROM debian:12.12-slim\nUSER 1000\n")
    catalogue = tmp_path / "images.yaml"
    catalogue.write_text(f"server:\n  dockerfile: {dockerfile}\n  context: .\n  build_args: {{}}\n")
    monkeypatch.setattr(images, "CATALOGUE", catalogue)
    images.base_images.cache_clear()
    try:
        found = rule.run(env)
    finally:
        images.base_images.cache_clear()
    assert [v.value for v in found] == ["debian:12.12-slim"]
    assert str(dockerfile) in found[0].message and "BASE_AWAITING_DIGEST" in found[0].message


def test_the_plan_review_names_the_base_images_still_awaiting_digests(stacks: dict[str, dict[str, Any]]) -> None:
    lines = "\n".join(security_posture(stacks["dev"]))
    assert "Base images still by tag (infra/catalogue/upstream.py BASE_AWAITING_DIGEST)" in lines
    assert "`python:3.12.12-slim-bookworm`" in lines


def test_the_plan_review_shows_who_may_do_what_with_its_conditions(stacks: dict[str, dict[str, Any]]) -> None:
    """Every grant of the stack by who holds it, with the condition that holds it to a prefix or to names: the new
    identities (the converter, the image builder) and the conditioned grants held to their prefixes."""
    lines = security_posture(stacks["dev"])
    assert "| who | role | on | held to |" in lines
    assert (
        "| wi-converter | storage.objectUser | bucket acme-ml-platform-dev-models | Objects under maxtext/llama2-70b/, "
        "maxtext/llama3.1-405b/ only (issue 25, finding 7) |"
    ) in lines
    assert "| wi-serving | storage.objectViewer | bucket acme-ml-platform-dev-models | all of it |" in lines
    assert (
        "| KSA ml-serving/checkpoint-converter | iam.workloadIdentityUser | service account wi-converter | all of it |"
        in lines
    )
    assert "| image-builder | artifactregistry.writer | registry ml-platform | all of it |" in lines
    assert (
        "| slurm-mlp-dev-ctl | compute.instanceAdmin.v1 | the project | Instances named mlp-dev-* only "
        "(issue 25, finding 7) |"
    ) in lines


# --- low findings ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_the_load_balancer_and_webhook_ports_open_on_gke_nodes_only(
    env: str, stacks: dict[str, dict[str, Any]]
) -> None:
    """Before the fix: the proxy-only subnet's rule (8000, 9002) and the control plane's webhook rule (9443) named no
    target, so they opened those ports on every instance of the VPC, the Slurm hosts and the VM groups too."""
    stack = stacks[env]
    accounts = {k: a["account_id"] for k, a in of_type(stack, "google_service_account").items()}
    gke = {
        f"${{google_service_account.{k}.email}}"
        for k, a in accounts.items()
        if a in (f"ml-platform-{env}-nodes", f"ml-platform-{env}-pathways")
    }
    rules = {r["name"]: r for r in of_type(stack, "google_compute_firewall").values()}
    for name in ("ml-platform-proxy-only-to-servers", "ml-platform-control-plane-webhooks"):
        rule = rules[name]
        assert set(rule["target_service_accounts"]) == gke, name
        assert "target_tags" not in rule and "source_tags" not in rule, name
    # Every allow rule of the platform's VPC names what it opens: a target tag or a target service account (the
    # GPUDirect networks hold GPU NICs only, each open to its own subnet).
    for name, rule in rules.items():
        if rule.get("allow") and str(rule["network"]).startswith("${google_compute_network.network_vpc"):
            assert rule.get("target_tags") or rule.get("target_service_accounts"), name


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_the_control_plane_answers_on_its_private_address_when_no_network_is_authorized(
    env: str, stacks: dict[str, dict[str, Any]]
) -> None:
    """Before the fix: the IP endpoint stayed public, its authorized network a documentation range (203.0.113.0/24,
    TEST-NET-3, which no client comes from). Every tool reaches the cluster through its DNS endpoint."""
    (cluster,) = of_type(stacks[env], "google_container_cluster").values()
    assert cluster["private_cluster_config"]["enable_private_endpoint"] is True
    assert cluster["master_authorized_networks_config"] == {"cidr_blocks": []}
    assert cluster["control_plane_endpoints_config"] == {"dns_endpoint_config": {"allow_external_traffic": True}}


# --- the planner and Helm's release records -----------------------------------------------------------------------


def test_helm_keeps_its_release_records_where_the_read_only_planner_may_read_them(
    stacks: dict[str, dict[str, Any]],
) -> None:
    """Refreshing a helm_release reads its release record. Under Helm's default driver the record is a Secret, which
    the planner (roles/container.viewer) may not list; the Helm provider 3.1.1 then drops the error and plans the
    release as new (hashicorp/terraform-provider-helm#1716), so the planner's plan of prod never matched the
    deployer's and the approved apply was refused. In ConfigMaps the planner reads them, and no Secret."""
    from infra.constructs.bootstrap import PLANNER_ROLES

    for stack in stacks.values():
        (helm,) = stack["provider"]["helm"]
        assert helm["helm_driver"] == "configmap"
    assert "roles/container.viewer" in PLANNER_ROLES
    assert not [r for r in PLANNER_ROLES if r in ("roles/container.developer", "roles/container.admin")]
