"""NetworkPolicies of the workload namespaces: every pod isolated for ingress, then narrow
allows.

GKE Dataplane V2 enforces NetworkPolicy; a pod no policy selects takes every connection
(https://kubernetes.io/docs/concepts/services-networking/network-policies/#the-two-sorts-of-pod-isolation).
Each workload namespace gets:

- ``default-deny-ingress``: selects every pod, allows nothing (the page's "Default deny all ingress traffic");
- ``<release>-within``: the pods of one Helm release (``app.kubernetes.io/instance``, and its endpoint picker's
  ``inferencepool``) from each other, on every port: a Ray head and its workers, an LWS leader and its workers,
  Saxml's admin, model and HTTP servers, the endpoint picker and its model servers. Nothing of another release
  or namespace reaches a Ray head's Jobs API (8265), client port (10001) or GCS (6379) (Ray's security page,
  docs.ray.io/en/latest/ray-security: whoever reaches them runs code as the cluster; CVE-2023-48022);
- ``from-load-balancers`` (only where the Inference Gateway runs): the regional proxies' proxy-only subnet and
  Google's health checkers to the servers' and endpoint picker's ports, the same sources and ports the VPC
  firewall opens (ProxyOnlySubnet);
- ``<release>-from-vpc`` for a release behind an internal passthrough load balancer (Saxml's HTTP server): its
  listening port from the cluster's subnet only.

- ``from-monitoring``: Google Cloud Managed Service for Prometheus's collectors (a DaemonSet on the pod network in
  ``gmp-system``) to the metrics ports only (MONITORING_PORTS); without it the cluster's Ray monitoring and any
  PodMonitoring collect nothing.

The kubelet's probes and `kubectl port-forward` come from the pod's own node, which NetworkPolicy does not
block ("Pods cannot currently block ... access from their resident node", the page's "What you can't do with
network policies").
"""

from __future__ import annotations

from constructs import Construct

from infra.catalogue.cloud_metrics import MONITORING_NAMESPACE
from infra.cdk.bindings import kubernetes
from infra.derive.names import endpoint_picker

INSTANCE_LABEL = "app.kubernetes.io/instance"
DEFAULT_DENY = "default-deny-ingress"
# Where Managed Service for Prometheus's managed collectors run: a DaemonSet on the pod network (no hostNetwork) in
# this namespace (https://cloud.google.com/stackdriver/docs/managed-prometheus/setup-managed;
# GoogleCloudPlatform/prometheus-engine manifests/operator.yaml, DaemonSet `collector`).
# The ports the workloads export metrics on: Ray's metrics export port (KubeRay's default `metrics` port, which
# GKE's Ray cluster monitoring scrapes; docs.ray.io cluster metrics, --metrics-export-port 8080), vLLM's /metrics on
# its serving port, the endpoint picker's `metrics` (workloads/charts/vllm-tpu/templates/gateway.yaml). Not 8081: on
# the Ray workers that is the multislice coordinator's port (Ray 2.60 ray/_private/accelerators/tpu.py
# DEFAULT_MEGASCALE_PORT), which only the RayCluster's own pods reach (its `within` policy).
MONITORING_PORTS = (8000, 8080, 9090)


class NamespacePolicies(Construct):
    """Default-deny ingress in each namespace, and the allows its releases need."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        namespaces: dict[str, object],
        releases: dict[str, str],
        load_balancer_sources: list[str],
        load_balancer_ports: list[int],
        load_balanced_namespaces: list[str],
        vpc_ports: dict[str, tuple[str, int, str]],
    ) -> None:
        """`namespaces`: name -> NamespaceV1; `releases`: release -> namespace (workload namespaces only);
        `vpc_ports`: release -> (component label, port, source CIDR) behind an internal passthrough LB."""
        super().__init__(scope, id_)
        self._np = np = kubernetes("network_policy_v1")
        for namespace, ns in sorted(namespaces.items()):
            self._policy(DEFAULT_DENY, namespace, {}, [], ns)
            collectors = np.NetworkPolicyV1SpecIngressFrom(
                namespace_selector=np.NetworkPolicyV1SpecIngressFromNamespaceSelector(
                    match_labels={"kubernetes.io/metadata.name": MONITORING_NAMESPACE}
                )
            )
            self._policy("from-monitoring", namespace, {}, [self._ingress([collectors], MONITORING_PORTS)], ns)
        for release, namespace in sorted(releases.items()):
            if namespace in namespaces:
                self._release(release, namespace, namespaces[namespace], vpc_ports.get(release))
        if load_balancer_sources:
            for namespace in sorted(set(load_balanced_namespaces) & set(namespaces)):
                ingress = self._ingress(self._cidrs(load_balancer_sources), sorted(set(load_balancer_ports)))
                self._policy("from-load-balancers", namespace, {}, [ingress], namespaces[namespace])

    def _release(self, release: str, namespace: str, ns: object, vpc: tuple[str, int, str] | None) -> None:
        """A release's pods from each other (and from its endpoint picker); from the VPC where it is load-balanced
        there."""
        np = self._np
        same = np.NetworkPolicyV1SpecIngressFrom(
            pod_selector=np.NetworkPolicyV1SpecIngressFromPodSelector(match_labels={INSTANCE_LABEL: release})
        )
        # The release's endpoint picker (vllm-tpu's gateway), whose pods carry only `inferencepool`: it reads
        # each model server's /metrics to pick one (workloads/charts/vllm-tpu/templates/gateway.yaml).
        picker = np.NetworkPolicyV1SpecIngressFrom(
            pod_selector=np.NetworkPolicyV1SpecIngressFromPodSelector(
                match_labels={"inferencepool": endpoint_picker(release)}
            )
        )
        within = np.NetworkPolicyV1SpecIngress(from_=[same, picker])
        self._policy(f"{release}-within", namespace, {INSTANCE_LABEL: release}, [within], ns)
        if vpc is not None:
            component, port, cidr = vpc
            selector = {INSTANCE_LABEL: release, "app.kubernetes.io/name": component}
            self._policy(f"{release}-from-vpc", namespace, selector, [self._ingress(self._cidrs([cidr]), [port])], ns)

    def _cidrs(self, cidrs: list[str]) -> list[object]:
        np = self._np
        return [
            np.NetworkPolicyV1SpecIngressFrom(ip_block=np.NetworkPolicyV1SpecIngressFromIpBlock(cidr=c)) for c in cidrs
        ]

    def _ingress(self, sources: list[object], ports: list[int] | tuple[int, ...]) -> object:
        np = self._np
        tcp = [np.NetworkPolicyV1SpecIngressPorts(port=str(p), protocol="TCP") for p in ports]
        return np.NetworkPolicyV1SpecIngress(from_=sources, ports=tcp)

    def _policy(self, name: str, namespace: str, selector: dict, ingress: list, after: object) -> None:
        np = self._np
        np.NetworkPolicyV1(
            self,
            f"{namespace}-{name}",
            metadata={"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/managed-by": "cdktf"}},
            spec=np.NetworkPolicyV1Spec(
                pod_selector=np.NetworkPolicyV1SpecPodSelector(match_labels=selector),
                policy_types=["Ingress"],
                ingress=ingress,
            ),
            depends_on=[after],
        )
