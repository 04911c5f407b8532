"""The Kubernetes half of a synthesized stack applied to the local cluster by the real engine: OpenTofu with the
kubernetes and helm providers the stacks pin (infra/engine), built from their sources, with Terraform's own graph,
parallelism (10) and state, as `make deploy` applies it on GKE.

What OpenTofu is given is the stack's own configuration with the Google half taken out (`configuration`):
- every helm_release and kubernetes_* resource as synthesized; a value that reads the Google half holds what that
  apply would give it, from the synth (a service account's email is `<account_id>@<project>.iam.gserviceaccount.com`;
  any other reference is refused by name), and a depends_on on the Google half is dropped (nothing of it is here);
- the providers pointed at the local cluster's kubeconfig in place of GKE's endpoint and credentials plugin;
- a controller's chart from an OCI registry taken from the controller's Go module at the version the local cluster
  runs (no registry is reachable here: `registry_charts`), and the local charts and post-renderer at absolute paths.
The workspace and its state live in the cluster's folder (`engine/<stack>`): a rerun is the real plan and apply of
the change, a destroy is `tofu destroy` of that state.

Before the apply, what GKE itself provides: the Ray operator add-on's CRDs, Gateway API, InferencePool and GKE's
networking CRDs (the pinned files, infra/charts/crds.yaml), and stand-ins for GKE's Gateway policy CRDs
where their pinned files are not here (an open schema: the rule gke.inference-gateway-policies holds the objects).
During it, the supervisor (infra/localcluster/controllers.py) does for the controllers' pods what their kubelet and
container would.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from infra.cdk.layout import STACK_FILE
from infra.engine.build import build_all
from infra.engine.tofu import STATE_FILE, Workspace, tofu
from infra.localcluster.cluster import Cluster
from infra.localcluster.controllers import (
    KUBERAY,
    LOCAL_CONTROLLERS,
    ApplyError,
    Controllers,
    LocalController,
    Supervisor,
    chart_dir,
    module_dir,
)

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
# The providers of the Kubernetes half (the stacks' required_providers names).
KUBERNETES_PROVIDERS = ("kubernetes", "helm")
_REFERENCE = re.compile(r"\$\{([a-z0-9_]+)\.([A-Za-z0-9_-]+)\.([a-z0-9_]+)\}")
# libyaml's loader where PyYAML has it: GKE's CRD files are 3 MB (2.7 s in the pure-Python loader, 0.3 here).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# The cluster's record of GKE's CRDs as the last deploy applied them: the documents' digest, each CRD's generation.
CRDS_APPLIED = "gke-crds-applied.json"
_SUMMARY = re.compile(r"^(Apply|Destroy) complete! Resources: .*$", re.M)


class UnsupportedResource(ValueError):
    """A value of the Kubernetes half that reads something of the Google half the synth cannot know: named."""


def resolve(value: Any, stack: dict[str, Any]) -> Any:
    """`value` with each reference to the Google half replaced by what its apply would give: a service account's
    email is `<account_id>@<project>.iam.gserviceaccount.com`. A reference within the Kubernetes half is kept (the
    engine resolves it); any other is refused by name."""
    if isinstance(value, dict):
        return {k: resolve(v, stack) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, stack) for v in value]
    if not isinstance(value, str) or "${" not in value:
        return value

    def one(match: re.Match[str]) -> str:
        rtype, name, attribute = match.groups()
        if in_kubernetes_half(rtype):
            return match.group(0)
        body = (stack.get("resource") or {}).get(rtype, {}).get(name)
        if rtype == "google_service_account" and attribute == "email" and body is not None:
            return f"{body['account_id']}@{body['project']}.iam.gserviceaccount.com"
        raise UnsupportedResource(f"the reference ${{{rtype}.{name}.{attribute}}} is not known offline")

    return _REFERENCE.sub(one, value)


def in_kubernetes_half(rtype: str) -> bool:
    return rtype == "helm_release" or rtype.startswith("kubernetes_")


def configuration(stack: dict[str, Any], stack_dir: Path, kubeconfig: Path) -> dict[str, Any]:
    """The stack's Kubernetes half as OpenTofu's configuration for the local cluster (the module doc says what
    differs from the stack, and why)."""
    resources: dict[str, dict[str, Any]] = {}
    for rtype, items in (stack.get("resource") or {}).items():
        if not in_kubernetes_half(rtype):
            continue
        for key, body in items.items():
            body = resolve(body, stack)
            depends = [d for d in body.get("depends_on") or [] if in_kubernetes_half(d.split(".", 1)[0])]
            body = {k: v for k, v in body.items() if k != "depends_on"} | ({"depends_on": depends} if depends else {})
            if rtype == "helm_release":
                body = _absolute_paths(body, stack_dir)
            resources.setdefault(rtype, {})[key] = body
    required = stack.get("terraform", {}).get("required_providers") or {}
    helm = [
        {k: v for k, v in p.items() if k != "kubernetes"} for p in (stack.get("provider") or {}).get("helm") or [{}]
    ]
    return {
        "terraform": {"required_providers": {k: v for k, v in required.items() if k in KUBERNETES_PROVIDERS}},
        "provider": {
            "kubernetes": [{"config_path": str(kubeconfig)}],
            "helm": [{**p, "kubernetes": {"config_path": str(kubeconfig)}} for p in helm],
        },
        "resource": resources,
    }


def _absolute_paths(body: dict[str, Any], stack_dir: Path) -> dict[str, Any]:
    """A release's local chart and post-renderer at the paths Terraform would open from the stack's folder."""
    body = dict(body)
    if "repository" not in body:
        body["chart"] = str((stack_dir / str(body["chart"])).resolve())
    if body.get("postrender"):
        postrender = dict(body["postrender"])
        postrender["binary_path"] = str((stack_dir / str(postrender["binary_path"])).resolve())
        body["postrender"] = postrender
    return body


def registry_charts(stack: dict[str, Any], folder: Path) -> dict[str, Any]:
    """An override of each controller release whose chart comes from an OCI registry: the same chart from the
    controller's Go module (the one the local cluster runs), copied into
    `folder` and packaged as the controller's release packages it for the registry: Chart.yaml's version and
    appVersion the release's, and every image of values.yaml at the release's tag, pulled IfNotPresent (a module's
    chart carries placeholders: `tag: main`, which the helm provider would install as is; kubernetes-sigs/kueue
    hack/helm-chart-package.sh @ v0.19.2, jobset hack/helm-chart-package.sh @ v0.12.0, lws hack/push-chart.sh @
    v0.7.0). The helm provider reads a release's chart at plan time, and no chart registry is reachable here;
    nothing else of the release changes."""
    releases = {}
    for key, body in ((stack.get("resource") or {}).get("helm_release") or {}).items():
        controller = LOCAL_CONTROLLERS.get(str(body.get("chart")))
        if controller is None or not str(body.get("repository", "")).startswith("oci://"):
            continue
        version = str(body.get("version") or "")
        copy = folder / "registry-charts" / f"{body['chart']}-{version}"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(chart_dir(controller, version), copy)
        meta = yaml.safe_load((copy / "Chart.yaml").read_text())
        meta["version"], meta["appVersion"] = version, f"v{version}"
        (copy / "Chart.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
        values = yaml.safe_load((copy / "values.yaml").read_text())
        (copy / "values.yaml").write_text(yaml.safe_dump(_released_images(values, f"v{version}"), sort_keys=False))
        releases[key] = {"chart": str(copy), "repository": None}
    return {"resource": {"helm_release": releases}} if releases else {}


def as_registry_planned(planned: dict[str, Any], before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """`planned` (a plan made with `registry_charts`) as the registry's charts would have been planned: each such
    release's chart and repository, before and after, the stacks' own (`before`, `after`). The copies' folders are
    named after the version, so without this a controller's bump reads to the gate as its chart swapped for another
    (every object the old chart made deleted) rather than as the controller's version moving."""
    for entry in planned.get("resource_changes") or []:
        if entry.get("type") != "helm_release":
            continue
        for side, stack in (("before", before), ("after", after)):
            values = (entry.get("change") or {}).get(side)
            body = ((stack.get("resource") or {}).get("helm_release") or {}).get(entry.get("name"))
            if values and body and str(body.get("repository", "")).startswith("oci://"):
                values["chart"], values["repository"] = body["chart"], body["repository"]
    return planned


