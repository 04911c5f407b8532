"""The stack's parts on their own: each built on a bare stack from a minimal environment, holding what its sections
say and nothing of the others' (infra/stacks/network.py, identity.py, compute.py, data.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from infra.config import ENVIRONMENTS_DIR, Environment, parse_environment
from infra.stacks.compute import Compute
from infra.stacks.data import Data
from infra.stacks.identity import NodeIdentities
from infra.stacks.network import Networking


def _minimal(tmp_path: Path, **sections: Any) -> Environment:
    """dev's project, network, cluster, registry and buckets, and only the given other sections."""
    dev = yaml.safe_load((ENVIRONMENTS_DIR / "dev.yaml").read_text())
    keep = ("name", "project", "project_number", "region", "zones", "labels", "state", "network", "cluster")
    body = {k: dev[k] for k in keep} | {
        "registry": dev["registry"],
        "buckets": {"checkpoints": dev["buckets"]["checkpoints"]},
    }
    # Only what the sections kept use (an attachment without Vertex AI jobs, a proxy-only subnet without a gateway,
    # GPUDirect ranges without GPUs are refused).
    for unused in ("network_attachment_cidr", "proxy_only_cidr", "gpudirect_cidr"):
        body["network"].pop(unused, None)
    path = tmp_path / "dev.yaml"
    path.write_text(yaml.safe_dump(body | sections))
    return parse_environment(path)


def _synth(tmp_path: Path, build: Any) -> dict[str, Any]:
    """One bare stack (its providers alone) with `build(stack)` in it, synthesized: its resources by type."""
    from infra.cdk import App, TerraformStack
    from infra.constructs.providers import Providers

    app = App(outdir=str(tmp_path / "out"))
    stack = TerraformStack(app, "part")
    Providers(stack, "providers", project="acme-ml-platform-dev", region="us-east5", labels={})
    build(stack)
    app.synth()
    synthesized = json.loads((tmp_path / "out/stacks/part/cdk.tf.json").read_text())
    resources: dict[str, Any] = synthesized.get("resource", {})
    return resources


def test_compute_makes_the_cluster_and_a_pool_per_slice_and_nothing_else(tmp_path: Path) -> None:
    slices = {
        "train": {"accelerator": "v6e", "topology": "4x4", "capacity": {"type": "spot"}},
        "serve": {"accelerator": "v5e", "topology": "2x4", "capacity": {"type": "on-demand"}},
    }
    env = _minimal(tmp_path, slices=slices)

    def build(stack: Any) -> None:
        nodes = NodeIdentities(stack, env)
        Compute(stack, env, Networking(stack, env, gke_nodes=nodes.gke_nodes), nodes)

    resources = _synth(tmp_path, build)
    pools = sorted(p["name"] for p in resources["google_container_node_pool"].values())
    assert pools == ["serve", "system", "train"]
    assert len(resources["google_container_cluster"]) == 1
    # The network it runs on and the nodes' accounts; no bucket, registry, release or Kubernetes object.
    assert not [t for t in resources if t.startswith(("google_storage", "google_artifact", "helm", "kubernetes"))]
    assert {"google_compute_network", "google_compute_subnetwork", "google_service_account"} <= set(resources)


def test_the_network_part_adds_a_proxy_only_subnet_only_where_a_gateway_serves(tmp_path: Path) -> None:
    env = _minimal(tmp_path)
    resources = _synth(tmp_path, lambda stack: Networking(stack, env, gke_nodes=["nodes@x"]))
    purposes = [s.get("purpose") for s in resources["google_compute_subnetwork"].values()]
    assert "REGIONAL_MANAGED_PROXY" not in purposes and "google_container_cluster" not in resources


def test_data_makes_the_buckets_and_the_registry_its_readers_pull_from(tmp_path: Path) -> None:
    env = _minimal(tmp_path)

    def build(stack: Any) -> None:
        data = Data(stack, env)
        data.images(stack, readers=["serviceAccount:reader@example.iam.gserviceaccount.com"])

    resources = _synth(tmp_path, build)
    assert [b["name"] for b in resources["google_storage_bucket"].values() if "checkpoints" in b["name"]] == [
        "acme-ml-platform-dev-checkpoints"
    ]
    readers = [m["member"] for m in resources["google_artifact_registry_repository_iam_member"].values()]
    assert "serviceAccount:reader@example.iam.gserviceaccount.com" in readers
