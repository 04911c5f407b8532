"""What a destroy of the local cluster left behind.

`make destroy-local` is `tofu destroy` of the state deploy-local's apply left (infra/localcluster/apply.py): the
helm provider uninstalls each release, the kubernetes provider deletes each object and waits until it is gone, each
before what it depends on, as `make destroy` does on GKE. What is left is every object of the cluster after the
destroy that was not there before the stack's first apply on this cluster (the baseline deploy-local records), but
Events, Leases and Nodes (the cluster's own). Two kinds are left by design and listed as such: what the controllers'
post-renderer marks `helm.sh/resource-policy: keep` (their CRDs and aggregated ClusterRoles;
infra/delivery/crd_postrender.py says why) and a namespace a release's `create_namespace` made (Helm never deletes
one) with what the control plane puts in every namespace. Anything else is left behind.
"""

from __future__ import annotations

import json
from typing import Any

from infra.catalogue.controller_crds import KEEP_ANNOTATION
from infra.localcluster.cluster import Cluster

# What the control plane creates in every namespace (the service account controller, the root CA publisher).
EVERY_NAMESPACE = {"ServiceAccount/default", "ConfigMap/kube-root-ca.crt"}
# kube-apiserver registers an APIService of its own for each group and version a CRD serves, so labelled
# (k8s.io/kube-aggregator v0.35.4 pkg/controllers/autoregister/autoregister_controller.go AutoRegisterManagedLabel).
AUTOMANAGED = "kube-aggregator.kubernetes.io/automanaged"


def left_behind(cluster: Cluster, stack: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(left by design, left behind): each object there now that was not before the stack's first apply."""
    path = cluster.baseline
    if not path.is_file():
        return [], [f"no baseline ({path}): the cluster was not started by deploy-local; nothing can be compared"]
    before = set(json.loads(path.read_text()))
    created = {
        str(b["namespace"])
        for b in (stack.get("resource") or {}).get("helm_release", {}).values()
        if b.get("create_namespace")
    }
    kept, left = [], []
    for key, metadata in sorted(cluster.inventory().items()):
        if key in before:
            continue
        kind, _, where = key.partition(" ")
        namespace, _, name = where.partition("/")
        if _kept(metadata):
            kept.append(f"{key}: marked {KEEP_ANNOTATION[0]}: {KEEP_ANNOTATION[1]} (infra/delivery/crd_postrender.py)")
        elif kind == "Namespace" and name in created:
            kept.append(f"{key}: a release's create_namespace made it (Helm never deletes such a namespace)")
        elif namespace in created and f"{kind}/{name}" in EVERY_NAMESPACE:
            continue  # the control plane's, in a namespace kept above
        elif (metadata.get("labels") or {}).get(AUTOMANAGED):
            continue  # the API server's, for as long as a CRD (kept above) serves its group and version
        else:
            left.append(key)
    return kept, left


def _kept(metadata: dict[str, Any]) -> bool:
    return bool((metadata.get("annotations") or {}).get(KEEP_ANNOTATION[0]) == KEEP_ANNOTATION[1])
