"""What GKE's controllers built in the cloud outside Terraform, removed before `cdktf destroy` takes the network.

The GKE Inference Gateway (a Gateway of class gke-l7-rilb, its HTTPRoute and InferencePool; the vllm-tpu
chart's gateway.yaml) is a regional internal Application Load Balancer that GKE's Gateway controller builds
from those objects: a forwarding rule, a target HTTP proxy, a URL map, backend services and health checks, a
firewall rule, and zonal network endpoint groups (NEGs) of the servers' pods. None of it is in Terraform's
state. `helm uninstall` does not wait for it to go, and `cdktf destroy` may delete the proxy-only subnet or the
cluster first: the load balancer is then left behind, and its NEGs and firewall rule stop the network's delete.

How they are found:
- the Gateway's annotations: GKE's Gateway controller writes the names (or resource paths) of what it built
  into `networking.gke.io/forwarding-rules`, `target-http-proxies` (older: `target-proxies`), `url-maps`,
  `backend-services`, `health-checks`, `firewalls`, `addresses` (GKE's "Deploying Gateways" guide shows them in
  `kubectl describe gateway`; the names start gkegw1-);
- the NEGs: GKE's NEG controller (kubernetes/ingress-gce) names them k8s1-<cluster>-<namespace>-<name>-<port>-
  <hash> and writes into each one's description the JSON {"cluster-uid", "namespace", "service-name", "port"}
  (pkg/utils/namer/namer.go NEG, pkg/utils/negdescription.go StandardNEGDescription); the cluster UID there is
  the kube-system namespace's UID. Its ServiceNetworkEndpointGroup objects in the namespace list them as well.

What runs, per Gateway, before `cdktf destroy`:
1. `gcloud container clusters get-credentials` (DNS endpoint) into a temporary kubeconfig;
2. read the Gateway's annotations and the namespace's ServiceNetworkEndpointGroups, and list what they name;
3. `kubectl delete httproute,gateway,inferencepool <name> --wait`: the Gateway carries GKE's finalizer
   (gateway.finalizer.networking.gke.io), so the delete returns once the controller has cleaned up;
4. poll the gcloud listings (forwarding rules, proxies, URL maps, backend services, health checks, firewall
   rules, NEGs by name and by description) until none is left, or stop the destroy and name what is.
Then each Service of type LoadBalancer (Saxml's HTTP server): GKE's service controller built a passthrough load
balancer for it (forwarding rule, backend service, health check, firewall rules), each part's description naming
the Service ({"kubernetes.io/service-name": "<ns>/<name>"}, or {"networking.gke.io/service-name": ...} with GKE
subsetting: kubernetes/ingress-gce pkg/utils/utils.go L4LBResourceDescription). The Service is deleted with
--wait (its finalizer service.kubernetes.io/load-balancer-cleanup holds it until the parts are gone) and the
forwarding rules and backend services naming it are listed until none is left.
If the cluster cannot be reached, nothing can ask GKE to clean up: the listings by GKE's naming (gkegw1- names
carrying the namespace and the Gateway's name, NEGs by description) are run, and the destroy is stopped with
what they find.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from infra import settings
from infra.config import Environment
from infra.config.serving import SaxmlServing, VllmServing

# Gateway annotation -> the gcloud compute group that lists what it names.
LB_ANNOTATIONS = {
    "networking.gke.io/forwarding-rules": "forwarding-rules",
    "networking.gke.io/target-http-proxies": "target-http-proxies",
    "networking.gke.io/target-proxies": "target-http-proxies",
    "networking.gke.io/target-https-proxies": "target-https-proxies",
    "networking.gke.io/url-maps": "url-maps",
    "networking.gke.io/backend-services": "backend-services",
    "networking.gke.io/health-checks": "health-checks",
    "networking.gke.io/firewalls": "firewall-rules",
    "networking.gke.io/addresses": "addresses",
}
# What the load balancer of a gke-l7-rilb Gateway is made of, as the dry run names it.
LB_PARTS = (
    "forwarding rule, target HTTP proxy, URL map, backend service and health check (named in the Gateway's "
    "networking.gke.io/* annotations, gkegw1-...), firewall rule, and zonal NEGs of the servers (k8s1-..., "
    'description {"cluster-uid", "namespace", ...})'
)
DELETE_KINDS = "httproute,gateway,inferencepool"


def _kubectl() -> list[str]:
    return settings.KUBECTL.command()


def _gcloud() -> list[str]:
    return settings.GCLOUD.command()


@dataclass(frozen=True)
class Gateway:
    namespace: str
    name: str


@dataclass
class Found:
    """What GKE built for one Gateway: names per gcloud compute group, NEGs as (name, zone)."""

    by_group: dict[str, set[str]] = field(default_factory=dict)
    negs: set[tuple[str, str]] = field(default_factory=set)

    def lines(self) -> list[str]:
        out = [f"{group}: {', '.join(sorted(names))}" for group, names in sorted(self.by_group.items()) if names]
        if self.negs:
            out.append("network-endpoint-groups: " + ", ".join(f"{n} ({z})" for n, z in sorted(self.negs)))
        return out

    def empty(self) -> bool:
        return not self.negs and not any(self.by_group.values())


def gateways(env: Environment) -> list[Gateway]:
    """The Inference Gateways the environment's releases create (one per vLLM deployment with `gateway`)."""
    from infra.constructs.serving import release_name  # the constructs load jsii: only when it is needed

    return [
        Gateway(env.identities[d.identity].namespace, release_name(key))
        for key, d in sorted(env.serving.items())
        if isinstance(d, VllmServing) and d.gateway
    ]


