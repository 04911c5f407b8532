"""The Kubernetes half of a synthesized stack applied to the local cluster, as the deploy applies it on GKE.

Every helm_release and kubernetes_* resource, in an order Terraform could apply them (manifests.kubernetes_half):
- a helm_release with Helm v3.18.4 (the library of the pinned helm provider 3.1.1, which cannot be built here:
  infra/engine/go/helm/go.mod), `helm upgrade --install` run in the stack's folder, as Terraform runs the
  provider, so its chart and post-renderer paths resolve as on a real deploy; every argument of the release
  translated, an unknown one refused. A chart from an OCI registry (the controllers') is the same chart from the
  controller's Go module at the version the local cluster runs (no registry is reachable here);
- a kubernetes_* resource as the object the kubernetes provider sends (manifests.manifest), applied server-side.
Before them, what GKE itself provides: the Ray operator add-on's CRDs, Gateway API, InferencePool and GKE's
networking CRDs (the pinned files, workloads/charts/crds.yaml), and stand-ins for GKE's Gateway policy CRDs
where their pinned files are not here (an open schema: the rule gke.inference-gateway-policies holds the objects).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infra.engine.build import build_all
from infra.localcluster.cluster import Cluster
from infra.localcluster.controllers import (
    KUBERAY,
    LOCAL_CONTROLLERS,
    Controllers,
    LocalController,
    chart_dir,
    module_dir,
)
from infra.localcluster.manifests import KUBERNETES_TYPES, kubernetes_half, manifest, resolve

GKE_CRD_SOURCES = ("kuberay", "gke-networking", "gateway-api", "inference-extension", "gke-gateway", "gmp")
# GKE's own kinds whose CRD files are not pinned here, each (group, version, plural), for a stand-in CRD with an
# open schema: the Gateway policies (networking.gke.io/v1; the rule gke.inference-gateway-policies holds the
# objects), Managed Prometheus's PodMonitoring and the cluster autoscaler's ProvisioningRequest
# (autoscaling.x-k8s.io/v1, which GKE serves for queued provisioning; Kueue's ProvisioningRequest admission check
# creates them, and nothing here fulfils them).
GKE_STAND_IN_KINDS = {
    "HealthCheckPolicy": ("networking.gke.io", "v1", "healthcheckpolicies"),
    "GCPBackendPolicy": ("networking.gke.io", "v1", "gcpbackendpolicies"),
    "ProvisioningRequest": ("autoscaling.x-k8s.io", "v1", "provisioningrequests"),
    # Managed Prometheus's PodMonitoring (GKE installs it with managed collection; the rule
    # monitoring.pod-monitoring-reaches-its-pods holds the objects).
    "PodMonitoring": ("monitoring.googleapis.com", "v1", "podmonitorings"),
    # GKE's custom ComputeClass, cluster-scoped (the rule gke.compute-class-tiers holds the objects).
    "ComputeClass": ("cloud.google.com", "v1", "computeclasses"),
}
CLUSTER_SCOPED_STAND_INS = {"ComputeClass"}
RELEASE_KEYS = {
    "//",
    "name",
    "chart",
    "namespace",
    "version",
    "repository",
    "values",
    "set",
    "postrender",
    "skip_crds",
    "create_namespace",
    "wait",
    "atomic",
    # `helm upgrade --install` is what the translation runs for every release already.
    "upgrade_install",
    "timeout",
    "depends_on",
    "lifecycle",
}


# What the helm provider takes for a release argument left unset (hashicorp/terraform-provider-helm v3.1.1
# helm/resource_helm_release.go defaultAttributes): the install, upgrade and uninstall all read them.
RELEASE_DEFAULTS = {"skip_crds": False, "create_namespace": False, "wait": True, "atomic": False, "timeout": 300}


def release_setting(body: dict[str, Any], key: str) -> Any:
    """A helm_release's argument, or the provider's default for it."""
    value = body.get(key)
    return RELEASE_DEFAULTS[key] if value is None else value


class ApplyError(RuntimeError):
    """A resource the real components refused: the release or resource, the object, and the component's words."""


