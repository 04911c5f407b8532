"""The GKE Inference Gateway: an InferencePool of the model servers, its endpoint picker, GKE's policies for the
pool, and what the cluster and VPC need for a regional internal Gateway."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from infra.catalogue.gcp_apis import INFERENCE_GATEWAY_API
from infra.rules import Finding, containers, pod_templates, rule, selects, where
from infra.rules.manifest_subject import ReleaseContext
from infra.rules.terraform_subject import resources

if TYPE_CHECKING:
    from infra.config import Environment

GAIE = "kubernetes-sigs/gateway-api-inference-extension @ v1.5.0"
GKE_POLICIES = (
    "GoogleCloudPlatform/gke-gateway-api @ fc40d606 config/crd/networking.gke.io_healthcheckpolicies.yaml "
    "(x-kubernetes-validations of each *HealthCheck block)"
)


def _server_templates(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(where, pod template, object) of every pod template of the release."""
    return [(f"{where(obj)}: {path}", template, obj) for obj in objects for path, template in pod_templates(obj)]


@rule(
    id="gaie.pool-selects-servers",
    system="GKE Inference Gateway (InferencePool)",
    layer="admission",
    summary=(
        "An InferencePool selects the pods that serve HTTP on its target port, and only those: a multi-host "
        "group's workers serve nothing, and the picker would route requests to them."
    ),
    source=(
        f"{GAIE} api/v1/inferencepool_types.go (selector: the pods of the pool, in its namespace; targetPorts: "
        "the port the model servers listen on); kubernetes-sigs/lws (only the leader of a vLLM TPU group serves)"
    ),
    subject="manifest",
)
def _pool_selects(objects: list[dict[str, Any]], ctx: Any) -> Iterator[Finding]:
    templates = _server_templates(objects)
    for pool in (o for o in objects if o.get("kind") == "InferencePool"):
        spec = pool.get("spec") or {}
        selector = (spec.get("selector") or {}).get("matchLabels") or {}
        ports = {p.get("number") for p in spec.get("targetPorts") or []}
        selected = [
            (at, t) for at, t, _ in templates if selects(selector, (t.get("metadata") or {}).get("labels") or {})
        ]
        if not selected:
            yield Finding(f"{where(pool)}: spec.selector.matchLabels", selector, "selects no pod of the release")
        for at, template in selected:
            served = {
                p.get("containerPort")
                for _, c in containers(template.get("spec") or {})
                for p in c.get("ports") or []
                if c.get("readinessProbe")
            }
            if not ports & served:
                yield Finding(
                    f"{where(pool)}: spec.selector.matchLabels",
                    selector,
                    f"selects {at}, which serves none of the target ports {sorted(ports)} (no ready HTTP server)",
                )


@rule(
    id="gaie.failure-mode-explicit",
    system="GKE Inference Gateway (InferencePool)",
    layer="admission",
    summary=(
        "An InferencePool says what happens when its endpoint picker is down (failureMode): the CRD's default is "
        "FailClose, which refuses every request while the picker restarts."
    ),
    source=f"{GAIE} api/v1/inferencepool_types.go (EndpointPickerRef.failureMode, default FailClose)",
    subject="manifest",
    kinds=("InferencePool",),
)
def _failure_mode(objects: list[dict[str, Any]], ctx: Any) -> Iterator[Finding]:
    for pool in objects:
        ref = (pool.get("spec") or {}).get("endpointPickerRef") or {}
        if "failureMode" not in ref:
            yield Finding(f"{where(pool)}: spec.endpointPickerRef.failureMode", None, "set FailOpen or FailClose")


