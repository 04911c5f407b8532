"""The stack's Helm releases (`release`, `training`, `batch`, `serving`): the controllers, the Ray training cluster,
the GPU batch jobs and their queues, a release per serving deployment, and the namespaces' network policies; each
ordered after what it needs (its pools, its service accounts, the controllers of the kinds its chart writes)."""

from __future__ import annotations

import json
from typing import Any

from infra.catalogue import upstream
from infra.catalogue.controllers import CONTROLLERS, controllers_of_chart, webhook_owners
from infra.catalogue.serving_metrics import ADAPTER_NAMESPACE, ADAPTER_PORT, ADAPTER_ROLE, ADAPTER_SERVICE_ACCOUNT
from infra.cdk import TerraformStack
from infra.config import PLACEHOLDER_DIGEST, Environment, SaxmlServing
from infra.constructs.compute_class import compute_class_values, fallback_slices
from infra.constructs.identity import RoleOfKubernetesAccount
from infra.constructs.network import HEALTH_CHECK_RANGES, ControlPlaneWebhooks
from infra.constructs.network_policy import NamespacePolicies
from infra.constructs.releases import (
    ChartRelease,
    ControllerRelease,
    gpu_networking_values,
    gpu_training_values,
    kueue_controller_values,
    kueue_values,
    nccl_test_values,
    ray_training_values,
)
from infra.constructs.serving import metrics_adapter_values, release_name, serving_values
from infra.serving import vllm_args as vllm
from infra.stacks.compute import Compute
from infra.stacks.identity import WorkloadIdentities
from infra.stacks.network import Networking


def control_plane_ports(env: Environment) -> list[int]:
    """Every port in the nodes' pods the control plane calls: each controller's admission webhooks and aggregated
    APIs (infra/catalogue/controllers.py), and the metrics adapter's custom metrics API where a server
    autoscales. The rule gke.private.control-plane-reaches-served-apis holds the rendered releases to it."""
    ports = {CONTROLLERS[name].webhook_port for name in env.release.controllers}
    ports |= {port for name in env.release.controllers for port in CONTROLLERS[name].api_ports}
    if env.autoscales:
        ports.add(ADAPTER_PORT)
    return sorted(ports)