def _released_images(values: Any, tag: str) -> Any:
    """`values` with every image (a mapping with a repository and a tag) at `tag`, pulled IfNotPresent."""
    if isinstance(values, list):
        return [_released_images(v, tag) for v in values]
    if not isinstance(values, dict):
        return values
    out = {k: _released_images(v, tag) for k, v in values.items()}
    if "repository" in out and "tag" in out:
        out["tag"], out["pullPolicy"] = tag, "IfNotPresent"
    return out


class LocalApply:
    """OpenTofu applying (or destroying) one stack's Kubernetes half on `cluster`: its workspace and state in the
    cluster's folder (`engine/<stack>`). What OpenTofu prints goes to `log` (None: the standard error of the call)."""

    def __init__(self, cluster: Cluster, stack_name: str) -> None:
        self.cluster = cluster
        self.controllers = Controllers(cluster)
        self.folder = cluster.folder / "engine" / stack_name
        self.crds_sent = False  # whether the last gke_crds() sent them

    def gke_crds(self) -> list[str]:
        """Apply the CRDs GKE itself installs (see the module doc); their names. Not sent again where the last apply
        of the same documents left every one of them established at the generation it recorded (`CRDS_APPLIED` in
        the cluster's folder): a redeploy skips 3 MB of server-side apply. A CRD deleted or edited since (its
        generation moved) is applied again with all the others."""
        from infra.charts import crds

        files = yaml.safe_load(crds.PINS.read_text())["files"]
        folder = crds.locate()
        documents = []
        for name, pin in sorted(files.items()):
            if pin["source"] in GKE_CRD_SOURCES and (folder / name).is_file():
                documents.append(yaml.load((folder / name).read_text(), Loader=_LOADER))
        # The add-on's RayService CRD is not pinned: the operator's own, from its Go module (KubeRay waits for
        # every kind it reconciles, RayService among them).
        services = module_dir(KUBERAY) / "config" / "crd" / "bases" / "ray.io_rayservices.yaml"
        documents.append(yaml.load(services.read_text(), Loader=_LOADER))
        have = {d["spec"]["names"]["kind"] for d in documents}
        for kind, (group, version, plural) in GKE_STAND_IN_KINDS.items():
            if kind not in have:
                documents.append(_open_crd(group, version, kind, plural, cluster=kind in CLUSTER_SCOPED_STAND_INS))
        text = json.dumps({"apiVersion": "v1", "kind": "List", "items": documents})
        names = sorted(d["metadata"]["name"] for d in documents)
        digest = hashlib.sha256(text.encode()).hexdigest()
        stamp = self.cluster.folder / CRDS_APPLIED
        recorded = json.loads(stamp.read_text()) if stamp.is_file() else {}
        self.crds_sent = False
        if recorded.get("digest") == digest and recorded.get("generations") == self.established(names):
            return names
        self.crds_sent = True
        stamp.unlink(missing_ok=True)
        self.cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=text)
        deadline = time.monotonic() + 300
        while (generations := self.established(names)) is None:
            if time.monotonic() > deadline:
                raise ApplyError(f"CRDs not established after 300 s: {', '.join(names)}")
            time.sleep(0.3)
        stamp.write_text(json.dumps({"digest": digest, "generations": generations}))
        return names

    def established(self, names: list[str]) -> dict[str, int] | None:
        """Each CRD of `names` -> its generation, where the API server serves every one (condition Established);
        None while one is missing or not yet served."""
        listed = self.cluster.read("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")["items"]
        served = {
            crd["metadata"]["name"]: int(crd["metadata"]["generation"])
            for crd in listed
            if any(
                c["type"] == "Established" and c["status"] == "True"
                for c in (crd.get("status") or {}).get("conditions") or []
            )
        }
        if not set(names) <= served.keys():
            return None
        return {name: served[name] for name in names}

    def configuration(self) -> dict[str, Any]:
        """The configuration the last apply gave OpenTofu (what its state was applied from)."""
        loaded: dict[str, Any] = json.loads((self.folder / STACK_FILE).read_text())
        return loaded

    def applied(self) -> bool:
        """Whether the state holds anything (a first apply has not yet run, or a destroy took everything)."""
        state = self.folder / STATE_FILE
        return state.is_file() and bool(json.loads(state.read_text() or "{}").get("resources"))

    def run(self, stack_dir: Path, log: Any = None) -> str:
        """`tofu apply` of the stack synthesized in `stack_dir` (the state's resources the stack no longer has
        destroyed, as Terraform does); OpenTofu's own summary line."""
        log = log or sys.stderr
        stack = json.loads((stack_dir / STACK_FILE).read_text())
        config = configuration(stack, stack_dir, self.cluster.kubeconfig)
        crd_names = self.gke_crds()
        said = "applied" if self.crds_sent else "as the last apply left them (not sent)"
        print(f"deploy-local: GKE's own CRDs ({len(crd_names)}): {said}", file=log)
        self.controllers.start_kuberay()
        if not self.applied():
            self.cluster.record_baseline()  # what a destroy compares with (infra/localcluster/destroy.py)
        for body in ((stack.get("resource") or {}).get("helm_release") or {}).values():
            controller = LOCAL_CONTROLLERS.get(str(body.get("chart"))) if body.get("repository") else None
            if controller is not None:
                _stage_crds(controller, str(body["chart"]), str(body.get("version", "")), self.cluster.controller_crds)
        for line in recover_interrupted(self.cluster, config):
            print(f"deploy-local: {line}", file=log)
        workspace = Workspace(self.folder, config, overrides=registry_charts(config, self.folder))
        return self.engine(workspace, "apply", log)

    def destroy(self, log: Any = None) -> str:
        """`tofu destroy` of the state, with the configuration it was applied from; OpenTofu's own summary line."""
        log = log or sys.stderr
        overrides = json.loads((self.folder / Workspace.OVERRIDE).read_text())
        overrides.pop("terraform", None)  # the backend, which Workspace writes again
        summary = self.engine(Workspace(self.folder, self.configuration(), overrides=overrides), "destroy", log)
        for name in LOCAL_CONTROLLERS:  # their releases are gone; their pods go after the apply returns
            self.controllers.stop(name)
        return summary

    def plan(self) -> dict[str, Any]:
        """OpenTofu's plan of the configuration the last apply gave it against what the cluster holds now (its refresh
        of the state), as `tofu show -json` writes it: `resource_drift` is what changed outside OpenTofu,
        `resource_changes` what the next apply would do about it. Nothing is changed."""
        overrides = json.loads((self.folder / Workspace.OVERRIDE).read_text())
        overrides.pop("terraform", None)  # the backend, which Workspace writes again
        workspace = Workspace(self.folder, self.configuration(), overrides=overrides)
        workspace.init()
        extra = helm_env(self.cluster)
        workspace.run("plan", "-lock=false", "-no-color", "-input=false", "-out=drift.bin", extra_env=extra)
        shown = workspace.run("show", "-json", "drift.bin", extra_env=extra)
        (workspace.folder / "drift.bin").unlink(missing_ok=True)
        planned: dict[str, Any] = json.loads(shown.stdout)
        return planned

    def engine(self, workspace: Workspace, action: str, log: Any) -> str:
        """`tofu <action>` in `workspace`, its output streamed to `log`, while the supervisor runs the controllers;
        OpenTofu's summary line, or ApplyError with OpenTofu's errors."""
        workspace.init()
        env = {**workspace.env(), **helm_env(self.cluster)}
        process = subprocess.Popen(
            [str(tofu()), action, "-auto-approve", "-no-color", "-input=false"],
            cwd=workspace.folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip

        def stop(err: Exception) -> None:
            # Said now: OpenTofu stops once what it started ends, and a release it waits on keeps it up to the
            # release's timeout (a controller that never serves: minutes with no word of why).
            print(f"error: the local controllers: {err}; stopping OpenTofu", file=log, flush=True)
            process.terminate()

        supervisor = Supervisor(self.cluster, on_error=stop)
        supervisor.start()
        try:
            assert process.stdout is not None
            lines = []
            for line in process.stdout:
                lines.append(line)
                print(line, end="", file=log, flush=True)
            process.wait()
        finally:
            supervisor.stop()
        text = "".join(lines)
        found = _SUMMARY.search(text)
        if process.returncode or found is None:
            errors = text[text.find("Error:") :] if "Error:" in text else text[-3000:]
            raise ApplyError(
                f"tofu {action} in {workspace.folder} (exit {process.returncode}):\n{errors.strip()[-4000:]}"
            )
        return found.group(0)


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


def recover_interrupted(cluster: Cluster, config: dict[str, Any]) -> list[str]:
    """Each release of `config` an interrupted apply left pending (infra/review/upgrades.py `interrupted_record`),
    set back as the local cluster's recovery: the pending record removed. What was done, a line each."""
    from infra.catalogue.helm_records import interrupted_record

    done = []
    for body in ((config.get("resource") or {}).get("helm_release") or {}).values():
        name, namespace = str(body["name"]), str(body["namespace"])
        selector = f"owner=helm,name={name}"
        pending = interrupted_record(cluster.get("configmaps", "-n", namespace, "-l", selector))
        if pending is not None:
            record, status = pending
            cluster.kubectl("delete", "configmap", record, "-n", namespace)
            done.append(
                f"release {namespace}/{name} was left {status} by an interrupted apply: its record {record} "
                "removed, so this apply installs or upgrades it again"
            )
    return done


def helm_env(cluster: Cluster) -> dict[str, str]:
    """Helm's cache and configuration under the cluster's folder, its releases' records in ConfigMaps (the
    provider's helm_driver, infra/constructs/providers.py), and where the controllers' post-renderer finds their
    pinned crds/ files."""
    home = cluster.folder / "helm"
    return {
        "KUBECONFIG": str(cluster.kubeconfig),
        "HELM_DRIVER": "configmap",
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
        "PLATFORM_CONTROLLER_CRDS": str(cluster.controller_crds),
    }


def run_helm(cluster: Cluster, args: Any, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Helm on the local cluster, run in `cwd`, with the provider's settings (helm_env): the tests' and the
    verdicts' reads of Helm's records."""
    helm = build_all(["helm"])["helm"]
    env = {**os.environ, **helm_env(cluster)}
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
