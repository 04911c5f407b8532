"""A stand-in for the Custom Metrics Stackdriver Adapter in its pod: the custom metrics API
(custom.metrics.k8s.io v1beta1 and v1beta2, as k8s.io/metrics defines it) served at the pod's address and port, so
the real HorizontalPodAutoscaler controller reads a server's metric through the real aggregation layer and the
cluster's firewall (infra/localcluster/firewall.py), as on GKE.

What stands in is where the values come from. On GKE the adapter reads Cloud Monitoring, where Managed Prometheus
writes what each server exports. Here each value is a file, `<series>/<namespace>/<metric>`, holding a number, which
a test writes as the servers' traffic would. The file's value is each pod's value, for every pod the HPA's
selector matches. With no file there is no series, and the API answers with no items, as the adapter does for a
metric no one writes.

  python -m infra.localcluster.metrics_adapter <address> <port> <cert> <key> <kubectl> <kubeconfig> <series>
                                               (the local cluster starts it for the adapter's pod, controllers.py)

Exit codes: it serves until stopped; 2 usage.
"""

from __future__ import annotations

import argparse
import json
import ssl
import subprocess
import sys
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

GROUP = "custom.metrics.k8s.io"
VERSIONS = ("v1beta1", "v1beta2")


def write_series(folder: Path, namespace: str, metric: str, value: float) -> None:
    """What the adapter answers for `metric` of every pod of `namespace` from now on."""
    (folder / namespace).mkdir(parents=True, exist_ok=True)
    (folder / namespace / metric.replace("/", "|")).write_text(str(value))


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(f"{self.address_string()} {format % args}\n")

    def _answer(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/")]
        if parts == ["healthz"] or parts == ["readyz"] or parts == ["livez"]:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")
            return
        if len(parts) == 3 and parts[:2] == ["apis", GROUP] and parts[2] in VERSIONS:
            self._answer(200, self.server.discovery(parts[2]))
            return
        # apis/<group>/<version>/namespaces/<namespace>/pods/<name or *>/<metric>
        if len(parts) == 8 and parts[:2] == ["apis", GROUP] and parts[2] in VERSIONS and parts[5] == "pods":
            query = urllib.parse.parse_qs(url.query)
            selector = (query.get("labelSelector") or [""])[0]
            self._answer(200, self.server.values(parts[2], parts[4], parts[6], parts[7], selector))
            return
        self._answer(
            404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404, "reason": "NotFound"}
        )


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], kubectl: str, kubeconfig: str, series: Path) -> None:
        super().__init__(address, _Handler)
        self.kubectl, self.kubeconfig, self.series = kubectl, kubeconfig, series

    def metrics(self) -> list[str]:
        return sorted({p.name for p in self.series.glob("*/*")}) if self.series.is_dir() else []

    def discovery(self, version: str) -> dict[str, Any]:
        resources = [
            {"name": f"pods/{m}", "singularName": "", "namespaced": True, "kind": "MetricValueList", "verbs": ["get"]}
            for m in self.metrics()
        ]
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{GROUP}/{version}",
            "resources": resources,
        }

    def values(self, version: str, namespace: str, name: str, metric: str, selector: str) -> dict[str, Any]:
        path = self.series / namespace / metric.replace("/", "|")
        items = []
        if path.is_file():
            value = path.read_text().strip()
            command = [self.kubectl, f"--kubeconfig={self.kubeconfig}", "get", "pods", "-n", namespace, "-o", "json"]
            command += [name] if name != "*" else (["-l", selector] if selector else [])
            listed = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
            pods = listed.get("items", [listed])
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            for pod in pods:
                described = {
                    "kind": "Pod",
                    "namespace": namespace,
                    "name": pod["metadata"]["name"],
                    "apiVersion": "/v1",
                }
                item: dict[str, Any] = {"describedObject": described, "timestamp": now, "value": value}
                if version == "v1beta1":
                    item["metricName"] = metric
                else:
                    item["metric"] = {"name": metric}
                items.append(item)
        return {"kind": "MetricValueList", "apiVersion": f"{GROUP}/{version}", "metadata": {}, "items": items}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m infra.localcluster.metrics_adapter", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("address", help="the pod's address, held on this machine")
    parser.add_argument("port", type=int, help="the container's port")
    parser.add_argument("cert", help="the serving certificate (PEM)")
    parser.add_argument("key", help="its key (PEM)")
    parser.add_argument("kubectl", help="the kubectl that lists the pods a selector matches")
    parser.add_argument("kubeconfig", help="the cluster's kubeconfig")
    parser.add_argument("series", type=Path, help="the values' folder: <namespace>/<metric>")
    args = parser.parse_args(argv)
    server = _Server((args.address, args.port), args.kubectl, args.kubeconfig, args.series)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
