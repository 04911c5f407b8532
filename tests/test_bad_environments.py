"""A campaign of bad edits of dev.yaml, as a careful reviewer would try them: every one refused at load,
naming the file and the field, with no traceback, and through `make plan` leaving cdktf.out as it was.

The classes are those of the review: YAML that means two things, numbers GCP cannot hold, names checked
where they are written, places and machines that exist, requests that fit, versions that exist, and
messages a person can read (`make plan`'s all-or-nothing is also tests/test_plan.py).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from infra.cdk.layout import stack_file
from infra.config import ENVIRONMENTS_DIR, ConfigError
from infra.synth.load import load_all, load_environment
from scripts.plan import main as plan_main
from tests.helpers import REPO
from tests.in_process import run_main

DEV = (ENVIRONMENTS_DIR / "dev.yaml").read_text()
# A local tier (resilience.local_tier) backed up to dev's checkpoints bucket, which has no folders.
LOCAL_TIER = "{bucket: checkpoints, every_steps: 25, bucket_every_steps: 100, ram_disk: 32Gi}"
JOBSET_TIER = "  queue: training\n  runs: jobs\n  launcher: jobset\n  resilience:\n    local_tier: "
Edit = Callable[[str], str | bytes]


def _sub(old: str, new: str) -> Edit:
    """Replace the first `old` of dev.yaml (which must be there) with `new`."""

    def edit(text: str) -> str:
        assert old in text, old
        return text.replace(old, new, 1)

    return edit


def _sub_all(old: str, new: str) -> Edit:
    """Replace every `old` of dev.yaml (at least one must be there) with `new`."""

    def edit(text: str) -> str:
        assert old in text, old
        return text.replace(old, new)

    return edit


def _seed(project: str, number: str) -> Edit:
    """dev's delivery given a seed project (delivery.seed)."""
    owner = '    repository_owner_id: "100000001"\n'
    return _sub(owner, f'{owner}  seed: {{project: {project}, project_number: "{number}"}}\n')


def _then(*edits: Edit) -> Edit:
    def edit(text: str) -> str | bytes:
        for e in edits:
            text = e(text)  # type: ignore[assignment]
        return text

    return edit


def _bytes(text: str) -> bytes:
    raw = text.encode()
    return raw[:300] + b"\xc3\x28" + raw[300:]


LONG_BUCKET = "  an-unusually-long-bucket-key-for-dataset:\n    protect: false\n    soft_delete_days: 7\n" + (
    "    lifecycle: {delete_noncurrent_after_days: 14}\n"
)