def lb_services(env: Environment) -> list[Gateway]:
    """The Services of type LoadBalancer the releases create (Saxml's HTTP server: `<release>-http`), as
    (namespace, name): GKE builds a passthrough Network Load Balancer for each (forwarding rule, backend service
    or target pool, health check, firewall rules), also outside Terraform."""
    from infra.constructs.serving import release_name

    return [
        Gateway(env.identities[d.identity].namespace, f"{release_name(key)}-http")
        for key, d in sorted(env.serving.items())
        if isinstance(d, SaxmlServing)
    ]


def _service_filter(svc: Gateway) -> str:
    # GKE's service controllers write the Service into each part's description: {"kubernetes.io/service-name":
    # "<ns>/<name>"} (cloud-provider-gcp) or {"networking.gke.io/service-name": ...} (kubernetes/ingress-gce
    # pkg/utils/utils.go L4LBResourceDescription, GKE subsetting).
    return f'description~"service-name\\":\\"{svc.namespace}/{svc.name}\\""'


def describe(env: Environment) -> list[str]:
    """What `make destroy` removes that is outside Terraform, one line each (empty: nothing)."""
    from infra.constructs.serving import GATEWAY_CLASS

    lines = [
        f"Gateway {gw.namespace}/{gw.name} ({GATEWAY_CLASS}), its HTTPRoute and InferencePool: GKE's Gateway "
        f"controller built its load balancer outside Terraform: {LB_PARTS}"
        for gw in gateways(env)
    ]
    lines += [
        f"Service {svc.namespace}/{svc.name} (type LoadBalancer): GKE built its passthrough load balancer outside "
        "Terraform: forwarding rule, backend service, health check, firewall rules (description names the "
        "Service)"
        for svc in lb_services(env)
    ]
    return lines


def _last(ref: str) -> str:
    return ref.strip().rstrip("/").rsplit("/", 1)[-1]


def _neg_filter(namespace: str, cluster_uid: str | None) -> str:
    parts = [f'description~"\\"namespace\\":\\"{namespace}\\""']
    if cluster_uid:
        parts.insert(0, f'description~"\\"cluster-uid\\":\\"{cluster_uid}\\""')
    return " AND ".join(parts)


