"""Managed Prometheus and the Horizontal Pod Autoscaler: what a release declares to be scraped reaches its pods,
and an autoscaler scales on a metric that is collected and that its server exports.

A PodMonitoring that selects no pod, names a port its pods do not have, or one the namespace's NetworkPolicies keep
the collectors (gmp-system) from, is accepted by the API server and collects nothing; an HPA on a metric nobody
collects reads no value and never scales ("unable to get metric ... no metrics returned from custom metrics API").
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from infra.catalogue.charts import SERVING_CHART
from infra.catalogue.cloud_metrics import MONITORING_NAMESPACE
from infra.catalogue.controllers import CONTROLLERS
from infra.catalogue.serving_metrics import ADAPTER_SOURCE, signals_of
from infra.rules import Finding, containers, pod_templates, rule, selects, where
from infra.rules.manifest_subject import ReleaseContext
from infra.rules.terraform_subject import resources

if TYPE_CHECKING:
    from infra.config import Environment

PODMONITORING_CRD = (
    "GoogleCloudPlatform/prometheus-engine charts/operator/crds/monitoring.googleapis.com_podmonitorings.yaml @ "
    "2ffde4ec (v1: spec.selector and spec.endpoints required; each endpoint's port, by name or number, and interval, "
    "a Prometheus duration)"
)
GMP_DOC = (
    "https://cloud.google.com/stackdriver/docs/managed-prometheus/setup-managed (PodMonitoring: the selector's pods, "
    "scraped on the named port by the collectors in gmp-system)"
)
DURATION = re.compile(r"^([0-9]+(ms|s|m|h))+$")
SCALABLE = {"Deployment": "apps/v1", "StatefulSet": "apps/v1", "LeaderWorkerSet": "leaderworkerset.x-k8s.io/v1"}


def _labels(template: dict[str, Any]) -> dict[str, str]:
    return (template.get("metadata") or {}).get("labels") or {}


def _selected(objects: list[dict[str, Any]], match: dict[str, str]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(object, pod template) of every pod template of the release whose labels carry all of `match`."""
    return [
        (obj, template)
        for obj in objects
        for _, template in pod_templates(obj)
        if match and selects(match, _labels(template))
    ]