# id: (class, edit, the field path (or place) the message names, a fragment of what it says)
CASES: dict[str, tuple[str, Edit, str, str]] = {
    # 1. YAML that means two things
    "production guard written twice": (
        "yaml",
        _sub("  deletion_protection: false\n", "  deletion_protection: true\n  deletion_protection: false\n"),
        "cluster.deletion_protection",
        "written twice, at lines",
    ),
    "a second train slice": (
        "yaml",
        _sub("slices:\n", "slices:\n  train:\n    accelerator: v6e\n    topology: 8x8\n    capacity: {type: spot}\n"),
        "slices.train",
        "written twice",
    ),
    "a serving field written twice": (
        "yaml",
        _sub("    per_device_batch_size: 6\n", "    per_device_batch_size: 6\n    per_device_batch_size: 60\n"),
        "serving.llama405b.per_device_batch_size",
        "written twice",
    ),
    "not UTF-8": ("yaml", _bytes, "byte offset 300", "not valid UTF-8"),
    "broken YAML": (
        "yaml",
        _sub("  name: ml-platform-dev\n", "  name: [ml-platform-dev\n"),
        "line 43, column 18",
        "not valid YAML: expected ',' or ']', but got ':' (while parsing a flow sequence)",
    ),
    # 2. Numbers GCP cannot hold
    "infinite node count": (
        "numbers",
        _sub("    max_nodes: 5\n", "    max_nodes: .inf\n"),
        "cluster.system_pool.max_nodes",
        "valid integer",
    ),
    "NaN retention": (
        "numbers",
        _sub("    soft_delete_days: 7\n", "    soft_delete_days: .nan\n"),
        "buckets.checkpoints.soft_delete_days",
        "valid integer",
    ),
    "5,000 nodes in a pool": (
        "numbers",
        _sub("    max_nodes: 5\n", "    max_nodes: 5000\n"),
        "cluster.system_pool.max_nodes",
        "less than or equal to 1000",
    ),
    "a year of soft delete": (
        "numbers",
        _sub("    soft_delete_days: 7\n", "    soft_delete_days: 365\n"),
        "buckets.checkpoints.soft_delete_days",
        "less than or equal to 90",
    ),
    "NCCL gate above the NICs": (
        "numbers",
        _sub("    min_bus_bandwidth_gbps: 185\n", "    min_bus_bandwidth_gbps: 400\n"),
        "batch.nccl_test.min_bus_bandwidth_gbps",
        "less than or equal to 200",
    ),
    "zero training steps": (
        "numbers",
        _sub("    steps: 200\n", "    steps: 0\n"),
        "batch.training.steps",
        "greater than or equal to 1",
    ),
    "a conversion pool of 2,000 nodes": (
        "numbers",
        _sub("    max_nodes: 1\n", "    max_nodes: 2000\n"),
        "cpu_pools.convert.max_nodes",
        "less than or equal to 1000",
    ),
    "a queued TPU slice": (
        "messages",
        _sub(
            "    machine_type: ct6e-standard-4t\n    capacity:\n      type: on-demand\n",
            "    machine_type: ct6e-standard-4t\n    capacity:\n      type: queued\n",
        ),
        "slices.train.capacity.type",
        "batch.slices takes GPU slices); a TPU slice takes on-demand, spot, reservation or flex-start",
    ),
    "a maintenance window on the 30th of February": (
        "messages",
        _sub('start: "2026-01-03T02:00:00Z"', 'start: "2026-02-30T02:00:00Z"'),
        "cluster.maintenance.window.start",
        "'2026-02-30T02:00:00Z': not a time of the calendar (day is out of range for month)",
    ),
    "a misspelt slice": (
        "messages",
        _sub("training:\n  slice: train\n", "training:\n  slice: trian\n"),
        "training.slice",
        "not in slices: train, a3mega, a3mega-slurm, a3mega-vertex, a3mega-vms, sax-a, sax-b, serve, prefill, decode, "
        "vllm, vllm-multihost; did you mean 'train'?",
    ),
    "a misspelt key": (
        "messages",
        _sub("    accelerator: v6e\n    topology: 4x4\n", "    accelerator: v6e\n    tpology: 4x4\n"),
        "slices.train.tpology",
        "unknown key 'tpology': did you mean 'topology'?; allowed keys here: accelerator, topology,",
    ),
    "a misspelt chart": (
        "messages",
        _sub("  charts: {}\n", "  charts:\n    ray-trainin: 0.2.0\n"),
        "release.charts.ray-trainin",
        "did you mean 'ray-training'?",
    ),
    "a Cyrillic e in an accelerator": (
        "messages",
        _sub("    accelerator: v6e\n    topology: 4x4\n", "    accelerator: v6\u0435\n    topology: 4x4\n"),
        "slices.train.accelerator",
        "'v6e' written with look-alike characters (U+0435 CYRILLIC SMALL LETTER IE)",
    ),
    "a Cyrillic a in an image name": (
        "messages",
        _sub("  image: trainer\n", "  image: tr\u0430iner\n"),
        "training.image",
        "the value holds characters outside ASCII: U+0430 CYRILLIC SMALL LETTER A",
    ),
    "a 100 TB boot disk": (
        "numbers",
        _sub("    max_nodes: 5\n", "    max_nodes: 5\n    disk_size_gb: 100000\n"),
        "cluster.system_pool.disk_size_gb",
        "less than or equal to 65536",
    ),
    "a GPU slice of no nodes": (
        "numbers",
        _sub("    nodes: 2\n", "    nodes: 0\n"),
        "slices.a3mega.nodes",
        "greater than or equal to 1",
    ),
    "more static Slurm nodes than the slice has": (
        "numbers",
        _sub("      default: true\n", "      default: true\n      static_nodes: 5\n"),
        "slurm.partitions.a3mega.static_nodes",
        "slice 'a3mega-slurm' has 2 nodes",
    ),
    # 3. Names checked where they are written
    "a project id with 'google'": (
        "names",
        _then(
            _sub("project: acme-ml-platform-dev\n", "project: acme-google-dev\n"),
            _sub_all("-docker.pkg.dev/acme-ml-platform-dev/", "-docker.pkg.dev/acme-google-dev/"),
        ),
        "project",
        "restricted string 'google'",
    ),
    "a bucket named goog-": (
        "names",
        _sub("  models:\n    protect: false\n", "  models:\n    name: goog-models\n    protect: false\n"),
        "buckets.models.name",
        "must not start with 'goog'",
    ),
    "a default bucket name over 63 characters": (
        "names",
        _then(
            _sub("project: acme-ml-platform-dev\n", "project: acme-ml-platform-development\n"),
            _sub_all("-docker.pkg.dev/acme-ml-platform-dev/", "-docker.pkg.dev/acme-ml-platform-development/"),
            _sub("  # Saxml's admin state (SAX_ROOT).\n", LONG_BUCKET),
        ),
        "buckets.an-unusually-long-bucket-key-for-dataset",
        "(the default name)",
    ),
    # names the platform makes were not reserved.
    "a bucket named like make image's staging bucket": (
        "names",
        _sub(
            "  models:\n    protect: false\n",
            "  models:\n    name: acme-ml-platform-dev-build-staging\n    protect: false\n",
        ),
        "buckets.models.name",
        "the name of the bucket the stack makes for `make image`'s sources",
    ),
    "a slice named system": (
        "names",
        _sub_all("  train:\n    accelerator: v6e\n", "  system:\n    accelerator: v6e\n"),
        "slices.system",
        "the name of the cluster's system pool",
    ),
    "a state bucket with capitals": (
        "names",
        _sub("  bucket: acme-ml-platform-dev-tfstate ", "  bucket: Acme-TFState "),
        "state.bucket",
        "must match the pattern",
    ),
    "a cluster name too long for its Pathways service account": (
        "names",
        _sub("  name: ml-platform-dev\n", "  name: ml-platform-dev-abcdefgh\n"),
        "cluster.name",
        "'ml-platform-dev-abcdefgh-pathways'",
    ),
    "an identity too long for its Google service account": (
        "names",
        _sub(
            "  saxml:\n    namespace: ml-serving\n",
            "  saxml-admin-identity-with-a-long-name:\n    namespace: ml-serving\n",
        ),
        "identities.saxml-admin-identity-with-a-long-name",
        "30 characters",
    ),
    "an upper-case project id": (
        "names",
        _sub("project: acme-ml-platform-dev\n", "project: Acme-ML-dev\n"),
        "project",
        "pattern",
    ),
    "a Slurm cluster name over 20 characters": (
        "names",
        _sub("  name: mlp-dev\n", "  name: mlp-dev-for-the-hpc-team\n"),
        "slurm.name",
        "rule ctk.slurm-names",
    ),
    # 4. Places and machines that exist
    "a region that does not exist": (
        "places",
        _then(
            _sub("region: us-east5\n", "region: us-east9\n"),
            _sub("zones: [us-east5-b, us-east5-a]\n", "zones: [us-east9-b, us-east9-a]\n"),
            _sub_all("    zone: us-east5-a\n", "    zone: us-east9-a\n"),
            _sub_all("us-east5-docker.pkg.dev/", "us-east9-docker.pkg.dev/"),
        ),
        "region",
        "not a Compute Engine region",
    ),
    "a zone that does not exist": (
        "places",
        _sub("zones: [us-east5-b, us-east5-a]\n", "zones: [us-east5-b, us-east5-a, us-east5-d]\n"),
        "zones[2]",
        "no such zone",
    ),
    "A3 Mega where it is not offered": (
        "places",
        _sub("    zone: us-east5-a\n", ""),
        "slices.a3mega",
        "offered in this region: us-east5-a",
    ),
    "a machine type that does not exist": (
        "places",
        _sub("    machine_type: e2-standard-8\n", "    machine_type: e2-standard-7\n"),
        "cluster.system_pool.machine_type",
        "unknown CPU machine type",
    ),
    "M1 in us-east5": (
        "places",
        _sub("    machine_type: c4-highmem-288\n", "    machine_type: m1-ultramem-80\n"),
        "cpu_pools.convert.machine_type",
        "not offered in us-east5-b, us-east5-a",
    ),
    "a topology of another machine type": (
        "places",
        _sub(
            "    topology: 4x4\n    machine_type: ct6e-standard-4t\n",
            "    topology: 4x4\n    machine_type: ct6e-standard-8t\n",
        ),
        "slices.train.topology",
        "allowed: 2x4",
    ),
    "a 2-D topology on v5p": (
        "places",
        _sub("  sax-a:\n    accelerator: v5e\n", "  sax-a:\n    accelerator: v5p\n"),
        "slices.sax-a.topology",
        "not a 3-D topology",
    ),
    "queued provisioning for the Slurm partition": (
        "places",
        _sub("    capacity: {type: flex-start, max_run_hours: 24}\n", "    capacity: {type: queued}\n"),
        "slices.a3mega-slurm.capacity.type",
        "Slurm has no queued provisioning",
    ),
    "one slice for GKE and Slurm": (
        "places",
        _sub("      slice: a3mega-slurm\n", "      slice: a3mega\n"),
        "slurm.partitions.a3mega.slice",
        "a slice's machines are held by one orchestrator",
    ),
    "queued provisioning for Vertex AI jobs": (
        "places",
        _sub(
            "  a3mega-vertex:\n    accelerator: a3-mega\n    nodes: 2\n    zone: us-east5-a\n"
            "    capacity: {type: flex-start, max_run_hours: 24}\n",
            "  a3mega-vertex:\n    accelerator: a3-mega\n    nodes: 2\n    zone: us-east5-a\n"
            "    capacity: {type: queued}\n",
        ),
        "slices.a3mega-vertex.capacity.type",
        "rule vertex.capacity",
    ),
    "one slice for Slurm and a VM group": (
        "places",
        _sub("    slice: a3mega-vms\n", "    slice: a3mega-slurm\n"),
        "vm_groups.a3mega.slice",
        "a slice is held by one owner",
    ),
    "a Vertex AI NCCL test over more nodes than its slice": (
        "places",
        _sub(
            "  nccl_test: {slice: a3mega-vertex, min_bus_bandwidth_gbps: 185}\n",
            "  nccl_test: {slice: a3mega-vertex, min_bus_bandwidth_gbps: 185, nodes: 3}\n",
        ),
        "vertex.nccl_test.nodes",
        "slice 'a3mega-vertex' has only 2 nodes",
    ),
    "a network attachment range inside the subnet": (
        "places",
        _sub("  network_attachment_cidr: 10.10.16.0/24\n", "  network_attachment_cidr: 10.10.8.0/24\n"),
        "network",
        "subnet_cidr 10.10.0.0/20 overlaps network_attachment_cidr 10.10.8.0/24",
    ),
    "a VM group whose account id would be too long": (
        "names",
        _sub("vm_groups:\n  a3mega:\n", "vm_groups:\n  a3mega-for-the-research-team-lab:\n"),
        "vm_groups.a3mega-for-the-research-team-lab",
        "service account id 'vm-a3mega-for-the-research-team-lab' would exceed 30 characters",
    ),
    "a misspelt field of a VM group": (
        "names",
        _sub("    nccl_test: {min_bus_bandwidth_gbps: 185}\n", "    ncl_test: {min_bus_bandwidth_gbps: 185}\n"),
        "vm_groups.a3mega.ncl_test",
        "",
    ),
    # 5. Requests that fit
    "a Ray worker larger than its TPU host": (
        "requests",
        _sub("    memory: 200Gi\n", "    memory: 800Gi\n"),
        "training.worker.memory",
        "ct6e-standard-4t node of the slice has about 698.1 GiB allocatable",
    ),
    "a Ray worker asking for more cores than a host has": (
        "requests",
        _sub('    cpu: "24"\n', '    cpu: "500"\n'),
        "training.worker.cpu",
        "179.1 cores allocatable",
    ),
    "a Ray head larger than the system pool's nodes": (
        "requests",
        _sub("  image: trainer\n", "  image: trainer\n  head: {cpu: '4', memory: 64Gi}\n"),
        "training.head.memory",
        "e2-standard-8 node of the system pool",
    ),
    "a conversion pool too small for 405B": (
        "requests",
        _sub("    machine_type: c4-highmem-288\n", "    machine_type: n2-highmem-64\n"),
        "serving.llama405b.conversion.pool",
        "requests 1636 GiB",
    ),
    # 6. Versions that exist
    "an LWS version without pinned CRDs": (
        "versions",
        _sub("    lws: 0.7.0\n", "    lws: 0.9.0\n"),
        "release.controllers.lws",
        "known: 0.7.0",
    ),
    "a Kueue version without pinned CRDs": (
        "versions",
        _sub("    kueue: 0.19.2\n", "    kueue: 0.18.0\n"),
        "release.controllers.kueue",
        "known: 0.17.3, 0.19.2",
    ),
    "a controller range instead of a version": (
        "versions",
        _sub("    jobset: 0.12.0\n", "    jobset: '>=0.12'\n"),
        "release.controllers.jobset",
        "must be exact",
    ),
    "a chart version the repository does not have": (
        "versions",
        _sub("  charts: {}\n", "  charts:\n    ray-training: 9.9.9\n"),
        "release.charts.ray-training",
        "workloads/charts/ray-training/Chart.yaml",
    ),
    "a chart that does not exist": (
        "versions",
        _sub("  charts: {}\n", "  charts:\n    ray-trainin: 0.2.0\n"),
        "release.charts.ray-trainin",
        "not a chart of workloads/charts: canary-server",
    ),
    "GKE 1.33 past its end of support": (
        "versions",
        _sub('  min_master_version: "1.35"\n', '  min_master_version: "1.33"\n'),
        "cluster.min_master_version",
        "left standard support on 2026-08-03",
    ),
    "scale to zero without a cold-start budget": (
        "numbers",
        _sub(
            "    autoscaling: {min: 1, max: 3, signal: queue}\n", "    autoscaling: {min: 0, max: 3, signal: queue}\n"
        ),
        "serving.llama70b-vllm.autoscaling",
        "min 0 needs cold_start_budget_s",
    ),
    "scale to zero of a model whose cold start was never measured": (
        "requests",
        _sub(
            "    autoscaling: {min: 1, max: 3, signal: queue}\n",
            "    autoscaling: {min: 0, max: 3, signal: queue, cold_start_budget_s: 600}\n",
        ),
        "serving.llama70b-vllm.autoscaling.min",
        "meta-llama/Llama-3.3-70B-Instruct has no measured cold start on v6e-8",
    ),
    "scale to zero on a GKE before the HPA's": (
        "versions",
        _sub(
            "    autoscaling: {min: 1, max: 3, signal: queue}\n",
            "    autoscaling: {min: 0, max: 3, signal: queue, cold_start_budget_s: 600}\n",
        ),
        "cluster.min_master_version",
        "serving.llama70b-vllm.autoscaling.min needs GKE 1.37 or newer",
    ),
    "a GKE minor not released": (
        "versions",
        _sub('  min_master_version: "1.35"\n', '  min_master_version: "1.38"\n'),
        "cluster.min_master_version",
        "not in the platform's calendar",
    ),
    "a minor the channel does not offer": (
        "versions",
        _then(
            _sub("  release_channel: REGULAR\n", "  release_channel: STABLE\n"),
            _sub('  min_master_version: "1.35"\n', '  min_master_version: "1.36"\n'),
        ),
        "cluster.min_master_version",
        "the STABLE channel offers 1.34, 1.35",
    ),
    # 7. Messages a person can read
    "a key with a Cyrillic letter": (
        "messages",
        _sub("    machine_type: e2-standard-8\n", "    m\u0430chine_type: e2-standard-8\n"),
        "cluster.system_pool.m\u0430chine_type",
        "'machine_type' written with look-alike characters (U+0430 CYRILLIC SMALL LETTER A)",
    ),
    "a label value of 400 characters": (
        "messages",
        _sub("  team: ml-platform\n", "  team: " + "x" * 400 + "\n"),
        "labels.team",
        "... (402 characters)",
    ),
    "a misspelled serving key": (
        "messages",
        _sub("    per_device_batch_size: 6\n", "    per_device_batch: 6\n"),
        "serving.llama405b.per_device_batch",
        "allowed keys here: engine, slice,",
    ),
    "an unknown engine": (
        "messages",
        _sub("    engine: vllm\n", "    engine: vlm\n"),
        "serving.llama70b-vllm.engine",
        "'vllm'",
    ),
    "a misspelled top-level key": (
        "messages",
        _sub("slices:\n", "slice:\n"),
        "slice",
        "allowed keys here: name, project",
    ),
    "deletion protection as a word": (
        "messages",
        _sub("  deletion_protection: false\n", "  deletion_protection: 'no'\n"),
        "cluster.deletion_protection",
        "valid boolean",
    ),
    "two adapters of one name": (
        "messages",
        _sub(
            "      - {name: llama70b-support, path: adapters/llama70b-support, rank: 16}\n",
            "      - {name: llama70b-support, path: adapters/llama70b-support, rank: 16}\n" * 2,
        ),
        "serving.llama70b-vllm",
        "adapters: 'llama70b-support' is named twice (or is the model's own name)",
    ),
    "an adapter named like the model's Hugging Face path": (
        "messages",
        _sub("{name: llama70b-support,", "{name: meta-llama/Llama-3.3-70B-Instruct,"),
        "serving.llama70b-vllm.adapters[0].name",
        "must match the pattern ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$",
    ),
    "an adapter's rank above vLLM's largest": (
        "messages",
        _sub("path: adapters/llama70b-support, rank: 16}", "path: adapters/llama70b-support, rank: 1024}"),
        "serving.llama70b-vllm.adapters[0].rank",
        "above vLLM's largest --max-lora-rank, 512 (its choices: 1, 8, 16, 32, 64, 128, 256, 320, 512",
    ),
    "adapters on an engine that cannot load them": (
        "messages",
        _sub(
            "    checkpoint_path: maxtext/llama3.1-405b\n",
            "    checkpoint_path: maxtext/llama3.1-405b\n    adapters: [{name: a, path: adapters/a, rank: 8}]\n",
        ),
        "serving.llama405b.adapters",
        "unknown key 'adapters'",
    ),
    "more multi-host vLLM servers than the slice's pools": (
        "messages",
        _sub("    capacity: {type: spot}\n    count: 2\n", "    capacity: {type: spot}\n    count: 3\n"),
        "serving.llama70b-vllm-mh.autoscaling.max",
        "has count 3 (one pool per slice): set slices.vllm-multihost.count to 2",
    ),
    "a counted GPU slice": (
        "places",
        _sub("  a3mega:\n    accelerator: a3-mega\n", "  a3mega:\n    accelerator: a3-mega\n    count: 2\n"),
        "slices.a3mega",
        "only TPU slices are counted",
    ),
    # A union's member names are the validator's, not the file's (review round 4: `...[1].constrained-int`).
    "an exit code that is neither a number nor a range": (
        "messages",
        _sub('retry_exit_codes: [42, "128-255"]', 'retry_exit_codes: [42, "abc"]'),
        "batch.training.resilience.retry_exit_codes[1]",
        "Input should be a valid integer; or must match the pattern ^[0-9]{1,3}-[0-9]{1,3}$",
    ),
    # API limits the stack reaches (review round 4).
    "a no-upgrade exclusion longer than GKE allows": (
        "messages",
        _sub(
            'recurrence: "FREQ=WEEKLY;BYDAY=SA,SU"}\n',
            'recurrence: "FREQ=WEEKLY;BYDAY=SA,SU"}\n    exclusions: [{name: launch, start: "2026-11-01T00:00:00Z", '
            'end: "2026-12-15T00:00:00Z", scope: NO_UPGRADES}]\n',
        ),
        "cluster.maintenance.exclusions[0]",
        "a NO_UPGRADES exclusion of 44 days",
    ),
    "an alert address listed twice": (
        "messages",
        _sub(
            "  notify: [ml-platform-alerts@acme.example]\n",
            "  notify: [ml-platform-alerts@acme.example, ML-Platform-Alerts@acme.example]\n",
        ),
        "monitoring.notify",
        "is listed twice",
    ),
    "a restart count past JobSet's int32": (
        "messages",
        _sub("    resilience: {max_restarts: 3,", "    resilience: {max_restarts: 3000000000,"),
        "resilience.max_restarts",
        "less than or equal to 2147483647",
    ),
    # Training launched as JobSets, with GKE's multi-tier checkpointing (docs/training.md, "Checkpoint tiers").
    "a JobSet launcher with a standing cluster": (
        "requests",
        _sub("  queue: training\n", "  queue: training\n  launcher: jobset\n"),
        "training.runs",
        "launcher jobset makes each run a JobSet, with no standing cluster: write runs: jobs",
    ),
    "a local tier under Ray's launcher": (
        "requests",
        _sub(
            "  queue: training\n",
            "  queue: training\n  resilience:\n    local_tier: " + LOCAL_TIER + "\n",
        ),
        "training.resilience.local_tier",
        "starts JAX's distributed runtime itself",
    ),
    "a local tier backed up to a bucket without folders": (
        "places",
        _sub(
            "  queue: training\n",
            JOBSET_TIER + LOCAL_TIER + "\n",
        ),
        "training.resilience.local_tier.bucket",
        "need a bucket with hierarchical namespace",
    ),
    "a bucket backup between two local saves": (
        "numbers",
        _sub(
            "  queue: training\n",
            JOBSET_TIER + LOCAL_TIER.replace("100", "30") + "\n",
        ),
        "training.resilience.local_tier",
        "bucket_every_steps 30 is not a multiple of every_steps 25",
    ),
    "elastic slices under a JobSet launcher": (
        "requests",
        _sub(
            "  queue: training\n",
            "  queue: training\n  runs: jobs\n  launcher: jobset\n  resilience: {min_slices: 1}\n",
        ),
        "training.resilience.min_slices",
        "elastic slices are Ray Train's (launcher ray)",
    ),
    "multislice training on single-host slices": (
        "places",
        _sub(
            "  train:\n    accelerator: v6e\n    topology: 4x4\n",
            "  train:\n    accelerator: v6e\n    topology: 2x2\n    count: 2\n",
        ),
        "slices.train.count",
        "GKE's Multislice runs on multi-host TPU slice node pools only",
    ),
    "a counted serving slice": (
        "places",
        _sub("  sax-a:\n    accelerator: v5e\n", "  sax-a:\n    accelerator: v5e\n    count: 2\n"),
        "slices.sax-a.count",
        "only the Ray training slice (training.slice: train) and a vLLM deployment's multi-host slice",
    ),
    "a team on a slice the batch jobs do not share": (
        "places",
        _sub("    quota: {a3mega: 8}\n", "    quota: {a3mega: 8, train: 4}\n"),
        "teams.research.quota.train",
        "not in batch.slices: a3mega",
    ),
    "a team in a namespace the platform does not make": (
        "names",
        _sub("    namespace: ml-gpu\n    quota:", "    namespace: research\n    quota:"),
        "teams.research.namespace",
        "not in the identities' namespaces",
    ),
    "a team named like the platform's own queue": (
        "names",
        _sub("teams:\n  research:\n", "teams:\n  gpu:\n"),
        "teams.gpu",
        "the name of the platform's own queue (batch.queue)",
    ),
    "a team's budget of nothing": (
        "numbers",
        _sub("    budget: {monthly_usd: 75000}\n", "    budget: {monthly_usd: 0}\n"),
        "teams.research.budget.monthly_usd",
        "greater than or equal to 1",
    ),
    "a team's budget in another currency than the prices'": (
        "messages",
        _sub("    budget: {monthly_usd: 75000}\n", "    budget: {monthly_eur: 90000}\n"),
        "teams.research.budget",
        "monthly_usd",
    ),
    "a team's quota over its budget": (
        "requests",
        _sub("    budget: {monthly_usd: 75000}\n", "    budget: {monthly_usd: 50000}\n"),
        "teams.research.budget.monthly_usd",
        "its guaranteed quota commits 68,188.63 USD a month at list price",
    ),
    "a second training slice whose pool another slice takes": (
        "names",
        _sub(
            "  train:\n    accelerator: v6e\n",
            "  train-1:\n    accelerator: v6e\n    topology: 2x2\n    capacity: {type: spot}\n"
            "  train:\n    count: 2\n    accelerator: v6e\n",
        ),
        "slices.train.count",
        "its pool 'train-1' is the name of another pool",
    ),
}


