"""GKE Workload Identity: bindings that wait for the pool, nodes that serve it, pods that can use it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from infra.rules import Finding, rule
from infra.rules.manifest_subject import ReleaseContext, _pods
from infra.rules.sources import DOCS, WI_DOC
from infra.rules.terraform_subject import _clusters


@rule(
    id="gke.wi.host-network-has-no-workload-identity",
    system="GKE Workload Identity",
    layer="pod-start",
    summary="Pods on the host network do not use Workload Identity: they act as the node's service account.",
    source=f"{DOCS}/concepts/workload-identity#limitations (Pods that run on the host network)",
    subject="manifest",
)
def _host_network(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    bound = ctx.workload_identities()
    for at, _meta, spec in _pods(objects):
        if spec.get("hostNetwork") and spec.get("serviceAccountName") in bound:
            yield Finding(
                f"{at}.spec.hostNetwork",
                True,
                f"service account {spec['serviceAccountName']!r} would not apply: the pod gets the node's identity",
            )


@rule(
    id="gke.wi.bindings-after-cluster",
    system="IAM / Workload Identity",
    layer="apply",
    summary="IAM bindings to <project>.svc.id.goog members depend on the cluster that creates the identity pool.",
    source=(
        f"{WI_DOC} (the pool exists once a cluster with Workload Identity does); error: 'Identity Pool does not "
        "exist' (terraform-google-modules/terraform-google-kubernetes-engine#916)"
    ),
    subject="terraform",
)
def _wi_after_cluster(stack: dict[str, Any]) -> Iterator[Finding]:
    cluster_ids = {f"google_container_cluster.{lid}" for lid, _, _ in _clusters(stack)}
    for rtype, body_map in (stack.get("resource") or {}).items():
        for logical_id, body in body_map.items():
            member = str(body.get("member", ""))
            if ".svc.id.goog" not in member:
                continue
            depends = set(body.get("depends_on") or [])
            if not depends & cluster_ids:
                yield Finding(
                    f"{rtype}.{logical_id}.depends_on",
                    sorted(depends),
                    f"member {member[:60]}... needs depends_on the cluster ({', '.join(sorted(cluster_ids))})",
                )


@rule(
    id="gke.wi.gke-metadata-needs-workload-pool",
    system="GKE",
    layer="apply",
    summary="Node pools with the GKE metadata server need Workload Identity enabled on the cluster.",
    source=f"{WI_DOC}#enable_on_cluster (workload_metadata_config GKE_METADATA requires a workload pool)",
    subject="terraform",
    types=("google_container_node_pool",),
)
def _gke_metadata(pools: list[tuple[str, dict[str, Any]]], stack: dict[str, Any]) -> Iterator[Finding]:
    pooled = any((c.get("workload_identity_config") or {}).get("workload_pool") for _, _, c in _clusters(stack))
    for where, pool in pools:
        mode = ((pool.get("node_config") or {}).get("workload_metadata_config") or {}).get("mode")
        if mode == "GKE_METADATA" and not pooled:
            yield Finding(
                f"{where}.node_config.workload_metadata_config.mode", mode, "the cluster has no workload pool"
            )