@rule(
    id="gke.inference-gateway-policies",
    system="GKE Gateway (HealthCheckPolicy, GCPBackendPolicy)",
    layer="admission",
    summary=(
        "GKE's policies for an InferencePool target a pool of the release; its health check names a port only "
        "with portSpecification USE_FIXED_PORT (the CRD's CEL rules) and probes a path vLLM's API key does not "
        "guard. Held here too because GKE's policy CRDs are optional in the pinned schemas (crds.yaml)."
    ),
    source=(
        f"{GKE_POLICIES}: \"self.portSpecification == 'USE_SERVING_PORT' || !has(self.portSpecification) ? "
        '!has(self.port) && !has(self.portName) : true"; vllm/entrypoints/serve/middleware/authenticate.py'
    ),
    subject="manifest",
)
def _gke_policies(objects: list[dict[str, Any]], ctx: Any) -> Iterator[Finding]:
    pools = {(o.get("metadata") or {}).get("name") for o in objects if o.get("kind") == "InferencePool"}
    for policy in (o for o in objects if o.get("kind") in ("HealthCheckPolicy", "GCPBackendPolicy")):
        target = (policy.get("spec") or {}).get("targetRef") or {}
        if target.get("kind") == "InferencePool" and target.get("name") not in pools:
            yield Finding(f"{where(policy)}: spec.targetRef.name", target.get("name"), "no InferencePool of that name")
        if policy.get("kind") != "HealthCheckPolicy":
            continue
        config = ((policy.get("spec") or {}).get("default") or {}).get("config") or {}
        for block, check in config.items():
            if not block.endswith("HealthCheck") or not isinstance(check, dict):
                continue
            spec = check.get("portSpecification", "USE_SERVING_PORT")
            at = f"{where(policy)}: spec.default.config.{block}"
            if spec == "USE_SERVING_PORT" and ("port" in check or "portName" in check):
                yield Finding(f"{at}.port", check.get("port"), "a port needs portSpecification: USE_FIXED_PORT")
            if spec == "USE_FIXED_PORT" and ("port" not in check or "portName" in check):
                yield Finding(f"{at}.port", check.get("port"), "USE_FIXED_PORT needs port and no portName")
            path = str(check.get("requestPath", "/"))
            if path.startswith(("/v1", "/v2", "/inference", "/cohere")):
                yield Finding(f"{at}.requestPath", path, "behind vLLM's API key (401): use /health")


@rule(
    id="gke.inference-gateway-prerequisites",
    system="GKE Gateway / Cloud Load Balancing",
    layer="apply",
    summary=(
        "A stack that serves through the Inference Gateway (a regional internal Gateway) enables the cluster's "
        "Gateway API (CHANNEL_STANDARD), has an ACTIVE proxy-only subnet in the region (no flow logs: refused "
        "there), a firewall rule that lets the proxy range and Google's health checkers reach the servers, and "
        "the Network Services API enabled (the endpoint picker is a Service Extensions callout)."
    ),
    source=(
        "https://cloud.google.com/kubernetes-engine/docs/how-to/deploy-gke-inference-gateway; "
        "https://cloud.google.com/kubernetes-engine/docs/how-to/configure-gateway-resources (proxy-only subnet); "
        "https://cloud.google.com/load-balancing/docs/firewall-rules; "
        "https://cloud.google.com/service-extensions/docs/configure-callout (Network Services API); "
        "hashicorp/google 7.45.0 "
        "google_compute_subnetwork log_config ('Flow logging isn't supported if the subnet `purpose` field is set "
        "to subnetwork is `REGIONAL_MANAGED_PROXY` or `GLOBAL_MANAGED_PROXY`')"
    ),
    subject="terraform",
)
def _prerequisites(stack: dict[str, Any]) -> Iterator[Finding]:
    gateways = [
        body.get("name")
        for _, body in resources(stack, "helm_release")
        if any(json.loads(v).get("gateway", {}).get("enabled") for v in body.get("values") or [] if v.startswith("{"))
    ]
    if not gateways:
        return
    enabled = {b.get("service") for _, b in resources(stack, "google_project_service")}
    if INFERENCE_GATEWAY_API[0] not in enabled:
        yield Finding("google_project_service", INFERENCE_GATEWAY_API[0], f"releases {gateways} need it enabled")
    for where_, cluster in resources(stack, "google_container_cluster"):
        channel = (cluster.get("gateway_api_config") or {}).get("channel")
        if channel != "CHANNEL_STANDARD":
            yield Finding(f"{where_}.gateway_api_config.channel", channel, f"releases {gateways} need CHANNEL_STANDARD")
    proxies = [
        (w, b) for w, b in resources(stack, "google_compute_subnetwork") if b.get("purpose") == "REGIONAL_MANAGED_PROXY"
    ]
    if not proxies:
        yield Finding("google_compute_subnetwork", None, f"releases {gateways} need a REGIONAL_MANAGED_PROXY subnet")
    for w, body in proxies:
        if body.get("role") != "ACTIVE":
            yield Finding(f"{w}.role", body.get("role"), "ACTIVE")
        if body.get("log_config"):
            yield Finding(f"{w}.log_config", body["log_config"], "flow logs are refused on a proxy-only subnet")
        cidr = body.get("ip_cidr_range")
        allowed = [
            b for _, b in resources(stack, "google_compute_firewall")
            if b.get("direction") == "INGRESS" and cidr in (b.get("source_ranges") or []) and b.get("allow")
        ]  # fmt: skip
        if not allowed:
            yield Finding(f"{w}.ip_cidr_range", cidr, "no INGRESS firewall rule lets the proxies reach the servers")


