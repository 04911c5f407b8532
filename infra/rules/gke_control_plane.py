"""GKE's private control plane: what it reaches on the nodes (the webhooks' and aggregated APIs' ports the firewall
must open), its range, and the DNS endpoint the providers connect through."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from typing import Any

from infra.catalogue.controllers import CONTROLLERS
from infra.rules import Finding, rule
from infra.rules.manifest_subject import ReleaseContext, _pods
from infra.rules.sources import DOCS, PRIVATE_DOC
from infra.rules.terraform_subject import _clusters, resources

# The ports GKE's own firewall rule for a private cluster opens from the control plane to the nodes.
GKE_OPENS = {443, 10250}


def control_plane_openings(stack: dict[str, Any]) -> Iterator[tuple[str, str, set[int]]]:
    """(cluster's field, its control plane range, the tcp ports the stack's firewall rules open from it to the
    nodes, GKE's own included) of every private cluster of the stack."""
    for _, where, cluster in _clusters(stack):
        master = (cluster.get("private_cluster_config") or {}).get("master_ipv4_cidr_block")
        if not master:
            continue
        opened: set[int] = set(GKE_OPENS)
        for _, fw in resources(stack, "google_compute_firewall"):
            if fw.get("direction", "INGRESS") != "INGRESS" or master not in (fw.get("source_ranges") or []):
                continue
            for allow in fw.get("allow") or []:
                if allow.get("protocol") in ("tcp", "all"):
                    opened |= {int(p) for p in allow.get("ports") or [] if str(p).isdigit()}
        yield f"{where}.private_cluster_config.master_ipv4_cidr_block", master, opened


@rule(
    id="gke.private.webhook-ports-open",
    system="GKE",
    layer="admission",
    summary=(
        "In a private cluster, the control plane range may reach nodes on every port a controller's admission "
        "webhooks and aggregated APIs serve on."
    ),
    source=(
        f"{PRIVATE_DOC} (GKE's own rule opens 443 and 10250 only); ports: "
        + ", ".join(
            f"{c.chart} {', '.join(str(p) for p in (c.webhook_port, *c.api_ports))}" for c in CONTROLLERS.values()
        )
    ),
    subject="terraform",
)
def _webhook_ports(stack: dict[str, Any]) -> Iterator[Finding]:
    wanted = {
        (name, port, "webhook" if port == CONTROLLERS[name].webhook_port else "aggregated API")
        for name in (r.get("chart") for _, r in resources(stack, "helm_release") if r.get("repository"))
        if name in CONTROLLERS
        for port in (CONTROLLERS[name].webhook_port, *CONTROLLERS[name].api_ports)
    }
    for field, master, opened in control_plane_openings(stack):
        for name, port, what in sorted(wanted):
            if port not in opened:
                yield Finding(
                    field,
                    master,
                    f"no firewall rule lets {master} reach the nodes on tcp:{port} ({name}'s {what}): "
                    + ("admission calls would time out" if what == "webhook" else "its API's calls would time out"),
                )


def _served_port(objects: list[dict[str, Any]], namespace: str, service: dict[str, Any]) -> int | str | None:
    """The pod port a webhook's or APIService's `service` reference reaches: the Service's targetPort (by
    number, or by name through the container ports of the release's pods), or None where the release does not
    render the Service."""
    wanted = int(service.get("port") or 443)
    for obj in objects:
        meta = obj.get("metadata") or {}
        if obj.get("kind") != "Service" or meta.get("name") != service.get("name"):
            continue
        if (meta.get("namespace") or namespace) != (service.get("namespace") or namespace):
            continue
        for port in (obj.get("spec") or {}).get("ports") or []:
            if int(port.get("port") or 0) != wanted:
                continue
            target = port.get("targetPort", wanted)
            if isinstance(target, int) or str(target).isdigit():
                return int(target)
            for _at, _meta, spec in _pods(objects):
                for c in spec.get("containers") or []:
                    for p in c.get("ports") or []:
                        if p.get("name") == target:
                            return int(p["containerPort"])
            return str(target)
    return None


@rule(
    id="gke.private.control-plane-reaches-served-apis",
    system="GKE",
    layer="apply",
    summary=(
        "In a private cluster, every aggregated API (APIService) and admission webhook a release renders is served "
        "on a pod port the control plane range may reach: 443, 10250, or one a firewall rule of the stack opens "
        "from that range; else every call to it times out (an autoscaler's metrics, a namespace's deletion)."
    ),
    source=(
        f"{PRIVATE_DOC} (GKE's own rule opens 443 and 10250 only); "
        "https://kubernetes.io/docs/tasks/extend-kubernetes/configure-aggregation-layer/ (the API server proxies "
        "an APIService's calls to its Service's endpoints: the pods' port)"
    ),
    subject="manifest",
    kinds=("APIService", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"),
)
def _served_apis(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    everything = ctx.stack_objects.get(ctx.name) or objects
    served: list[tuple[str, dict[str, Any]]] = []
    for obj in objects:
        name = (obj.get("metadata") or {}).get("name")
        if obj.get("kind") == "APIService" and (obj.get("spec") or {}).get("service"):
            served.append((f"APIService/{name}: spec.service", obj["spec"]["service"]))
        for i, hook in enumerate(obj.get("webhooks") or []):
            if (hook.get("clientConfig") or {}).get("service"):
                served.append(
                    (f"{obj['kind']}/{name}: webhooks[{i}].clientConfig.service", hook["clientConfig"]["service"])
                )
    if not served:
        return
    for _field, master, opened in control_plane_openings(ctx.stack):
        for at, service in served:
            port = _served_port(everything, ctx.namespace, service)
            if port is None or port in opened:
                continue
            yield Finding(
                at,
                f"{service.get('namespace')}/{service.get('name')}",
                f"served on the pods' port {port}, which no firewall rule opens from the control plane range "
                f"{master} (open: {', '.join(str(p) for p in sorted(opened))}): every call to it would time out",
            )


@rule(
    id="gke.private.master-cidr-28",
    system="GKE",
    layer="apply",
    summary="The control plane range of a private cluster is a /28 from private address space.",
    source=f"{DOCS}/how-to/legacy/network-isolations (master-ipv4-cidr: a /28 RFC 1918 range)",
    subject="terraform",
    types=("google_container_cluster",),
)
def _master_28(clusters: list[tuple[str, dict[str, Any]]], stack: dict[str, Any]) -> Iterator[Finding]:
    for where, cluster in clusters:
        master = (cluster.get("private_cluster_config") or {}).get("master_ipv4_cidr_block")
        if master is None:
            continue
        net = ipaddress.ip_network(master)
        if net.prefixlen != 28 or not net.is_private:
            yield Finding(f"{where}.private_cluster_config.master_ipv4_cidr_block", master, "must be a private /28")


@rule(
    id="gke.dns-endpoint-allows-external-traffic",
    system="GKE",
    layer="apply",
    summary=(
        "Providers that reach the cluster through its DNS-based endpoint need it to allow external traffic "
        "(control_plane_endpoints_config.dns_endpoint_config.allow_external_traffic, provider >= 6.11.0)."
    ),
    source=(
        f"{DOCS}/concepts/network-isolation#dns-based_endpoint; hashicorp/terraform-provider-google "
        "v6.11.0 (Add support for GKE DNS-based endpoints, #20193)"
    ),
    subject="terraform",
)
def _dns_endpoint(stack: dict[str, Any]) -> Iterator[Finding]:
    hosts = [p.get("host", "") for p in (stack.get("provider") or {}).get("kubernetes") or []]
    hosts += [(p.get("kubernetes") or {}).get("host", "") for p in (stack.get("provider") or {}).get("helm") or []]
    for logical_id, where, cluster in _clusters(stack):
        uses_dns = any(f"google_container_cluster.{logical_id}.control_plane_endpoints_config" in h for h in hosts)
        dns = (cluster.get("control_plane_endpoints_config") or {}).get("dns_endpoint_config") or {}
        if uses_dns and dns.get("allow_external_traffic") is not True:
            yield Finding(
                f"{where}.control_plane_endpoints_config.dns_endpoint_config.allow_external_traffic",
                dns.get("allow_external_traffic"),
                "the Kubernetes and Helm providers connect through the DNS endpoint: set it true",
            )
