"""The local cluster's firewall (infra/localcluster/firewall.py): the API server's traffic to the pods passes only on
the ports the stack's rules open from the control plane's range, and a tunnel is cut once its port is closed."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.localcluster import firewall

MASTER = "172.16.0.0/28"


def _stack(ports: list[str]) -> dict[str, object]:
    cluster = {"private_cluster_config": {"master_ipv4_cidr_block": MASTER}}
    rule = {"direction": "INGRESS", "source_ranges": [MASTER], "allow": [{"protocol": "tcp", "ports": ports}]}
    return {"resource": {"google_container_cluster": {"c": cluster}, "google_compute_firewall": {"r": rule}}}


def test_the_ports_opened_are_gkes_own_and_the_stacks_rules_from_the_control_planes_range() -> None:
    assert firewall.opened(_stack(["9443", "6443"])) == [443, 6443, 9443, 10250]
    elsewhere = _stack(["6443"])
    elsewhere["resource"]["google_compute_firewall"]["r"]["source_ranges"] = ["10.0.0.0/8"]  # type: ignore[index]
    assert firewall.opened(elsewhere) == [443, 10250]
    assert firewall.opened({"resource": {}}) is None, "no private cluster: nothing between them"


@pytest.fixture
def echo() -> Iterator[int]:
    """A server on 127.0.0.1 that sends back what it is sent: its port."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=lambda c=conn: [c.sendall(d) for d in iter(lambda: c.recv(1024), b"")]).start()

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def _connect(sock: Path, port: int) -> tuple[socket.socket, str]:
    client = socket.socket(socket.AF_UNIX)
    client.connect(str(sock))
    client.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    answer = b""
    while not answer.endswith(b"\r\n\r\n"):
        answer += client.recv(1)
    return client, answer.decode().splitlines()[0]


def test_a_port_the_rules_do_not_open_is_refused_by_name_and_an_open_tunnel_is_cut_when_its_rule_goes(
    tmp_path: Path, echo: int
) -> None:
    rules, sock = tmp_path / "rules.json", tmp_path / "firewall.sock"
    rules.write_text(json.dumps({"opened": [443]}))
    proxy = subprocess.Popen([sys.executable, "-m", "infra.localcluster.firewall", str(sock), str(rules)])
    try:
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        refused, status = _connect(sock, echo)
        assert status == f"HTTP/1.1 403 the cluster's firewall does not open tcp:{echo} from the control plane's range"
        refused.close()
        rules.write_text(json.dumps({"opened": [443, echo]}))
        tunnel, status = _connect(sock, echo)
        assert status == "HTTP/1.1 200 Connection established"
        tunnel.sendall(b"ping")
        assert tunnel.recv(4) == b"ping"
        rules.write_text(json.dumps({"opened": [443]}))
        tunnel.settimeout(10)
        assert tunnel.recv(4) == b"", "the tunnel outlived the rule that opened it"
    finally:
        proxy.terminate()
        proxy.wait()


def test_a_burst_of_connections_waits_for_the_proxy_instead_of_being_refused(tmp_path: Path) -> None:
    """While the proxy accepts nothing (its thread busy on a loaded machine), 64 connections at once are queued by the
    kernel, as a network path queues them; with socketserver's backlog of 5 the sixth was refused (EAGAIN), and a
    webhook call of the API server failed."""
    path = tmp_path / "firewall.sock"
    server = firewall._Proxy(str(path), firewall._Handler)  # bound and listening; nothing accepts yet
    clients = []
    try:
        for _ in range(64):
            client = socket.socket(socket.AF_UNIX)
            client.setblocking(False)
            client.connect(str(path))  # BlockingIOError (EAGAIN) once the backlog is full
            clients.append(client)
    finally:
        for client in clients:
            client.close()
        server.server_close()
    assert len(clients) == 64
