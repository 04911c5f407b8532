"""The rules of the real systems (infra/rules): every rule has a source, passes on what ships, and fails on a
known-bad example with its own message.

Each failing example is a small change to exactly what the dev stack applies (its synthesized JSON, its
rendered releases, its environment); many of them are the defects the rules were written for, as the
platform produced them before the fix.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.catalogue.models import MODELS, ModelArch
from infra.config import ENVIRONMENTS_DIR, ConfigError, Environment
from infra.config.findings import field_path
from infra.rules import LAYERS, RULES, Violation, all_rules, check_environment
from infra.rules.manifest_subject import ReleaseContext
from infra.rules.run import check_synthesized, stack_releases
from infra.synth.load import load_environment
from tests.helpers import ENVIRONMENT_NAMES, REPO, of_type, one, one_of_kind

DEV = yaml.safe_load((ENVIRONMENTS_DIR / "dev.yaml").read_text())


@pytest.fixture(scope="module")
def releases(stacks: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The rendered objects of every local release of the dev stack."""
    return {name: objs for name, (_, objs) in stack_releases(stacks["dev"]).items()}


def test_there_are_at_least_40_rules_each_with_a_source_and_a_layer() -> None:
    rules = all_rules()
    assert len(rules) >= 40
    for r in rules:
        assert r.layer in LAYERS, r.id
        assert len(r.source) > 20 and len(r.summary) > 20, r.id
        assert r.subject in ("environment", "environments", "terraform", "manifest", "request", "script", "upgrade"), (
            r.id
        )


def test_every_rule_has_a_failing_example_here() -> None:
    from tests.refused import SCRIPT_REFUSED, UPGRADE_REFUSED, VERTEX_REFUSED, VM_REFUSED

    # Request rules, the host rules of generated scripts and the upgrade rules fail on the examples of
    # tests/refused.py (run by tests/test_vertex.py, tests/test_vms.py, tests/test_shell.py, tests/test_upgrades.py).
    requests = {case[2] for case in [*VERTEX_REFUSED.values(), *VM_REFUSED.values()]}
    scripts = {case[2] for case in SCRIPT_REFUSED.values()}
    upgrades = {case[3] for case in UPGRADE_REFUSED.values()}
    covered = set(ENV_CASES) | set(TOGETHER_CASES) | set(TERRAFORM_CASES) | set(MANIFEST_CASES)
    covered |= requests | scripts | upgrades
    assert sorted(set(RULES) - covered) == []
    assert sorted(covered - set(RULES)) == []


@pytest.mark.parametrize("name", ENVIRONMENT_NAMES)
def test_what_ships_breaks_no_rule(name: str, envs: dict[str, Environment], stacks: dict[str, dict[str, Any]]) -> None:
    assert check_environment(envs[name]) == []
    terraform, manifest, count = check_synthesized(stacks[name])
    assert [v.line() for v in terraform] == []
    assert [f"{release}: {v.line()}" for release, v in manifest] == []
    assert count >= 8


# --- environment rules ------------------------------------------------------------------------------------------


def _env(data: dict[str, Any]) -> Environment:
    """The environment without running the rules (load_environment runs them)."""
    return Environment.model_validate(data)


def _old_405b_args(args: list[str]) -> list[str]:
    """The 405B server's arguments as the platform generated them before following the tutorial."""
    out = [a for a in args if not a.startswith(("tokenizer_path=", "ici_tensor", "ici_autoregressive"))]
    return [*out, "ici_autoregressive_parallelism=1", "ici_tensor_parallelism=16"]


def _patch_args(monkeypatch: pytest.MonkeyPatch, change: Callable[[list[str]], list[str]]) -> None:
    from workloads.serving import jetstream

    real = jetstream.maxtext_serving_args
    monkeypatch.setattr(jetstream, "maxtext_serving_args", lambda env, d: change(real(env, d)))


def _flex_and_reservation(mp: pytest.MonkeyPatch) -> None:
    """A blueprint generator that asks for both DWS flex and a reservation (what the nodeset refuses at plan)."""
    from infra.slurm import blueprint

    mp.setattr(blueprint, "_capacity", lambda env, p: {"reservation_name": "r", "dws_flex": {"enabled": True}})


