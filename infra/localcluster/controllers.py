"""The controllers of the local cluster, run as processes on this machine beside its control plane.

A controller release installs its chart as on GKE (the Deployment's pods are KWOK's, so nothing runs in them);
the controller itself runs here for its pod, built from its Go module (infra/engine/go/<name>) at the version of
the pod's image, and started with the chart's own Configuration (its ConfigMap, as installed) with only what running
outside the cluster needs changed: its webhook server at the pod's address (held on the loopback interface) with a
certificate of the cluster's CA instead of its in-cluster certificate rotation, no leader election, no metrics
listener. The chart's webhook configurations (and a CRD's conversion webhook) stay as the chart made them, naming the
controller's Service; the API server reaches the pod's address through its Ready endpoint, and the CA's bundle is
set on them as the controller's certificate management would. The `Supervisor` does this while an apply runs, and
marks each pod Ready once what stands for it serves.

KubeRay stands in for GKE's Ray operator add-on (GKE does not publish which KubeRay it runs); it runs without
webhooks, as the add-on's CRDs declare none.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from infra.catalogue.serving_metrics import ADAPTER_NAMESPACE
from infra.engine.build import build_all
from infra.localcluster import certs
from infra.localcluster.cluster import (
    Cluster,
    alive,
    free_port,
    hold_address,
    kubectl_binary,
    release_address,
    start_detached,
)


@dataclass(frozen=True)
class LocalController:
    component: str  # infra/engine/go/<component>
    program: str  # the program it builds
    module: str  # the Go module whose chart the release installs
    chart: str  # the chart's folder in that module
    namespace: str
    metrics_certs: str = ""  # a fixed path the controller reads its metrics certificate from, if any
    # Its aggregated API's server, where it has one: the fixed folder it reads its serving certificate from (the
    # chart's Secret mounted there) and the port it listens on, at its pod's address.
    api_certs: str = ""
    api_port: int = 0


LOCAL_CONTROLLERS = {
    "jobset": LocalController("jobset", "jobset", "sigs.k8s.io/jobset", "charts/jobset", "jobset-system"),
    # sigs.k8s.io/kueue v0.19.2 cmd/kueue/main.go: metricsCertPath := "/etc/kueue/metrics/certs"; its visibility
    # API (the pending workloads' positions, the chart's APIService): pkg/visibility/server.go certDir "/visibility"
    # (tls.crt, tls.key) on Configuration.visibilityServer's port (8082, the chart's Service's targetPort).
    "kueue": LocalController(
        "kueue",
        "kueue",
        "sigs.k8s.io/kueue",
        "charts/kueue",
        "kueue-system",
        "/etc/kueue/metrics/certs",
        api_certs="/visibility",
        api_port=8082,
    ),
    "lws": LocalController("lws", "cmd", "sigs.k8s.io/lws", "charts/lws", "lws-system"),
}
KUBERAY = LocalController("kuberay", "ray-operator", "github.com/ray-project/kuberay/ray-operator", "", "")
# The metrics adapter's pod, served by a stand-in (infra/localcluster/metrics_adapter.py).
ADAPTER = "metrics-adapter"
# The namespaces whose pods run something here, each Ready only once it serves (infra/localcluster/stages.py).
SERVED_NAMESPACES = {**{c.namespace: name for name, c in LOCAL_CONTROLLERS.items()}, ADAPTER_NAMESPACE: ADAPTER}


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
    """The controller processes of one local cluster, in its folder's `controllers/`: one per controller, serving
    for one of its pods (`<name>.pod`: the pod's uid) at that pod's address (`<name>.address`)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.folder = cluster.folder / "controllers"
        self.folder.mkdir(parents=True, exist_ok=True)

    def _pid(self, name: str) -> Path:
        return self.folder / f"{name}.pid"

    def running(self, name: str) -> bool:
        return alive(self._pid(name)) is not None

    def serving(self, name: str) -> str | None:
        """The uid of the pod the running controller `name` serves for, if it runs."""
        pod = self.folder / f"{name}.pod"
        return pod.read_text() if self.running(name) and pod.is_file() else None

    def _start(self, name: str, command: list[str], log: Path) -> None:
        start_detached(command, log, self._pid(name), {**os.environ, "KUBECONFIG": str(self.cluster.kubeconfig)})

    def _configuration(self, namespace: str) -> dict[str, Any]:
        """The controller's Configuration as its chart installed it (the ConfigMap holding `kind: Configuration`)."""
        maps = self.cluster.get("configmaps", "-n", namespace)["items"]
        for item in maps:
            for text in (item.get("data") or {}).values():
                loaded = yaml.safe_load(text) if "kind: Configuration" in text else None
                if isinstance(loaded, dict) and loaded.get("kind") == "Configuration":
                    return loaded
        raise RuntimeError(f"no ConfigMap in {namespace} holds the controller's Configuration")

    def serve(self, name: str, pod: dict[str, Any]) -> None:
        """Run the controller of release `name` for its pod `pod` (Running, with an address): at the version of the
        pod's image (component_of), its webhook server at the pod's address and the port the chart configured, with
        a certificate of the cluster's CA for the names of its namespace's Services; wait until it answers, then
        mark the pod Ready, as the kubelet's readiness probe would. A controller serving another pod is stopped
        first (an upgrade rolls its pod)."""
        controller = LOCAL_CONTROLLERS[name]
        version = image_version(pod["spec"]["containers"][0]["image"])
        program = build_all([component_of(controller, version)])[controller.program]
        address, cert_dir = self._take(name, pod)
        config = self._configuration(controller.namespace)
        port = int((config.get("webhook") or {}).get("port") or 9443)
        config["internalCertManagement"] = {"enable": False}
        config["webhook"] = {**(config.get("webhook") or {}), "port": port, "host": address, "certDir": str(cert_dir)}
        config["metrics"] = {**(config.get("metrics") or {}), "bindAddress": "0"}
        config["health"] = {**(config.get("health") or {}), "healthProbeBindAddress": f"127.0.0.1:{free_port()}"}
        config["leaderElection"] = {**(config.get("leaderElection") or {}), "leaderElect": False}
        if controller.api_port:
            config["visibilityServer"] = {"bindAddress": address, "bindPort": controller.api_port}
        config_file = self.folder / f"{name}-config.yaml"
        config_file.write_text(yaml.safe_dump(config))
        command = [str(program), f"--config={config_file}", f"--kubeconfig={self.cluster.kubeconfig}"]
        folders = {path: cert_dir for path in (controller.metrics_certs, controller.api_certs) if path}
        if folders:
            command = self._with_files(name, folders, command)
        self.inject_ca(controller.namespace)
        self._run_until_serving(name, command, pod, address, port)

    def serve_adapter(self, pod: dict[str, Any]) -> None:
        """The metrics adapter's stand-in (infra/localcluster/metrics_adapter.py) for its pod: the custom metrics
        API at the pod's address and its container's port, the values from `series`; the pod Ready once it serves."""
        address, cert_dir = self._take(ADAPTER, pod)
        port = next((p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports") or []), 6443)
        command = [
            sys.executable,
            "-m",
            "infra.localcluster.metrics_adapter",
            address,
            str(port),
            str(cert_dir / "tls.crt"),
        ]
        command += [
            str(cert_dir / "tls.key"),
            str(kubectl_binary()),
            str(self.cluster.kubeconfig),
            str(self.cluster.metric_series),
        ]
        self._run_until_serving(ADAPTER, command, pod, address, int(port))

    def _take(self, name: str, pod: dict[str, Any]) -> tuple[str, Path]:
        """Stop what serves `name` now; hold `pod`'s address here; a serving certificate of the cluster's CA for the
        address and the names of its namespace's Services. (the address, the certificate's folder)"""
        self.stop(name)
        address, namespace = pod["status"]["podIP"], pod["metadata"]["namespace"]
        hold_address(address)
        (self.folder / f"{name}.address").write_text(address)
        (self.folder / f"{name}.pod").write_text(pod["metadata"]["uid"])
        cert_dir = self.folder / f"{name}-certs"
        cert_dir.mkdir(exist_ok=True)
        services = self.cluster.get("services", "-n", namespace)["items"]
        names = tuple(f"{s['metadata']['name']}.{namespace}.svc" for s in services)
        certs.serving_pair(
            cert_dir, "tls", self.cluster.pki / "ca.crt", self.cluster.pki / "ca.key", ips=(address,), dns=names
        )
        return address, cert_dir

    def _run_until_serving(self, name: str, command: list[str], pod: dict[str, Any], address: str, port: int) -> None:
        """Start `command`; once it answers at `address`:`port`, mark `pod` Ready. One that exits first is started
        again after a back-off (1 s, doubling to 10 s), as the kubelet restarts a container: a controller started
        before its release's CRDs are established exits ("no matches for kind"), and does on GKE too."""
        log = self.cluster.logs / f"{name}.log"
        deadline, backoff = time.monotonic() + 300, 1.0
        self._start(name, command, log)
        while True:
            try:
                with socket.create_connection((address, port), timeout=1):
                    break
            except OSError as err:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name}: its server did not answer in 300 s: read {log}") from err
            if not self.running(name):
                time.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
                self._start(name, command, log)
            else:
                time.sleep(0.3)
        self.mark_ready(pod)

    def mark_ready(self, pod: dict[str, Any]) -> None:
        """The pod's Ready and ContainersReady conditions True and each container ready (what KWOK's own pod-ready
        stage sets for every other pod)."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        conditions = [{"type": t, "status": "True", "lastTransitionTime": now} for t in ("Ready", "ContainersReady")]
        statuses = [{**s, "ready": True, "started": True} for s in pod["status"].get("containerStatuses") or []]
        patch = {"status": {"conditions": conditions, "containerStatuses": statuses}}
        meta = pod["metadata"]
        self.cluster.patch(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status", patch, "strategic")

    def hooks(self) -> list[dict[str, Any]]:
        """Every object that holds a webhook's client configuration (the admission webhook configurations, the
        CRDs: a conversion webhook), each with its `kind`, in one read of each list."""
        items = []
        for kind, path in _HOOK_LISTS.items():
            items += [{**item, "kind": kind} for item in self.cluster.read(path)["items"]]
        return items

    def inject_ca(self, namespace: str, hooks: list[dict[str, Any]] | None = None) -> None:
        """The cluster's CA as the caBundle of every webhook (admission, and a CRD's conversion) that names a Service
        of `namespace`, as the controller's own certificate management injects its CA on GKE (off here: it would
        write its certificate into a Secret for the kubelet to mount). `hooks`: what `hooks()` read, else read now."""
        bundle = base64.b64encode((self.cluster.pki / "ca.crt").read_bytes()).decode()
        for item in self.hooks() if hooks is None else hooks:
            if item["kind"] == "CustomResourceDefinition":
                webhook = (item["spec"].get("conversion") or {}).get("webhook")
                configs = (
                    [("/spec/conversion/webhook/clientConfig", webhook.get("clientConfig") or {})] if webhook else []
                )
            else:
                configs = [
                    (f"/webhooks/{i}/clientConfig", h.get("clientConfig") or {})
                    for i, h in enumerate(item.get("webhooks") or [])
                ]
            patch = [
                {"op": "add", "path": f"{path}/caBundle", "value": bundle}
                for path, config in configs
                if (config.get("service") or {}).get("namespace") == namespace and config.get("caBundle") != bundle
            ]
            if patch:
                self.cluster.patch(f"{_HOOK_LISTS[item['kind']]}/{item['metadata']['name']}", patch, "json")

    def stop(self, name: str) -> None:
        pid = alive(self._pid(name))
        if pid is not None:
            os.killpg(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while self.running(name) and time.monotonic() < deadline:
                time.sleep(0.1)
        (self.folder / f"{name}.pod").unlink(missing_ok=True)
        address = self.folder / f"{name}.address"
        if address.is_file():
            release_address(address.read_text().strip())
            address.unlink()

    def _with_files(self, name: str, folders: dict[str, Path], command: list[str]) -> list[str]:
        """`command` run where fixed paths hold `folders` (Kueue reads its metrics certificate from
        /etc/kueue/metrics/certs and its visibility server's from /visibility whenever its own certificate management
        is off): in a mount namespace of its own, whose /etc is a copy with those under it added, and where each
        other path is the folder mounted there. Nothing of this machine's own files changes but that mount point,
        an empty folder made once."""
        etc = self.folder / f"{name}-etc"
        subprocess.run(["rm", "-rf", str(etc)], check=True)
        subprocess.run(["cp", "-a", "/etc", str(etc)], check=True)
        script = ""
        for path, source in folders.items():
            if Path(path).is_relative_to("/etc"):
                target = etc / Path(path).relative_to("/etc")
                target.parent.mkdir(parents=True, exist_ok=True)
                subprocess.run(["cp", "-a", str(source), str(target)], check=True)
            else:
                script += (
                    f"mkdir -p {shlex.quote(path)} && mount --bind {shlex.quote(str(source))} {shlex.quote(path)} && "
                )
        script += 'mount --bind "$0" /etc && exec "$@"'
        return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, str(etc), *command]

    def start_kuberay(self) -> None:
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
                f"--kubeconfig={self.cluster.kubeconfig}",
            ],
            self.cluster.logs / "kuberay.log",
        )


# Where the API server lists each kind that holds a webhook's client configuration (its items carry no kind); the
# list's last part is the resource a patch names.
_HOOK_LISTS = {
    "ValidatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
    "MutatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
    "CustomResourceDefinition": "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
}


def image_version(image: str) -> str:
    """The tag of a container image reference (`registry.k8s.io/kueue/kueue:v0.17.3@sha256:...` -> v0.17.3)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.rsplit(":", 1)[1] if ":" in last else ""


