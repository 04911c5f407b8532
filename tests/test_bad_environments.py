"""A campaign of bad edits of dev.yaml, as a careful reviewer would try them: every one refused at load,
naming the file and the field, with no traceback, and through `make plan` leaving cdktf.out as it was.

The classes are those of the review: YAML that means two things, numbers GCP cannot hold, names checked
where they are written, places and machines that exist, requests that fit, versions that exist, and
messages a person can read (`make plan`'s all-or-nothing is also tests/test_plan.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from infra.config import ENVIRONMENTS_DIR, ConfigError
from infra.load import load_environment
from tests.conftest import REPO

DEV = (ENVIRONMENTS_DIR / "dev.yaml").read_text()
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
        "line 41, column 18",
        "not valid YAML: expected ',' or ']', but got ':' (while parsing a flow sequence)",
    ),
    # 2. Numbers GCP cannot hold
    "infinite node count": (
        "numbers",
        _sub("    max_nodes: 3\n", "    max_nodes: .inf\n"),
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
        _sub("    max_nodes: 3\n", "    max_nodes: 5000\n"),
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
    "a 100 TB boot disk": (
        "numbers",
        _sub("    max_nodes: 3\n", "    max_nodes: 3\n    disk_size_gb: 100000\n"),
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
        _sub("project: acme-ml-platform-dev\n", "project: acme-google-dev\n"),
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
            _sub("  # Saxml's admin state (SAX_ROOT).\n", LONG_BUCKET),
        ),
        "buckets.an-unusually-long-bucket-key-for-dataset",
        "(the default name)",
    ),
    "a state bucket with capitals": (
        "names",
        _sub("  bucket: acme-ml-platform-tfstate\n", "  bucket: Acme-TFState\n"),
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
        _sub("    kueue: 0.17.3\n", "    kueue: 0.18.0\n"),
        "release.controllers.kueue",
        "known: 0.17.3",
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
    "two replicas of a multi-host vLLM server on one slice": (
        "messages",
        _sub("    max_model_len: 8192\n", "    max_model_len: 8192\n    replicas: 2\n"),
        "serving.llama70b-vllm-mh.replicas",
        "is one node pool of one slice: one replica",
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
    done = subprocess.run(
        ["make", "--no-print-directory", "plan", f"OUT={out}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PLATFORM_ENVIRONMENTS_DIR": str(environments)},
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stdout + done.stderr
    assert str(path) in done.stderr and field in done.stderr
    assert [p.name for p in out.rglob("*")] == ["review", "dev.md"]
    assert (out / "review" / "dev.md").read_text() == "the last good review"