@dataclass
class Applied:
    """What one apply did: each resource's address and how long it took, and the releases Helm deployed."""

    steps: list[tuple[str, float]] = field(default_factory=list)
    releases: list[str] = field(default_factory=list)


def helm_command(body: dict[str, Any], stack: dict[str, Any], values_dir: Path) -> list[str]:
    """`helm upgrade --install` with every argument of the helm_release `body` (paths as written)."""
    unknown = sorted(set(body) - RELEASE_KEYS)
    if unknown:
        raise ApplyError(f"helm_release {body.get('name')}: argument(s) {', '.join(unknown)} not translated")
    chart = str(body["chart"])
    if "repository" in body:
        controller = LOCAL_CONTROLLERS.get(chart)
        if controller is None:
            raise ApplyError(f"helm_release {body['name']}: chart {chart} from {body['repository']}: no local copy")
        chart = str(chart_dir(controller, str(body.get("version") or "")))
    command = ["upgrade", "--install", str(body["name"]), chart, "--namespace", str(body["namespace"])]
    for i, text in enumerate(body.get("values") or []):
        path = values_dir / f"{body['name']}-{i}.yaml"
        path.write_text(json.dumps(resolve(yaml.safe_load(text), stack)))
        command += ["--values", str(path)]
    for item in body.get("set") or []:
        command += ["--set-string" if item.get("type") == "string" else "--set", f"{item['name']}={item['value']}"]
    postrender = body.get("postrender")
    if postrender:
        command += ["--post-renderer", str(postrender["binary_path"])]
        command += [f"--post-renderer-args={arg}" for arg in postrender.get("args") or []]
    for flag in ("skip_crds", "create_namespace", "wait", "atomic"):
        if release_setting(body, flag):
            command.append("--" + flag.replace("_", "-"))
    command += ["--timeout", f"{int(release_setting(body, 'timeout'))}s"]
    return command