class Supervisor(threading.Thread):
    """While an apply or a destroy runs, what the kubelet and the controller's process would do on GKE for the
    controllers' pods: each Running pod of a controller's namespace that is not Ready gets its controller started
    for it (Controllers.serve) and is marked Ready once that serves; a Ready pod whose controller stopped is served
    again; a controller whose pod is gone stops. The first error stops the watch, goes to `on_error` at once and is
    kept in `error`."""

    def __init__(self, cluster: Cluster, on_error: Callable[[Exception], None], interval: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.cluster, self.interval, self.on_error = cluster, interval, on_error
        self.controllers = Controllers(cluster)
        self.done = threading.Event()
        self.error: Exception | None = None

    def run(self) -> None:
        while not self.done.is_set():
            try:
                self.step()
            except Exception as err:  # kept for the caller, which reports it with the apply's
                self.error = err
                self.on_error(err)  # the apply stops: nothing can be admitted without the controller
                return
            self.done.wait(self.interval)

    def stop(self) -> None:
        self.done.set()
        self.join()
        if self.error is not None:
            raise ApplyError(f"the local controllers: {self.error}")

    def step(self) -> None:
        pods = self.cluster.read("/api/v1/pods")["items"]
        hooks = None  # read once per step, where a running controller needs it
        for namespace, name in SERVED_NAMESPACES.items():
            mine = [
                p
                for p in pods
                if p["metadata"]["namespace"] == namespace
                and not p["metadata"].get("deletionTimestamp")
                and p.get("status", {}).get("podIP")
                and p["status"].get("phase") == "Running"
            ]
            serving = self.controllers.serving(name)
            if serving is not None and serving not in {p["metadata"]["uid"] for p in mine}:
                self.controllers.stop(name)  # its pod is gone (uninstalled, or replaced by an upgrade's)
                serving = None
            for pod in mine:
                if not _ready(pod) or (serving is None and len(mine) == 1):
                    if name == ADAPTER:
                        self.controllers.serve_adapter(pod)
                    else:
                        self.controllers.serve(name, pod)
                    break
            else:
                if serving is not None and name in LOCAL_CONTROLLERS:  # what an apply made since it started
                    hooks = self.controllers.hooks() if hooks is None else hooks
                    self.controllers.inject_ca(namespace, hooks)


def _ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


class ApplyError(RuntimeError):
    """A resource the real components refused, or the engine's or a controller's failure: named, with their words."""