ENV_CASES: dict[str, tuple[Callable[[dict[str, Any], pytest.MonkeyPatch], None], str, str]] = {
    "vllm.parallelism-covers-the-slice": (
        lambda d, mp: d["serving"]["llama70b-vllm"].update(tensor_parallel_size=4),
        "serving.llama70b-vllm.tensor_parallel_size",
        "tensor x pipeline parallelism (4 x 1) must be the slice's 8 chips",
    ),
    "gke.tpu.multi-host-server-per-slice": (
        lambda d, mp: d["slices"]["vllm-multihost"].update(count=3),
        "serving.llama70b-vllm-mh.autoscaling.max",
        "slices.vllm-multihost has count 3 (one pool per slice): set slices.vllm-multihost.count to 2",
    ),
    "gke.inference-gateway-needs-proxy-only-subnet": (
        lambda d, mp: d["network"].pop("proxy_only_cidr"),
        "serving.llama70b-vllm.gateway",
        "needs a proxy-only subnet: set network.proxy_only_cidr",
    ),
    "gcp.labels-per-resource": (
        lambda d, mp: d["labels"].update({f"l{i}": "x" for i in range(61)}),
        "labels",
        "a resource carries at most 64 labels",
    ),
    "gcs.bucket-names-unique": (
        lambda d, mp: d["buckets"]["datasets"].update(name="acme-ml-platform-dev-checkpoints"),
        "buckets.datasets.name",
        "the same bucket name as buckets.checkpoints",
    ),
    "gcs.bucket-location-exists": (
        lambda d, mp: d["buckets"]["datasets"].update(location="us-east9"),
        "buckets.datasets.location",
        "not a Cloud Storage location",
    ),
    "artifact-registry.images-in-own-registry": (
        lambda d, mp: d["release"]["images"].update(
            trainer=d["release"]["images"]["trainer"].replace("acme-ml-platform-dev", "acme-ml-platform-prod")
        ),
        "release.images.trainer",
        "not this environment's registry",
    ),
    "maxtext.conversion-matches-model": (
        lambda d, mp: d["serving"]["llama405b"]["conversion"].update(model_size="llama3.1-70b"),
        "serving.llama405b.conversion.model_size",
        "converts a 70B model, but serving.llama405b.model has 405B parameters",
    ),
    "gke.release-channel-auto-upgrade": (
        lambda d, mp: d["slices"]["train"].update(auto_upgrade=False),
        "slices.train.auto_upgrade",
        "where GKE refuses a node pool without auto-upgrade",
    ),
    "hpa.signal-the-server-exports": (
        lambda d, mp: d["serving"]["llama70b-vllm"]["autoscaling"].update(signal="kv-cache", target=80),
        "serving.llama70b-vllm.autoscaling.target",
        "the KV cache's use is a fraction from 0 to 1",
    ),
    "kueue.cluster-scoped-names-unique": (
        lambda d, mp: d["training"].update(queue=d["batch"]["queue"]),
        "training.queue",
        "batch.queue names a ClusterQueue",
    ),
    "gcs.identity-writes-where-it-writes": (
        lambda d, mp: d["identities"]["trainer"]["bucket_roles"].update(checkpoints="roles/storage.objectViewer"),
        "training.identity",
        "must be able to write checkpoints to bucket 'checkpoints': give it roles/storage.objectUser there (it has "
        "roles/storage.objectViewer)",
    ),
    "gcs.identity-reads-its-buckets": (
        lambda d, mp: d["identities"]["serving"]["bucket_roles"].pop("models"),
        "serving.llama70b-vllm.identity",
        "has no role on bucket 'models' (bucket); add one to identities.serving.bucket_roles",
    ),
    # dev's pools reach 61 nodes with their surge nodes; its VMs and internal load balancers need more of the subnet.
    "vpc.subnet-holds-every-node": (
        lambda d, mp: d["network"].update(subnet_cidr="10.10.0.0/26"),
        "network.subnet_cidr",
        "holds 60 addresses (64 less 4 reserved)",
    ),
    "gke.pod-range-holds-every-node": (
        lambda d, mp: d["network"].update(pods_cidr="10.16.0.0/19"),
        "network.pods_cidr",
        "holds 32 node(s) of a /24 each",
    ),
    "gke.services-range-holds-every-service": (
        lambda d, mp: d["network"].update(services_cidr="10.20.0.0/27"),
        "network.services_cidr",
        "holds 32 Service addresses",
    ),
    "ray-train.restarts-on-any-worker-error": (
        lambda d, mp: d["training"].update(resilience={"retry_exit_codes": [42]}),
        "training.resilience.retry_exit_codes",
        "cannot tell exit codes apart",
    ),
    "kueue.team-quotas-within-the-slices": (
        lambda d, mp: d["teams"]["research"].update(quota={"a3mega": 24}),
        "teams.*.quota.a3mega",
        "add up to more than slice a3mega's 16 nvidia.com/gpu",
    ),
    "kueue.borrow-within-cohort-needs-reclaim": (
        lambda d, mp: d["teams"]["research"].update(
            preemption={"reclaim_within_cohort": "Never", "borrow_within_cohort": "LowerPriority"}
        ),
        "teams.research.preemption.borrow_within_cohort",
        "needs reclaim_within_cohort LowerPriority or Any",
    ),
    "vllm.served-where-probes-reach": (
        lambda d, mp: d["serving"]["llama70b-vllm"].update(extra_args=["--uds=/tmp/vllm.sock"]),
        "serving.llama70b-vllm.extra_args[0]",
        "listens on a Unix socket",
    ),
    # a 70B model declared as 7B passed the HBM fit as 7B.
    "models.parameters-match-architecture": (
        lambda d, mp: d["serving"]["llama70b-vllm"]["model"].update(parameters_b=7),
        "serving.llama70b-vllm.model.parameters_b",
        "meta-llama/Llama-3.3-70B-Instruct (model.name) has 70.55B parameters",
    ),
    "ctk.slurm-names": (
        lambda d, mp: d["slurm"].update(name="mlp-dev-slurm-for-the-hpc-team"),
        "slurm.name",
        "must match ^[a-z]([-a-z0-9]{0,19})$",
    ),
    "ctk.slurm-capacity": (
        lambda d, mp: d["slices"]["a3mega-slurm"].update(capacity={"type": "queued"}),
        "slices.a3mega-slurm.capacity.type",
        "Slurm has no queued provisioning",
    ),
    "ctk.slurm-nodeset-preconditions": (
        lambda d, mp: _flex_and_reservation(mp),
        "slurm.partitions.a3mega",
        "Cannot use more than one of a reservation, Spot VMs and DWS Flex",
    ),
    # Before the fix: the convert pool's m1-ultramem-80 (no us-east5 zone offers it); A3 Mega in us-east5-b.
    "gce.machine-type-offered-in-zone": (
        lambda d, mp: d["cpu_pools"]["convert"].update(machine_type="m1-ultramem-80"),
        "cpu_pools.convert.machine_type",
        "not offered in us-east5-b, us-east5-a (the pool's zones); offered in this region: none",
    ),
    "gcp.names-where-written": (
        lambda d, mp: d["cluster"].update(name="ml-platform-dev-abcdefgh"),
        "cluster.name",
        "the node service account 'ml-platform-dev-abcdefgh-pathways': 6-30 characters",
    ),
    # a smaller training slice with dev's recipe was found only at `make train`.
    "maxtext.recipe-runs-on-training-slice": (
        lambda d, mp: d["slices"]["train"].update(topology="2x4"),
        "training.recipe",
        "does not run on training.slice 'train' (v6e-8, topology 2x4): tuned for v6e 4x4 only",
    ),
    "gke.requests-fit-their-pool": (
        lambda d, mp: d["training"]["worker"].update(memory="800Gi"),
        "training.worker.memory",
        "requests 800.25 GiB with the FUSE sidecar; a ct6e-standard-4t node of the slice has about 698.1 GiB",
    ),
    # Before the fix: both environments pinned 1.33, out of standard support since 2026-08-03.
    "gke.version-in-support": (
        lambda d, mp: d["cluster"].update(min_master_version="1.33"),
        "cluster.min_master_version",
        "GKE 1.33 left standard support on 2026-08-03",
    ),
    "gke.features-need-versions": (
        lambda d, mp: d["cluster"].update(min_master_version="1.31.1-gke.1146000"),
        "cluster.min_master_version",
        "slices.train.accelerator needs GKE 1.31.2-gke.1115000 or newer",
    ),
    "platform.tpu.one-workload-per-slice": (
        lambda d, mp: d["serving"]["llama405b"].update(slice="train"),
        "serving.llama405b.slice",
        "slice 'train' is already used by training.slice",
    ),
    "maxtext.ici-product-equals-chips": (
        lambda d, mp: _patch_args(mp, lambda a: [*a, "ici_fsdp_parallelism=2"]),
        "serving.llama405b.maxtext args",
        "product 32 is not the slice's 16 chips",
    ),
    "maxtext.tensor-parallelism-divides-kv-heads": (
        lambda d, mp: _patch_args(mp, _old_405b_args),
        "serving.llama405b.maxtext args.ici_tensor_parallelism",
        "llama3.1-405b has 8 KV heads",
    ),
    "maxtext.tokenizer-matches-model": (
        lambda d, mp: _patch_args(mp, _old_405b_args),
        "serving.llama405b.maxtext args.tokenizer_path",
        "llama3.1-405b needs assets/tokenizer_llama3.tiktoken",
    ),
    "vllm.tensor-parallel-divides-heads": (
        lambda d, mp: mp.setitem(MODELS, "meta-llama/Llama-3.3-70B-Instruct", ModelArch(60, 4, "t")),
        "serving.llama70b-vllm.slice",
        "60 heads are not divisible by tensor parallelism 8",
    ),
    "vllm.support-matrix": (
        lambda d, mp: d["serving"]["llama70b-vllm-mh"].update(tensor_parallel_size=16, pipeline_parallel_size=1),
        "serving.llama70b-vllm-mh.pipeline_parallel_size",
        "only pipeline parallelism over the hosts is tested",
    ),
    # argparse would take the prefix silently (--max-num-seq for --max-num-seqs).
    "vllm.flags-known": (
        lambda d, mp: mp.setattr(
            "workloads.serving.vllm_args.serve_args", lambda env, key: ["--model=gs://b/m", "--max-num-seq=8"]
        ),
        "serving.llama70b-vllm vllm args",
        "only a prefix of --max-num-seqs",
    ),
    # tpu-inference refuses any other connector at start; vLLM's own config takes the name.
    "vllm.kv-connector-on-tpu": (
        lambda d, mp: d["serving"]["llama70b-vllm"].update(
            extra_args=['--kv-transfer-config={"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}']
        ),
        "serving.llama70b-vllm.extra_args[0].kv_connector",
        "the TPU platform accepts TPUConnector, TPUConnectorHMA, TPUOffloadConnector",
    ),
    # vLLM's own value checks at load, from the description generated from the pinned vLLM.
    "vllm.args-valid": (
        lambda d, mp: d["serving"]["llama70b-vllm"].update(extra_args=["--gpu-memory-utilization=1.5"]),
        "serving.llama70b-vllm.extra_args[0]",
        "--gpu-memory-utilization must be <= 1",
    ),
    # an --api-key in the arguments overrides the Secret-backed key and lands in Terraform state.
    "vllm.no-secrets-in-args": (
        lambda d, mp: d["serving"]["llama70b-vllm"].update(extra_args=["--api-key=sk-123"]),
        "serving.llama70b-vllm.extra_args[0]",
        "set serving.<key>.api_key_secret",
    ),
    # a bare boolean flag crashed `make plan` in the rules step while the chart demands --flag=value.
    "vllm.args-fit-the-chart": (
        lambda d, mp: (
            mp.setattr("infra.rules.vllm.chart_args_pattern", lambda: "^--[a-z0-9-]+=.+$"),
            d["serving"]["llama70b-vllm"].update(extra_args=["--enable-prefix-caching"]),
        ),
        "serving.llama70b-vllm.extra_args[0]",
        "the vllm-tpu chart's values schema takes only",
    ),
    "vllm.context-fits-model": (
        lambda d, mp: d["serving"]["llama70b-vllm"].update(max_model_len=200000),
        "serving.llama70b-vllm.max_model_len",
        "takes at most 131072 positions",
    ),
    "vllm.load-format": (
        lambda d, mp: mp.setattr("workloads.serving.vllm_args.LOAD_FORMAT", "safetensors"),
        "serving.llama70b-vllm vllm args.--load-format",
        "only runai_streamer, runai_streamer_sharded read object storage",
    ),
    "gke.pod-fits-a-node-of-its-pool": (
        lambda d, mp: d["cpu_pools"]["convert"].update(machine_type="n2-highmem-64"),
        "serving.llama405b.conversion.pool",
        "requests 1636 GiB; a n2-highmem-64 node has about 495 GiB allocatable",
    ),
    "vertex.capacity": (
        lambda d, mp: d["slices"]["a3mega-vertex"].update(capacity={"type": "queued"}),
        "slices.a3mega-vertex.capacity.type",
        "queued provisioning is GKE's",
    ),
    "vertex.accelerator": (
        lambda d, mp: mp.setattr(
            "infra.catalogue.accelerators.MachineShape.vertex_accelerator", property(lambda self: None), raising=False
        ),
        "vertex.nccl_test.slice",
        "a3-megagpu-8g has no Vertex AI accelerator in the catalogue",
    ),
    "gce.vm-capacity": (
        lambda d, mp: d["slices"]["a3mega-vms"].update(capacity={"type": "queued"}),
        "slices.a3mega-vms.capacity.type",
        "a VM has no queued provisioning",
    ),
    "platform.queued-provisioning-through-kueue": (
        lambda d, mp: d["slices"]["sax-a"].update(capacity={"type": "queued"}),
        "slices.sax-a.capacity.type",
        "a TPU slice takes on-demand, spot, reservation or flex-start",
    ),
    "platform.jobs-within-their-slice": (
        lambda d, mp: d["batch"]["nccl_test"].update(nodes=3),
        "batch.nccl_test.nodes",
        "slice 'a3mega' has only 2 nodes",
    ),
    "platform.slurm-static-nodes-on-fixed-capacity": (
        lambda d, mp: d["slurm"]["partitions"]["a3mega"].update(static_nodes=1),
        "slurm.partitions.a3mega.static_nodes",
        "the slice's flex-start nodes come and go with the jobs: static_nodes must be 0",
    ),
    "platform.slurm-writes-one-bucket": (
        lambda d, mp: d["slurm"]["training"].update(bucket="datasets"),
        "slurm.training.bucket",
        "the cluster mounts and may write one bucket, slurm.bucket ('checkpoints')",
    ),
    "platform.network-attachment-for-vertex-only": (
        lambda d, mp: d.pop("vertex"),
        "network.network_attachment_cidr",
        "only Vertex AI jobs use a network attachment",
    ),
    "platform.vm-groups-on-tcpxo": (
        lambda d, mp: d["slices"]["a3mega-vms"].update(accelerator="a3-high"),
        "vm_groups.a3mega.slice",
        "sets up GPUDirect-TCPXO machines (A3 Mega) only",
    ),
    "platform.capacity-lists-for-whole-host-servers": (
        lambda d, mp: d["slices"]["a3mega-slurm"].update(nodes=1, capacity=[{"type": "spot"}, {"type": "on-demand"}]),
        "slices.a3mega-slurm.capacity",
        "slurm (slurm.partitions.a3mega.slice) takes one capacity type",
    ),
    "platform.servers-read-their-models": (
        lambda d, mp: d["identities"]["serving"]["bucket_roles"].update(models="roles/storage.objectUser"),
        "identities.serving.bucket_roles.models",
        "only reads its model from bucket 'models': give it roles/storage.objectViewer there",
    ),
    "platform.conversion-runs-as-its-own-identity": (
        lambda d, mp: d["serving"]["llama405b"]["conversion"].update(identity="serving"),
        "serving.llama405b.conversion.identity",
        "run(s) as 'serving' too: the conversion writes the models",
    ),
    "platform.saxml-identity-owns-its-bucket-only": (
        lambda d, mp: d["identities"]["saxml"]["bucket_roles"].update(models="roles/storage.objectViewer"),
        "identities.saxml.bucket_roles",
        "roles/storage.objectAdmin on bucket 'saxml' and no other role (remove models)",
    ),
    "k8s.service-account-in-the-pods-namespace": (
        lambda d, mp: d["identities"]["converter"].update(namespace="ml-training"),
        "serving.llama405b.conversion.identity",
        "its namespace 'ml-training' is not the deployment's ('ml-serving'",
    ),
    "hpa.replicas-left-to-the-autoscaler": (
        lambda d, mp: d["serving"]["llama70b-vllm"].update(replicas=2),
        "serving.llama70b-vllm.replicas",
        "the autoscaler sets the number of servers",
    ),
    "models.weights-fit-the-slice": (
        lambda d, mp: d["serving"]["llama70b-vllm"]["model"].update(kv_cache_gb=200),
        "serving.llama70b-vllm.model",
        "more than the 256 GB of HBM of slice 'vllm'",
    ),
    "jetstream.prefill-and-decode-one-shape": (
        lambda d, mp: d["slices"]["decode"].update(topology="4x4"),
        "serving.llama70b-disagg.decode_slice",
        "prefill and decode slices must have one shape: 2x4 on ct6e-standard-4t vs 4x4",
    ),
    # a Dockerfile of a released image building from a base by tag that nothing names.
    "docker.base-images-pinned-by-digest": (
        lambda d, mp: mp.setattr(
            "infra.rules.docker_builds.base_images",
            lambda: {"debian:12.12-slim": ["server (workloads/server/Dockerfile)"]},
        ),
        "release.images.server",
        "workloads/server/Dockerfile builds from debian:12.12-slim by tag",
    ),
    # the GPU trainer's image given to the Ray trainer on TPU.
    "docker.image-runs-the-job": (
        lambda d, mp: d["training"].update(image="trainer-gpu"),
        "training.image",
        "release.images.trainer-gpu is built from workloads/trainer/Dockerfile.gpu",
    ),
}