class Releases:
    def __init__(
        self,
        stack: TerraformStack,
        env: Environment,
        *,
        net: Networking,
        compute: Compute,
        identities: WorkloadIdentities,
        gke_nodes: list[str],
        omit_unbuilt: bool,
    ) -> None:
        """`omit_unbuilt`: the first deploy of a fresh environment leaves out the releases that run images not built
        yet (still at the placeholder digest), named in `left_out`."""
        self.stack, self.env, self.compute, self.identities = stack, env, compute, identities
        self.omit_unbuilt = omit_unbuilt
        self.left_out: list[str] = []
        # Every chart release's namespace, by release name (the network policies open each release to itself).
        self.release_namespaces: dict[str, str] = {}
        self.controllers: dict[str, ControllerRelease] = {}
        # The controllers run on the system pool and answer the API server through the webhook firewall rule: they
        # wait for those, not for the accelerator pools (one slice short of capacity would otherwise hold every
        # controller, and every release after them, out of the apply).
        controller_needs: list[Any] = [compute.system_pool.pool]
        ports = control_plane_ports(env)
        if ports:
            webhooks = ControlPlaneWebhooks(
                stack,
                "webhooks",
                project=env.project,
                network=net.network.vpc.id,
                name=env.network.name,
                master_cidr=env.network.master_cidr,
                ports=ports,
                targets=gke_nodes,
            )
            controller_needs.append(webhooks.firewall)
        # What serves the API server (a webhook, an aggregated API) waits for the rule that lets the calls through.
        self.api_server_needs = controller_needs
        # A controller whose chart writes what another controller's webhooks intercept (JobSet's and LWS's manager
        # Deployments, Kueue's Deployment webhook) comes after that one: until its pod is Ready the API server
        # refuses them (failurePolicy Fail), and Terraform applies what does not depend on it in parallel.
        self.controllers = {}
        pinned = env.release.controllers
        for name in sorted(pinned, key=lambda n: (bool(webhook_owners(CONTROLLERS[n].chart_kinds, besides=n)), n)):
            after = [
                self.controllers[o].release
                for o in webhook_owners(CONTROLLERS[name].chart_kinds, besides=name)
                if o in self.controllers
            ]
            values = kueue_controller_values(env) if name == "kueue" else None
            self.controllers[name] = ControllerRelease(
                stack, name, version=pinned[name], depends_on=[*controller_needs, *after], values=values
            )
        if env.training is not None:  # after the controllers: a queued cluster's queue is Kueue's objects
            self._chart_release(
                "ray-training",
                chart="ray-training",
                namespace=env.identities[env.training.identity].namespace,
                values=ray_training_values(env),
                depends_on=[*identities.accounts(env.training.identity), *compute.pools_of(env.training.slice)],
            )
        gpu_pools = compute.pools_of(*(k for k in compute.slice_pools if env.slices[k].slice.kind == "gpu"))
        self._gpu_releases(gpu_pools)
        self.compute_classes = self._compute_classes()
        self._serving_releases()
        self._network_policies()

    def _chart_release(self, id_: str, *, skip_unbuilt: bool = True, **kwargs: Any) -> ChartRelease | None:
        """A ChartRelease, ordered after the controller release of every kind its chart writes (derived from the
        chart's templates; rule helm.release-after-its-kinds holds the rendered objects to it); None (recorded in
        `left_out`) when it would run an image not built yet."""
        if skip_unbuilt and self.omit_unbuilt and PLACEHOLDER_DIGEST in json.dumps(kwargs["values"]):
            self.left_out.append(id_)
            return None
        self.release_namespaces[id_] = kwargs["namespace"]  # network_policy: each release's own allows
        # (A chart that writes a controller's kinds only where its values ask, as ray-training's queue: the controller
        # is then pinned, a load check says so, or the chart renders none of its kinds.)
        owners = [self.controllers[n].release for n in controllers_of_chart(kwargs["chart"]) if n in self.controllers]
        kwargs["depends_on"] = [*kwargs["depends_on"], *(o for o in owners if o not in kwargs["depends_on"])]
        return ChartRelease(self.stack, id_, **kwargs)

    def _network_policies(self) -> None:
        """Default-deny ingress in every workload namespace, each release's pods open to each other, the load
        balancers' sources to the servers (infra/constructs/network_policy.py)."""
        env = self.env
        vpc_ports = {}
        for key, deployment in env.serving.items():
            if isinstance(deployment, SaxmlServing):
                source = env.network.subnet_cidr if deployment.load_balancer == "internal" else "0.0.0.0/0"
                vpc_ports[release_name(key)] = ("sax-http", upstream.SAXML_HTTP_PORT, source)
        lb_namespaces = sorted({serving_values(env, key)[1] for key in env.serving}) if env.inference_gateway else []
        NamespacePolicies(
            self.stack,
            "network-policies",
            namespaces=self.identities.namespaces.by_name,
            releases=self.release_namespaces,
            load_balancer_sources=(
                [env.network.proxy_only_cidr, *HEALTH_CHECK_RANGES] if env.network.proxy_only_cidr else []
            ),
            load_balancer_ports=[vllm.PORT, upstream.GAIE_EPP_PORT],
            load_balanced_namespaces=lb_namespaces,
            vpc_ports=vpc_ports,
        )

    def _compute_classes(self) -> ChartRelease | None:
        """The ComputeClasses of the slices that fall back through capacity tiers, once their pools exist."""
        slices = fallback_slices(self.env)
        if not slices:
            return None
        return self._chart_release(
            "compute-classes",
            skip_unbuilt=False,
            chart="compute-classes",
            namespace="kube-system",
            values=compute_class_values(self.env),
            depends_on=self.compute.pools_of(*slices),
        )

    def _serving_releases(self) -> None:
        """One release per serving deployment; model servers load for minutes, so the deploy does not wait. Where one
        autoscales, the metrics adapter its autoscaler reads through, with its Cloud Monitoring role."""
        env = self.env
        if env.autoscales:
            RoleOfKubernetesAccount(
                self.stack,
                "metrics-adapter-monitoring-viewer",
                project=env.project,
                project_number=env.project_number,
                workload_pool=env.workload_pool,
                namespace=ADAPTER_NAMESPACE,
                service_account=ADAPTER_SERVICE_ACCOUNT,
                role=ADAPTER_ROLE,
                cluster=self.compute.cluster,
            )
            self._chart_release(
                "metrics-adapter",
                skip_unbuilt=False,
                chart="metrics-adapter",
                namespace=ADAPTER_NAMESPACE,
                create_namespace=True,
                values=metrics_adapter_values(),
                depends_on=self.api_server_needs,
            )
        for key, deployment in env.serving.items():
            chart, namespace, values = serving_values(env, key)
            # Every account its pods run as (rule helm.release-after-its-service-accounts): the servers', and the
            # checkpoint conversion Job's.
            conversion = getattr(deployment, "conversion", None)
            accounts = [deployment.identity, *([conversion.identity] if conversion else [])]
            depends = self.identities.accounts(*accounts)
            slices = [k for _, k in deployment.slice_fields()]
            depends += self.compute.pools_of(*slices)
            if self.compute_classes is not None and set(slices) & set(fallback_slices(env)):
                depends.append(self.compute_classes.release)
            self._chart_release(
                release_name(key),
                chart=chart,
                namespace=namespace,
                values=values,
                depends_on=depends,
                wait=False,
            )

    def _gpu_releases(self, pools: list[object]) -> None:
        """GPUDirect networking (once the GPU pools exist: its DaemonSets run there), Kueue's queues and the GPU
        JobSets."""
        env = self.env
        if env.gke_gpudirect_networks:
            self._chart_release(
                "gpu-networking",
                skip_unbuilt=False,
                chart="gpu-networking",
                namespace="kube-system",
                values=gpu_networking_values(env),
                depends_on=pools,
            )
        batch = env.batch
        if batch is None:
            return
        queues = self._chart_release(
            "kueue-queues",
            skip_unbuilt=False,
            chart="kueue-queues",
            namespace=CONTROLLERS["kueue"].namespace,
            values=kueue_values(env),
            depends_on=self.identities.accounts(batch.identity),
        )
        assert queues is not None
        namespace = env.identities[batch.identity].namespace
        # JobSets wait in Kueue for capacity, so the deploy does not wait for them.
        jobs = {"nccl-test": (batch.nccl_test, nccl_test_values), "gpu-training": (batch.training, gpu_training_values)}
        for name, (section, values) in jobs.items():
            if section is not None:
                self._chart_release(
                    name,
                    chart="gpu-jobset",
                    namespace=namespace,
                    values=values(env),
                    depends_on=[queues.release],
                    wait=False,
                )
