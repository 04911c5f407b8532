"""The controllers of the local cluster, run as processes on this machine beside its control plane.

A controller release installs its chart as on GKE (the Deployment's pods are KWOK's, so nothing runs in them);
the controller itself runs here, built from its Go module (infra/engine/go/<name>) and started with the
chart's own Configuration (its ConfigMap, as installed) with only what running outside the cluster needs changed:
its webhook server on 127.0.0.1 with a certificate of the cluster's CA instead of its in-cluster certificate
rotation, no leader election, no metrics listener. The chart's webhook configurations (and a CRD's conversion
webhook) name the controller's Service; here they are pointed at that server by URL, with the CA's bundle.

KubeRay stands in for GKE's Ray operator add-on (GKE does not publish which KubeRay it runs); it runs without
webhooks, as the add-on's CRDs declare none.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infra.engine.build import build_all
from infra.localcluster import certs
from infra.localcluster.cluster import Cluster, alive, free_port, start_detached


@dataclass(frozen=True)
class LocalController:
    component: str  # infra/engine/go/<component>
    program: str  # the program it builds
    module: str  # the Go module whose chart the release installs
    chart: str  # the chart's folder in that module
    namespace: str
    metrics_certs: str = ""  # a fixed path the controller reads its metrics certificate from, if any
    # Features off here, each for a server that must be reached through an in-cluster Service (an aggregated
    # API): nothing in this cluster routes a Service to a process on this machine.
    feature_gates: dict[str, bool] = field(default_factory=dict)


LOCAL_CONTROLLERS = {
    "jobset": LocalController("jobset", "jobset", "sigs.k8s.io/jobset", "charts/jobset", "jobset-system"),
    # sigs.k8s.io/kueue v0.17.0 cmd/kueue/main.go: metricsCertPath := "/etc/kueue/metrics/certs".
    "kueue": LocalController(
        "kueue",
        "kueue",
        "sigs.k8s.io/kueue",
        "charts/kueue",
        "kueue-system",
        "/etc/kueue/metrics/certs",
        # Its visibility API (pending workloads, an APIService of the chart): served from /visibility certificates
        # behind the chart's Service. The workloads' own status says the same here.
        {"VisibilityOnDemand": False},
    ),
    "lws": LocalController("lws", "cmd", "sigs.k8s.io/lws", "charts/lws", "lws-system"),
}
KUBERAY = LocalController("kuberay", "ray-operator", "github.com/ray-project/kuberay/ray-operator", "", "")


def component_of(controller: LocalController, version: str | None = None) -> str:
    """The folder of infra/engine/go that builds `controller` at chart `version`: the one whose go.mod
    requires the controller's module at v<version> (`<component>-<version>` beside the pinned one, for a bump),
    else the pinned one, which stands in for a version the module proxy does not serve (Kueue's 0.17.3)."""
    from infra.engine.build import components

    if version:
        wanted = re.compile(rf"^\s*{re.escape(controller.module)} v{re.escape(version.lstrip('v'))}\b", re.M)
        for name, component in components().items():
            if name.split("-", 1)[0] == controller.component and wanted.search(
                (component.folder / "go.mod").read_text()
            ):
                return name
    return controller.component


def module_dir(controller: LocalController, version: str | None = None) -> Path:
    """Where the Go module cache holds the controller's module at `version` (component_of), else at its pin."""
    from infra.engine.build import components

    folder = components()[component_of(controller, version)].folder
    done = subprocess.run(
        ["go", "mod", "download", "-json", controller.module],
        cwd=folder,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "GOFLAGS": "-mod=readonly"},
    )
    return Path(json.loads(done.stdout)["Dir"])


def chart_dir(controller: LocalController, version: str | None = None) -> Path:
    return module_dir(controller, version) / controller.chart


