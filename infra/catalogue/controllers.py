"""Upstream controllers the platform installs as pinned Helm releases.

Their versions live in each environment's `release.controllers` (exact, and
promoted from dev to prod with the rest of the release); where the charts come
from and which namespace they run in is fixed here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from infra.catalogue.charts import chart_api_groups, chart_kinds


@dataclass(frozen=True)
class Controller:
    repository: str
    chart: str
    namespace: str
    description: str
    # The chart versions the platform knows: their CRDs are pinned (infra/charts/crds.yaml) and their
    # webhooks' rules are the ones infra/rules encodes. Another version is refused at load.
    versions: tuple[str, ...] = ()
    # The port the controller's admission webhook server listens on, in its pods. In a
    # private cluster the control plane must be let through to it by a firewall rule.
    # All three use controller-runtime's default (9443): their charts' webhook Service
    # targets it (jobset, kueue, lws: config/webhook/service.yaml, targetPort 9443).
    webhook_port: int = 9443
    # The ports of the aggregated APIs (APIServices) it serves in its pods: the API server calls them for every
    # request of their group, and for discovery of every group (a namespace delete waits on discovery), so a
    # private cluster's firewall must let the control plane through to them as to the webhooks.
    api_ports: tuple[int, ...] = ()
    # The API group of the custom resources the chart installs (its CRDs' spec.group: the pinned upstream CRD
    # files, infra/charts/crds.yaml, tests/test_charts.py holds them equal). A release whose objects are of
    # this group can be applied only once this controller's release is: its CRD then exists and, for LWS,
    # the conversion webhook its CRD names (lws-webhook-service in lws-system) answers.
    api_group: str = ""
    # The controller manager's pod: how many, and what each requests of a node (cpu cores, memory GiB), at the
    # chart's default values (its values.yaml at the pinned version). It carries no node selector and no
    # toleration, so it lands on an untainted pool: the system pool.
    pods: int = 1
    requests: tuple[tuple[str, float], ...] = ()
    # Where its controller manager serves Prometheus metrics, where the platform scrapes them: the pod's labels (the
    # chart's selector labels, the release named after the controller) and the container port's name and number.
    # Served over HTTPS with a self-signed certificate, to a caller whose bearer token the API server authenticates
    # and authorizes for GET /metrics (controller-runtime's WithAuthenticationAndAuthorization).
    metrics_pod_labels: tuple[tuple[str, str], ...] = ()
    metrics_port: tuple[str, int] | None = None
    # The (API group, kind) of the objects its admission webhooks intercept with failurePolicy Fail in the
    # workloads' namespaces, at the chart's default values: while its pod is not Ready, the API server refuses every
    # such object, so a release that writes one is applied after this controller's release.
    intercepts: frozenset[tuple[str, str]] = frozenset()
    # What its own chart writes (its controller manager's Deployment), for the same ordering among controllers.
    chart_kinds: frozenset[tuple[str, str]] = frozenset({("apps", "Deployment")})


CONTROLLERS = {
    "jobset": Controller(
        repository="oci://registry.k8s.io/jobset/charts",
        chart="jobset",
        namespace="jobset-system",
        description="JobSet: a group of Jobs run and restarted as one unit",
        versions=("0.12.0",),
        api_group="jobset.x-k8s.io",
        # kubernetes-sigs/jobset charts/jobset/values.yaml @ v0.12.0: requests cpu 500m, memory 128Mi.
        requests=(("cpu", 0.5), ("memory", 0.125)),
    ),
    "kueue": Controller(
        repository="oci://registry.k8s.io/kueue/charts",
        chart="kueue",
        namespace="kueue-system",
        description="Kueue: job queueing, quota and ProvisioningRequest admission",
        # 0.17.3: the version before, kept so that an environment still on it plans, and its bump is reviewed.
        versions=("0.17.3", "0.19.2"),
        api_group="kueue.x-k8s.io",
        # kubernetes-sigs/kueue charts/kueue/values.yaml @ v0.17.3 and v0.19.2 controllerManager: requests cpu 500m,
        # memory 512Mi.
        requests=(("cpu", 0.5), ("memory", 0.5)),
        # charts/kueue/templates/_helpers.tpl kueue.selectorLabels and manager/manager.yaml (containerPort 8443,
        # name metrics) @ v0.17.3 and v0.19.2; cmd/kueue/main.go: SecureServing,
        # filters.WithAuthenticationAndAuthorization.
        metrics_pod_labels=(
            ("app.kubernetes.io/name", "kueue"),
            ("app.kubernetes.io/instance", "kueue"),
            ("control-plane", "controller-manager"),
        ),
        metrics_port=("metrics", 8443),
        # The visibility API (v1beta1 and v1beta2.visibility.kueue.x-k8s.io, the pending workloads' positions):
        # charts/kueue/templates/visibility/apiservice_v1beta2.yaml and service.yaml (targetPort 8082) @ v0.17.3 and
        # v0.19.2, rendered whatever the values.
        api_ports=(8082,),
        # charts/kueue/templates/webhook/manifests.yaml and values.yaml integrations.frameworks @ v0.17.3, v0.19.2: Fail
        # for Jobs, JobSets, LeaderWorkerSets and Ray's kinds in every namespace, and for Pods, Deployments and
        # StatefulSets (frameworks pod, deployment, statefulset are on by default) in every namespace but
        # kube-system and Kueue's own. At v0.19.2 every one of them leaves those two namespaces out (the same file):
        # no release of the platform writes one of these kinds there, so the two read alike.
        intercepts=frozenset(
            {
                ("", "Pod"),
                ("apps", "Deployment"),
                ("apps", "StatefulSet"),
                ("batch", "Job"),
                ("jobset.x-k8s.io", "JobSet"),
                ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"),
                ("ray.io", "RayCluster"),
                ("ray.io", "RayJob"),
                ("ray.io", "RayService"),
            }
        ),
    ),
    "lws": Controller(
        repository="oci://registry.k8s.io/lws/charts",
        chart="lws",
        namespace="lws-system",
        description="LeaderWorkerSet: a leader pod and its workers, scheduled and restarted as one group",
        versions=("0.7.0",),
        api_group="leaderworkerset.x-k8s.io",
        # kubernetes-sigs/lws charts/lws/values.yaml @ v0.7.0: requests cpu 1, memory 1Gi.
        requests=(("cpu", 1.0), ("memory", 1.0)),
    ),
}


# How many pod sets one Kueue Workload holds, per Kueue version the platform knows (CONTROLLERS["kueue"].versions):
# apis/kueue/v1beta2/workload_types.go WorkloadSpec.PodSets `+kubebuilder:validation:MaxItems`: 8 @ v0.17 (v0.17.0,
# the module the local cluster built for 0.17.3), 18 @ v0.19.2 (the module it builds: tests/test_training_runs.py reads
# it there). A queued RayCluster's pod sets are its head's and one per worker group; a RayJob's also its submitter's.
KUEUE_MAX_POD_SETS = {"0.17.3": 8, "0.19.2": 18}


# Kueue's Configuration as its chart writes it (kubernetes-sigs/kueue charts/kueue/values.yaml
# managerConfig.controllerManagerConfigYaml, comments left out; 0.17.3's as at v0.17.0, the same file). The chart takes
# the whole file as one value: a release that sets it, to turn fair sharing on or to say how long pods may take to be
# Ready, writes all of it (tests/test_team_queues.py holds it to the chart of the module the local cluster builds).
# Keyed by the versions CONTROLLERS["kueue"] pins.
def _chart_configuration(
    concurrency: tuple[int, int, int], qps: int, burst: int, frameworks: list[str]
) -> dict[str, Any]:
    """The chart's Configuration, what differs between versions given: the Workload, LocalQueue and ClusterQueue
    reconcilers' concurrency, the API client's qps and burst, and the integrations on."""
    workloads, local_queues, cluster_queues = concurrency
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "controller": {
            "groupKindConcurrency": {
                "Job.batch": 5,
                "Pod": 5,
                "Workload.kueue.x-k8s.io": workloads,
                "LocalQueue.kueue.x-k8s.io": local_queues,
                "ClusterQueue.kueue.x-k8s.io": cluster_queues,
                "ResourceFlavor.kueue.x-k8s.io": 1,
            }
        },
        "clientConnection": {"qps": qps, "burst": burst},
        "integrations": {"frameworks": frameworks},
    }


_RAY_AND_JOBS = ["batch/job", "kubeflow.org/mpijob", "ray.io/rayjob", "ray.io/rayservice", "ray.io/raycluster",
                 "jobset.x-k8s.io/jobset"]  # fmt: skip
_SERVING = ["pod", "deployment", "statefulset", "leaderworkerset.x-k8s.io/leaderworkerset"]
_KUBEFLOW = ["kubeflow.org/paddlejob", "kubeflow.org/pytorchjob", "kubeflow.org/tfjob", "kubeflow.org/xgboostjob",
             "kubeflow.org/jaxjob"]  # fmt: skip
KUEUE_MANAGER_CONFIG: dict[str, dict[str, Any]] = {
    "0.17.3": _chart_configuration(
        (5, 1, 1),
        50,
        100,
        [*_RAY_AND_JOBS, "trainer.kubeflow.org/trainjob", *_KUBEFLOW, "workload.codeflare.dev/appwrapper", *_SERVING],
    ),
    # 0.19: more concurrency and API throughput; Kubeflow's training-operator kinds off (its successor, TrainJob, on).
    "0.19.2": _chart_configuration(
        (10, 5, 5),
        300,
        500,
        [*_RAY_AND_JOBS, "workload.codeflare.dev/appwrapper", "trainer.kubeflow.org/trainjob", *_SERVING],
    ),
}

# From 0.19, Kueue always waits for an admitted workload's pods to be Ready: a workload whose pods are not all Ready
# `timeout` after its admission, or again `recoveryTimeout` after one of them failed, is evicted (its quota freed, its
# pods deleted) and queued again after a backoff (60 s doubling to 3600 s, with no limit). The Configuration has no
# switch to turn it off (apis/config/v1beta2/configuration_types.go WaitForPodsReady; defaults.go: 30 minutes, and
# recoveryTimeout the same when unset @ v0.19.2); only the feature gate DisableWaitForPodsReady does, deprecated at
# birth and to be removed in 0.21 (pkg/features/kube_features.go), which the platform leaves alone. The platform
# writes the wait out, so that what the cluster does is in the release and the review, not in a default a later
# Kueue may change. Only training's jobs are Kueue's here (the servers carry no queue-name label), so a server's
# compile never counts. These are Kueue's own values: an environment whose queued slices all record a measured start
# (slices.<key>.queued_start) gets both timeouts from them instead (infra/derive/queues.py pods_ready_timeout); a
# recovery may take as long as a first start.
KUEUE_WAIT_FOR_PODS_READY: dict[str, dict[str, Any]] = {
    "0.19.2": {
        "timeout": "30m",
        "recoveryTimeout": "30m",
        "blockAdmission": False,
        "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 60, "backoffMaxSeconds": 3600},
    }
}

# Fair sharing's preemption (Configuration.fairSharing): first preempt only a workload whose queue keeps a share at
# least the preemptor's after it, then one whose queue's share is above the preemptor's; the set Kueue's chart
# suggests (values.yaml @ v0.17.3 and v0.19.2) and its own docs use (site/content/en/docs/concepts/preemption.md
# @ v0.17.3; the sets it accepts: pkg/config/validation.go validStrategySets, the same at v0.19.2).
KUEUE_FAIR_SHARING = {"preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]}


@dataclass(frozen=True)
class PodsReadyWait:
    """Kueue's wait for an admitted workload's pods, in seconds (KUEUE_WAIT_FOR_PODS_READY)."""

    timeout_s: int
    recovery_s: int


def _seconds(duration: str) -> int:
    """A Go duration of the forms KUEUE_WAIT_FOR_PODS_READY writes (`30m`, `90s`, `2h`) in seconds."""
    return int(duration[:-1]) * {"s": 1, "m": 60, "h": 3600}[duration[-1]]


def pods_ready_wait(version: str | None) -> PodsReadyWait | None:
    """How long Kueue `version` lets an admitted workload's pods take to be Ready, as the platform configures it; None
    where it does not wait (no Kueue, or one that waits only when told to and is not told)."""
    wait = KUEUE_WAIT_FOR_PODS_READY.get(version or "")
    return None if wait is None else PodsReadyWait(_seconds(wait["timeout"]), _seconds(wait["recoveryTimeout"]))


def kueue_max_pod_sets(version: str) -> int:
    """The pod sets a Workload holds at Kueue `version`; KeyError naming the table for a version it lacks."""
    if version not in KUEUE_MAX_POD_SETS:
        raise KeyError(f"Kueue {version}: its Workload's pod-set limit is not in infra/catalogue/controllers.py "
                       "KUEUE_MAX_POD_SETS (apis/kueue/v1beta2/workload_types.go at that version)")  # fmt: skip
    return KUEUE_MAX_POD_SETS[version]


def owner_of(api_version: str) -> str | None:
    """The controller whose release installs the kind of an object with this apiVersion, or None (a core
    kind, or one GKE installs itself)."""
    group = api_version.rpartition("/")[0]
    return next((name for name, c in CONTROLLERS.items() if c.api_group == group), None)


# The namespaces Kueue's webhooks for Pods, Deployments and StatefulSets leave out (the chart's default
# managedJobsNamespaceSelector); its other webhooks have no namespace selector at 0.17 and the same one at 0.19, so
# reading them as intercepting everywhere errs on the side of ordering a release after Kueue's.
WEBHOOK_EXEMPT_NAMESPACES = {"kueue": ("kube-system", "kueue-system")}
NAMESPACE_SELECTED_KINDS = frozenset({("", "Pod"), ("apps", "Deployment"), ("apps", "StatefulSet")})


def intercepted(controller: str, group_kind: tuple[str, str], namespace: str | None = None) -> bool:
    """Whether `controller`'s Fail webhooks intercept an object of `group_kind` (in `namespace`; None: in some
    namespace)."""
    if group_kind not in CONTROLLERS[controller].intercepts:
        return False
    exempt = namespace in WEBHOOK_EXEMPT_NAMESPACES.get(controller, ())
    return not (group_kind in NAMESPACE_SELECTED_KINDS and exempt)


def webhook_owners(kinds: Iterable[tuple[str, str]], *, besides: str = "") -> tuple[str, ...]:
    """The controllers (other than `besides`) whose Fail webhooks intercept any of `kinds` ((group, kind) pairs)."""
    wanted = set(kinds)
    return tuple(sorted(name for name, c in CONTROLLERS.items() if name != besides and c.intercepts & wanted))


def controllers_of_chart(chart: str) -> tuple[str, ...]:
    """The controllers a chart of the repository needs installed first: the owners of every API group its
    templates write, and those whose admission webhooks intercept a kind its templates write; derived from the
    templates themselves (not kept by hand)."""
    owners = {name for name, c in CONTROLLERS.items() if c.api_group in chart_api_groups(chart)}
    return tuple(sorted(owners | set(webhook_owners(chart_kinds(chart)))))
