"""Deploying a fresh environment and tearing one down, offline: the steps, the guards and the exact CLI calls.

Stand-ins for terraform (a deploy plans, gates and applies the stack it synthesized once, in that folder) and
the cdktf CLI (a destroy runs `cdktf destroy --skip-synth --output <it>`) record how they were called and keep
the stack they applied, so the test sees exactly the stack a real deploy would apply. The deploy runs in the
test's process (`run_deploy`), as `python -m scripts.deploy` would, its output and its children's captured at the file
descriptors: the provider bindings load once per test process.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from infra.cdk.layout import read_stack
from infra.delivery import apply_paths
from tests.deploy_harness import (
    GKE_LB,
    GKE_NEGS,
    SKIP_SYNTH,
    applied,
    built_environments,
    cloud_state,
    recorded_calls,
    recorded_order,
    run_deploy,
    stack_releases,
    tools_on_path,
)
from tests.helpers import REPO


def test_a_fresh_environment_is_deployed_in_three_steps(tmp_path: Path) -> None:
    # 0. A plain deploy with unbuilt images is refused, naming the sequence.
    refused = run_deploy(["deploy", "dev"], tmp_path)
    assert refused.returncode == 2
    unbuilt = "checkpoint-converter, server, trainer, trainer-gpu, vllm-tpu"
    assert f"{unbuilt} still at the placeholder digest" in refused.stderr
    assert "1. make deploy-infra ENV=dev" in refused.stderr
    assert "2. make images ENV=dev" in refused.stderr and "3. make deploy ENV=dev" in refused.stderr
    assert recorded_calls(tmp_path) == []
    # 1. Infrastructure first: every release that runs an unbuilt image is left out, the registry is not.
    first = run_deploy(["deploy", "dev", "--infra-only", "--auto-approve"], tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    left_out = (
        "gpu-training, ray-training, serve-canary, serve-llama405b, serve-llama70b-disagg, serve-llama70b-vllm, "
        "serve-llama70b-vllm-mh"
    )
    said = re.search(r"left out until their images are built: (.*)", first.stdout)
    assert said and sorted(said[1].split(", ")) == left_out.split(", ")
    assert recorded_calls(tmp_path)[-1] == applied("platform-dev")
    releases = stack_releases(tmp_path, "dev")
    assert "ray-training" not in releases and "serve-llama405b" not in releases
    assert {"jobset", "kueue", "lws", "kueue-queues", "nccl-test", "serve-saxml"} <= releases
    stack = read_stack(tmp_path / "cdktf.out", "platform-dev")
    assert stack["resource"]["google_artifact_registry_repository"], "the registry images are pushed to"
    # 2. `make image` pins the digests (here: written directly). 3. Deploy everything.
    done = run_deploy(["deploy", "dev", "--auto-approve"], tmp_path, built_environments(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    assert recorded_calls(tmp_path)[-1] == applied("platform-dev")
    assert {"ray-training", "serve-llama405b", "serve-canary", "gpu-training"} <= stack_releases(tmp_path, "dev")


def test_dry_runs_change_nothing(tmp_path: Path) -> None:
    done = run_deploy(["deploy", "dev", "--infra-only", "--dry-run"], tmp_path)
    assert done.returncode == 0
    assert "platform-dev: left out until their images are built: ray-training, " in done.stdout
    would = re.findall(r"^dry run, would run \(in \S+/stacks/platform-dev\): .*?_stand_in\.py (\w+)", done.stdout, re.M)
    assert would == ["init", "plan", "show", "apply"], done.stdout
    assert recorded_calls(tmp_path) == [] and recorded_calls(tmp_path, "gcluster") == []
    assert not (tmp_path / "work" / "cdktf.out").exists(), "a dry run writes nothing"


def test_make_deploy_goes_through_the_gate_and_asks_before_it_applies(tmp_path: Path) -> None:
    """`make deploy` ran `cdktf deploy` with no gate, the one route past it. Now every deploy
    plans to a file, gates it and applies that file; without --auto-approve only after a typed "yes", and where
    nothing can answer (no terminal) it applies nothing."""
    done = run_deploy(["deploy", "dev", "--infra-only"], tmp_path)
    assert done.returncode == 5, done.stderr[-2000:]
    assert "not applied: nothing here can answer whether to apply the plan above" in done.stderr
    calls = [c["terraform"][0] for c in recorded_calls(tmp_path) if "terraform" in c]
    assert calls == ["init", "plan", "show"], "planned and gated, not applied"
    # Terraform's own output is the log's, not the review's (stdout, a pull request's comment).
    raw = "Terraform will perform the following actions"
    assert raw in done.stderr and raw not in done.stdout and "# Plan review: platform-dev" in done.stdout
    assert not any("argv" in c for c in recorded_calls(tmp_path)), "no cdktf deploy"


def test_destroy_shows_what_goes_and_needs_the_stack_name_typed(tmp_path: Path) -> None:
    refused = run_deploy(["destroy", "dev"], tmp_path)
    assert refused.returncode == 3
    assert re.search(r"platform-dev: destroy would remove \d+ resources:", refused.stdout)
    assert "stateful: google_container_cluster ml-platform-dev" in refused.stdout
    assert "stateful: google_storage_bucket acme-ml-platform-dev-checkpoints" in refused.stdout
    assert "not confirmed: pass CONFIRM=platform-dev" in refused.stderr
    assert "nothing was changed" in refused.stderr
    assert recorded_calls(tmp_path) == []
    done = run_deploy(["destroy", "dev", "--confirm", "platform-dev", "--auto-approve"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert recorded_calls(tmp_path)[-1]["argv"] == ["destroy", "platform-dev", *SKIP_SYNTH, "--auto-approve"]


def test_destroy_refuses_prod_and_every_protected_resource(tmp_path: Path) -> None:
    refused = run_deploy(["destroy", "prod", "--confirm", "platform-prod", "--dry-run"], tmp_path)
    assert refused.returncode == 3
    assert "protected: google_container_cluster ml-platform-prod (set cluster.deletion_protection: false" in (
        refused.stderr
    )
    assert "protected: google_storage_bucket acme-ml-platform-prod-checkpoints (set buckets.<key>.protect" in (
        refused.stderr
    )
    assert "protected: google_artifact_registry_repository" in refused.stderr
    assert recorded_calls(tmp_path) == []


@pytest.mark.slow
def test_make_destroy_prod_is_refused(tmp_path: Path) -> None:
    kept = f".cdktf.out-dry-run-test-{tmp_path.name}"  # the dry run's folder, this test's own
    try:
        done = subprocess.run(
            ["make", "-s", "destroy", "ENV=prod", "DRY_RUN=1", "CONFIRM=platform-prod"],
            cwd=REPO,
            capture_output=True,
            text=True,
            env={**os.environ, "PLATFORM_CDKTF": "false", "PLATFORM_DRY_RUN_DIR": kept},
        )
    finally:
        shutil.rmtree(REPO / kept, ignore_errors=True)
    assert done.returncode != 0
    assert "platform-prod: destroy refused; nothing was changed" in done.stderr


def test_the_slurm_cluster_is_deployed_after_the_stack_with_the_pinned_tools(tmp_path: Path) -> None:
    done = run_deploy(["deploy", "dev", "--auto-approve"], tmp_path, built_environments(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    assert recorded_calls(tmp_path)[-1] == applied("platform-dev")
    (gcluster,) = recorded_calls(tmp_path, "gcluster")
    folder = "cdktf.out/slurm/dev"
    assert gcluster == {
        "gcluster": [
            "deploy", f"{folder}/blueprint.yaml", "-d", f"{folder}/deployment.yaml", "-o", f"{folder}/gcluster", "-w",
            "--auto-approve",
        ],
        "blueprint_exists": True,
    }  # fmt: skip
    assert re.search(r"slurm: cdktf.out/slurm/dev/blueprint.yaml: 10 modules, .*: valid", done.stdout)


def test_a_deploy_with_the_wrong_terraform_or_packer_is_refused_before_anything_is_applied(tmp_path: Path) -> None:
    # Terraform was once checked only before gcluster, after the platform stack was applied with
    # whatever Terraform was on PATH (1.11.4 where 1.12.2 is pinned); packer likewise.
    tools_on_path(tmp_path, terraform="1.11.4", packer="1.15.0")
    done = run_deploy(["deploy", "dev", "--auto-approve"], tmp_path, built_environments(tmp_path))
    assert done.returncode == 1, done.stderr[-2000:]
    assert "terraform 1.11.4: the platform pins terraform 1.12.2" in done.stderr
    assert "packer 1.15.0: the platform pins packer 1.15.3" in done.stderr
    assert "error: preflight dev: tools failed; nothing was applied" in done.stderr
    assert recorded_calls(tmp_path) == [] and recorded_calls(tmp_path, "gcluster") == [], "nothing applied"
    assert recorded_order(tmp_path) == [], "no API enabled either"


def test_a_dry_run_prints_the_slurm_commands_and_skips_the_image_when_asked(tmp_path: Path) -> None:
    done = run_deploy(["deploy", "dev", "--skip-image", "--dry-run"], tmp_path, built_environments(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("dry run, would run")]
    lines = lines[
        lines.index(next(line for line in lines if line.endswith(" apply -input=false -no-color plan.tfplan"))) :
    ]
    assert lines[1].endswith(
        "deploy cdktf.out/slurm/dev/blueprint.yaml -d cdktf.out/slurm/dev/deployment.yaml -o "
        "cdktf.out/slurm/dev/gcluster -w --skip image"
    )
    assert recorded_calls(tmp_path) == [] and recorded_calls(tmp_path, "gcluster") == []


def test_destroy_removes_the_slurm_cluster_first_and_stops_if_that_fails(tmp_path: Path) -> None:
    done = run_deploy(["destroy", "dev", "--confirm", "platform-dev", "--auto-approve"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    create, destroy = (c["gcluster"] for c in recorded_calls(tmp_path, "gcluster"))
    assert create[0] == "create" and destroy == ["destroy", "cdktf.out/slurm/dev/gcluster/mlp-dev", "--auto-approve"]
    assert recorded_calls(tmp_path)[-1]["argv"] == ["destroy", "platform-dev", *SKIP_SYNTH, "--auto-approve"]
    failed = tmp_path / "failed"
    failed.mkdir()
    refused = run_deploy(["destroy", "dev", "--confirm", "platform-dev", "--auto-approve"], failed, GCLUSTER_EXIT="1")
    assert refused.returncode == 1
    assert "slurm-dev: destroy failed; platform-dev was left as it is" in refused.stderr
    assert recorded_calls(failed) == [], "the platform stack was not touched"


def test_destroy_deletes_each_vm_groups_vms_before_the_stack(tmp_path: Path) -> None:
    done = run_deploy(["destroy", "dev", "--confirm", "platform-dev", "--auto-approve"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert recorded_calls(tmp_path, "vms") == [{"vms": ["down", "--env", "dev", "--group", "a3mega"]}]
    assert done.stdout.index("vms_stand_in.py down") < done.stdout.index("destroy platform-dev")
    failed = tmp_path / "failed"
    failed.mkdir()
    refused = run_deploy(["destroy", "dev", "--confirm", "platform-dev", "--auto-approve"], failed, VMS_EXIT="1")
    assert refused.returncode == 1
    assert "VM group a3mega: deleting its VMs failed; platform-dev was left as it is" in refused.stderr
    assert recorded_calls(failed) == [], "the platform stack was not touched"


def test_the_first_apply_waits_until_every_api_answers(tmp_path: Path) -> None:
    # Service Usage lists an API as enabled minutes before the API stops answering
    # SERVICE_DISABLED, and no resource of the provider retries that answer.
    cloud_state(tmp_path, not_yet={"container clusters": 2, "compute networks": 1})
    done = run_deploy(["deploy", "dev", "--infra-only", "--auto-approve"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    order = recorded_order(tmp_path)
    # The plan first (gated), then the APIs: nothing changes the project before the plan is the one to apply.
    (enable,) = [line.split() for line in order if line.startswith("gcloud services enable")]
    assert order.index("terraform show -json plan.tfplan") < order.index(" ".join(enable))
    assert enable[:3] == ["gcloud", "services", "enable"] and enable[-1] == "--project=acme-ml-platform-dev"
    assert {"container.googleapis.com", "networkservices.googleapis.com", "aiplatform.googleapis.com"} <= set(enable)
    probes = [line for line in order if line.startswith("gcloud container clusters list")]
    assert len(probes) == 3, "probed until it answered"
    assert "not yet usable (enabled recently): compute.googleapis.com, container.googleapis.com" in done.stdout
    assert "not yet usable (enabled recently): container.googleapis.com" in done.stdout
    last_probe = max(i for i, line in enumerate(order) if line.startswith("gcloud ") and "services enable" not in line)
    assert last_probe < order.index("terraform apply -input=false -no-color plan.tfplan"), "every API answers first"


def test_an_api_that_never_answers_stops_the_deploy_before_the_apply(tmp_path: Path) -> None:
    cloud_state(tmp_path, not_yet={"container clusters": 99})
    done = run_deploy(["deploy", "dev", "--infra-only", "--auto-approve"], tmp_path, PLATFORM_API_WAIT="0")
    assert done.returncode == 1
    assert "still not usable after 0s: container.googleapis.com; nothing was applied" in done.stderr
    assert "terraform apply -input=false -no-color plan.tfplan" not in recorded_order(tmp_path)


def test_destroy_lists_what_gke_built_outside_terraform_and_a_dry_run_shows_how_it_goes(tmp_path: Path) -> None:
    # Even refused, the summary names it.
    refused = run_deploy(["destroy", "dev", "--dry-run"], tmp_path)
    assert refused.returncode == 3
    assert "platform-dev: and first, what controllers made outside Terraform:" in refused.stdout
    assert (
        "Gateway ml-serving/serve-llama70b-vllm (gke-l7-rilb), its HTTPRoute and InferencePool: GKE's Gateway "
        "controller built its load balancer outside Terraform: forwarding rule, target HTTP proxy, URL map"
    ) in refused.stdout
    done = run_deploy(["destroy", "dev", "--confirm", "platform-dev", "--dry-run"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    delete = out.index("delete httproute,gateway,inferencepool serve-llama70b-vllm -n ml-serving --ignore-not-found")
    assert "dry run, would run: gcloud container clusters get-credentials ml-platform-dev --location us-east5" in out
    assert "network-endpoint-groups list --filter 'description~" in out
    assert delete < out.index("destroy platform-dev"), "before the stack (and its network) goes"
    assert recorded_order(tmp_path) == [], "a dry run runs nothing"


def test_destroy_deletes_the_gateway_and_waits_for_gke_to_remove_its_load_balancer_first(tmp_path: Path) -> None:
    cloud_state(tmp_path, lb=GKE_LB, negs=GKE_NEGS, lag=2)
    done = run_deploy(["destroy", "dev", "--confirm", "platform-dev", "--auto-approve"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    order = recorded_order(tmp_path)
    creds = next(i for i, line in enumerate(order) if "get-credentials ml-platform-dev" in line)
    delete = next(
        i for i, line in enumerate(order) if line.startswith("kubectl delete httproute,gateway,inferencepool")
    )
    last_list = max(i for i, line in enumerate(order) if line.startswith("gcloud compute"))
    destroy = order.index("cdktf destroy platform-dev --skip-synth --output <output> --auto-approve")
    assert creds < delete < last_list < destroy
    assert "--dns-endpoint" in order[creds]
    kubeconfig = json.loads((tmp_path / "cloud.json").read_text())["kubeconfig"]
    assert kubeconfig and all(line.endswith(f"KUBECONFIG={kubeconfig}") for line in order if line.startswith("kubectl"))
    assert "forwarding-rules: gkegw1-3k2f-ml-serving-serve-llama70b-vllm-h2kz0x8d1c9v" in done.stdout
    assert "network-endpoint-groups: k8s1-6f1c2a9e-ml-serving-serve-llama70b-vllm-8000-5c1a2b3d (us-east5-b)" in (
        done.stdout
    )
    assert "waiting for GKE to remove: " in done.stdout
    assert "ml-serving/serve-llama70b-vllm: GKE removed its load balancer" in done.stdout
    negs = [line for line in order if line.startswith("gcloud compute network-endpoint-groups list")]
    assert '"cluster-uid\\":\\"6f1c2a9e-uid' in negs[0] and '"namespace\\":\\"ml-serving' in negs[0]
    assert order.index(next(line for line in order if line.startswith("gcloud compute firewall-rules"))) < destroy


def test_destroy_stops_before_the_network_while_gke_leaves_its_load_balancer(tmp_path: Path) -> None:
    cloud_state(tmp_path, lb=GKE_LB, negs=GKE_NEGS, lag=99)
    done = run_deploy(["destroy", "dev", "--confirm", "platform-dev", "--auto-approve"], tmp_path,
                PLATFORM_TEARDOWN_TIMEOUT="0")  # fmt: skip
    assert done.returncode == 1
    assert "Gateway ml-serving/serve-llama70b-vllm: GKE's load balancer is still there: backend-services: " in (
        done.stderr
    )
    assert "platform-dev was left as it is" in done.stderr
    assert (
        recorded_calls(tmp_path) == []
        and recorded_calls(tmp_path, "gcluster") == []
        and recorded_calls(tmp_path, "vms") == []
    )
    # The cluster gone already: nothing can ask GKE to clean up; what its naming finds stops the destroy.
    gone = tmp_path / "gone"
    gone.mkdir()
    cloud_state(gone, lb=GKE_LB, negs=GKE_NEGS, credentials_exit=1)
    refused = run_deploy(["destroy", "dev", "--confirm", "platform-dev", "--auto-approve"], gone)
    assert refused.returncode == 1
    assert "cannot be reached: listing by GKE's naming" in refused.stdout
    assert (
        "forwarding-rules list --project acme-ml-platform-dev --filter name~^gkegw1-.*-ml-serving-serve-llama70b-vllm-"
        in ("\n".join(recorded_order(gone)))
    )
    assert not any(line.startswith("kubectl delete") for line in recorded_order(gone))
    assert recorded_calls(gone) == []


def test_destroy_deletes_the_load_balancer_services_and_waits_for_their_forwarding_rules(tmp_path: Path) -> None:
    # Saxml's HTTP Service is of type LoadBalancer: GKE builds a passthrough load balancer for it, outside Terraform.
    svc_lb = {"forwarding-rules": ["a1b2c3d4e5f6"], "backend-services": ["k8s2-abc-ml-serving-serve-saxml-http-x1"]}
    refused = run_deploy(["destroy", "dev", "--dry-run"], tmp_path)
    assert "Service ml-serving/serve-saxml-http (type LoadBalancer): GKE built its passthrough load balancer" in (
        refused.stdout
    )
    cloud_state(tmp_path, svc_lb=svc_lb)
    done = run_deploy(["destroy", "dev", "--confirm", "platform-dev", "--auto-approve"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    order = recorded_order(tmp_path)
    delete = next(
        i for i, line in enumerate(order) if line.startswith("kubectl delete service serve-saxml-http -n ml-serving")
    )
    listed = [i for i, line in enumerate(order) if "service-name" in line and line.startswith("gcloud compute")]
    assert (
        listed
        and delete < min(listed)
        and max(listed) < order.index("cdktf destroy platform-dev --skip-synth --output <output> --auto-approve")
    )
    assert 'description~"service-name\\":\\"ml-serving/serve-saxml-http\\""' in order[listed[0]]
    assert "ml-serving/serve-saxml-http: no load balancer left" in done.stdout
    stuck = tmp_path / "stuck"
    stuck.mkdir()
    cloud_state(stuck, svc_lb=svc_lb, credentials_exit=1)
    refused = run_deploy(["destroy", "dev", "--confirm", "platform-dev", "--auto-approve"], stuck)
    assert refused.returncode == 1
    assert (
        "Service ml-serving/serve-saxml-http: GKE's load balancer is still there: forwarding-rules: a1b2c3d4e5f6"
        in (refused.stderr)
    )
    assert recorded_calls(stuck) == []


def test_a_crd_a_first_install_left_to_no_release_is_made_the_releases_before_the_apply(tmp_path: Path) -> None:
    # JobSet's CRD came from its chart's crds/ on the first install: Helm will not take it over unmarked.
    cloud_state(tmp_path, crds={"jobsets.jobset.x-k8s.io": {"controller-gen.kubebuilder.io/version": "v0.17.2"}})
    done = run_deploy(["deploy", "dev", "--infra-only", "--auto-approve"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    order = recorded_order(tmp_path)
    label = next(i for i, line in enumerate(order) if line.startswith("kubectl label crd jobsets.jobset.x-k8s.io"))
    annotate = order[label + 1]
    assert "app.kubernetes.io/managed-by=Helm --overwrite" in order[label]
    assert annotate.startswith(
        "kubectl annotate crd jobsets.jobset.x-k8s.io meta.helm.sh/release-name=jobset "
        "meta.helm.sh/release-namespace=jobset-system --overwrite"
    )
    assert annotate.split(" KUBECONFIG=")[1], "a temporary kubeconfig, not the caller's"
    # After the plan is gated (nothing changes before then), before the apply that installs over it.
    assert (
        order.index("terraform show -json plan.tfplan")
        < label
        < order.index("terraform apply -input=false -no-color plan.tfplan")
    )
    # Already the release's: nothing to do. Another release's: the deploy stops.
    owned = tmp_path / "owned"
    owned.mkdir()
    cloud_state(owned, crds={"jobsets.jobset.x-k8s.io": {"meta.helm.sh/release-name": "jobset"}})
    assert run_deploy(["deploy", "dev", "--infra-only", "--auto-approve"], owned).returncode == 0
    assert not any(line.startswith(("kubectl label", "kubectl annotate")) for line in recorded_order(owned))
    other = tmp_path / "other"
    other.mkdir()
    cloud_state(other, crds={"jobsets.jobset.x-k8s.io": {"meta.helm.sh/release-name": "jobset-old"}})
    refused = run_deploy(["deploy", "dev", "--infra-only", "--auto-approve"], other)
    assert refused.returncode == 1 and "belongs to the Helm release 'jobset-old', not 'jobset'" in refused.stderr
    assert "terraform apply -input=false -no-color plan.tfplan" not in recorded_order(other)


def test_every_file_a_release_opens_resolves_only_where_the_deploy_synthesizes(
    tmp_path: Path, stacks: dict[str, dict[str, Any]]
) -> None:
    stack = stacks["dev"]
    opened = apply_paths.opened_paths(stack)
    assert "../../../workloads/charts/ray-training" in {path for _, field, path in opened if field == "chart"}
    assert sum(field == "postrender.binary_path" for _, field, _ in opened) == 3  # jobset, kueue, lws
    # A folder that is not a direct child of the repository (a temporary folder: the deploy that could not finish).
    elsewhere = tmp_path / "out" / "stacks" / "platform-dev"
    elsewhere.mkdir(parents=True)
    missing = apply_paths.unresolved(elsewhere, stack)
    assert len(missing) == len(opened)
    assert any(
        f"chart '../../../workloads/charts/ray-training' resolves to {tmp_path}/workloads/charts/ray-training" in m
        for m in missing
    )
    # Where the deploy synthesizes, every one resolves.
    with apply_paths.output_folder("test") as folder:
        stack_dir = Path(folder) / "stacks" / "platform-dev"
        stack_dir.mkdir(parents=True)
        assert apply_paths.unresolved(stack_dir, stack) == []


def test_a_deploy_whose_chart_is_missing_stops_before_anything_is_applied(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(apply_paths, "REPO", tmp_path)  # the deploy's folder where the charts are not
    done = run_deploy(["deploy", "dev", "--infra-only", "--auto-approve"], tmp_path)
    assert done.returncode == 2
    refused = r"error: platform-dev: helm_release\.\S+ \(jobset\): postrender\.binary_path '\.\./\.\./\.\./scripts/"
    assert re.search(refused + r"crd-postrender' resolves to .*, which is not an executable file", done.stderr)
    assert recorded_calls(tmp_path) == [], "nothing applied"


def test_a_dry_run_offline_goes_to_the_end_keeps_its_stack_and_says_what_would_stop_a_deploy(tmp_path: Path) -> None:
    """The dry runs stopped at the first thing a deploy would stop at (unbuilt images; a preflight with no
    credentials) and synthesized into a temporary folder nobody could read. Offline, with unbuilt images, the
    dry run now prints every command to the end, keeps the stack it would apply, and names what would stop; it
    exits as the deploy would (2, the unbuilt images: it exited 0, so a script could not tell)."""
    done = run_deploy(
        ["deploy", "dev", "--dry-run"], tmp_path, GOOGLE_APPLICATION_CREDENTIALS=str(tmp_path / "no-such-adc.json")
    )
    assert done.returncode == 2, done.stderr[-2000:]
    out = done.stdout
    assert "dry run: a deploy refuses: " in done.stderr and "still at the placeholder digest" in done.stderr
    assert "dry run: the preflight above failed: a deploy would stop there and apply nothing; going on" in out
    would = re.findall(r"^dry run, would run \(in \S+/stacks/platform-dev\): .*?_stand_in\.py (\w+)", out, re.M)
    assert would == ["init", "plan", "show", "apply"], out
    assert "dry run, would run: " in out and "gcluster_stand_in.py deploy" in out  # the Slurm cluster after
    assert out.rstrip().endswith(
        "dry run: done, nothing changed; a deploy would stop at images at the placeholder digest and the preflight "
        "(exit 2, as it would)"
    )
    kept = re.search(r"dry run: platform-dev synthesized as the deploy applies it, kept: (\S+)", out)
    assert kept and kept[1].endswith("/stacks/platform-dev/cdk.tf.json")
    # The harness moves the kept folder into the test's own (tests run side by side); it held the stack.
    stack = read_stack(tmp_path / "dry-run", "platform-dev")
    assert "ray-training" in {r["name"] for r in stack["resource"]["helm_release"].values()}
    assert recorded_calls(tmp_path) == [] and recorded_calls(tmp_path, "gcluster") == []