class Controllers:
    """The controller processes of one local cluster, in its folder's `controllers/`."""

    def __init__(self, cluster: Cluster) -> None:
        self.folder = cluster.folder / "controllers"
        self.kubeconfig, self.pki, self.kubectl = cluster.kubeconfig, cluster.pki, cluster.kubectl
        self.folder.mkdir(parents=True, exist_ok=True)

    def _pid(self, name: str) -> Path:
        return self.folder / f"{name}.pid"

    def running(self, name: str) -> bool:
        return alive(self._pid(name)) is not None

    def _start(self, name: str, command: list[str], log: Path) -> None:
        start_detached(command, log, self._pid(name), {**os.environ, "KUBECONFIG": str(self.kubeconfig)})

    def _configuration(self, namespace: str) -> dict[str, Any]:
        """The controller's Configuration as its chart installed it (the ConfigMap holding `kind: Configuration`)."""
        maps = json.loads(self.kubectl("get", "configmaps", "-n", namespace, "-o", "json").stdout)["items"]
        for item in maps:
            for text in (item.get("data") or {}).values():
                loaded = yaml.safe_load(text) if "kind: Configuration" in text else None
                if isinstance(loaded, dict) and loaded.get("kind") == "Configuration":
                    return loaded
        raise RuntimeError(f"no ConfigMap in {namespace} holds the controller's Configuration")

    def start(self, name: str, logs: Path, version: str | None = None) -> None:
        """Start the controller of release `name` (its chart installed) at `version` (component_of), point the
        chart's webhooks at it and wait until its webhook server answers. A running one is stopped first (an
        upgrade may change its config or its version)."""
        controller = LOCAL_CONTROLLERS[name]
        self.stop(name)
        program = build_all([component_of(controller, version)])[controller.program]
        port, health = free_port(), free_port()
        cert_dir = self.folder / f"{name}-certs"
        cert_dir.mkdir(exist_ok=True)
        certs.serving_pair(cert_dir, "tls", self.pki / "ca.crt", self.pki / "ca.key")
        config = self._configuration(controller.namespace)
        config["internalCertManagement"] = {"enable": False}
        config["webhook"] = {
            **(config.get("webhook") or {}),
            "port": port,
            "host": "127.0.0.1",
            "certDir": str(cert_dir),
        }
        config["metrics"] = {**(config.get("metrics") or {}), "bindAddress": "0"}
        config["health"] = {**(config.get("health") or {}), "healthProbeBindAddress": f"127.0.0.1:{health}"}
        config["leaderElection"] = {**(config.get("leaderElection") or {}), "leaderElect": False}
        if controller.feature_gates:
            config["featureGates"] = {**(config.get("featureGates") or {}), **controller.feature_gates}
        config_file = self.folder / f"{name}-config.yaml"
        config_file.write_text(yaml.safe_dump(config))
        command = [str(program), f"--config={config_file}", f"--kubeconfig={self.kubeconfig}"]
        if controller.metrics_certs:
            command = self._with_files(name, {controller.metrics_certs: cert_dir}, command)
        self._start(name, command, logs / f"{name}.log")
        self.point_webhooks(controller.namespace, port)
        self.drop_api_services(controller.namespace)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if not self.running(name):
                raise RuntimeError(f"controller {name} exited: read {logs / (name + '.log')}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError(f"controller {name}: its webhook server did not answer in 90 s: read {logs}/{name}.log")

    def drop_api_services(self, namespace: str) -> None:
        """Remove the aggregated APIs served behind a Service of `namespace` (see `feature_gates`): left, the API
        server reports them unavailable to every discovery."""
        for item in json.loads(self.kubectl("get", "apiservices", "-o", "json").stdout)["items"]:
            if (item["spec"].get("service") or {}).get("namespace") == namespace:
                self.kubectl("delete", "apiservice", item["metadata"]["name"], "--wait=false")

    def stop(self, name: str) -> None:
        pid = alive(self._pid(name))
        if pid is not None:
            os.killpg(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while self.running(name) and time.monotonic() < deadline:
                time.sleep(0.1)

    def _with_files(self, name: str, folders: dict[str, Path], command: list[str]) -> list[str]:
        """`command` run where fixed paths under /etc hold `folders` (Kueue reads its metrics certificate from
        /etc/kueue/metrics/certs whenever its own certificate management is off): in a mount namespace of its own
        whose /etc is a copy with them added, so nothing of this machine's /etc changes."""
        etc = self.folder / f"{name}-etc"
        subprocess.run(["rm", "-rf", str(etc)], check=True)
        subprocess.run(["cp", "-a", "/etc", str(etc)], check=True)
        for path, source in folders.items():
            target = etc / Path(path).relative_to("/etc")
            target.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["cp", "-a", str(source), str(target)], check=True)
        script = 'mount --bind "$0" /etc && exec "$@"'
        return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, str(etc), *command]

    def start_kuberay(self, logs: Path) -> None:
        """KubeRay's operator (GKE's Ray add-on stands in here), once the RayCluster CRD exists."""
        if self.running("kuberay"):
            return
        program = build_all([KUBERAY.component])[KUBERAY.program]
        self._start(
            "kuberay",
            [
                str(program),
                "--metrics-addr=0",
                f"--health-probe-bind-address=127.0.0.1:{free_port()}",
                "--enable-leader-election=false",
                f"--kubeconfig={self.kubeconfig}",
            ],
            logs / "kuberay.log",
        )

    def _hooked(self, namespace: str) -> list[tuple[str, dict[str, Any], list[tuple[dict[str, Any], str]]]]:
        """(resource kind, object, [(client config holder, field)]) of every admission webhook configuration and
        CRD whose webhook names a Service in `namespace` or was pointed here from one."""
        out = []
        for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
            for item in json.loads(self.kubectl("get", kind, "-o", "json").stdout)["items"]:
                holders = [(hook, "clientConfig") for hook in item.get("webhooks") or []]
                out.append((kind, item, holders))
        for crd in json.loads(self.kubectl("get", "crds", "-o", "json").stdout)["items"]:
            webhook = (crd["spec"].get("conversion") or {}).get("webhook")
            if webhook:
                out.append(("crd", crd, [(webhook, "clientConfig")]))
        return [
            (kind, item, [(h, f) for h, f in holders if _names(h.get(f) or {}, namespace, item)])
            for kind, item, holders in out
        ]

    def point_webhooks(self, namespace: str, port: int) -> None:
        """Every webhook that names a Service in `namespace` (admission and CRD conversion) now calls
        https://127.0.0.1:<port><path>, trusting the cluster's CA; the Service it named is kept in an annotation,
        so `restore_webhooks` can give Helm back the objects its release made."""
        bundle = base64.b64encode((self.pki / "ca.crt").read_bytes()).decode()
        for kind, item, holders in self._hooked(namespace):
            if not holders:
                continue
            kept = json.loads((item["metadata"].get("annotations") or {}).get(SERVICES, "{}"))
            for index, (holder, key) in enumerate(holders):
                service = holder[key].get("service") or kept.get(str(index))
                kept[str(index)] = service
                holder[key] = {"url": f"https://127.0.0.1:{port}{service.get('path') or ''}", "caBundle": bundle}
            self._replace(kind, item, {SERVICES: json.dumps(kept)})

    def restore_webhooks(self, namespace: str) -> None:
        """The webhooks `point_webhooks` changed, back as the release made them (its Service), before Helm
        upgrades the release: Helm merges its new objects into the live ones, and an object with both a URL and a
        Service is invalid."""
        for kind, item, holders in self._hooked(namespace):
            kept = json.loads((item["metadata"].get("annotations") or {}).get(SERVICES, "{}"))
            if not kept or not holders:
                continue
            for index, (holder, key) in enumerate(holders):
                holder[key] = {"service": kept[str(index)]}
            self._replace(kind, item, {SERVICES: None})

    def _replace(self, kind: str, item: dict[str, Any], annotations: dict[str, str | None]) -> None:
        metadata = item["metadata"]
        metadata["annotations"] = {
            k: v for k, v in {**(metadata.get("annotations") or {}), **annotations}.items() if v is not None
        }
        for drop in ("managedFields", "resourceVersion", "generation", "creationTimestamp", "uid"):
            metadata.pop(drop, None)
        item.pop("status", None)
        self.kubectl("replace", "-f", "-", input=json.dumps(item))


# Where point_webhooks keeps the Service each webhook named, by its index among the object's webhooks.
SERVICES = "platform.local/webhook-services"


def _names(config: dict[str, Any], namespace: str, item: dict[str, Any]) -> bool:
    service = config.get("service")
    if service:
        return bool(service.get("namespace") == namespace)
    kept = json.loads((item["metadata"].get("annotations") or {}).get(SERVICES, "{}"))
    return any(v and v.get("namespace") == namespace for v in kept.values())