def _controller_pods(namespace: str, match: dict[str, str]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(its Deployment, pod template) of a pinned controller in `namespace` that `match` selects: its metrics port, as
    its chart makes it (infra/catalogue/controllers.py)."""
    out = []
    for name, c in CONTROLLERS.items():
        if c.namespace == namespace and c.metrics_port and match and selects(match, dict(c.metrics_pod_labels)):
            port_name, number = c.metrics_port
            template = {
                "metadata": {"labels": dict(c.metrics_pod_labels)},
                "spec": {"containers": [{"name": "manager", "ports": [{"name": port_name, "containerPort": number}]}]},
            }
            deployment = {"kind": "Deployment", "metadata": {"name": f"{name}-controller-manager"}, "controller": name}
            out.append((deployment, template))
    return out


def _port(template: dict[str, Any], port: Any) -> int | None:
    """The container port number a PodMonitoring endpoint's port (name or number) is, on this pod; None if none."""
    for _, c in containers(template.get("spec") or {}):
        for p in c.get("ports") or []:
            if p.get("name") == port or p.get("containerPort") == port:
                return int(p["containerPort"])
    return None


def _monitoring_reaches(stack: dict[str, Any], namespace: str) -> set[int] | None:
    """The ports the namespace's NetworkPolicies admit from gmp-system; None where no policy isolates its pods."""
    policies = [
        b for _, b in resources(stack, "kubernetes_network_policy_v1") if b["metadata"]["namespace"] == namespace
    ]
    if not any("Ingress" in ((b.get("spec") or {}).get("policy_types") or []) for b in policies):
        return None
    ports: set[int] = set()
    for body in policies:
        for ingress in (body.get("spec") or {}).get("ingress") or []:
            sources = ingress.get("from") or []
            if any(
                ((s.get("namespace_selector") or {}).get("match_labels") or {}).get("kubernetes.io/metadata.name")
                == MONITORING_NAMESPACE
                for s in sources
            ):
                ports |= {int(p["port"]) for p in ingress.get("ports") or [] if str(p.get("port", "")).isdigit()}
    return ports


@rule(
    id="monitoring.pod-monitoring-reaches-its-pods",
    system="Google Cloud Managed Service for Prometheus",
    layer="admission",
    summary=(
        "A PodMonitoring selects pods of its release (or of the pinned controller of its namespace), on a port those "
        "pods have and the namespace's NetworkPolicies admit from gmp-system, at a Prometheus-duration interval, with "
        "the scheme and bearer token a guarded metrics server demands (a controller's, the endpoint picker's): else "
        "it is accepted and collects nothing."
    ),
    source=f"{PODMONITORING_CRD}; {GMP_DOC}",
    subject="manifest",
)
def _pod_monitoring(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    admitted = _monitoring_reaches(ctx.stack, ctx.namespace)
    for pm in (o for o in objects if o.get("kind") == "PodMonitoring"):
        spec = pm.get("spec") or {}
        match = (spec.get("selector") or {}).get("matchLabels") or {}
        pods = _selected(objects, match) or _controller_pods(ctx.namespace, match)
        if not pods:
            yield Finding(
                f"{where(pm)}: spec.selector.matchLabels", match, "selects no pod of this release or its controller"
            )
        endpoints = spec.get("endpoints") or []
        if not endpoints:
            yield Finding(f"{where(pm)}: spec.endpoints", endpoints, "no endpoint: nothing is scraped")
        for i, endpoint in enumerate(endpoints):
            at = f"{where(pm)}: spec.endpoints[{i}]"
            interval = str(endpoint.get("interval", ""))
            if not DURATION.match(interval):
                yield Finding(f"{at}.interval", endpoint.get("interval"), "required, a Prometheus duration (15s, 1m)")
            port = endpoint.get("port")
            schemes = {scheme for obj, template in pods if (scheme := _guarded(obj, template))}
            for scheme in sorted(schemes):
                yield from _authorized_endpoint(at, endpoint, scheme)
            for obj, template in pods:
                number = _port(template, port)
                if number is None:
                    yield Finding(f"{at}.port", port, f"{where(obj)}'s pods have no such container port")
                elif admitted is not None and number not in admitted:
                    yield Finding(
                        f"{at}.port",
                        port,
                        f"port {number} is not one the NetworkPolicies of {ctx.namespace} admit from "
                        f"{MONITORING_NAMESPACE} ({', '.join(map(str, sorted(admitted))) or 'none'})",
                    )


# The endpoint picker's image (gateway-api-inference-extension): its /metrics is guarded unless told otherwise.
EPP_IMAGE = "gateway-api-inference-extension/epp"


def _guarded(obj: dict[str, Any], template: dict[str, Any]) -> str | None:
    """The scheme of a metrics server that answers only a bearer token the API server authenticates and authorizes
    for GET /metrics (controller-runtime's WithAuthenticationAndAuthorization): a pinned controller's (HTTPS,
    infra/catalogue/controllers.py) and the endpoint picker's (HTTP; --metrics-endpoint-auth on by default,
    gateway-api-inference-extension cmd/epp/runner/runner.go @ v1.5.0); None for an open one."""
    if "controller" in obj:
        return "https"
    for _, c in containers(template.get("spec") or {}):
        if EPP_IMAGE in str(c.get("image", "")) and "--metrics-endpoint-auth=false" not in (c.get("args") or []):
            return "http"
    return None


def _authorized_endpoint(at: str, endpoint: dict[str, Any], scheme: str) -> Iterator[Finding]:
    """An endpoint of a guarded metrics server: its scheme, and a bearer token from a Secret."""
    if endpoint.get("scheme", "http") != scheme:
        yield Finding(f"{at}.scheme", endpoint.get("scheme"), f"the server serves its metrics over {scheme.upper()}")
    secret = (((endpoint.get("authorization") or {}).get("credentials") or {}).get("secret") or {}).get("name")
    if (endpoint.get("authorization") or {}).get("type") != "Bearer" or not secret:
        yield Finding(
            f"{at}.authorization",
            endpoint.get("authorization"),
            "the server answers /metrics only to a bearer token allowed GET /metrics: a Bearer credential from a "
            "Secret",
        )


def _engine(ctx: ReleaseContext) -> str | None:
    """The serving engine whose chart the release installs, from the stack's helm_release."""
    charts = {chart: engine for engine, chart in SERVING_CHART.items()}
    for _, body in resources(ctx.stack, "helm_release"):
        if body.get("name") == ctx.name:
            return charts.get(str(body.get("chart", "")).rstrip("/").rsplit("/", 1)[-1])
    return None


@rule(
    id="hpa.scales-on-a-collected-metric",
    system="Horizontal Pod Autoscaler (Custom Metrics Stackdriver Adapter)",
    layer="pod-start",
    summary=(
        "An HPA scales an object of its release that has a scale subresource, on a Pods metric its server exports "
        "(Cloud Monitoring's prometheus.googleapis.com/<metric>/gauge), which a PodMonitoring of the release collects "
        "from the pods it scales: else it reads no value and never scales."
    ),
    source=(
        f"{ADAPTER_SOURCE}; https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/ (a Pods "
        "metric averaged over the target's pods); infra/catalogue/serving_metrics.py (what each server exports)"
    ),
    subject="manifest",
)
def _hpa(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    engine = _engine(ctx)
    exported = {s.hpa_metric for s in signals_of(engine).values()} if engine else set()
    monitored = [o for o in objects if o.get("kind") == "PodMonitoring"]
    for hpa in (o for o in objects if o.get("kind") == "HorizontalPodAutoscaler"):
        spec = hpa.get("spec") or {}
        ref = spec.get("scaleTargetRef") or {}
        target = next(
            (o for o in objects if o.get("kind") == ref.get("kind") and o["metadata"]["name"] == ref.get("name")),
            None,
        )
        if target is None or SCALABLE.get(str(ref.get("kind"))) != ref.get("apiVersion"):
            yield Finding(
                f"{where(hpa)}: spec.scaleTargetRef",
                ref,
                "names no object of this release with a scale subresource ("
                + ", ".join(f"{v} {k}" for k, v in SCALABLE.items())
                + ")",
            )
            continue
        if int(spec.get("minReplicas", 1)) > int(spec.get("maxReplicas", 0)):
            yield Finding(f"{where(hpa)}: spec.minReplicas", spec.get("minReplicas"), "above maxReplicas")
        labels = [_labels(t) for _, t in pod_templates(target)]
        collected = any(
            selects((pm["spec"].get("selector") or {}).get("matchLabels") or {}, lab)
            for pm in monitored
            for lab in labels
        )
        for i, metric in enumerate(spec.get("metrics") or []):
            at = f"{where(hpa)}: spec.metrics[{i}]"
            if metric.get("type") != "Pods":
                continue
            name = ((metric.get("pods") or {}).get("metric") or {}).get("name")
            if name not in exported:
                yield Finding(
                    f"{at}.pods.metric.name",
                    name,
                    f"not a metric the {engine}'s server exports: {', '.join(sorted(exported))}"
                    if exported
                    else "this release runs no server whose metrics the platform knows",
                )
            elif not collected:
                yield Finding(
                    f"{at}.pods.metric.name",
                    name,
                    f"no PodMonitoring of the release collects it from {where(target)}'s pods",
                )


@rule(
    id="hpa.signal-the-server-exports",
    system="Horizontal Pod Autoscaler / Managed Service for Prometheus",
    layer="pod-start",
    summary=(
        "A deployment's autoscaler scales on a signal its engine's server exports, at a target the signal can reach "
        "(the KV cache's use is a fraction from 0 to 1); otherwise the HPA reports the metric missing, or never adds "
        "a server."
    ),
    source=f"infra/catalogue/serving_metrics.py (each server's /metrics, with its sources); {ADAPTER_SOURCE}",
    subject="environment",
)
def _autoscaling_signal(env: Environment) -> Iterator[Finding]:
    for key, d in env.serving.items():
        scaling = getattr(d, "autoscaling", None)
        if scaling is None:
            continue
        exported = signals_of(d.engine)
        if scaling.signal not in exported:
            yield Finding(
                ("serving", key, "autoscaling", "signal"),
                scaling.signal,
                f"the {d.engine} server exports no such signal; it exports: "
                + ", ".join(f"{name} ({s.metric})" for name, s in exported.items()),
            )
        if scaling.signal == "kv-cache" and (scaling.target or 0) > 1:
            yield Finding(
                ("serving", key, "autoscaling", "target"),
                scaling.target,
                "the KV cache's use is a fraction from 0 to 1 (vllm:kv_cache_usage_perc): a target above 1 is never "
                "reached, so the autoscaler never adds a server",
            )


@rule(
    id="hpa.replicas-left-to-the-autoscaler",
    system="Horizontal Pod Autoscaler",
    layer="apply",
    summary=(
        "A deployment with an autoscaler leaves its number of servers to it (between autoscaling.min and max): a "
        "replica count in the release would set the servers back to it on every upgrade."
    ),
    source=(
        "https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/#migrating-deployments-and-"
        "statefulsets-to-horizontal-autoscaling ('When an HPA is enabled, it is recommended that the value of "
        "spec.replicas of the Deployment and / or StatefulSet be removed from their manifest(s)')"
    ),
    subject="environment",
)
def _replicas_with_autoscaler(env: Environment) -> Iterator[Finding]:
    for key, d in env.serving.items():
        replicas = getattr(d, "replicas", 1)
        if getattr(d, "autoscaling", None) is not None and replicas != 1:
            yield Finding(
                ("serving", key, "replicas"),
                replicas,
                "the autoscaler sets the number of servers between autoscaling.min and autoscaling.max: remove "
                "replicas",
            )