def test_the_campaign_covers_every_class_with_at_least_40_edits() -> None:
    classes = {c for c, *_ in CASES.values()}
    assert classes == {"yaml", "numbers", "names", "places", "requests", "versions", "messages"}
    assert len(CASES) >= 40


def _write(environments: Path, edit: Edit) -> Path:
    shutil.copy(ENVIRONMENTS_DIR / "prod.yaml", environments / "prod.yaml")
    changed = edit(DEV)
    path = environments / "dev.yaml"
    if isinstance(changed, bytes):
        path.write_bytes(changed)
    else:
        path.write_text(changed)
    return path


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_edit_is_refused_at_load_naming_the_file_and_the_field(case: str, tmp_path: Path) -> None:
    _, edit, field, fragment = CASES[case]
    path = _write(tmp_path, edit)
    with pytest.raises(ConfigError) as err:
        load_environment(path)
    assert str(path) in str(err.value)
    hits = [p for p in err.value.problems if field in p.split(": ")[0] or p.startswith(field)]
    assert hits, f"no problem at {field}: {err.value.problems}"
    assert any(fragment in p for p in hits), f"{fragment!r} not in {hits}"
    assert all(len(p) < 1200 for p in err.value.problems)


@pytest.mark.parametrize("case", sorted(CASES))
def test_make_plan_refuses_a_bad_edit_and_leaves_cdktf_out_unchanged(case: str, tmp_path: Path) -> None:
    _, edit, field, _ = CASES[case]
    environments = tmp_path / "environments"
    environments.mkdir()
    path = _write(environments, edit)
    out = tmp_path / "cdktf.out"
    (out / "review").mkdir(parents=True)
    (out / "review" / "dev.md").write_text("the last good review")
    # `make plan`'s command in this process (its steps are still processes); the groups of classes below run
    # `make plan` itself.
    done = run_main(
        plan_main,
        ["--outdir", str(out)],
        env={**os.environ, "PLATFORM_ENVIRONMENTS_DIR": str(environments)},
        cwd=REPO,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stdout + done.stderr
    assert str(path) in done.stderr and field in done.stderr
    assert [p.name for p in out.rglob("*")] == ["review", "dev.md"]
    assert (out / "review" / "dev.md").read_text() == "the last good review"


# --- Round two: arithmetic, limits, global names, locations, machines, reserved words, the engines'
# own value checks, secrets, paths, consistency, refusals that came only from a later step, YAML 1.1, size ---------

VLLM = "    max_model_len: 8192\n"  # the multi-host vLLM deployment's last written field
VLLM1 = "    gateway: true\n"  # the single-host one's
IMAGE = "us-east5-docker.pkg.dev/acme-ml-platform-dev/ml-platform/trainer@"


def _extra(anchor: str, *args: str) -> Edit:
    """Give the vLLM deployment whose block holds `anchor` these extra_args."""
    return _sub(anchor, anchor + "    extra_args: [" + ", ".join(f"'{a}'" for a in args) + "]\n")


# id: (class, edit, the field path the message names, the value it shows, a fragment of what it says)
SOURCED_EDITS: dict[str, tuple[str, Edit, str, str, str]] = {
    # Capacity arithmetic of address ranges
    "a subnet too small for the pools' nodes": (
        "arithmetic",
        _sub("  subnet_cidr: 10.10.0.0/20\n", "  subnet_cidr: 10.10.0.0/27\n"),
        "network.subnet_cidr",
        "10.10.0.0/27",
        "holds 28 addresses",
    ),
    "a pod range too small for a /24 per node": (
        "arithmetic",
        _sub("  pods_cidr: 10.16.0.0/14\n", "  pods_cidr: 10.16.0.0/20\n"),
        "network.pods_cidr",
        "10.16.0.0/20",
        "holds 16 node(s) of a /24 each",
    ),
    "a Service range too small for the releases": (
        "arithmetic",
        _sub("  services_cidr: 10.20.0.0/20\n", "  services_cidr: 10.20.0.0/28\n"),
        "network.services_cidr",
        "10.20.0.0/28",
        "holds 16 Service addresses",
    ),
    "teams guaranteed more GPUs than the slice holds": (
        "arithmetic",
        _sub(
            "    quota: {a3mega: 8}\n",
            "    quota: {a3mega: 12}\n  eval:\n    namespace: ml-gpu\n    quota: {a3mega: 8}\n",
        ),
        "teams.*.quota.a3mega",
        "20",
        "the teams' quotas (eval 8, research 12) add up to more than slice a3mega's 16 nvidia.com/gpu (2 nodes)",
    ),
    "a team preempting while borrowing that never reclaims": (
        "consistency",
        _sub(
            "    quota: {a3mega: 8}\n",
            "    quota: {a3mega: 8}\n"
            "    preemption: {reclaim_within_cohort: Never, borrow_within_cohort: LowerPriority}\n",
        ),
        "teams.research.preemption.borrow_within_cohort",
        "LowerPriority",
        "needs reclaim_within_cohort LowerPriority or Any (it is Never)",
    ),
    "the trainer's image given to the canary server": (
        "consistency",
        _sub("    image: server\n", "    image: trainer\n"),
        "serving.canary.image",
        "trainer",
        "runs the Ray Train JaxTrainer launcher on TPU slices (training.image); this field takes an image that "
        "runs the canary server (serving.<key>.image, engine canary): server",
    ),
    "vLLM's image given to the TPU trainer": (
        "consistency",
        _sub("  image: trainer\n", "  image: vllm-tpu\n"),
        "training.image",
        "vllm-tpu",
        "is built from workloads/serving/Dockerfile.vllm-tpu and runs vLLM on TPU",
    ),
    "a release image no catalogue entry builds": (
        "consistency",
        _sub(
            "  images:\n",
            "  images:\n    custom: " + IMAGE.replace("/trainer@", "/custom@") + "sha256:" + "0" * 64 + "\n",
        ),
        "release.images.custom",
        "custom",
        "not an image of images/images.yaml",
    ),
    "a subnet that holds the nodes but not the internal load balancers": (
        "arithmetic",
        # dev's nodes, surge nodes and VMs need 60 of a /26's 60; Saxml's Service and vLLM's Gateway take 2 more.
        _sub("  subnet_cidr: 10.10.0.0/20\n", "  subnet_cidr: 10.10.0.0/26\n"),
        "network.subnet_cidr",
        "10.10.0.0/26",
        "2 internal load balancer(s): serving.saxml, serving.llama70b-vllm",
    ),
    "a weekly window of too few hours in 32 days": (
        "arithmetic",
        _sub('recurrence: "FREQ=WEEKLY;BYDAY=SA,SU"', 'recurrence: "FREQ=WEEKLY;BYDAY=SA"'),
        "cluster.maintenance.window",
        "FREQ=WEEKLY;BYDAY=SA with 8-hour occurrences opens 4 times in the leanest 32 days: 32 hours",
        "at least 48 hours of maintenance in any 32 days (longer occurrences, 12 hours each, or more days)",
    ),
    "a maintenance window shorter than GKE counts": (
        "arithmetic",
        _sub('end: "2026-01-03T10:00:00Z", recurrence: "FREQ=W', 'end: "2026-01-03T05:00:00Z", recurrence: "FREQ=W'),
        "cluster.maintenance.window",
        "lasts 3 hours (2026-01-03T02:00:00Z to 2026-01-03T05:00:00Z)",
        "GKE counts only stretches of at least 4 hours",
    ),
    "a proxy-only subnet below a /26": (
        "arithmetic",
        _sub("  proxy_only_cidr: 10.10.18.0/23\n", "  proxy_only_cidr: 10.10.18.0/28\n"),
        "network.proxy_only_cidr",
        "10.10.18.0/28",
        "a proxy-only subnet is a /26 or larger",
    ),
    "a bare address for a range": (
        "arithmetic",
        _sub("  network_attachment_cidr: 10.10.16.0/24\n", "  network_attachment_cidr: 10.10.16.1\n"),
        "network.network_attachment_cidr",
        "10.10.16.1",
        "a bare address where a range is meant",
    ),
    "an IPv6 Service range": (
        "arithmetic",
        _sub("  services_cidr: 10.20.0.0/20\n", "  services_cidr: fd00:20::/108\n"),
        "network.services_cidr",
        "fd00:20::/108",
        "IPv4 ranges only",
    ),
    # Platform limits
    "65 labels": (
        "limits",
        _sub("  managed_by: cdktf\n", "  managed_by: cdktf\n" + "".join(f"  l{i}: x\n" for i in range(62))),
        "labels",
        "65 labels",
        "at most 64 labels",
    ),
    "a label key of 64 characters": (
        "limits",
        _sub("  team: ml-platform\n", "  team: ml-platform\n  " + "k" * 64 + ": x\n"),
        "labels." + "k" * 64 + " (the key)",
        "k" * 64,
        "labels-overview",
    ),
    "a label value of 64 characters": (
        "limits",
        _sub("  team: ml-platform\n", "  team: " + "v" * 64 + "\n"),
        "labels.team",
        "v" * 64,
        "pattern",
    ),
    # Global names (within one file; across files: TOGETHER below)
    "two buckets of one name": (
        "global names",
        _sub(
            "  models:\n    protect: false\n",
            "  models:\n    name: acme-ml-platform-dev-datasets\n    protect: false\n",
        ),
        "buckets.models.name",
        "acme-ml-platform-dev-datasets",
        "the same bucket name as buckets.datasets",
    ),
    "a bucket named like the state bucket": (
        "global names",
        _sub(
            "  saxml:\n    protect: false\n", "  saxml:\n    name: acme-ml-platform-dev-tfstate\n    protect: false\n"
        ),
        "buckets.saxml.name",
        "acme-ml-platform-dev-tfstate",
        "the Terraform state bucket's name",
    ),
    "a bucket key whose default name is another's": (
        "global names",
        _sub(
            "  pathways:\n    protect: false\n",
            "  pathways:\n    name: acme-ml-platform-dev-models\n    protect: false\n",
        ),
        "buckets.pathways.name",
        "acme-ml-platform-dev-models",
        "the same bucket name as buckets.models",
    ),
    # Locations and references
    "a bucket location Cloud Storage does not have": (
        "locations",
        _sub("  models:\n    protect: false\n", "  models:\n    location: us-east9\n    protect: false\n"),
        "buckets.models.location",
        "us-east9",
        "not a Cloud Storage location",
    ),
    "an image of prod's registry in dev": (
        "locations",
        _sub(IMAGE, IMAGE.replace("-dev/", "-prod/")),
        "release.images.trainer",
        "acme-ml-platform-prod/ml-platform/trainer",
        "not this environment's registry",
    ),
    "an image repository with a typo": (
        "locations",
        _sub("ml-platform/vllm-tpu@", "ml-platfrom/vllm-tpu@"),
        "release.images.vllm-tpu",
        "ml-platfrom/vllm-tpu",
        "not this environment's registry",
    ),
    # Every machine type through the zone rule
    "a Slurm controller machine its zone does not offer": (
        "machines",
        _sub("  controller: {machine_type: n2-standard-4}\n", "  controller: {machine_type: m1-ultramem-80}\n"),
        "slurm.controller.machine_type",
        "m1-ultramem-80",
        "not offered in us-east5-a (the Slurm deployment's zone",
    ),
    "a Slurm login machine its zone does not offer": (
        "machines",
        _sub("  login: {machine_type: n2-standard-2}\n", "  login: {machine_type: m1-ultramem-40}\n"),
        "slurm.login.machine_type",
        "m1-ultramem-40",
        "gce.machine-type-offered-in-zone",
    ),
    "a conversion pool machine its zones do not offer": (
        "machines",
        _sub("    machine_type: c4-highmem-288\n", "    machine_type: m1-megamem-96\n"),
        "cpu_pools.convert.machine_type",
        "m1-megamem-96",
        "not offered in us-east5-b, us-east5-a",
    ),
    # Reserved words of the target system
    "a Slurm partition named default": (
        "reserved",
        _then(
            _sub("  partitions:\n    a3mega:\n", "  partitions:\n    default:\n"),
            _sub_all("partition: a3mega", "partition: default"),
        ),
        "slurm.partitions",
        "default",
        "Slurm's record of defaults",
    ),
    "a Slurm partition named DEFAULT": (
        "reserved",
        _then(
            _sub("  partitions:\n    a3mega:\n", "  partitions:\n    DEFAULT:\n"),
            _sub_all("partition: a3mega", "partition: DEFAULT"),
        ),
        "slurm.partitions",
        "DEFAULT",
        "PartitionName=DEFAULT",
    ),
    "an identity in kube-system": (
        "reserved",
        _sub("    namespace: ml-training\n", "    namespace: kube-system\n"),
        "identities.trainer.namespace",
        "kube-system",
        "reserved for Kubernetes system namespaces",
    ),
    # The engines' own value checks (vLLM's, from infra/catalogue/vllm-serve-options.json)
    "a vLLM memory fraction above 1": (
        "engine values",
        _extra(VLLM, "--gpu-memory-utilization=1.5"),
        "serving.llama70b-vllm-mh.extra_args[0]",
        "--gpu-memory-utilization=1.5",
        "must be <= 1",
    ),
    "a vLLM dtype it does not have": (
        "engine values",
        _extra(VLLM1, "--dtype=bf16"),
        "serving.llama70b-vllm.extra_args[0]",
        "--dtype=bf16",
        "not one of vLLM's choices",
    ),
    "a vLLM boolean given a value": (
        "engine values",
        _extra(VLLM, "--seed=7", "--enable-prefix-caching=true"),
        "serving.llama70b-vllm-mh.extra_args[1]",
        "--enable-prefix-caching=true",
        "a boolean flag",
    ),
    "a non-integer vLLM seed": (
        "engine values",
        _extra(VLLM1, "--seed=1.5"),
        "serving.llama70b-vllm.extra_args[0]",
        "--seed=1.5",
        "takes an integer",
    ),
    "truncated JSON for vLLM": (
        "engine values",
        _extra(VLLM, '--compilation-config={"mode": 3'),
        "serving.llama70b-vllm-mh.extra_args[0]",
        "--compilation-config",
        "takes JSON",
    ),
    "max_num_seqs above max_num_batched_tokens": (
        "engine values",
        _sub(VLLM, VLLM + "    max_num_seqs: 600\n"),
        "serving.llama70b-vllm-mh.max_num_seqs",
        "--max-num-seqs=600",
        "--max-num-seqs=600 <= --max-num-batched-tokens=512 does not hold",
    ),
    # Secrets never in arguments
    "an API key in extra_args": (
        "secrets",
        _extra(VLLM1, "--api-key=sk-live-abc"),
        "serving.llama70b-vllm.extra_args[0]",
        "--api-key=<redacted>",
        "api_key_secret",
    ),
    "an API key in the multi-host deployment": (
        "secrets",
        _extra(VLLM, "--seed=1", "--api-key=abc"),
        "serving.llama70b-vllm-mh.extra_args[1]",
        "--api-key=<redacted>",
        "vllm.no-secrets-in-args",
    ),
    "a Hugging Face token in extra_args": (
        "secrets",
        _extra(VLLM1, "--hf-token=hf_abc"),
        "serving.llama70b-vllm.extra_args[0]",
        "--hf-token=<redacted>",
        "a Hugging Face token",
    ),
    # Paths: a full gs:// URL where a path inside the bucket is meant
    "a gs:// URL as a vLLM model path": (
        "paths",
        _sub("    model_path: hf/Llama-3.3-70B-Instruct\n", "    model_path: gs://acme-ml-platform-dev-models/hf/L\n"),
        "serving.llama70b-vllm.model_path",
        "gs://acme-ml-platform-dev-models/hf/L",
        "a URL where a path inside the bucket is meant",
    ),
    "a gs:// URL as a checkpoint path": (
        "paths",
        _sub("    checkpoint_path: maxtext/llama2-70b\n", "    checkpoint_path: gs://acme-ml-platform-dev-models/x\n"),
        "serving.llama70b-disagg.checkpoint_path",
        "gs://acme-ml-platform-dev-models/x",
        "gs://<bucket>/gs://",
    ),
    "a gs:// URL as a conversion source": (
        "paths",
        _sub(
            "      source_path: meta/Llama-2-70b-chat\n", "      source_path: gs://acme-ml-platform-dev-models/meta\n"
        ),
        "serving.llama70b-disagg.conversion.source_path",
        "gs://acme-ml-platform-dev-models/meta",
        "a URL where a path inside the bucket is meant",
    ),
    # Security: the model servers read the models; only the conversion's identity writes them.
    "a model server that may write the models": (
        "security",
        _sub(
            "      pathways: roles/storage.objectUser\n      models: roles/storage.objectViewer\n",
            "      pathways: roles/storage.objectUser\n      models: roles/storage.objectUser\n",
        ),
        "identities.serving.bucket_roles.models",
        "roles/storage.objectUser",
        "only reads its model from bucket 'models'",
    ),
    "a conversion as the model servers' identity": (
        "security",
        _sub_all("      identity: converter\n", "      identity: serving\n"),
        "serving.llama405b.conversion.identity",
        "serving",
        "runs as an identity of its own, which no server shares",
    ),
    "a documentation range as the control plane's authorized network": (
        "security",
        _sub("  authorized_networks: []\n", "  authorized_networks: [{name: vpn, cidr: 203.0.113.0/24}]\n"),
        "network.authorized_networks[0].cidr",
        "203.0.113.0/24",
        "a documentation range (TEST-NET-3",
    ),
    # half the Internet passed, and the whole of it was called a documentation range.
    "the repository in clone form": (
        "security",
        _sub("    repository: acme/ml-platform\n", "    repository: acme/ml-platform.git\n"),
        "delivery.github.repository",
        "acme/ml-platform.git",
        "owner/name as GitHub's OIDC token's `repository` claim names it",
    ),
    "a seed project that is the environment's own": (
        "security",
        _seed("acme-ml-platform-dev", "100000000009"),
        "delivery.seed.project",
        "acme-ml-platform-dev",
        "the environment's own project: a seed project is another one, out of its deployer's reach",
    ),
    "a seed project with the environment's own project number": (
        "security",
        _seed("acme-ml-platform-seed", "100000000001"),
        "delivery.seed.project_number",
        "100000000001",
        "the number of the environment's own project acme-ml-platform-dev",
    ),
    "half the Internet as the control plane's authorized network": (
        "security",
        _sub("  authorized_networks: []\n", "  authorized_networks: [{name: anyone, cidr: 0.0.0.0/1}]\n"),
        "network.authorized_networks[0].cidr",
        "0.0.0.0/1",
        "2,147,483,648 addresses of the Internet (wider than a /8)",
    ),
    "a conversion identity in another namespace": (
        "security",
        _sub("  converter:\n    namespace: ml-serving\n", "  converter:\n    namespace: ml-training\n"),
        "serving.llama405b.conversion.identity",
        "converter",
        "is not the deployment's ('ml-serving'",
    ),
    # Consistency between fields
    "a 70B conversion for a 405B model": (
        "consistency",
        _sub("      model_size: llama3.1-405b\n", "      model_size: llama3.1-70b\n"),
        "serving.llama405b.conversion.model_size",
        "llama3.1-70b",
        "converts a 70B model",
    ),
    "a 7B conversion for a 70B model": (
        "consistency",
        _sub("      model_size: llama2-70b\n", "      model_size: llama2-7b\n"),
        "serving.llama70b-disagg.conversion.model_size",
        "llama2-7b",
        "converts a 7B model",
    ),
    "a conversion of another family of the same size": (
        "consistency",
        _sub("      model_size: llama2-70b\n", "      model_size: llama3-70b\n"),
        "serving.llama70b-disagg.conversion.model_size",
        "llama3-70b",
        "serves llama2-70b",
    ),
    # Refused only by a later step naming a Terraform address: now at load, at the field
    "a public control-plane range": (
        "later steps",
        _sub("  master_cidr: 172.16.0.0/28\n", "  master_cidr: 34.1.2.0/28\n"),
        "network.master_cidr",
        "34.1.2.0/28",
        "a public range",
    ),
    "auto-upgrade off on a release channel": (
        "later steps",
        _sub(
            "    machine_type: ct6e-standard-4t\n    capacity:\n      type: on-demand\n",
            "    machine_type: ct6e-standard-4t\n    auto_upgrade: false\n    capacity:\n      type: on-demand\n",
        ),
        "slices.train.auto_upgrade",
        "False",
        "refuses a node pool without auto-upgrade",
    ),
    "Ray training on a GPU slice": (
        "later steps",
        _sub("training:\n  slice: train\n", "training:\n  slice: a3mega\n"),
        "training.slice",
        "a3mega",
        "not TPU",
    ),
    "a VM group whose account id is too short": (
        "later steps",
        _sub("vm_groups:\n  a3mega:\n", "vm_groups:\n  ab:\n"),
        "vm_groups.ab",
        "ab",
        "would be under 6 characters",
    ),
    # YAML 1.1 coercion: say what was typed, and to quote it
    "an unquoted project number with a leading zero (octal)": (
        "yaml 1.1",
        _sub('project_number: "100000000001"\n', "project_number: 0100000000001\n"),
        "project_number",
        "0100000000001",
        "YAML 1.1 reads it as the int 8589934593",
    ),
    "1.30 read as the float 1.3": (
        "yaml 1.1",
        _sub('  min_master_version: "1.35"\n', "  min_master_version: 1.30\n"),
        "cluster.min_master_version",
        "1.3",
        "typed 1.30 unquoted, which YAML reads as a float: quote it, '1.30'",
    ),
    "a topology typed as a number, which quoting would not mend": (
        "yaml 1.1",
        _sub("    topology: 4x4\n", "    topology: 16\n"),
        "slices.train.topology",
        "16",
        "which YAML reads as an int; quoted, '16' is refused too: topology '16' is not a 2-D topology of v6e",
    ),
    "yes for a boolean": (
        "yaml 1.1",
        _sub("  deletion_protection: false\n", "  deletion_protection: yes\n"),
        "cluster.deletion_protection",
        "yes",
        "YAML 1.1 reads it as the bool True",
    ),
    "an octal node count": (
        "yaml 1.1",
        _sub("    max_nodes: 1\n", "    max_nodes: 010\n"),
        "cpu_pools.convert.max_nodes",
        "010",
        "reads it as the int 8",
    ),
    # A size limit on environment files
    "a file over the size limit": (
        "size",
        lambda text: text + "# " + "x" * 300_000 + "\n",
        "(file)",
        "bytes",
        "an environment file is at most 262144 bytes",
    ),
    "an alias bomb": (
        "size",
        lambda text: (
            text
            + "bomb:\n  a: &a [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(f"  {c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n" for p, c in zip("abcdef", "bcdefg", strict=True))
        ),
        "(file)",
        "100000",
        "once its aliases are expanded",
    ),
}

PROD = (ENVIRONMENTS_DIR / "prod.yaml").read_text()

# Edits of both files that only the environments together refuse (infra/rules/across_environments.py): id -> (dev
# edit, prod edit, the file refused, the field, the value, a fragment).
# prod moved into dev's project, its buckets named apart (bucket names are global).
PROD_IN_DEVS_PROJECT = _then(
    _sub("project: acme-ml-platform-prod\n", "project: acme-ml-platform-dev\n"),
    _sub_all("/acme-ml-platform-prod/", "/acme-ml-platform-dev/"),
    *(_sub(f"  {key}:\n", f"  {key}:\n    name: acme-ml-platform-p-{key}\n")
      for key in ("checkpoints", "datasets", "saxml", "pathways", "models")),
)  # fmt: skip

TOGETHER: dict[str, tuple[Edit, Edit, str, str, str, str]] = {
    "a prod bucket named like one of dev": (
        lambda t: t,
        _sub("  models:\n", "  models:\n    name: acme-ml-platform-dev-models\n"),
        "prod.yaml",
        "buckets.models.name",
        "acme-ml-platform-dev-models",
        "also the name of dev.yaml's buckets.models",
    ),
    "a dev bucket named like prod's state bucket": (
        _sub(
            "  saxml:\n    protect: false\n", "  saxml:\n    name: acme-ml-platform-prod-tfstate\n    protect: false\n"
        ),
        lambda t: t,  # prod's own state bucket (each environment has its own)
        "dev.yaml",
        "buckets.saxml.name",
        "acme-ml-platform-prod-tfstate",
        "the Terraform state bucket of prod.yaml",
    ),
    "prod in dev's project with the same VPC and repository": (
        lambda t: t,
        PROD_IN_DEVS_PROJECT,
        "prod.yaml",
        "network.name",
        "ml-platform",
        "dev.yaml names its VPC network the same in project acme-ml-platform-dev",
    ),
    # every stack makes `make image`'s build account under a fixed name in its project.
    "prod in dev's project, every name of its own": (
        lambda t: t,
        _then(PROD_IN_DEVS_PROJECT, _sub("  name: ml-platform\n", "  name: ml-platform-p\n")),
        "prod.yaml",
        "project",
        "image-builder@acme-ml-platform-dev.iam.gserviceaccount.com",
        "dev.yaml names its build service account the same in project acme-ml-platform-dev",
    ),
}


def _chart_takes_bare_flags() -> bool:
    from infra.rules.vllm_serve_args import chart_args_pattern

    pattern = chart_args_pattern()
    return pattern is None or re.search(pattern, "--enable-prefix-caching") is not None


def test_a_bare_vllm_boolean_flag_is_taken_as_vllm_takes_it(tmp_path: Path) -> None:
    """Before: `--enable-prefix-caching` in extra_args crashed `make plan` with a traceback (the chart's schema
    demanded --flag=value, and vLLM refuses a value on a boolean flag). The chart (vllm-tpu 0.6.0) takes bare flags,
    vLLM's own description says the flag takes none, and the file loads; a value the chart still refused would be a
    refusal of the rules step (tests/test_plan_refusals.py), never a traceback."""
    assert _chart_takes_bare_flags()
    env = load_environment(_write(tmp_path, _extra(VLLM1, "--enable-prefix-caching")))
    assert "--enable-prefix-caching" in env.serving["llama70b-vllm"].extra_args  # type: ignore[union-attr]


def test_the_sourced_edits_cover_every_class_with_at_least_three_each() -> None:
    classes: dict[str, int] = {}
    for c, *_ in SOURCED_EDITS.values():
        classes[c] = classes.get(c, 0) + 1
    assert {c for c, n in classes.items() if n >= 3} >= {
        "arithmetic", "limits", "global names", "locations", "machines", "reserved", "engine values", "secrets",
        "paths", "consistency", "later steps", "yaml 1.1",
    }  # fmt: skip
    assert len(TOGETHER) >= 3


def _refused_line(problems: list[str], field: str, value: str, fragment: str) -> str:
    hits = [p for p in problems if p.split(": ")[0] == field or p.startswith(field + ": ")]
    assert hits, f"no problem at {field}: {problems}"
    named = [p for p in hits if value in p and fragment in p]
    assert named, f"{value!r} and {fragment!r} not in {hits}"
    # The rule's source: a URL, a rule with its source, or the module that holds the limit.
    assert re.search(r"source|https://|MAX_ENVIRONMENT_BYTES|MAX_YAML_NODES", named[0]), named[0]
    return named[0]


@pytest.mark.parametrize("case", sorted(SOURCED_EDITS))
def test_a_sourced_edit_is_refused_at_load_naming_file_field_value_and_source(case: str, tmp_path: Path) -> None:
    _, edit, field, value, fragment = SOURCED_EDITS[case]
    path = _write(tmp_path, edit)
    with pytest.raises(ConfigError) as err:
        load_environment(path)
    assert str(path) in str(err.value)
    _refused_line(err.value.problems, field, value, fragment)
    assert all(len(p) < 1500 for p in err.value.problems)


def _write_both(environments: Path, dev: Edit, prod: Edit) -> None:
    (environments / "dev.yaml").write_text(str(dev(DEV)))
    (environments / "prod.yaml").write_text(str(prod(PROD)))


@pytest.mark.parametrize("case", sorted(TOGETHER))
def test_environments_are_held_together_when_all_are_loaded(case: str, tmp_path: Path) -> None:
    dev, prod, file, field, value, fragment = TOGETHER[case]
    _write_both(tmp_path, dev, prod)
    for name in ("dev", "prod"):  # each alone is a good file
        load_environment(tmp_path / f"{name}.yaml")
    with pytest.raises(ConfigError) as err:
        load_all(tmp_path)
    assert str(err.value.path).endswith(file)
    _refused_line(err.value.problems, field, value, fragment)


# `make plan` runs, each with several edits of different classes in one file: the loader reports them together
# (schema faults of every field at once; then the cross-section checks; then the rules), so each group holds
# edits of one phase.
PLAN_GROUPS: dict[str, list[str]] = {
    "fields": [
        "an IPv6 Service range",
        "a label value of 64 characters",
        "a gs:// URL as a vLLM model path",
        "a Slurm partition named default",
        "an identity in kube-system",
        "1.30 read as the float 1.3",
        "an unquoted project number with a leading zero (octal)",
    ],
    "cross-section": [
        "Ray training on a GPU slice",
    ],
    "rules": [
        "65 labels",
        "a bucket named like the state bucket",
        "a bucket location Cloud Storage does not have",
        "an image of prod's registry in dev",
        "a 70B conversion for a 405B model",
        "auto-upgrade off on a release channel",
        "a VM group whose account id is too short",
        "a subnet too small for the pools' nodes",
        "a Slurm controller machine its zone does not offer",
        "a vLLM memory fraction above 1",
        "max_num_seqs above max_num_batched_tokens",
        "a Slurm login machine its zone does not offer",
    ],
    "size": ["a file over the size limit"],
}


def _make_plan(environments: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / "cdktf.out"
    (out / "review").mkdir(parents=True)
    (out / "review" / "dev.md").write_text("the last good review")
    done = subprocess.run(
        ["make", "--no-print-directory", "plan", f"OUT={out}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PLATFORM_ENVIRONMENTS_DIR": str(environments)},
    )
    return done, out


def _assert_refused_cleanly(done: subprocess.CompletedProcess[str], out: Path) -> None:
    assert done.returncode != 0
    assert "Traceback" not in done.stdout + done.stderr
    assert [p.name for p in out.rglob("*")] == ["review", "dev.md"]
    assert (out / "review" / "dev.md").read_text() == "the last good review"


@pytest.mark.slow
@pytest.mark.parametrize("group", sorted(PLAN_GROUPS))
def test_make_plan_refuses_a_group_of_sourced_edits_naming_each(group: str, tmp_path: Path) -> None:
    cases = PLAN_GROUPS[group]
    environments = tmp_path / "environments"
    environments.mkdir()
    path = _write(environments, _then(*(SOURCED_EDITS[c][1] for c in cases)))
    done, out = _make_plan(environments, tmp_path)
    _assert_refused_cleanly(done, out)
    lines = [line.split(f"{path}: ", 1)[1] for line in done.stderr.splitlines() if f"{path}: " in line]
    for case in cases:
        _, _, field, value, fragment = SOURCED_EDITS[case]
        _refused_line(lines, field, value, fragment)


@pytest.mark.slow
def test_make_plan_holds_every_environment_together(tmp_path: Path) -> None:
    environments = tmp_path / "environments"
    environments.mkdir()
    cases = ["a dev bucket named like prod's state bucket", "prod in dev's project with the same VPC and repository"]
    _write_both(environments, _then(*(TOGETHER[c][0] for c in cases)), _then(*(TOGETHER[c][1] for c in cases)))
    done, out = _make_plan(environments, tmp_path)
    _assert_refused_cleanly(done, out)
    for case in cases:
        _, _, file, field, value, fragment = TOGETHER[case]
        lines = [line.split(f"{file}: ", 1)[1] for line in done.stderr.splitlines() if f"{file}: " in line]
        assert lines, (case, done.stderr[-3000:])
        _refused_line(lines, field, value, fragment)


def test_an_environment_named_like_a_stack_is_refused_and_leaves_the_others_outputs(tmp_path: Path) -> None:
    """an environment named `platform-dev` made `make plan ENV=platform-dev` replace dev's stack,
    placement and rendered releases in cdktf.out with its own, exit 0."""
    envs = tmp_path / "environments"
    shutil.copytree(ENVIRONMENTS_DIR, envs)
    text = DEV.replace("name: dev\n", "name: platform-dev\n", 1)
    assert text != DEV
    (envs / "platform-dev.yaml").write_text(text)
    with pytest.raises(
        ConfigError,
        match=r"platform-dev.yaml: name: 'platform-dev': starts with 'platform-', which the platform's stacks",
    ):
        load_environment(envs / "platform-dev.yaml")
    out = tmp_path / "out"
    (out / "stacks" / "platform-dev").mkdir(parents=True)
    stack_file(out, "platform-dev").write_text("{}")
    done = run_main(
        plan_main,
        ["--outdir", str(out), "--env", "platform-dev"],
        env={**os.environ, "PLATFORM_ENVIRONMENTS_DIR": str(envs)},
        cwd=REPO,
    )
    assert done.returncode == 2 and "starts with 'platform-'" in done.stderr, done.stderr[-2000:]
    assert stack_file(out, "platform-dev").read_text() == "{}"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["scripts.logs", "--env", "dve"], "ENV='dve': not one; the environments here: dev, prod; did you mean 'dev'?"),
        (
            ["scripts.logs", "--env", "../../images/images"],
            "ENV='../../images/images': an environment's name, not a path",
        ),
        (
            ["scripts.recipes", "--env", "prd"],
            "ENV='prd': not one; the environments here: dev, prod; did you mean 'prod'?",
        ),
        (["scripts.promote", "dev", "prod.yaml"], "TO='prod.yaml': an environment's name, not a path"),
        (["scripts.deploy", "deploy", "staging"], "ENV='staging': not one; the environments here: dev, prod"),
    ],
)
def test_every_command_takes_an_environment_by_name_and_lists_them_on_a_miss(argv: list[str], said: str) -> None:
    """every command but `make plan` read ENV/FROM/TO as a path: a miss said only that a file could not
    be read, and ENV=../../images/images read another YAML file as an environment."""
    done = subprocess.run(
        [sys.executable, "-m", *argv], cwd=REPO, capture_output=True, text=True, env={**os.environ}, timeout=300
    )
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]


def test_a_yml_file_in_the_environments_folder_is_refused_not_ignored(tmp_path: Path) -> None:
    envs = tmp_path / "environments"
    shutil.copytree(ENVIRONMENTS_DIR, envs)
    (envs / "prod.yaml").rename(envs / "prod.yml")
    with pytest.raises(ConfigError, match=r"prod.yml: environment files end in .yaml; rename it to prod.yaml"):
        load_all(envs)


@pytest.mark.parametrize("value", ["-h", "../../images/images", "dev;ls", "a b", "Dev", ""])
def test_make_refuses_an_env_from_or_to_that_is_not_a_name(value: str) -> None:
    """ENV reached the shell unquoted and `make deploy ENV=-h` printed the command's help, exit 0."""
    for variable in ("ENV", "FROM", "TO"):
        done = subprocess.run(
            ["make", "-n", "logs", f"{variable}={value}"], cwd=REPO, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 2, done.stdout
        assert f"{variable}='{value}': an environment's name, lowercase letters, digits and hyphens" in done.stderr
