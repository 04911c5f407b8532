"""The firewall between GKE's control plane and the nodes, on the local cluster.

On a private GKE cluster the control plane reaches the nodes' pods from its own range (`master_ipv4_cidr_block`)
through the VPC firewall: GKE's own rule opens tcp 443 and 10250, and every other port a webhook or an aggregated
API serves on must be opened by a rule of the stack (https://cloud.google.com/kubernetes-engine/docs/how-to/
private-clusters#add_firewall_rules). Here the API server sends everything it dials in the cluster (webhooks,
aggregated APIs: its `cluster` egress, https://kubernetes.io/docs/tasks/extend-kubernetes/setup-konnectivity/) to
this program, an HTTP CONNECT proxy on a unix socket, which lets a connection through only to a port the stack's
rules open from the control plane's range (`opened`, re-read for every connection: an apply that changes the
rules changes what passes) and refuses any other, naming the port, as the VPC drops it. A tunnel open to a port the
rules then close is cut.

  python -m infra.localcluster.firewall <socket> <rules.json>     (the local cluster starts it, cluster.py)

Exit codes: it serves until stopped; 2 usage.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import socketserver
import sys
import threading
import time
from pathlib import Path
from typing import Any


def opened(stack: dict[str, Any]) -> list[int] | None:
    """The tcp ports the stack's firewall opens from its private cluster's control plane range to the nodes (GKE's
    own included), or None where the stack has no private cluster (nothing stands between them)."""
    from infra.rules.gke_control_plane import control_plane_openings

    found = [ports for _, _, ports in control_plane_openings(stack)]
    return sorted(set().union(*found)) if found else None


def write_rules(path: Path, stack: dict[str, Any]) -> None:
    path.write_text(json.dumps({"opened": opened(stack)}))


def egress_configuration(socket_path: Path) -> str:
    """The API server's --egress-selector-config-file: its cluster traffic through the proxy at `socket_path`."""
    return json.dumps(
        {
            "apiVersion": "apiserver.k8s.io/v1beta1",
            "kind": "EgressSelectorConfiguration",
            "egressSelections": [
                {
                    "name": "cluster",
                    "connection": {"proxyProtocol": "HTTPConnect", "transport": {"uds": {"udsName": str(socket_path)}}},
                }
            ],
        }
    )


class _Proxy(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    # The API server opens a connection per webhook call, and a Helm install calls them in bursts. socketserver's
    # default backlog is 5: on a loaded machine the accepting thread fell behind and the sixth connect was refused
    # ("dial unix .../firewall.sock: connect: resource temporarily unavailable", a deploy-local that failed in a
    # full `make test`). A network path refuses nothing it lets through: the system's largest backlog.
    request_queue_size = socket.SOMAXCONN
    rules: Path
    # Each open tunnel: its port, and its two sockets (closed when a change of the rules closes its port).
    tunnels: dict[int, tuple[int, socket.socket, socket.socket]]
    lock: threading.Lock

    def allowed(self) -> list[int] | None:
        found: list[int] | None = json.loads(self.rules.read_text())["opened"]
        return found

    def enforce(self) -> None:
        """Every second: a tunnel to a port the rules no longer open is cut, as a stateful firewall drops an
        established connection once its rule goes."""
        while True:
            time.sleep(1)
            allowed = self.allowed()
            with self.lock:
                cut = [t for t in self.tunnels.values() if allowed is not None and t[0] not in allowed]
            for _, a, b in cut:
                for s in (a, b):
                    with contextlib.suppress(OSError):
                        s.shutdown(socket.SHUT_RDWR)


class _Handler(socketserver.StreamRequestHandler):
    server: _Proxy

    def handle(self) -> None:
        request = self.rfile.readline().decode("latin-1").split()
        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
            pass  # the request's headers
        if len(request) < 2 or request[0] != "CONNECT":
            self.wfile.write(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
            return
        host, _, port = request[1].rpartition(":")
        allowed = self.server.allowed()
        if allowed is not None and int(port) not in allowed:
            reason = f"the cluster's firewall does not open tcp:{port} from the control plane's range"
            self.wfile.write(f"HTTP/1.1 403 {reason}\r\n\r\n".encode())
            return
        try:
            upstream = socket.create_connection((host.strip("[]"), int(port)), timeout=10)
        except OSError as err:
            self.wfile.write(f"HTTP/1.1 502 {err}\r\n\r\n".encode())
            return
        upstream.settimeout(None)
        self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        self.wfile.flush()
        key = id(upstream)
        with self.server.lock:
            self.server.tunnels[key] = (int(port), self.connection, upstream)
        try:
            _pipe(self.connection, upstream)
        finally:
            with self.server.lock:
                self.server.tunnels.pop(key, None)


def _pipe(a: socket.socket, b: socket.socket) -> None:
    def copy(source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, target):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    other = threading.Thread(target=copy, args=(b, a), daemon=True)
    other.start()
    copy(a, b)
    other.join()
    b.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.localcluster.firewall", description=__doc__.split("\n\n")[0])
    parser.add_argument("socket", type=Path, help="the unix socket the API server's egress selector names")
    parser.add_argument("rules", type=Path, help='the ports opened: {"opened": [443, ...]} (None: every port)')
    args = parser.parse_args(argv)
    path, rules = args.socket, args.rules
    path.unlink(missing_ok=True)
    server = _Proxy(str(path), _Handler)
    server.rules, server.tunnels, server.lock = rules, {}, threading.Lock()
    os.chmod(path, 0o600)
    threading.Thread(target=server.enforce, daemon=True).start()
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
