"""The Kubernetes half of an applied stack destroyed on the local cluster, as `make destroy` destroys it on GKE, and
what the destroy left behind.

Each resource of the stack deploy-local applied last (the cluster's record of it, Cluster.applied: the state), in
the order
manifests.destroy_order gives (each before what it depends on; among the orders Terraform could take, the one
that takes the controllers first), as the providers delete:
- a helm_release: `helm uninstall` with the release's `wait` (the provider's default: true) and `timeout`, as
  hashicorp/terraform-provider-helm v3.1.1 helm/resource_helm_release.go Delete runs Helm's uninstall action; a
  release already gone is skipped, as the provider's exists check does. A controller's process stops with its
  release (its pods would);
- a kubernetes_* resource: deleted, and waited for until it is gone, for the resource's delete timeout (the
  kubernetes provider's default, 5 minutes; resource_kubernetes_namespace_v1.go Delete waits while the namespace
  is Terminating). A namespace that does not go is refused with the namespace controller's own conditions (which
  finalizers remain, on how many objects).

What is left: every object of the cluster after the destroy that was not there before the stack's first apply on
this cluster (the baseline deploy-local records), but Events, Leases and Nodes (the cluster's own). Two kinds are
left by design and listed as such: what the controllers' post-renderer marks `helm.sh/resource-policy: keep`
(their CRDs and aggregated ClusterRoles; infra/delivery/crd_postrender.py says why) and a namespace a release's
`create_namespace` made (Helm never deletes one) with what the control plane puts in every namespace. Anything
else is left behind.
"""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from infra.catalogue.controller_crds import KEEP_ANNOTATION
from infra.localcluster.apply import ApplyError, release_setting, run_helm
from infra.localcluster.cluster import Cluster
from infra.localcluster.controllers import LOCAL_CONTROLLERS, Controllers
from infra.localcluster.manifests import destroy_order, manifest

# The kubernetes provider's delete timeout when a resource sets none (its resources' schema.ResourceTimeout).
DEFAULT_DELETE_TIMEOUT_S = 300
# What the control plane creates in every namespace (the service account controller, the root CA publisher).
EVERY_NAMESPACE = {"ServiceAccount/default", "ConfigMap/kube-root-ca.crt"}
# kube-apiserver registers an APIService of its own for each group and version a CRD serves, so labelled
# (k8s.io/kube-aggregator v0.35.4 pkg/controllers/autoregister/autoregister_controller.go AutoRegisterManagedLabel).
AUTOMANAGED = "kube-aggregator.kubernetes.io/automanaged"
_DURATION = re.compile(r"(\d+)([hms])")


@dataclass
class Destroyed:
    """What one destroy did: each resource's address and seconds, what it left by design and what it left behind."""

    steps: list[tuple[str, float]] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)


def _seconds(duration: str | None, default: int) -> int:
    """A Terraform timeout ("5m", "1h30m", "90s") in seconds."""
    parts = _DURATION.findall(duration or "")
    return sum(int(n) * {"h": 3600, "m": 60, "s": 1}[unit] for n, unit in parts) if parts else default


def identity(address: str, body: dict[str, Any], stack: dict[str, Any]) -> str:
    """What a resource is in the cluster, whatever its address in the stack: a release's namespace and name, an
    object's kind, namespace and name."""
    if address.startswith("helm_release."):
        return f"release {body['namespace']}/{body['name']}"
    obj = manifest(address, body, stack)
    return f"{obj['kind']} {obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


def gone(applied: dict[str, Any], stack: dict[str, Any]) -> set[str]:
    """The addresses of `applied` (the stack applied last) whose release or object `stack` no longer has: what
    Terraform destroys at the next apply."""
    wanted = {identity(a, b, stack) for a, b in destroy_order(stack)}
    return {a for a, b in destroy_order(applied) if identity(a, b, applied) not in wanted}


