"""A real Kubernetes control plane on this machine, no containers: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler built from Kubernetes' Go modules (infra/engine/go/kube), with KWOK standing in for the
kubelets of one fake node per node of every pool of an environment's stack (infra/localcluster/nodes.py).

Everything of one cluster lives in one folder (default `.cache/cluster-local`): `pki/` (keys and certificates),
`etcd/` (the data), `logs/<component>.log`, `run/<component>.pid`, and `kubeconfig` (admin, system:masters). The
processes run detached until `down`, which stops them and removes the folder's state.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from infra.engine.build import build_all
from infra.localcluster import certs, discovery, firewall

KUBERNETES_VERSION = "v1.35.4"  # infra/engine/go/kube/go.mod
SERVICE_RANGE = "10.96.0.0/16"
COMPONENTS = ("etcd", "firewall", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
# How long `down` waits for the components to exit on SIGTERM before it kills them. The API server drains for more
# than 10 s (and etcd waits for it), every time; its state is removed right after, so nothing is kept by waiting.
DOWN_GRACE_S = 3
# The cluster's own objects, which come and go without any stack: not in an inventory.
NOT_COUNTED = {"events", "events.events.k8s.io", "leases.coordination.k8s.io", "nodes"}


class ClusterError(RuntimeError):
    """The local cluster could not start or answer: what failed and the log to read."""


class NotFound(ClusterError):
    """The API server has no such object (404)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_detached(command: list[str], log: Path, pid_file: Path, env: dict[str, str] | None = None) -> None:
    """Start `command` in a session of its own (it outlives this process), its output appended to `log`, its pid
    in `pid_file`."""
    with log.open("ab") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
        )
    pid_file.write_text(str(process.pid))


def alive(pid_file: Path) -> int | None:
    """The pid `pid_file` holds while that process runs, else None."""
    if not pid_file.is_file():
        return None
    pid = int(pid_file.read_text())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    return pid


def hold_address(address: str) -> None:
    """`address` (a pod's, from the cluster's pod range) on this machine's loopback interface, so a process here can
    serve at it and the API server reach it there (`ip address add`, which needs CAP_NET_ADMIN: root)."""
    done = subprocess.run(["ip", "address", "add", f"{address}/32", "dev", "lo"], capture_output=True, text=True)
    if done.returncode and "File exists" not in done.stderr:
        raise ClusterError(
            f"ip address add {address}/32 dev lo: {done.stderr.strip()} (the local cluster runs as root)"
        )


def release_address(address: str) -> None:
    subprocess.run(["ip", "address", "del", f"{address}/32", "dev", "lo"], capture_output=True, check=False)