class LocalApply:
    """Applies one synthesized stack (in `stack_dir`) to the local cluster `cluster`."""

    def __init__(self, cluster: Cluster, stack_dir: Path) -> None:
        self.cluster = cluster
        self.stack_dir = stack_dir
        self.stack: dict[str, Any] = json.loads((stack_dir / "cdk.tf.json").read_text())
        self.controllers = Controllers(cluster)

    def helm_run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_helm(self.cluster, args, self.stack_dir)

    def gke_crds(self) -> list[str]:
        """Apply the CRDs GKE itself installs (see the module doc); their names."""
        from workloads.charts import crds

        files = yaml.safe_load(crds.PINS.read_text())["files"]
        folder = crds.locate()
        documents = []
        for name, pin in sorted(files.items()):
            if pin["source"] in GKE_CRD_SOURCES and (folder / name).is_file():
                documents.append(yaml.safe_load((folder / name).read_text()))
        # The add-on's RayService CRD is not pinned: the operator's own, from its Go module (KubeRay waits for
        # every kind it reconciles, RayService among them).
        services = module_dir(KUBERAY) / "config" / "crd" / "bases" / "ray.io_rayservices.yaml"
        documents.append(yaml.safe_load(services.read_text()))
        have = {d["spec"]["names"]["kind"] for d in documents}
        for kind, (group, version, plural) in GKE_STAND_IN_KINDS.items():
            if kind not in have:
                documents.append(_open_crd(group, version, kind, plural, cluster=kind in CLUSTER_SCOPED_STAND_INS))
        text = json.dumps({"apiVersion": "v1", "kind": "List", "items": documents})
        self.cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=text)
        self.wait_established({d["metadata"]["name"] for d in documents})
        return sorted(d["metadata"]["name"] for d in documents)

    def wait_established(self, names: set[str], timeout: float = 300) -> None:
        """Until the API server serves every CRD of `names` (condition Established)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            established = {
                crd["metadata"]["name"]
                for crd in self.cluster.get("crds")["items"]
                for c in crd.get("status", {}).get("conditions") or []
                if c["type"] == "Established" and c["status"] == "True"
            }
            if names <= established:
                return
            time.sleep(0.3)
        raise ApplyError(f"CRDs not established after {timeout:.0f} s: {', '.join(sorted(names))}")

    def run(self, log: Any = sys.stderr) -> Applied:
        applied = Applied()
        crd_names = self.gke_crds()
        print(f"deploy-local: GKE's own CRDs applied: {len(crd_names)}", file=log)
        self.controllers.start_kuberay(self.cluster.logs)
        # A cluster applied to before: its controllers run again before anything (their webhooks answer for
        # every later object, an upgrade's included).
        listed = json.loads(self.helm_run("list", "-A", "-o", "json").stdout or "[]")
        installed = {r["name"]: r.get("app_version") for r in listed}  # a controller's chart: its version
        if not installed:
            self.cluster.record_baseline()  # what a destroy compares with (infra/localcluster/destroy.py)
        for name in sorted(set(installed) & set(LOCAL_CONTROLLERS)):
            self.controllers.start(name, self.cluster.logs, installed[name])
        values = self.cluster.folder / "values"
        shutil.rmtree(values, ignore_errors=True)
        values.mkdir(parents=True)
        for address, body in kubernetes_half(self.stack):
            started = time.monotonic()
            rtype = address.split(".", 1)[0]
            if rtype in KUBERNETES_TYPES:
                obj = manifest(address, body, self.stack)
                done = self.cluster.kubectl(
                    "apply",
                    "--server-side",
                    "--field-manager=platform-deploy-local",
                    "-f",
                    "-",
                    input=json.dumps(obj),
                    check=False,
                )
                if done.returncode:
                    raise ApplyError(f"{address} ({obj['kind']} {obj['metadata']['name']}): {done.stderr.strip()}")
            else:
                name = str(body["name"])
                command = helm_command(body, self.stack, values)
                controller = LOCAL_CONTROLLERS.get(name) if body.get("repository") else None
                if controller is not None:
                    _stage_crds(
                        controller, str(body["chart"]), str(body.get("version", "")), self.cluster.controller_crds
                    )
                    self.controllers.restore_webhooks(controller.namespace)
                done = self.helm_run(*command)
                if done.returncode:
                    raise ApplyError(f"{address} (release {name}): helm: {done.stderr.strip()[-3000:]}")
                applied.releases.append(name)
                if name in LOCAL_CONTROLLERS and body.get("repository"):
                    self.controllers.start(name, self.cluster.logs, str(body.get("version") or ""))
            seconds = time.monotonic() - started
            applied.steps.append((address, seconds))
            print(f"deploy-local: {address}: applied ({seconds:.1f} s)", file=log, flush=True)
        return applied


def _stage_crds(controller: LocalController, name: str, version: str, folder: Path) -> None:
    """The crds/ files the post-renderer adds to a controller release (infra/delivery/crd_postrender.py), taken from the
    controller's Go module where they are at the same path: the post-renderer checks each one's pinned sha256, so
    a file of another version is refused, not applied. Its folder is what PLATFORM_CONTROLLER_CRDS names."""
    from infra.catalogue.controller_crds import crd_set

    crds = crd_set(name, version)
    if crds is None:
        return
    target = folder / crds.directory
    target.mkdir(parents=True, exist_ok=True)
    source = module_dir(controller, version)
    for crd in crds.injected:
        if (source / crd.path).is_file():
            shutil.copyfile(source / crd.path, target / crd.file_name)


def run_helm(cluster: Cluster, args: Any, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Helm v3.18.4 on the local cluster, run in `cwd` (a stack's folder: its relative paths resolve as the
    provider's do), with its own cache and configuration under the cluster's folder."""
    home = cluster.folder / "helm"
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        "HELM_DRIVER": "configmap",  # the provider's helm_driver (infra/constructs/providers.py)
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
        "PLATFORM_CONTROLLER_CRDS": str(cluster.controller_crds),
    }
    helm = build_all(["helm"])["helm"]
    return subprocess.run([str(helm), *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)


def _open_crd(group: str, version: str, kind: str, plural: str, *, cluster: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}", "labels": {"platform.local/stand-in": "true"}},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "scope": "Cluster" if cluster else "Namespaced",
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }
