"""Upstream controllers the platform installs as pinned Helm releases.

Their versions live in each environment's `release.controllers` (exact, and
promoted from dev to prod with the rest of the release); where the charts come
from and which namespace they run in is fixed here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Controller:
    repository: str
    chart: str
    namespace: str
    description: str
    # The chart versions the platform knows: their CRDs are pinned (workloads/charts/crds.yaml) and their
    # webhooks' rules are the ones infra/rules encodes. Another version is refused at load.
    versions: tuple[str, ...] = ()
    # The port the controller's admission webhook server listens on, in its pods. In a
    # private cluster the control plane must be let through to it by a firewall rule.
    # All three use controller-runtime's default (9443): their charts' webhook Service
    # targets it (jobset, kueue, lws: config/webhook/service.yaml, targetPort 9443).
    webhook_port: int = 9443


CONTROLLERS = {
    "jobset": Controller(
        repository="oci://registry.k8s.io/jobset/charts",
        chart="jobset",
        namespace="jobset-system",
        description="JobSet: a group of Jobs run and restarted as one unit",
        versions=("0.12.0",),
    ),
    "kueue": Controller(
        repository="oci://registry.k8s.io/kueue/charts",
        chart="kueue",
        namespace="kueue-system",
        description="Kueue: job queueing, quota and ProvisioningRequest admission",
        versions=("0.17.3",),
    ),
    "lws": Controller(
        repository="oci://registry.k8s.io/lws/charts",
        chart="lws",
        namespace="lws-system",
        description="LeaderWorkerSet: a leader pod and its workers, scheduled and restarted as one group",
        versions=("0.7.0",),
    ),
}

# The controller each serving engine's chart needs (its custom resources).
ENGINE_CONTROLLER = {"saxml": "jobset", "jetstream": "lws"}