@dataclass(frozen=True)
class Cluster:
    folder: Path

    @property
    def kubeconfig(self) -> Path:
        return self.folder / "kubeconfig"

    @property
    def logs(self) -> Path:
        return self.folder / "logs"

    @property
    def pki(self) -> Path:
        return self.folder / "pki"

    @property
    def controller_crds(self) -> Path:
        """The controllers' pinned crds/ files, staged for their post-renderer (PLATFORM_CONTROLLER_CRDS)."""
        return self.folder / "controller-crds"

    def _pid(self, name: str) -> Path:
        return self.folder / "run" / f"{name}.pid"

    @property
    def pod_range(self) -> str:
        """The pods' addresses: a /16 of 10.0.0.0/8 of this cluster's own, from its folder, so that two clusters on
        one machine (the tests' workers) hold different addresses on the loopback interface."""
        octet = 100 + zlib.crc32(str(self.folder.resolve()).encode()) % 150
        return f"10.{octet}.0.1/16"

    @property
    def metric_series(self) -> Path:
        """What the metrics adapter's stand-in answers (infra/localcluster/metrics_adapter.py `write_series`)."""
        return self.folder / "metrics"

    @property
    def firewall_rules(self) -> Path:
        """The ports the stack's firewall opens from the control plane's range (infra/localcluster/firewall.py)."""
        return self.folder / "run" / "firewall.json"

    def running(self) -> dict[str, int]:
        """component -> pid of each component whose process is alive."""
        pids = {name: alive(self._pid(name)) for name in COMPONENTS}
        return {name: pid for name, pid in pids.items() if pid is not None}

    def server(self) -> str:
        config = self.kubeconfig.read_text()
        return next(line.split("server:", 1)[1].strip() for line in config.splitlines() if "server:" in line)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        """kubectl on this cluster. A command that changes nothing twice (get, a server-side apply, a merge patch) is
        tried again, up to TRIES times, when the API server did not answer in time: on two loaded cores its
        OpenAPI document (which kubectl fetches to validate an apply) once took past kubectl's 32 s (a CI
        failure). Any other failure, and every other command, fails at once."""
        for attempt in range(1, TRIES + 1):
            done = subprocess.run(
                [str(kubectl_binary()), f"--kubeconfig={self.kubeconfig}", *args],
                input=input,
                capture_output=True,
                text=True,
                check=False,
            )
            if not (done.returncode and args[:1] and args[0] in IDEMPOTENT and _unanswered(done.stderr)):
                break
            if attempt < TRIES:
                time.sleep(5 * attempt)
        if check and done.returncode:
            raise ClusterError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done

    def get(self, *args: str) -> dict[str, Any]:
        """What `kubectl get <args> -o json` prints, read from the API server in this process (discovery.py: the
        arguments it takes; kubectl itself for any other)."""
        wanted = discovery.parse(args)
        if wanted is None:
            loaded: dict[str, Any] = json.loads(self.kubectl("get", *args, "-o", "json").stdout)
            return loaded
        for fresh in (False, True):  # a resource not (or no longer) as discovered: discover again, once
            known = self._resources(fresh)
            found = [discovery.resolve(token, known) for token in wanted.tokens]
            resources = [r for r in found if r is not None]
            if len(resources) < len(found):
                if fresh:
                    missing = wanted.tokens[found.index(None)]
                    raise ClusterError(
                        f"kubectl get {' '.join(args)}: the server doesn't have a resource type {missing!r}"
                    )
                continue
            namespace = None if wanted.all_namespaces else wanted.namespace
            try:
                if wanted.name:
                    return discovery.as_kubectl_shows(self.read(resources[0].path(wanted.name, namespace)))
                answers = [(r, self.read(r.path(None, namespace) + wanted.query())) for r in resources]
                return discovery.as_kubectl_prints(answers)
            except NotFound:
                if fresh or wanted.name:  # an object not there; or a list's version gone since the discovery
                    raise
        raise AssertionError("unreachable")

    def _resources(self, fresh: bool) -> list[discovery.Resource]:
        """The API server's resources (discovery.py), discovered once per server and again when `fresh`."""
        server = self.server()
        if fresh or server not in _DISCOVERED:
            accept = {"Accept": discovery.AGGREGATED}
            _DISCOVERED[server] = discovery.resources(self.read("/api", accept), self.read("/apis", accept))
        return _DISCOVERED[server]

    def read(self, path: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
        """GET `path` of the API server (`/api/v1/pods`) as JSON, with the admin's certificate (`_call`: when it is
        asked again). kubectl would be a process each time and decode and print every object again: listing the
        CRDs took 0.9 CPU-s in kubectl and 17 MB of output, this 0.1 (the server's own 3 MB)."""
        return self._call("GET", path, None, headers or {})

    def patch(self, path: str, patch: Any, kind: str) -> dict[str, Any]:
        """PATCH `path` with `patch`, a `json` patch or a `strategic` merge patch (each the same when sent twice, so
        tried again as `read` is)."""
        content = {"json": "application/json-patch+json", "strategic": "application/strategic-merge-patch+json"}
        return self._call("PATCH", path, json.dumps(patch).encode(), {"Content-Type": content[kind]})

    def _call(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> dict[str, Any]:
        """One request, tried again where kubectl's client tries again: a 503 or no answer up to TRIES times; a 429
        (the server busy, or a CRD's storage initializing right after it was created) after the server's
        Retry-After, up to client-go's 10 times."""
        request = urllib.request.Request(f"{self.server()}{path}", body, headers, method=method)
        context = self._admin_tls()
        attempt, busy = 1, 0
        while True:
            try:
                with urllib.request.urlopen(request, context=context, timeout=60) as answer:
                    loaded: dict[str, Any] = json.load(answer)
                    return loaded
            except urllib.error.HTTPError as err:
                if err.code == 429 and busy < RETRY_AFTER_TRIES:
                    busy += 1
                    time.sleep(_retry_after(err))
                    continue
                if err.code != 503 or attempt == TRIES:
                    said = f"{method} {path}: {err.code} {_message(err.read().decode(errors='replace').strip())}"
                    raise (NotFound if err.code == 404 else ClusterError)(said) from err
            except OSError as err:  # refused, reset, or no answer within the timeout
                if attempt == TRIES:
                    raise ClusterError(f"{method} {path}: {err}") from err
            time.sleep(5 * attempt)
            attempt += 1

    def inventory(self) -> dict[str, dict[str, Any]]:
        """Every object of the cluster but the cluster's own comings and goings (NOT_COUNTED):
        "<kind>[.<group>] <namespace>/<name>" -> its metadata."""
        listable = [
            r for r in self._resources(True) if {"list", "delete"} <= r.verbs and r.qualified not in NOT_COUNTED
        ]
        items = discovery.as_kubectl_prints([(r, self.read(r.path())) for r in listable])["items"]
        out = {}
        for item in items:
            group, metadata = item["apiVersion"].rpartition("/")[0], item["metadata"]
            kind = item["kind"] + (f".{group}" if group else "")
            out[f"{kind} {metadata.get('namespace', '')}/{metadata['name']}"] = metadata
        return out

    @property
    def baseline(self) -> Path:
        """The inventory before a stack's first apply on this cluster (its run folder: `down` removes it)."""
        return self.folder / "run" / "baseline.json"

    def record_baseline(self) -> None:
        """Take the baseline once per cluster: what was there before anything of a stack."""
        if not self.baseline.is_file():
            self.baseline.write_text(json.dumps(sorted(self.inventory()), indent=0) + "\n")

    def _admin_tls(self) -> ssl.SSLContext:
        """TLS to the API server: its CA trusted, the admin's certificate shown."""
        context = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        context.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return context

    def ready(self) -> bool:
        """Whether the API server answers /readyz with the admin's certificate."""
        if not self.kubeconfig.is_file():
            return False
        context = self._admin_tls()
        try:
            with urllib.request.urlopen(f"{self.server()}/readyz", context=context, timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def _start(self, name: str, command: list[str]) -> None:
        start_detached(command, self.logs / f"{name}.log", self._pid(name))

    def _wait(self, what: str, test: Any, log: str, timeout: float = 600) -> None:
        """Until `test()` holds; a component that exits fails it at once, so the deadline is only for one that hangs:
        600 s, since the API server once took more than 300 s to answer beside a full test run (load 10 and more)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if test():
                return
            started = {name for name in COMPONENTS if self._pid(name).is_file()}
            dead = started - set(self.running())
            if dead:
                raise ClusterError(f"{', '.join(sorted(dead))} exited: read {self.logs}/{sorted(dead)[0]}.log")
            time.sleep(0.2)
        raise ClusterError(f"{what} not ready after {timeout:.0f} s: read {self.logs}/{log}.log")

    def up(self, stack: dict[str, Any], region: str) -> None:
        """Start the control plane and KWOK (a running healthy cluster is kept), then create the stack's nodes
        and wait until every one is Ready."""
        from infra.localcluster.nodes import nodes

        started = time.monotonic()
        programs = build_all(["kube", "kwok"])
        if set(self.running()) != set(COMPONENTS) or not self.ready():
            self.down(quiet=True)
            for sub in ("logs", "run"):
                (self.folder / sub).mkdir(parents=True, exist_ok=True)
            certs.make(self.pki)
            self._start_control_plane(programs)
        firewall.write_rules(self.firewall_rules, stack)  # what this stack's rules open, from now on
        wanted = nodes(stack, region)
        if wanted:  # a stack with no pools (the engine's tests) makes a control plane alone
            self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=_list(wanted))
        names = {n["metadata"]["name"] for n in wanted}
        self._retire(names)

        def all_ready() -> bool:
            # Ready, and the node lifecycle controller has taken its not-ready taint off (what the scheduler reads).
            found = self.get("nodes")["items"]
            ready = {
                n["metadata"]["name"]
                for n in found
                if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))
                and not any(t["key"].startswith("node.kubernetes.io/") for t in n["spec"].get("taints") or [])
            }
            return names <= ready

        self._wait(f"{len(names)} nodes", all_ready, "kwok")
        print(
            f"cluster-local: Kubernetes {KUBERNETES_VERSION} at {self.server()}, {len(names)} nodes Ready "
            f"in {time.monotonic() - started:.1f} s; kubeconfig {self.kubeconfig}; logs {self.logs}",
            file=sys.stderr,
        )

    def _retire(self, keep: set[str]) -> None:
        """Drain and delete every fake node not in `keep` (its pool gone, resized down or recreated), as GKE drains
        a node before it deletes it: its pods evicted (a PodDisruptionBudget honoured for up to 2 minutes here, an
        hour on GKE), their controllers make them again on the nodes left."""
        from infra.localcluster.nodes import KWOK_ANNOTATION

        for node in self.get("nodes")["items"]:
            name, annotations = node["metadata"]["name"], node["metadata"].get("annotations") or {}
            if name in keep or annotations.get(KWOK_ANNOTATION[0]) != KWOK_ANNOTATION[1]:
                continue
            drained = self.kubectl(
                "drain", name, "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=120s", check=False
            )
            if drained.returncode:
                print(f"cluster-local: node {name} deleted undrained: {drained.stderr.strip()[-500:]}", file=sys.stderr)
            self.kubectl("delete", "node", name, "--wait")
            print(f"cluster-local: node {name} drained and deleted: the stack makes no such node now", file=sys.stderr)

    def _start_control_plane(self, programs: dict[str, Path]) -> None:
        pki = self.pki
        etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
        self._start(
            "etcd",
            [
                str(programs["etcd"]),
                f"--data-dir={self.folder / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=default=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync=true",  # a throwaway cluster: no fsync on every write
                "--quota-backend-bytes=2147483648",
            ],
        )
        proxy = self.folder / "run" / "firewall.sock"
        self._start(
            "firewall", [sys.executable, "-m", "infra.localcluster.firewall", str(proxy), str(self.firewall_rules)]
        )
        egress = self.folder / "run" / "egress.json"
        egress.write_text(firewall.egress_configuration(proxy))
        self.kubeconfig.write_text(_kubeconfig(f"https://127.0.0.1:{api_port}", pki))
        self.kubeconfig.chmod(0o600)
        self._start(
            "kube-apiserver",
            [
                str(programs["kube-apiserver"]),
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-cluster-ip-range={SERVICE_RANGE}",
                "--authorization-mode=Node,RBAC",
                # GKE runs privileged pods (the GPU networking DaemonSet in kube-system).
                "--allow-privileged=true",
                # GKE runs ExtendedResourceToleration: a pod that requests google.com/tpu or nvidia.com/gpu
                # tolerates the node taint of that name (https://cloud.google.com/kubernetes-engine/docs/how-to/gpus
                # "GKE automatically adds tolerations ... using the ExtendedResourceToleration admission
                # controller"; the same for TPUs).
                "--enable-admission-plugins=ExtendedResourceToleration",
                # A webhook's or an aggregated API's Service reached at a Ready endpoint's address and the pod's
                # port (GKE's control plane dials the pod, over the VPC, through the cluster's firewall); with
                # no Ready endpoint the call fails, as on GKE while a controller's pod is not Ready.
                "--enable-aggregator-routing=true",
                *_front_proxy_flags(pki),
                # ... through the cluster's firewall (infra/localcluster/firewall.py).
                f"--egress-selector-config-file={egress}",
            ],
        )
        self._wait("kube-apiserver", self.ready, "kube-apiserver")
        common = [f"--kubeconfig={self.kubeconfig}", "--leader-elect=false", "--bind-address=127.0.0.1"]
        self._start(
            "kube-controller-manager",
            [
                str(programs["kube-controller-manager"]),
                *common,
                f"--secure-port={free_port()}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                f"--cluster-signing-cert-file={pki / 'ca.crt'}",
                f"--cluster-signing-key-file={pki / 'ca.key'}",
                "--use-service-account-credentials=false",
                # Two busy cores can delay KWOK's heartbeats: a node is not taken for lost (and its pods marked
                # not ready, which KWOK does not undo) before two minutes without one.
                "--node-monitor-grace-period=2m",
            ],
        )
        self._start("kube-scheduler", [str(programs["kube-scheduler"]), *common, f"--secure-port={free_port()}"])
        self._start(
            "kwok",
            [
                str(programs["kwok"]),
                f"--kubeconfig={self.kubeconfig}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                f"--cidr={self.pod_range}",
                "--node-ip=127.0.0.1",
                # Each node's heartbeat as a kubelet sends it: a Lease renewed every 10 s, its status rarely
                # (infra/localcluster/stages.py NODE_STAGES).
                "--node-lease-duration-seconds=40",
                # KWOK's pod stages, but the controllers' pods Ready only once their controller serves
                # (infra/localcluster/stages.py).
                f"--config={self._kwok_config()}",
            ],
        )

    def _kwok_config(self) -> Path:
        from infra.localcluster.controllers import SERVED_NAMESPACES
        from infra.localcluster.stages import write_config

        return write_config(self.folder / "run" / "kwok.yaml", list(SERVED_NAMESPACES))

    def down(self, *, quiet: bool = False) -> None:
        """Stop every component and controller (SIGTERM, then SIGKILL after DOWN_GRACE_S) and remove the cluster's
        state."""
        for path in sorted((self.folder / "controllers").glob("*.pid")):
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.killpg(int(path.read_text()), signal.SIGTERM)
            path.unlink()
        for path in sorted((self.folder / "controllers").glob("*.address")):  # the pods' addresses held here
            release_address(path.read_text().strip())
            path.unlink()
        for _name, pid in self.running().items():
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + DOWN_GRACE_S
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in self.running().values():
            os.killpg(pid, signal.SIGKILL)
        for sub in ("etcd", "run", "pki", "controllers", "helm", "engine", "controller-crds", "metrics"):
            target = self.folder / sub
            if target.exists():
                subprocess.run(["rm", "-rf", str(target)], check=True)
        self.kubeconfig.unlink(missing_ok=True)
        if not quiet:
            print(f"cluster-local: stopped; logs kept in {self.logs}", file=sys.stderr)


# The resources each API server (by its address) was found to serve: Cluster._resources.
_DISCOVERED: dict[str, list[discovery.Resource]] = {}

# kubectl's verbs that may be sent again, and what kubectl says when the API server did not answer in time.
IDEMPOTENT = frozenset({"get", "apply", "patch", "wait"})
TRIES = 3
RETRY_AFTER_TRIES = 10  # client-go's rest client: at most 10 retries of a response that says Retry-After
_UNANSWERED = (
    "Client.Timeout exceeded",
    "request canceled",
    "TLS handshake timeout",
    "connection refused",
    "the server is currently unable to handle the request",
    "etcdserver: request timed out",
)


def _retry_after(err: urllib.error.HTTPError) -> float:
    """The seconds the server asked to wait (its Retry-After), 1 if it named none."""
    said = (err.headers.get("Retry-After") if err.headers else None) or ""
    with contextlib.suppress(ValueError):
        return max(1.0, float(said))
    return 1.0


def _message(body: str) -> str:
    """The API server's words: a Status's message, else the body as it came."""
    with contextlib.suppress(ValueError, AttributeError):
        return str(json.loads(body).get("message") or body)
    return body


def _unanswered(stderr: str) -> bool:
    return any(sign in stderr for sign in _UNANSWERED)


@cache
def kubectl_binary() -> Path:
    return build_all(["kube"])["kubectl"]


def _list(items: list[dict[str, Any]]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def _front_proxy_flags(pki: Path) -> list[str]:
    """The aggregator's client certificate, and whom an aggregated API trusts to say who the user is
    (https://kubernetes.io/docs/tasks/extend-kubernetes/configure-aggregation-layer/): Kueue's visibility server
    authenticates the API server's calls by it, as on GKE."""
    return [
        f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
        f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
        f"--requestheader-client-ca-file={pki / 'ca.crt'}",
        f"--requestheader-allowed-names={certs.FRONT_PROXY}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
    ]


def _kubeconfig(server: str, pki: Path) -> str:
    return f"""apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: {server}
    certificate-authority: {pki / "ca.crt"}
users:
- name: admin
  user:
    client-certificate: {pki / "admin.crt"}
    client-key: {pki / "admin.key"}
contexts:
- name: local
  context: {{cluster: local, user: admin}}
current-context: local
"""