PROD = yaml.safe_load((ENVIRONMENTS_DIR / "prod.yaml").read_text())


def _moved(images: dict[str, str], project: str) -> dict[str, str]:
    """prod's images as they would be named in `project`'s registry."""
    return {k: v.replace("/acme-ml-platform-prod/", f"/{project}/") for k, v in images.items()}


# Rules of the environments together: an edit of prod that dev and prod refuse together -> the field of prod.yaml
# refused, a fragment of what the rule says.
TOGETHER_CASES: dict[str, tuple[Callable[[dict[str, Any]], None], str, str]] = {
    "gcs.bucket-names-are-global": (
        lambda d: d["buckets"]["models"].update(name="acme-ml-platform-dev-models"),
        "buckets.models.name",
        "also the name of dev.yaml's buckets.models: bucket names are global",
    ),
    "gcp.names-unique-in-a-project": (
        lambda d: d.update(
            project="acme-ml-platform-dev",
            release={**d["release"], "images": _moved(d["release"]["images"], "acme-ml-platform-dev")},
        ),
        "network.name",
        "dev.yaml names its VPC network the same in project acme-ml-platform-dev",
    ),
}


@pytest.mark.parametrize("rule_id", sorted(TOGETHER_CASES))
def test_rule_of_the_environments_together_fails_on_its_example(rule_id: str) -> None:
    mutate, field, fragment = TOGETHER_CASES[rule_id]
    dev, prod = copy.deepcopy(DEV), copy.deepcopy(PROD)
    assert RULES[rule_id].run({"dev": _env(dev), "prod": _env(prod)}) == []
    mutate(prod)
    found = RULES[rule_id].run({"dev": _env(dev), "prod": _env(prod)})
    assert any(v.path[0] == "prod" and field_path(v.path[1:]) == field and fragment in v.message for v in found), [
        v.line() for v in found
    ]