def _allowed_ports(stack: dict[str, Any], source: str) -> set[int]:
    """TCP ports INGRESS firewall rules of the stack allow from `source` (a range they name)."""
    ports: set[int] = set()
    for _, rule_ in resources(stack, "google_compute_firewall"):
        if rule_.get("direction") != "INGRESS" or source not in (rule_.get("source_ranges") or []):
            continue
        for allow in rule_.get("allow") or []:
            if allow.get("protocol") in ("tcp", "all"):
                for port in allow.get("ports") or []:
                    low, _, high = str(port).partition("-")
                    ports.update(range(int(low), int(high or low) + 1))
    return ports


@rule(
    id="gaie.proxies-reach-picker-and-servers",
    system="GKE Inference Gateway / Cloud Load Balancing",
    layer="pod-start",
    summary=(
        "The load balancer's proxies send from the proxy-only subnet to the endpoint picker's ext-proc port (the "
        "InferencePool's endpointPickerRef) and to the model servers' target ports: the VPC allows both from that "
        "range, as the ports the release renders say (the VPC denies all other ingress)."
    ),
    source=(
        "https://cloud.google.com/load-balancing/docs/firewall-rules ('an ingress allow firewall rule that permits "
        "traffic from the proxy-only subnet to reach the backend instances'); "
        f"{GAIE} config/charts/inferencepool/templates/inferencepool.yaml (endpointPickerRef.port.number)"
    ),
    subject="manifest",
)
def _proxies_reach(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    pools = [o for o in objects if o.get("kind") == "InferencePool"]
    if not pools:
        return
    ranges = [
        str(b.get("ip_cidr_range"))
        for _, b in resources(ctx.stack, "google_compute_subnetwork")
        if b.get("purpose") == "REGIONAL_MANAGED_PROXY"
    ]
    for cidr in ranges:
        allowed = _allowed_ports(ctx.stack, cidr)
        for pool in pools:
            spec = pool.get("spec") or {}
            wanted = {
                "spec.endpointPickerRef.port.number": [
                    ((spec.get("endpointPickerRef") or {}).get("port") or {}).get("number")
                ],
                "spec.targetPorts": [p.get("number") for p in spec.get("targetPorts") or []],
            }
            for field, ports in wanted.items():
                for port in ports:
                    if port is not None and int(port) not in allowed:
                        yield Finding(
                            f"{where(pool)}: {field}",
                            port,
                            f"the proxy-only subnet {cidr} may not reach this port: no INGRESS firewall rule "
                            f"allows tcp:{port} from it",
                        )


@rule(
    id="gke.inference-gateway-needs-proxy-only-subnet",
    system="GKE Gateway (gke-l7-rilb)",
    layer="apply",
    summary=(
        "A vLLM deployment behind the Inference Gateway gets a regional internal Application Load Balancer, whose "
        "proxies need a proxy-only subnet in the region: the environment names its range (network.proxy_only_cidr)."
    ),
    source=(
        "https://cloud.google.com/kubernetes-engine/docs/how-to/configure-gateway-resources (proxy-only subnet); "
        "https://cloud.google.com/load-balancing/docs/proxy-only-subnets"
    ),
    subject="environment",
)
def _proxy_only_subnet(env: Environment) -> Iterator[Finding]:
    if env.network.proxy_only_cidr is not None:
        return
    for key, d in env.serving.items():
        if getattr(d, "gateway", False):
            yield Finding(
                ("serving", key, "gateway"),
                True,
                "the Inference Gateway's regional load balancer needs a proxy-only subnet: set "
                "network.proxy_only_cidr (a /23, for example 10.129.0.0/23)",
            )