class Teardown:
    def __init__(self, env: Environment, *, dry_run: bool) -> None:
        self.env = env
        self.dry_run = dry_run
        self.kubeconfig = ""

    def _call(self, command: list[str], *, quiet: bool = False) -> subprocess.CompletedProcess[str]:
        shown = " ".join(map(shlex.quote, command))
        if not quiet:
            print(f"running: {shown}", flush=True)
        extra = {"KUBECONFIG": self.kubeconfig} if self.kubeconfig else {}
        return subprocess.run(command, env={**os.environ, **extra}, capture_output=True, text=True, check=False)

    def _project(self) -> list[str]:
        return ["--project", self.env.project]

    def credentials(self) -> bool:
        env = self.env
        return (
            self._call(
                [
                    *_gcloud(), "container", "clusters", "get-credentials", env.cluster.name,
                    "--location", env.region, *self._project(), "--dns-endpoint",
                ]
            ).returncode
            == 0
        )  # fmt: skip

    def cluster_uid(self) -> str | None:
        done = self._call([*_kubectl(), "get", "namespace", "kube-system", "-o", "jsonpath={.metadata.uid}"])
        return done.stdout.strip() or None if done.returncode == 0 else None

    def from_cluster(self, gw: Gateway) -> Found:
        """What the Gateway's annotations and the namespace's ServiceNetworkEndpointGroups name."""
        found = Found()
        done = self._call([*_kubectl(), "get", "gateway", gw.name, "-n", gw.namespace, "-o", "json",
                           "--ignore-not-found"])  # fmt: skip
        if done.returncode == 0 and done.stdout.strip():
            annotations = (json.loads(done.stdout).get("metadata") or {}).get("annotations") or {}
            for key, group in LB_ANNOTATIONS.items():
                names = {_last(r) for r in str(annotations.get(key, "")).split(",") if r.strip()}
                found.by_group.setdefault(group, set()).update(names)
        done = self._call([*_kubectl(), "get", "servicenetworkendpointgroups", "-n", gw.namespace, "-o", "json"])
        if done.returncode == 0 and done.stdout.strip():
            for item in json.loads(done.stdout).get("items") or []:
                for neg in (item.get("status") or {}).get("networkEndpointGroups") or []:
                    link = str(neg.get("selfLink", ""))
                    zone = link.split("/zones/", 1)[1].split("/", 1)[0] if "/zones/" in link else ""
                    found.negs.add((_last(link), zone))
        return found

    def listed(self, gw: Gateway, known: Found, cluster_uid: str | None) -> Found:
        """What gcloud still lists of `known`, and the NEGs whose description names the namespace (and cluster).
        With nothing known (no cluster to ask), the load balancer's parts by GKE's naming instead."""
        left = Found()
        for group in sorted(set(LB_ANNOTATIONS.values())):
            names = known.by_group.get(group) or set()
            if names:
                query = f"name=({','.join(sorted(names))})"
            elif known.empty():
                query = f"name~^gkegw1-.*-{gw.namespace}-{gw.name}-"
            else:
                continue
            done = self._call([*_gcloud(), "compute", group, "list", *self._project(), "--filter", query,
                               "--format", "value(name)"], quiet=True)  # fmt: skip
            left.by_group[group] = set(done.stdout.split()) if done.returncode == 0 else names
        done = self._call([*_gcloud(), "compute", "network-endpoint-groups", "list", *self._project(), "--filter",
                           _neg_filter(gw.namespace, cluster_uid), "--format", "value(name,zone.basename())"],
                          quiet=True)  # fmt: skip
        rows = [line.split() for line in done.stdout.splitlines() if line.strip()]
        left.negs = {(r[0], r[1] if len(r) > 1 else "") for r in rows} if done.returncode == 0 else set(known.negs)
        return left

    def wait_gone(self, gw: Gateway, known: Found, cluster_uid: str | None) -> Found:
        timeout, poll = settings.TEARDOWN_TIMEOUT.seconds(), settings.TEARDOWN_POLL.seconds()
        deadline = time.monotonic() + timeout
        while True:
            left = self.listed(gw, known, cluster_uid)
            if left.empty() or time.monotonic() >= deadline:
                return left
            print(f"  waiting for GKE to remove: {'; '.join(left.lines())}", flush=True)
            time.sleep(poll)

    def run(self) -> int:
        found_any = gateways(self.env)
        services = lb_services(self.env)
        if not found_any and not services:
            return 0
        if self.dry_run:
            cmd = " ".join(map(shlex.quote, [*_kubectl(), "delete", DELETE_KINDS]))
            env = self.env
            print(f"dry run, would run: gcloud container clusters get-credentials {env.cluster.name} --location "
                  f"{env.region} --project {env.project} --dns-endpoint (a temporary kubeconfig)")  # fmt: skip
            for gw in found_any:
                print(f"dry run, would run: kubectl get gateway {gw.name} -n {gw.namespace} -o json "
                      f"(its networking.gke.io/* annotations), kubectl get servicenetworkendpointgroups -n "
                      f"{gw.namespace}")  # fmt: skip
                print(f"dry run, would run: {cmd} {gw.name} -n {gw.namespace} --ignore-not-found --wait=true "
                      "--timeout=15m")  # fmt: skip
                print(f"dry run, would wait until gcloud compute forwarding-rules, target-http-proxies, url-maps, "
                      f"backend-services, health-checks, firewall-rules list none of them, and gcloud compute "
                      f"network-endpoint-groups list --filter '{_neg_filter(gw.namespace, '<kube-system uid>')}' "
                      "lists none")  # fmt: skip
            for svc in services:
                print(f"dry run, would run: kubectl delete service {svc.name} -n {svc.namespace} --ignore-not-found "
                      f"--wait=true --timeout=15m, then wait until gcloud compute forwarding-rules and "
                      f"backend-services list --filter '{_service_filter(svc)}' list none")  # fmt: skip
            return 0
        missing = [tool[0] for tool in (_gcloud(), _kubectl()) if shutil.which(tool[0]) is None]
        if missing:
            print(f"error: {', '.join(missing)} not found: GKE's load balancers cannot be removed", file=sys.stderr)
            return 2
        with tempfile.TemporaryDirectory() as tmp:
            self.kubeconfig = str(Path(tmp) / "kubeconfig")
            reachable = self.credentials()
            cluster_uid = self.cluster_uid() if reachable else None
            for gw in found_any:
                known = self.from_cluster(gw) if reachable else Found()
                print(f"  {gw.namespace}/{gw.name}: " + ("; ".join(known.lines()) or "nothing recorded on the Gateway"))
                if reachable:
                    done = self._call([*_kubectl(), "delete", DELETE_KINDS, gw.name, "-n", gw.namespace,
                                       "--ignore-not-found", "--wait=true", "--timeout=15m"])  # fmt: skip
                    if done.returncode != 0:
                        print(f"error: deleting {gw.namespace}/{gw.name}: {done.stderr.strip()}", file=sys.stderr)
                        return 1
                    left = self.wait_gone(gw, known, cluster_uid)
                else:
                    print(f"  the cluster {self.env.cluster.name} cannot be reached: listing by GKE's naming")
                    left = self.listed(gw, known, None)
                if not left.empty():
                    print(
                        f"error: Gateway {gw.namespace}/{gw.name}: GKE's load balancer is still there: "
                        + "; ".join(left.lines())
                        + " (delete them with gcloud compute <group> delete, then destroy again)",
                        file=sys.stderr,
                    )
                    return 1
                print(f"  {gw.namespace}/{gw.name}: GKE removed its load balancer")
            for svc in services:
                if reachable:
                    done = self._call([*_kubectl(), "delete", "service", svc.name, "-n", svc.namespace,
                                       "--ignore-not-found", "--wait=true", "--timeout=15m"])  # fmt: skip
                    if done.returncode != 0:
                        print(f"error: deleting {svc.namespace}/{svc.name}: {done.stderr.strip()}", file=sys.stderr)
                        return 1
                parts = self.service_parts(svc, wait=reachable)
                if parts:
                    print(f"error: Service {svc.namespace}/{svc.name}: GKE's load balancer is still there: "
                          f"{'; '.join(parts)}", file=sys.stderr)  # fmt: skip
                    return 1
                print(f"  {svc.namespace}/{svc.name}: no load balancer left")
        return 0

    def service_parts(self, svc: Gateway, *, wait: bool) -> list[str]:
        """What gcloud lists of a Service's load balancer (by description), polled until none while `wait`."""
        timeout = settings.TEARDOWN_TIMEOUT.seconds() if wait else 0.0
        poll = settings.TEARDOWN_POLL.seconds()
        deadline = time.monotonic() + timeout
        while True:
            left = []
            for group in ("forwarding-rules", "backend-services"):
                done = self._call([*_gcloud(), "compute", group, "list", *self._project(), "--filter",
                                   _service_filter(svc), "--format", "value(name)"], quiet=True)  # fmt: skip
                names = done.stdout.split() if done.returncode == 0 else ["(the listing failed)"]
                left += [f"{group}: {', '.join(names)}"] if names else []
            if not left or time.monotonic() >= deadline:
                return left
            print(f"  waiting for GKE to remove: {'; '.join(left)}", flush=True)
            time.sleep(poll)