@pytest.mark.parametrize("rule_id", sorted(ENV_CASES))
def test_environment_rule_fails_on_its_example(rule_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    mutate, field, fragment = ENV_CASES[rule_id]
    data = copy.deepcopy(DEV)
    assert RULES[rule_id].run(_env(data)) == []
    mutate(data, monkeypatch)
    found = RULES[rule_id].run(_env(data))
    assert any(v.field == field and fragment in v.message for v in found), [v.line() for v in found]


def test_jetstream_refuses_a_model_name_only_vllm_knows() -> None:
    """JetStream took vLLM's (Hugging Face) model names, which MaxText has no config for."""
    data = copy.deepcopy(DEV)
    data["serving"]["llama70b-disagg"]["model"].update(name="meta-llama/Llama-3.1-70B-Instruct")
    found = RULES["maxtext.tokenizer-matches-model"].run(_env(data))
    assert [(v.field, v.value) for v in found] == [
        ("serving.llama70b-disagg.model.name", "meta-llama/Llama-3.1-70B-Instruct")
    ]
    assert "not a model MaxText knows" in found[0].message and "llama3.1-405b" in found[0].message


OFFLOAD = '--kv-transfer-config={"kv_connector":"TPUOffloadConnector",' + (
    '"kv_connector_module_path":"tpu_inference.offload.tpu_offload_connector","kv_role":"kv_both"}'
)


@pytest.mark.parametrize(
    ("extra_args", "rule_id", "field", "fragment"),
    [
        ([OFFLOAD, "--enable-prefix-caching"], "", "", ""),
        (["--max-num-seqs=8"], "vllm.flags-known", "serving.llama70b-vllm.extra_args[0]", "given already (by the"),
        (["--enable-prefix-caching"] * 2, "vllm.flags-known", "serving.llama70b-vllm.extra_args[1]", "earlier"),
        (["--enable-prefix-cach"], "vllm.flags-known", "serving.llama70b-vllm vllm args", "only a prefix of"),
        # a flag and its --no- form, chunked prefill off below the context, TLS and a Unix socket passed.
        (
            ["--enable-prefix-caching", "--no-enable-prefix-caching"],
            "vllm.flags-known",
            "serving.llama70b-vllm.extra_args[1]",
            "--enable-prefix-caching is given already (earlier)",
        ),
        (
            ["--no-enable-chunked-prefill"],
            "vllm.args-valid",
            "serving.llama70b-vllm.max_num_batched_tokens",
            "below --max-model-len=4096 with chunked prefill off",
        ),
        (["--enable-chunked-prefill"], "", "", ""),
        (
            ["--ssl-keyfile=/tls/key.pem"],
            "vllm.served-where-probes-reach",
            "serving.llama70b-vllm.extra_args[0]",
            "HTTPS",
        ),
        (["--uds=/tmp/vllm.sock"], "vllm.served-where-probes-reach", "serving.llama70b-vllm.extra_args[0]", "Unix"),
        (["--kv-transfer-config={nope"], "vllm.kv-connector-on-tpu", "serving.llama70b-vllm.extra_args[0]", "JSON"),
        (
            [OFFLOAD.replace("kv_both", "kv_producer")],
            "vllm.kv-connector-on-tpu",
            "serving.llama70b-vllm.extra_args[0].kv_role",
            "one server takes an offload connector as kv_both",
        ),
        (
            [OFFLOAD.replace("TPUOffloadConnector", "TPUConnector")],
            "vllm.kv-connector-on-tpu",
            "serving.llama70b-vllm.extra_args[0].kv_role",
            "prefill/decode is JetStream's",
        ),
        (
            [OFFLOAD.replace(',"kv_connector_module_path":"tpu_inference.offload.tpu_offload_connector"', "")],
            "vllm.kv-connector-on-tpu",
            "serving.llama70b-vllm.extra_args[0].kv_connector_module_path",
            "needs tpu_inference.offload.tpu_offload_connector",
        ),
    ],
)
def test_vllm_extra_args_are_held_to_the_parser_and_the_tpu_platform(
    extra_args: list[str], rule_id: str, field: str, fragment: str
) -> None:
    data = copy.deepcopy(DEV)
    data["serving"]["llama70b-vllm"]["extra_args"] = extra_args
    rules = ("vllm.flags-known", "vllm.kv-connector-on-tpu", "vllm.args-valid", "vllm.served-where-probes-reach")
    found = [v for r in rules for v in RULES[r].run(_env(data))]
    if not rule_id:
        assert found == []
        return
    assert any(v.rule.id == rule_id and v.field == field and fragment in v.message for v in found), [
        v.line() for v in found
    ]


def test_a_broken_rule_fails_loading_with_file_field_value_rule_and_source(tmp_path: Path) -> None:
    data = copy.deepcopy(DEV)
    data["serving"]["llama405b"]["slice"] = "train"
    path = tmp_path / "dev.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        load_environment(path)
    (line,) = err.value.problems
    assert line.startswith("serving.llama405b.slice: 'train': slice 'train' is already used by training.slice")
    assert "[rule platform.tpu.one-workload-per-slice (GKE TPU slices, refused at pod-start); source: https://" in line
    assert str(path) in str(err.value)


# --- terraform rules --------------------------------------------------------------------------------------------


def _pool(stack: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in of_type(stack, "google_container_node_pool").values() if p["name"] == name)


def _cluster(stack: dict[str, Any]) -> dict[str, Any]:
    return next(iter(of_type(stack, "google_container_cluster").values()))


def _tpu_total_autoscaling(stack: dict[str, Any]) -> None:
    pool = _pool(stack, "train")
    pool.pop("node_count")
    pool["autoscaling"] = {"total_min_node_count": 0, "total_max_node_count": 4, "location_policy": "ANY"}


def _drop_cluster_dependency(stack: dict[str, Any]) -> None:
    member = next(
        m for m in of_type(stack, "google_storage_bucket_iam_member").values() if "principal://" in m["member"]
    )
    member.pop("depends_on")


def _drop_webhook_firewall(stack: dict[str, Any]) -> None:
    firewalls = of_type(stack, "google_compute_firewall")
    (key,) = [k for k, f in firewalls.items() if f["name"].endswith("-control-plane-webhooks")]
    del firewalls[key]


def _flex_too_long(stack: dict[str, Any]) -> None:
    config = _pool(stack, "a3mega")["node_config"]
    config.update(flex_start=True, max_run_duration="864000s")


def _same_vpc_twice(stack: dict[str, Any]) -> None:
    nics = _pool(stack, "a3mega")["network_config"]["additional_node_network_configs"]
    nics[1]["network"] = nics[0]["network"]


def _drop_service(stack: dict[str, Any], api: str) -> None:
    services = of_type(stack, "google_project_service")
    (key,) = [k for k, v in services.items() if v["service"] == api]
    del services[key]


# Issue 25 (in-cluster security): main's stacks before the fix, one class of bad edit each.
def _namespace(stack: dict[str, Any], name: str) -> dict[str, Any]:
    return next(n for n in of_type(stack, "kubernetes_namespace_v1").values() if n["metadata"]["name"] == name)


def _drop_default_deny(stack: dict[str, Any], namespace: str) -> None:  # a namespace left open
    policies = of_type(stack, "kubernetes_network_policy_v1")
    (key,) = [
        k
        for k, p in policies.items()
        if p["metadata"]["namespace"] == namespace and p["metadata"]["name"] == "default-deny-ingress"
    ]
    del policies[key]


def _binauthz_policy(stack: dict[str, Any]) -> dict[str, Any]:  #
    (policy,) = of_type(stack, "google_binary_authorization_policy").values()
    return policy


def _allowlist_by_tag(stack: dict[str, Any]) -> None:  # an upstream image allowlisted by its tag
    _binauthz_policy(stack)["admission_whitelist_patterns"].append({"name_pattern": "docker.io/library/ubuntu:24.04"})


def _ironwood_without_policy(stack: dict[str, Any]) -> None:
    pool = _pool(stack, "train")
    pool["node_config"]["machine_type"] = "tpu7x-standard-4t"
    pool["placement_policy"] = {"type": "COMPACT", "tpu_topology": "2x2x2"}
    pool["node_count"] = 2


def _alert(stack: dict[str, Any], key: str) -> dict[str, Any]:
    return next(
        b
        for b in of_type(stack, "google_monitoring_alert_policy").values()
        if b["//"]["metadata"]["path"].endswith(f"/{key}")
    )


def _dashboard_percentile_90(stack: dict[str, Any]) -> None:
    body = one(stack, "google_monitoring_dashboard")
    body["dashboard_json"] = body["dashboard_json"].replace("REDUCE_PERCENTILE_95", "REDUCE_PERCENTILE_90")


TERRAFORM_CASES: dict[str, tuple[Callable[[dict[str, Any]], Any], str]] = {
    # A stack granting roles/owner: the deployer's conditioned projectIamAdmin could not (and must not).
    "iam.project-grants-the-deployer-may-make": (
        lambda s: next(iter(of_type(s, "google_project_iam_member").values())).update(role="roles/owner"),
        "the deployer may not grant it",
    ),
    # Before the fix: the Slurm controller's instanceAdmin on the whole project.
    "gce.instance-admin-held-to-its-instances": (
        lambda s: next(
            g for g in of_type(s, "google_project_iam_member").values() if g["role"] == "roles/compute.instanceAdmin.v1"
        ).pop("condition"),
        "roles/compute.instanceAdmin.v1 on the whole project",
    ),
    # Before the fix: Vertex AI jobs held objectUser on the whole checkpoints bucket.
    "gcs.grant-within-its-prefix": (
        lambda s: next(g for k, g in of_type(s, "google_storage_bucket_iam_member").items() if "vertex" in k).pop(
            "condition"
        ),
        "vertex-jobs writes under vertex/ only",
    ),
    # Before the fix: no NetworkPolicy anywhere.
    "k8s.namespace-default-deny-ingress": (
        lambda s: _drop_default_deny(s, "ml-training"),
        "no default-deny ingress NetworkPolicy",
    ),
    # Before the fix: namespaces labelled managed-by only; and a namespace made privileged.
    "k8s.namespace-enforces-pod-security": (
        lambda s: _namespace(s, "ml-serving")["metadata"]["labels"].update(
            {"pod-security.kubernetes.io/enforce": "privileged"}
        ),
        "privileged is kept only where",
    ),
    # Before the fix: the cluster enforced the project policy, the stack declared none;
    # and an upstream image allowlisted by tag.
    "binauthz.policy-denies-by-default": (_allowlist_by_tag, "allowlist an upstream image by digest"),
    # Before the fix: no maintenance policy, every TPU and GPU pool upgraded at any time.
    "gke.accelerator-upgrades-in-a-window": (
        lambda s: _cluster(s).pop("maintenance_policy"),
        "upgrade automatically at any time: set cluster.maintenance.window",
    ),
    # Before the fix: the provider's default surge settings on a fixed-size slice.
    "gke.tpu.upgrade-without-surge": (
        lambda s: _pool(s, "train").pop("upgrade_settings"),
        "use strategy SURGE with max_surge 0",
    ),
    "gke.tpu.workload-policy-placement": (_ironwood_without_policy, "needs a workload policy"),
    # A percentile the Dashboards API lacks (it has 5, 50, 95 and 99); a rate of a gauge.
    "monitoring.bodies-parse-as-the-api-types": (
        _dashboard_percentile_90,
        "not a google.monitoring.dashboard.v1.Aggregation.Reducer",
    ),
    # The GPU charts of a cluster whose component list leaves DCGM out (it was: ["SYSTEM_COMPONENTS"] alone).
    "monitoring.dcgm-series-are-collected": (
        lambda s: one(s, "google_container_cluster")["monitoring_config"].update(
            enable_components=["SYSTEM_COMPONENTS"]
        ),
        "reads DCGM series: list DCGM",
    ),
    "monitoring.filters-read-real-metrics": (
        lambda s: _alert(s, "llama70b-vllm-queue-stuck")["conditions"][0]["condition_threshold"]["aggregations"][
            0
        ].update(per_series_aligner="ALIGN_RATE"),
        "aligner ALIGN_RATE does not take GAUGE DOUBLE",
    ),
    # Before the fix: Binary Authorization enforced, its API never enabled.
    "gcp.apis-enabled-before-use": (
        lambda s: _drop_service(s, "binaryauthorization.googleapis.com"),
        "this API is not enabled by the stack",
    ),
    "gke.tpu.multihost-compact-placement": (
        lambda s: _pool(s, "train").update(node_locations=["us-east5-a", "us-east5-b"]),
        "a multi-host TPU slice lives in exactly one zone",
    ),
    "gke.tpu.node-count-equals-hosts": (
        lambda s: _pool(s, "train").update(node_count=3),
        "4x4 on ct6e-standard-4t is 4",
    ),
    "gke.tpu.multihost-autoscaling-per-zone": (_tpu_total_autoscaling, "use min_node_count / max_node_count"),
    "gke.dws.queued-needs-autoscaling-from-zero": (
        lambda s: _pool(s, "a3mega")["autoscaling"].update(location_policy="BALANCED"),
        "must be ANY",
    ),
    # The queued A3 Mega pool as the platform synthesized it before following GKE's DWS guide.
    "gke.dws.no-auto-repair": (lambda s: _pool(s, "a3mega")["management"].update(auto_repair=True), "turn it off"),
    "gke.dws.no-reservation-no-spot": (
        lambda s: _pool(s, "a3mega")["node_config"]["reservation_affinity"].update(
            consume_reservation_type="ANY_RESERVATION"
        ),
        "must be NO_RESERVATION",
    ),
    "gke.dws.flex-start-max-run-duration": (_flex_too_long, "604800s (7 days)"),
    # Before the fix: bindings to the identity pool did not wait for the cluster.
    "gke.wi.bindings-after-cluster": (_drop_cluster_dependency, "needs depends_on the cluster"),
    # Before the fix: no rule let the control plane reach 9443.
    "gke.private.webhook-ports-open": (_drop_webhook_firewall, "reach the nodes on tcp:9443"),
    "gke.private.master-cidr-28": (
        lambda s: _cluster(s)["private_cluster_config"].update(master_ipv4_cidr_block="172.16.0.0/24"),
        "must be a private /28",
    ),
    "gke.wi.gke-metadata-needs-workload-pool": (
        lambda s: _cluster(s).pop("workload_identity_config"),
        "the cluster has no workload pool",
    ),
    "gke.gpudirect.multinetwork-dataplane-v2-gvnic": (
        lambda s: _cluster(s).pop("enable_multi_networking"),
        "the cluster needs enable_multi_networking",
    ),
    "gce.multinic.one-vpc-per-nic": (_same_vpc_twice, "a VPC used twice"),
    "gke.inference-gateway-prerequisites": (
        lambda s: _cluster(s).pop("gateway_api_config"),
        "need CHANNEL_STANDARD",
    ),
    "gce.gpu-vm-template": (
        lambda s: next(iter(of_type(s, "google_compute_instance_template").values()))["scheduling"].update(
            on_host_maintenance="MIGRATE"
        ),
        "GPU VMs cannot live-migrate: TERMINATE",
    ),
    "gcp.resource-names": (lambda s: _pool(s, "train").update(name="t" * 41), "allowed: 1-40"),
    "iam.service-account-id": (
        lambda s: next(iter(of_type(s, "google_service_account").values())).update(account_id="ab"),
        "6-30 characters",
    ),
    "gcs.bucket-names": (
        lambda s: next(iter(of_type(s, "google_storage_bucket").values())).update(name="google-models"),
        "must not start with 'goog'",
    ),
    "gke.dns-endpoint-allows-external-traffic": (
        lambda s: _cluster(s).pop("control_plane_endpoints_config"),
        "connect through the DNS endpoint: set it true",
    ),
    "tf.node-pool.node-count-or-initial": (
        lambda s: _pool(s, "train").update(initial_node_count=4),
        "node_count is set too",
    ),
    "gke.compact-placement-no-blue-green": (
        lambda s: _pool(s, "train").update(upgrade_settings={"strategy": "BLUE_GREEN"}),
        "use SURGE with COMPACT placement",
    ),
}


@pytest.mark.parametrize("rule_id", sorted(TERRAFORM_CASES))
def test_terraform_rule_fails_on_its_example(rule_id: str, stacks: dict[str, dict[str, Any]]) -> None:
    mutate, fragment = TERRAFORM_CASES[rule_id]
    stack = copy.deepcopy(stacks["dev"])
    assert RULES[rule_id].run(stack) == []
    mutate(stack)
    found = RULES[rule_id].run(stack)
    assert found and all(fragment in v.message for v in found), [v.line() for v in found]


# --- manifest rules ---------------------------------------------------------------------------------------------


def _worker(objs: list[dict[str, Any]]) -> dict[str, Any]:
    """The TPU worker pod template of the RayCluster."""
    return one_of_kind(objs, "RayCluster")["spec"]["workerGroupSpecs"][0]["template"]


def _fuse_volume(pod_spec: dict[str, Any]) -> dict[str, Any]:
    return next(v for v in pod_spec["volumes"] if "csi" in v)


def _lwt(objs: list[dict[str, Any]]) -> dict[str, Any]:
    return one_of_kind(objs, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]


def _jetstream(objs: list[dict[str, Any]]) -> dict[str, Any]:
    return next(c for c in _lwt(objs)["leaderTemplate"]["spec"]["containers"] if c["name"] == "jetstream")


def _sax_pod(objs: list[dict[str, Any]]) -> dict[str, Any]:
    return one_of_kind(objs, "JobSet")["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]


def _old_ray_mount(objs: list[dict[str, Any]]) -> None:
    attributes = _fuse_volume(_worker(objs)["spec"])["csi"]["volumeAttributes"]
    attributes["mountOptions"] = "implicit-dirs,file-cache:enable-parallel-downloads:true"


def _old_ray_selector(objs: list[dict[str, Any]]) -> None:
    _worker(objs)["spec"]["nodeSelector"].pop("cloud.google.com/gke-nodepool")


def _old_ray_env(objs: list[dict[str, Any]]) -> None:
    _worker(objs)["spec"]["containers"][0].pop("env")


def _tpu_selector_without_chips(objs: list[dict[str, Any]]) -> None:
    leader = _lwt(objs)["leaderTemplate"]["spec"]
    leader["nodeSelector"] = {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice"}


def _requests_below_limits(objs: list[dict[str, Any]]) -> None:
    _worker(objs)["spec"]["containers"][0]["resources"]["requests"]["google.com/tpu"] = "2"


def _two_chips(objs: list[dict[str, Any]]) -> None:
    resources = _worker(objs)["spec"]["containers"][0]["resources"]
    resources["requests"]["google.com/tpu"] = resources["limits"]["google.com/tpu"] = "2"


def _old_probe(objs: list[dict[str, Any]]) -> None:
    _jetstream(objs)["startupProbe"] = {"httpGet": {"path": "/healthcheck", "port": 8000}, "periodSeconds": 10}
    _jetstream(objs)["startupProbe"]["failureThreshold"] = 180


def _vllm_pod(objs: list[dict[str, Any]]) -> dict[str, Any]:
    """The server pod template of the single-host vLLM group."""
    return one_of_kind(objs, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]["workerTemplate"]


def _vllm_on_gce_pool(objs: list[dict[str, Any]]) -> None:
    _vllm_pod(objs)["spec"]["nodeSelector"]["cloud.google.com/gke-nodepool"] = "serve"


def _forbidden_option(objs: list[dict[str, Any]]) -> None:
    attributes = _fuse_volume(_vllm_pod(objs)["spec"])["csi"]["volumeAttributes"]
    attributes["mountOptions"] += ",temp-dir=/tmp/x"


def _duplicate_group(objs: list[dict[str, Any]]) -> None:
    groups = one_of_kind(objs, "RayCluster")["spec"]["workerGroupSpecs"]
    groups.append(copy.deepcopy(groups[0]))


def _flavor_mismatch(objs: list[dict[str, Any]]) -> None:
    """The platform's ClusterQueue (`gpu`; dev's teams have theirs) with a flavor short of a resource."""
    queue = next(o for o in objs if o["kind"] == "ClusterQueue" and o["metadata"]["name"] == "gpu")
    group = queue["spec"]["resourceGroups"][0]
    group["flavors"][0]["resources"] = group["flavors"][0]["resources"][:-1]


def _service_named_after_the_lws(objs: list[dict[str, Any]]) -> None:
    service = one_of_kind(objs, "Service")
    service["metadata"]["name"] = one_of_kind(objs, "LeaderWorkerSet")["metadata"]["name"]


def _vllm(objs: list[dict[str, Any]]) -> dict[str, Any]:
    return _vllm_pod(objs)["spec"]["containers"][0]


def _vllm_cache_shared(objs: list[dict[str, Any]]) -> None:
    """Every host of every group writes the same cache path (before it was per host)."""
    env = next(e for e in _vllm(objs)["env"] if e["name"] == "VLLM_XLA_CACHE_PATH")
    env["value"] = "/data/xla-cache"


def _mh_worker(objs: list[dict[str, Any]]) -> dict[str, Any]:
    return one_of_kind(objs, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][
        0
    ]


def _fuse_as_before(objs: list[dict[str, Any]]) -> None:
    """The vLLM pod as it was before no user, no fsGroup, the XLA cache mounted `implicit-dirs` only."""
    pod = _vllm_pod(objs)["spec"]
    pod.pop("securityContext")
    _vllm(objs).pop("securityContext")
    attributes = _fuse_volume(pod)["csi"]["volumeAttributes"]
    attributes["mountOptions"] = attributes["mountOptions"].split(",uid=")[0]


def _container(objs: list[dict[str, Any]], name: str) -> dict[str, Any]:  #
    """The first container (or init container) of this name in a release's pods."""
    from infra.rules import containers, pod_templates

    return next(
        c
        for o in objs
        for _, t in pod_templates(o)
        for _, c in containers(t.get("spec") or {})
        if c.get("name") == name
    )


def _pool_selects_workers(objs: list[dict[str, Any]]) -> None:
    one_of_kind(objs, "InferencePool")["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] = "worker"


MANIFEST_CASES: dict[str, tuple[str, Callable[[list[dict[str, Any]]], Any], str]] = {
    # A training cluster of eight slices in dev's queue: one worker group more than a Kueue Workload holds.
    "kueue.raycluster-queued-whole": (
        "ray-training",
        lambda o: one_of_kind(o, "RayCluster")["spec"]["workerGroupSpecs"].extend(
            copy.deepcopy(one_of_kind(o, "RayCluster")["spec"]["workerGroupSpecs"][0]) for _ in range(7)
        ),
        "at most 7 worker groups in a queued RayCluster",
    ),
    # A nodepools priority that also says `spot`: GKE's CRD refuses the class at apply.
    "gke.compute-class-tiers": (
        "compute-classes",
        lambda o: one_of_kind(o, "ComputeClass")["spec"]["priorities"][0].update(spot=True),
        "Nodepool field cannot be set along with other fields",
    ),
    # A server that selects its slice's class and the spot label (as xpk's selectors do): GKE refuses the Pod.
    "gke.compute-class-pod-selector": (
        "serve-llama70b-vllm",
        lambda o: one_of_kind(o, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"][
            "nodeSelector"
        ].update({"cloud.google.com/gke-spot": "true"}),
        "GKE refuses a Pod that selects a ComputeClass and these labels",
    ),
    # A PodMonitoring on a port the servers do not have is accepted and collects nothing.
    "monitoring.pod-monitoring-reaches-its-pods": (
        "serve-llama70b-vllm",
        lambda o: next(p for p in o if p["kind"] == "PodMonitoring" and p["metadata"]["name"] == "serve-llama70b-vllm")[
            "spec"
        ]["endpoints"][0].update(port="metrics"),
        "pods have no such container port",
    ),
    # An autoscaler on a metric the server does not export reads no value and never scales.
    "hpa.scales-on-a-collected-metric": (
        "serve-llama70b-vllm",
        lambda o: one_of_kind(o, "HorizontalPodAutoscaler")["spec"]["metrics"][0]["pods"]["metric"].update(
            name="prometheus.googleapis.com|vllm:gpu_cache_usage_perc|gauge"
        ),
        "not a metric the vllm's server exports",
    ),
    # Helm's release records are ConfigMaps the read-only planner reads; a Secret with data in a chart would
    # be stored in one (and in Terraform's state with the values).
    "helm.release-holds-no-secret-data": (
        "serve-canary",
        lambda o: o.append(
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "api-key"}, "stringData": {"token": "t"}}
        ),
        "a Secret with data in a chart",
    ),
    # Before the fix: the privileged host set-up ran ubuntu:24.04 by tag; a new image by tag.
    "binauthz.images-pinned-by-digest": (
        "gpu-networking",
        lambda o: _container(o, "host-setup").update(image="ubuntu:24.04"),
        "pin it by digest",
    ),
    # Before the fix: the RayCluster answered its Jobs API without authentication.
    "kuberay.token-authentication": (
        "ray-training",
        lambda o: one_of_kind(o, "RayCluster")["spec"].pop("authOptions"),
        "set it to token",
    ),
    # Before the fix: Saxml's model servers ran privileged for no documented reason.
    "k8s.privileged-only-where-reasoned": (
        "serve-saxml",
        lambda o: _container(o, "sax-model-server").update(securityContext={"privileged": True}),
        "has no reason to run privileged",
    ),
    "k8s.pods-meet-their-namespaces-pod-security-level": (
        "serve-saxml",
        lambda o: _container(o, "sax-model-server").update(securityContext={"privileged": True}),
        "ml-serving enforces baseline",
    ),
    # Before the fix: a conversion Job larger than any node of any pool.
    "k8s.scheduler-places-every-pod": (
        "serve-llama405b",
        lambda o: one_of_kind(o, "Job")["spec"]["template"]["spec"]["containers"][0]["resources"].update(
            requests={"cpu": "16", "memory": "2400Gi"}, limits={"memory": "2400Gi"}
        ),
        "no node pool can take this pod",
    ),
    "k8s.crd-validation-rules": (
        "ray-training",
        lambda o: one_of_kind(o, "RayCluster")["spec"].update(managedBy="example.com/other"),
        "the managedBy field value must be either",
    ),
    # Before the fix: the JetStream Service took the LWS's name, so LWS made no headless Service.
    "k8s.controller-created-names": (
        "serve-llama405b",
        _service_named_after_the_lws,
        "already has a Service of this name",
    ),
    # Before the fix: 120 x 10 s, and the cache in the container's /tmp.
    "vllm.startup-probe-covers-cold-compile": (
        "serve-llama70b-vllm",
        lambda o: _vllm(o)["startupProbe"].update(periodSeconds=10, failureThreshold=120),
        "allows 1200 s; at least 3600 s",
    ),
    "vllm.xla-cache-persistent-single-writer": (
        "serve-llama70b-vllm",
        _vllm_cache_shared,
        "write one path: make it per pod",
    ),
    # Before the fix the Ray and vLLM mounts asked for parallel downloads without a file cache.
    "gcsfuse.parallel-downloads-need-file-cache": ("ray-training", _old_ray_mount, "parallel downloads need a file"),
    "gcsfuse.pod-annotation": (
        "serve-llama70b-vllm",
        lambda o: _vllm_pod(o)["metadata"]["annotations"].pop("gke-gcsfuse/volumes"),
        'must be "true"',
    ),
    "vllm.multihost-executor-env": (
        "serve-llama70b-vllm-mh",
        lambda o: _mh_worker(o)["env"].remove({"name": "TPU_MULTIHOST_BACKEND", "value": "ray"}),
        "must be ray on every pod of a multi-host group",
    ),
    "vllm.probes-open-paths": (
        "serve-llama70b-vllm",
        lambda o: _vllm(o)["readinessProbe"]["httpGet"].update(path="/v1/models"),
        "behind the API key",
    ),
    "gaie.pool-selects-servers": ("serve-llama70b-vllm", _pool_selects_workers, "selects no pod of the release"),
    "gaie.failure-mode-explicit": (
        "serve-llama70b-vllm",
        lambda o: one_of_kind(o, "InferencePool")["spec"]["endpointPickerRef"].pop("failureMode"),
        "set FailOpen or FailClose",
    ),
    # The GAIE chart's own shape: a port without portSpecification.
    "gke.inference-gateway-policies": (
        "serve-llama70b-vllm",
        lambda o: one_of_kind(o, "HealthCheckPolicy")["spec"]["default"]["config"]["httpHealthCheck"].pop(
            "portSpecification"
        ),
        "a port needs portSpecification: USE_FIXED_PORT",
    ),
    "gcsfuse.sidecar-limits": (
        "ray-training",
        lambda o: _worker(o)["metadata"]["annotations"].pop("gke-gcsfuse/memory-limit"),
        "set gke-gcsfuse/memory-limit",
    ),
    "gcsfuse.needs-gke-metadata-node": ("serve-llama70b-vllm", _vllm_on_gce_pool, "pools serve use GCE_METADATA"),
    "gcsfuse.allowed-mount-options-and-attributes": ("serve-llama70b-vllm", _forbidden_option, "set by the driver"),
    # Before the fix: vLLM (uid 1000) could not create its XLA cache folder on a root-owned 0755 mount.
    "gcsfuse.writable-by-the-container-user": (
        "serve-llama70b-vllm",
        _fuse_as_before,
        "uid 1000, groups [100] (image vllm-tpu (workloads/serving/Dockerfile.vllm-tpu: USER 1000:100)) cannot "
        "write to FUSE volume 'xla-cache'",
    ),
    # Before the fix the Saxml model servers ran on the host network.
    "gke.wi.host-network-has-no-workload-identity": (
        "serve-saxml",
        lambda o: _sax_pod(o).update(hostNetwork=True),
        "the pod gets the node's identity",
    ),
    "k8s.extended-resources-requests-equal-limits": ("ray-training", _requests_below_limits, "must equal the limit"),
    "gke.tpu.selectors-and-whole-host": ("ray-training", _two_chips, "host has 4 chips: request all"),
    # Before the fix the Ray workers selected any v6e 4x4 pool, the serving slice included.
    "platform.tpu.pod-pinned-to-its-pool": (
        "ray-training",
        _old_ray_selector,
        "pools serve, train, vllm-multihost, vllm-multihost-1 all match",
    ),
    "k8s.tpu-taint-needs-request-or-toleration": (
        "serve-llama405b",
        _tpu_selector_without_chips,
        "add a google.com/tpu toleration",
    ),
    "kuberay.tpu.num-of-hosts-matches-topology": (
        "ray-training",
        lambda o: one_of_kind(o, "RayCluster")["spec"]["workerGroupSpecs"][0].update(numOfHosts=2),
        "topology 4x4 with 4 chips per host is 4 hosts",
    ),
    # Before the fix the TPU workers lacked the tutorial's environment.
    "kuberay.tpu.worker-env": ("ray-training", _old_ray_env, "must be '"),
    "kuberay.worker-group-names-unique": ("ray-training", _duplicate_group, "used by more than one worker group"),
    "jobset.job-names-dns-1035": (
        "serve-saxml",
        lambda o: one_of_kind(o, "JobSet")["metadata"].update(name="s" * 60),
        "is invalid",
    ),
    "jobset.policies-name-replicated-jobs": (
        "nccl-test",
        lambda o: one_of_kind(o, "JobSet")["spec"].update(
            successPolicy={"operator": "All", "targetReplicatedJobs": ["x"]}
        ),
        "not a replicatedJob",
    ),
    "lws.subgroup-size-divides-group": (
        "serve-llama70b-disagg",
        lambda o: _lwt(o).update(size=4),
        "size-1 = 3 must be divisible by subGroupSize when using LeaderExcluded",
    ),
    "kueue.queue-exists-and-covers-resources": (
        "nccl-test",
        lambda o: one_of_kind(o, "JobSet")["metadata"]["labels"].update({"kueue.x-k8s.io/queue-name": "nope"}),
        "no LocalQueue; known: ml-gpu/gpu",
    ),
    "kueue.flavors-list-covered-resources": ("kueue-queues", _flavor_mismatch, "must list"),
    # Before the fix the 405B group was one pod per host, leader on a TPU host: with a chipless
    # leader that size is one TPU host short.
    "pathways.workers-match-instance": (
        "serve-llama405b",
        lambda o: _lwt(o).update(size=4),
        "1 x 4x4 is 16 chips; the group's TPU pods hold 12",
    ),
    # Before the fix the probe allowed 30 minutes.
    "jetstream.startup-probe-covers-restore": ("serve-llama405b", _old_probe, "allows 1800 s; at least 10600 s"),
    "k8s.names-and-label-values": (
        "serve-canary",
        lambda o: one_of_kind(o, "Deployment")["metadata"]["labels"].update(team="x" * 64),
        "at most 63 characters",
    ),
    "k8s.native-sidecars-need-1.29": ("serve-llama405b", lambda o: None, "the cluster may run 1.28"),
    # Before the fix the proxy-only subnet's firewall rule opened 8000 only, not the endpoint picker's 9002.
    "gaie.proxies-reach-picker-and-servers": (
        "serve-llama70b-vllm",
        lambda o: one_of_kind(o, "InferencePool")["spec"]["endpointPickerRef"]["port"].update(number=9009),
        "may not reach this port: no INGRESS firewall rule allows tcp:9009",
    ),
    # Ten endpoint pickers: the system pool's 5 nodes cannot hold them beside the other releases' pods.
    "gke.pools-hold-their-pods-together": (
        "serve-llama70b-vllm",
        lambda o: one_of_kind(o, "Deployment")["spec"].update(replicas=10),
        "find no room in system (at most 5 nodes)",
    ),
    # A chart that starts writing a LeaderWorkerSet without its release waiting for the lws release.
    "helm.release-after-its-kinds": (
        "serve-canary",
        lambda o: o.append(
            {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "x"}}
        ),
        "is not ordered after release lws",
    ),
    # A pod running as the converter's account, which the canary's release does not wait for.
    "helm.release-after-its-service-accounts": (
        "serve-canary",
        lambda o: one_of_kind(o, "Deployment")["spec"]["template"]["spec"].update(
            serviceAccountName="checkpoint-converter"
        ),
        "is not ordered after the service account its pods run as",
    ),
}


def test_a_conversion_job_whose_release_does_not_wait_for_its_account_is_refused(
    stacks: dict[str, dict[str, Any]], releases: dict[str, list[dict[str, Any]]]
) -> None:
    """Before the fix the JetStream releases waited for the servers' account only: deploy-local (and a first real
    apply) sent the conversion Job before the converter's account, its pods were refused and the Job controller's
    back-off delayed them past the settle (CI, stop 41)."""
    stack = copy.deepcopy(stacks["dev"])
    release = next(r for r in of_type(stack, "helm_release").values() if r["name"] == "serve-llama405b")
    converter = next(
        f"kubernetes_service_account_v1.{k}"
        for k, a in of_type(stack, "kubernetes_service_account_v1").items()
        if a["metadata"]["name"] == "checkpoint-converter"
    )
    assert converter in release["depends_on"]
    release["depends_on"].remove(converter)
    ctx = ReleaseContext(name="serve-llama405b", namespace=release["namespace"], stack=stack, stack_objects=releases)
    found = RULES["helm.release-after-its-service-accounts"].run(releases["serve-llama405b"], ctx)
    assert [v.value for v in found] == ["checkpoint-converter"], [v.line() for v in found]


def test_a_vllm_release_not_waiting_for_lws_is_refused(
    stacks: dict[str, dict[str, Any]], releases: dict[str, list[dict[str, Any]]]
) -> None:
    """Before the fix the vLLM releases did not depend on the lws release (the stack kept an engine -> controller
    map without vllm): a first apply sent the LeaderWorkerSet before its CRD existed."""
    stack = copy.deepcopy(stacks["dev"])
    release = next(r for r in of_type(stack, "helm_release").values() if r["name"] == "serve-llama70b-vllm")
    lws = next(f"helm_release.{k}" for k, r in of_type(stack, "helm_release").items() if r["name"] == "lws")
    assert lws in release["depends_on"]
    release["depends_on"].remove(lws)
    ctx = ReleaseContext(
        name="serve-llama70b-vllm", namespace=release["namespace"], stack=stack, stack_objects=releases
    )
    found = RULES["helm.release-after-its-kinds"].run(releases["serve-llama70b-vllm"], ctx)
    assert [v.field for v in found] == ["LeaderWorkerSet/serve-llama70b-vllm: apiVersion"], [v.line() for v in found]


@pytest.mark.parametrize("rule_id", sorted(MANIFEST_CASES))
def test_manifest_rule_fails_on_its_example(
    rule_id: str, stacks: dict[str, dict[str, Any]], releases: dict[str, list[dict[str, Any]]]
) -> None:
    release, mutate, fragment = MANIFEST_CASES[rule_id]
    stack = copy.deepcopy(stacks["dev"])
    objects = copy.deepcopy(releases[release])
    namespace = next(r["namespace"] for r in of_type(stack, "helm_release").values() if r["name"] == release)
    ctx = ReleaseContext(name=release, namespace=namespace, stack=stack, stack_objects=releases)
    assert RULES[rule_id].run(objects, ctx) == []
    mutate(objects)
    if rule_id == "k8s.native-sidecars-need-1.29":
        _cluster(stack)["min_master_version"] = "1.28"
    found = RULES[rule_id].run(objects, ctx)
    assert found and all(fragment in v.message for v in found), [v.line() for v in found]


# --- Who may write a Cloud Storage FUSE volume ----------------------------------------------

VLLM_AT = "LeaderWorkerSet/serve-llama70b-vllm: spec.leaderWorkerTemplate.workerTemplate.spec.containers[0]"


def _vllm_fuse(
    pod_sc: dict[str, Any] | None, c_sc: dict[str, Any] | None, options: str = "implicit-dirs"
) -> Callable[[list[dict[str, Any]]], None]:
    """The vLLM pod with this pod securityContext, container securityContext and XLA cache mountOptions."""

    def mutate(objs: list[dict[str, Any]]) -> None:
        pod, container = _vllm_pod(objs)["spec"], _vllm(objs)
        for holder, sc in ((pod, pod_sc), (container, c_sc)):
            holder.pop("securityContext", None)
            if sc is not None:
                holder["securityContext"] = sc
        _fuse_volume(pod)["csi"]["volumeAttributes"]["mountOptions"] = f"{options},only-dir=xla-cache/x"

    return mutate


@pytest.mark.parametrize(
    ("mutate", "refused"),
    [
        # Each way the driver documents is enough on its own: fsGroup (delegated: gid, 664, 775) ...
        (_vllm_fuse({"fsGroup": 100}, None), None),
        # ... or uid with the image's user (owner bits of the default 755 / 644 let the owner write) ...
        (_vllm_fuse(None, None, "implicit-dirs,uid=1000"), None),
        # ... or the user's group with group-writable modes.
        (_vllm_fuse(None, {"runAsGroup": 100}, "implicit-dirs,gid=100,file-mode=664,dir-mode=775"), None),
        (_vllm_fuse(None, {"runAsUser": 0}), None),
        # The container's runAsUser wins over the pod's: the image's user, in the image's group 100.
        (
            _vllm_fuse({"runAsUser": 2000}, {"runAsUser": 1000}, "implicit-dirs,gid=100,file-mode=664,dir-mode=775"),
            None,
        ),
        # The image's user (catalogue: its Dockerfile's USER 1000:100) on the default root-owned mount.
        (_vllm_fuse(None, None), "uid 1000, groups [100] (image vllm-tpu (workloads/serving/Dockerfile.vllm-tpu"),
        # runAsUser 1000 said outright, without the mount options or fsGroup.
        (_vllm_fuse(None, {"runAsUser": 1000}), "uid 1000, groups [100] (container securityContext.runAsUser)"),
        # The group without group-writable modes: gcsfuse's 755 / 644 give the group r-x.
        (_vllm_fuse(None, None, "implicit-dirs,gid=100"), "mounted uid 0, gid 100, dir-mode 755, file-mode 644"),
        # The volume's own dir-mode overrides the fsGroup delegation's 775 (the driver joins them in that order).
        (_vllm_fuse({"fsGroup": 100}, None, "implicit-dirs,dir-mode=755"), "gid 100, dir-mode 755, file-mode 664"),
        # Another user than the mount's owner and group.
        (_vllm_fuse({"runAsUser": 2000}, None, "implicit-dirs,uid=1000"), "uid 2000 (pod securityContext.runAsUser)"),
    ],
)
def test_fuse_writes_need_the_mount_given_to_the_containers_user(
    mutate: Callable[[list[dict[str, Any]]], None],
    refused: str | None,
    stacks: dict[str, dict[str, Any]],
    releases: dict[str, list[dict[str, Any]]],
) -> None:
    objects = copy.deepcopy(releases["serve-llama70b-vllm"])
    ctx = ReleaseContext(name="serve-llama70b-vllm", namespace="x", stack=stacks["dev"], stack_objects=releases)
    mutate(objects)
    found = RULES["gcsfuse.writable-by-the-container-user"].run(objects, ctx)
    if refused is None:
        assert found == [], [v.line() for v in found]
        return
    [violation] = found
    assert violation.field == f"{VLLM_AT}.volumeMounts[1]"
    assert violation.value == "xla-cache"
    assert refused in violation.message and "cannot write to FUSE volume 'xla-cache'" in violation.message


def test_fuse_writers_of_unknown_images_are_taken_as_not_root(
    stacks: dict[str, dict[str, Any]], releases: dict[str, list[dict[str, Any]]]
) -> None:
    """An image of another publisher: its user is unknown, and unknown is not root (only runAsUser 0 is)."""
    objects = copy.deepcopy(releases["serve-llama70b-vllm"])
    _vllm_fuse(None, None)(objects)
    _vllm(objects)["image"] = "docker.io/vllm/vllm-tpu:v0.11.1"
    ctx = ReleaseContext(name="serve-llama70b-vllm", namespace="x", stack=stacks["dev"], stack_objects=releases)
    [violation] = RULES["gcsfuse.writable-by-the-container-user"].run(objects, ctx)
    assert "a user that is not root (image 'docker.io/vllm/vllm-tpu:v0.11.1': its user is unknown" in violation.message
    # Read-only mounts need nothing: the others' r-x of 755 / 644 reads.
    next(m for m in _vllm(objects)["volumeMounts"] if m["name"] == "xla-cache")["readOnly"] = True
    assert RULES["gcsfuse.writable-by-the-container-user"].run(objects, ctx) == []


def test_image_users_are_read_from_the_dockerfiles_stage_by_stage() -> None:
    from infra.catalogue.images import dockerfile_user, image_users

    text = (
        "FROM python:3.12 AS base\nUSER 0\nUSER 1000:100\nFROM base AS converter\nRUN true\nFROM base AS other\nUSER 7"
    )
    assert dockerfile_user(text, "converter") == "1000:100"  # inherited from its stage's base
    assert dockerfile_user(text) == "7"
    assert dockerfile_user("FROM python:3.12\nRUN true") is None
    users = image_users()
    assert set(users) == set(yaml.safe_load((REPO / "images" / "images.yaml").read_text()))
    assert {(u.uid, u.gid) for u in users.values()} == {(1000, 100)}
    assert users["checkpoint-converter"].source == "workloads/trainer/Dockerfile (stage converter): USER 1000:100"


# The chart edit the plan must refuse: the XLA cache mount and the pod as they were before the fix, while the
# container still says runAsUser 1000.
VLLM_WITHOUT_FUSE_OWNER = {
    "    fsGroup: {{ $v.runAs.gid }}\n": "",
    ",uid={{ $v.runAs.uid }},gid={{ $v.runAs.gid }},file-mode=664,dir-mode=775": "",
}


@pytest.mark.parametrize(
    ("edits", "refused"),
    [
        (VLLM_WITHOUT_FUSE_OWNER, True),
        # Either half alone still lets uid 1000 write: fsGroup (delegated) or the mount options.
        (dict(list(VLLM_WITHOUT_FUSE_OWNER.items())[:1]), False),
        (dict(list(VLLM_WITHOUT_FUSE_OWNER.items())[1:]), False),
    ],
    ids=["without-fsgroup-and-mount-options", "without-fsgroup", "without-mount-options"],
)
def test_make_plan_refuses_a_vllm_chart_whose_xla_cache_its_user_cannot_write(
    edits: dict[str, str],
    refused: bool,
    synth_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`make plan`'s rules step (python -m scripts.rules) on the shipped stacks, with the vllm-tpu chart edited."""
    import shutil

    from scripts.rules import main
    from workloads.charts import check

    charts = tmp_path / "charts"
    for chart in check.CHARTS.glob("*/Chart.yaml"):
        shutil.copytree(chart.parent, charts / chart.parent.name)
    helpers = charts / "vllm-tpu" / "templates" / "_helpers.tpl"
    text = helpers.read_text()
    for old, new in edits.items():
        assert old in text
        text = text.replace(old, new)
    helpers.write_text(text)
    assert "runAsUser: {{ $v.runAs.uid }}" in text
    monkeypatch.setattr(check, "CHARTS", charts)
    stacks = tmp_path / "out" / "stacks"
    shutil.copytree(synth_dir / "stacks", stacks)

    code = main([str(stacks)])
    errors = [line for line in capsys.readouterr().err.splitlines() if "gcsfuse.writable-by-the-container-user" in line]
    if not refused:
        assert errors == []
        return
    assert code == 1
    # Both environments, both vLLM releases (the multi-host group's leader and worker pods).
    assert len(errors) == 6, errors
    [line] = [e for e in errors if "platform-dev/cdk.tf.json helm_release serve-llama70b-vllm)" in e]
    assert "dev.yaml: serving.llama70b-vllm (synthesized as " in line
    assert (
        f"{VLLM_AT}.volumeMounts[1]: 'xla-cache': uid 1000, groups [100] (container securityContext.runAsUser)" in line
    )
    assert "mounted uid 0, gid 0, dir-mode 755, file-mode 644" in line
    assert "source: GoogleCloudPlatform/gcs-fuse-csi-driver (v1.24.0) docs/authentication.md" in line


def test_make_plan_step_reports_how_many_rules_ran(synth_dir: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "scripts.rules", str(synth_dir / "stacks")], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    # The request rules run where the requests are written (the plan's vertex and vms steps), the script rules in
    # its scripts step.
    ran = [r for r in RULES.values() if r.subject in ("environment", "environments", "terraform", "manifest")]
    assert f"rules: {len(ran)} rules ran (" in done.stdout
    assert "on 2 environments" in done.stdout and "on 2 stacks" in done.stdout and ": no violations" in done.stdout
    # per environment, the training recipes that run on its training slice, the named one marked.
    assert "recipes: dev: training.slice train (v6e-16, topology 4x4), training.recipe llama3-8b" in done.stdout
    assert "recipes:   * llama3-8b: runs: " in done.stdout


def test_violation_line_names_field_value_rule_and_source() -> None:
    rule = RULES["gke.dws.no-auto-repair"]
    line = Violation(rule, "google_container_node_pool.a3mega.management.auto_repair", True, "turn it off").line(
        "x.json"
    )
    assert line == (
        "x.json: google_container_node_pool.a3mega.management.auto_repair: True: turn it off "
        f"[rule gke.dws.no-auto-repair (GKE, refused at apply); source: {rule.source}]"
    )


def test_the_rules_page_lists_every_rule_with_its_source() -> None:
    from scripts.rules import table

    page = (REPO / "docs" / "rules.md").read_text()
    shown = page.split("<!-- rules:begin -->\n", 1)[1].split("\n<!-- rules:end -->", 1)[0]
    assert shown == table(), "regenerate docs/rules.md's table: python -m scripts.rules --table"


def test_controller_names_over_their_limits_are_refused(
    stacks: dict[str, dict[str, Any]], releases: dict[str, list[dict[str, Any]]]
) -> None:
    """A 53-character LWS name passes LWS's webhook (63) but its StatefulSet's pods are never created."""
    objects = copy.deepcopy(releases["serve-llama405b"])
    one_of_kind(objects, "LeaderWorkerSet")["metadata"]["name"] = "l" * 53
    ctx = ReleaseContext(name="serve-llama405b", namespace="ml-serving", stack=stacks["dev"], stack_objects=releases)
    found = RULES["k8s.controller-created-names"].run(objects, ctx)
    assert [v.field.split(": ", 1)[1] for v in found] == [f"StatefulSet {'l' * 53}", f"StatefulSet {'l' * 53}-0"]
    assert all("over 52 characters" in v.message for v in found)


def _region(data: dict[str, Any], region: str) -> None:
    data.update(region=region, zones=[f"{region}-a"])
    for spec in data["slices"].values():
        if "zone" in spec:
            spec["zone"] = f"{region}-a"
    # the images move with the registry (release.images must be in the environment's own registry).
    images = data["release"]["images"]
    for name, ref in images.items():
        images[name] = f"{region}-docker.pkg.dev/" + ref.split("-docker.pkg.dev/", 1)[1]


@pytest.mark.parametrize(
    ("change", "field", "fragment"),
    [
        (lambda d: d["slices"]["a3mega"].pop("zone"), "slices.a3mega", "offered in this region: us-east5-a"),
        (
            lambda d: d.update(zones=["us-east5-b", "us-east5-a", "us-east5-d"]),
            "zones[2]",
            "no such zone; us-east5 has",
        ),
        (
            lambda d: d["cpu_pools"]["convert"].update(machine_type="m3-ultramem-64"),
            "cpu_pools.convert.machine_type",
            "not in the zone catalogue",
        ),
        (lambda d: _region(d, "us-east9"), "region", "not a Compute Engine region"),
    ],
)
def test_places_and_machines_that_do_not_exist_are_refused(
    change: Callable[[dict[str, Any]], Any], field: str, fragment: str
) -> None:
    data = copy.deepcopy(DEV)
    change(data)
    found = RULES["gce.machine-type-offered-in-zone"].run(_env(data))
    assert any(v.field.startswith(field) and fragment in v.message for v in found), [v.line() for v in found]


def test_the_inference_gateway_without_the_network_services_api_is_refused(stacks: dict[str, dict[str, Any]]) -> None:
    """Before the fix the stack did not enable networkservices.googleapis.com, which the endpoint picker's
    Service Extensions callout needs."""
    stack = copy.deepcopy(stacks["dev"])
    services = of_type(stack, "google_project_service")
    key = next(k for k, s in services.items() if s["service"] == "networkservices.googleapis.com")
    assert RULES["gke.inference-gateway-prerequisites"].run(stack) == []
    del services[key]
    found = RULES["gke.inference-gateway-prerequisites"].run(stack)
    assert [(v.field, v.value) for v in found] == [("google_project_service", "networkservices.googleapis.com")]


def test_rbac_names_are_path_segments_and_other_names_dns_subdomains(
    stacks: dict[str, dict[str, Any]], releases: dict[str, list[dict[str, Any]]]
) -> None:
    """The API server holds RBAC objects' names to path segments (`custom-metrics:system:auth-delegator`, as the
    metrics adapter's binding is named upstream) and every other object's to DNS-1123 subdomains."""
    from infra.rules.manifest_subject import ReleaseContext

    objects = copy.deepcopy(releases["metrics-adapter"])
    ctx = ReleaseContext("metrics-adapter", "custom-metrics", stacks["dev"])
    binding = next(o for o in objects if o["kind"] == "ClusterRoleBinding" and ":" in o["metadata"]["name"])
    assert binding["metadata"]["name"] == "metrics-adapter:system:auth-delegator"
    assert RULES["k8s.names-and-label-values"].run(objects, ctx) == []
    binding["metadata"]["name"] = "metrics-adapter/auth"
    (found,) = RULES["k8s.names-and-label-values"].run(objects, ctx)
    assert "a path segment name" in found.message
    one_of_kind(objects, "Service")["metadata"]["name"] = "metrics:adapter"
    assert any("DNS-1123" in v.message for v in RULES["k8s.names-and-label-values"].run(objects, ctx))