class LocalDestroy:
    """Destroys the Kubernetes half of `stack` (what deploy-local applied: the cluster's record of it) on
    `cluster`, or only some of its resources."""

    def __init__(self, cluster: Cluster, stack: dict[str, Any]) -> None:
        self.cluster = cluster
        self.stack = stack
        self.controllers = Controllers(cluster)

    def run(self, log: Any = sys.stderr, only: set[str] | None = None) -> Destroyed:
        """Destroy every resource (or those of `only`, with nothing compared after) and list what is left."""
        destroyed = Destroyed()
        listed = run_helm(self.cluster, ["list", "-A", "-o", "json"], self.cluster.folder).stdout or "[]"
        installed = {(r["name"], r["namespace"]) for r in json.loads(listed)}
        for address, body in destroy_order(self.stack):
            if only is not None and address not in only:
                continue
            started = time.monotonic()
            if address.startswith("helm_release."):
                if (body["name"], body["namespace"]) not in installed:
                    print(f"destroy-local: {address}: not installed, skipped", file=log)
                    continue
                self._uninstall(address, body)
            else:
                self._delete(address, manifest(address, body, self.stack), body)
            seconds = time.monotonic() - started
            destroyed.steps.append((address, seconds))
            print(f"destroy-local: {address}: destroyed ({seconds:.1f} s)", file=log, flush=True)
        if only is None:
            destroyed.kept, destroyed.left = self.left_behind()
        return destroyed

    def _uninstall(self, address: str, body: dict[str, Any]) -> None:
        name = str(body["name"])
        command = ["uninstall", name, "--namespace", str(body["namespace"])]
        command += ["--timeout", f"{int(release_setting(body, 'timeout'))}s"]
        if release_setting(body, "wait"):
            command.append("--wait")
        done = run_helm(self.cluster, command, self.cluster.folder)
        if done.returncode:
            raise ApplyError(f"{address} (release {name}): helm uninstall: {done.stderr.strip()[-3000:]}")
        if name in LOCAL_CONTROLLERS and body.get("repository"):
            self.controllers.stop(name)

    def _delete(self, address: str, obj: dict[str, Any], body: dict[str, Any]) -> None:
        kind, metadata = obj["kind"], obj["metadata"]
        timeout = _seconds((body.get("timeouts") or {}).get("delete"), DEFAULT_DELETE_TIMEOUT_S)
        where = ["--namespace", metadata["namespace"]] if metadata.get("namespace") else []
        done = self.cluster.kubectl(
            "delete", kind, metadata["name"], *where, "--ignore-not-found", "--wait", f"--timeout={timeout}s",
            check=False,
        )  # fmt: skip
        if done.returncode == 0:
            return
        why = done.stderr.strip()
        if kind == "Namespace":
            found = self.cluster.kubectl("get", "namespace", metadata["name"], "-o", "json", check=False)
            if found.returncode == 0:
                conditions = json.loads(found.stdout).get("status", {}).get("conditions") or []
                why = "; ".join(f"{c['type']}: {c['message']}" for c in conditions if c.get("status") == "True") or why
        raise ApplyError(f"{address} ({kind} {metadata['name']}): not deleted in {timeout} s: {why}")

    def left_behind(self) -> tuple[list[str], list[str]]:
        """(left by design, left behind): each object there now that was not before the stack's first apply."""
        path = self.cluster.baseline
        if not path.is_file():
            return [], [f"no baseline ({path}): the cluster was not started by deploy-local; nothing can be compared"]
        before = set(json.loads(path.read_text()))
        created = {
            str(b["namespace"])
            for b in (self.stack.get("resource") or {}).get("helm_release", {}).values()
            if b.get("create_namespace")
        }
        kept, left = [], []
        for key, metadata in sorted(self.cluster.inventory().items()):
            if key in before:
                continue
            kind, _, where = key.partition(" ")
            namespace, _, name = where.partition("/")
            if _kept(metadata):
                kept.append(
                    f"{key}: marked {KEEP_ANNOTATION[0]}: {KEEP_ANNOTATION[1]} (infra/delivery/crd_postrender.py)"
                )
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
