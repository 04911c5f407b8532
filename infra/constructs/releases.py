"""Helm releases of the workload charts, with values derived from the environment and its slices."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from constructs import Construct

from infra.catalogue import upstream
from infra.catalogue.accelerators import Slice
from infra.catalogue.charts import local_chart_versions
from infra.catalogue.checkpointing import MTC_FUSE_OPTIONS
from infra.catalogue.cloud_metrics import COLLECTOR_SERVICE_ACCOUNT, MONITORING_NAMESPACE
from infra.catalogue.controllers import (
    CONTROLLERS,
    KUEUE_FAIR_SHARING,
    KUEUE_MANAGER_CONFIG,
    KUEUE_WAIT_FOR_PODS_READY,
)
from infra.catalogue.gpudirect import GPU_HOSTS, nccl_env
from infra.cdk.bindings import helm
from infra.config import Environment
from infra.config.training import mebibytes, millicores
from infra.derive.names import COMPUTE_CLASS_LABEL, compute_class
from infra.derive.queues import (
    COHORT,
    PRIORITIES,
    WAIT_WHY,
    QueueShare,
    fair_sharing,
    pods_ready_timeout,
    queue_shares,
    training_flavors,
)
from workloads.constants import CHECKPOINT_MOUNT, MEGASCALE_PORT, MTC_CSI_DRIVER, MTC_MOUNT, RAY_VERSION, TPU_WORKER_ENV

REPO = Path(__file__).resolve().parents[2]
CHARTS = REPO / "workloads" / "charts"

# Managed Prometheus's collector account, which alone may read a guarded metrics endpoint's token (chart values).
COLLECTOR = {"namespace": MONITORING_NAMESPACE, "serviceAccount": COLLECTOR_SERVICE_ACCOUNT}


def chart_path(name: str) -> str:
    """A local chart's path as Terraform sees it: relative to the stack's directory in cdktf.out."""
    return f"../../../workloads/charts/{name}"


# The controllers' Helm post-renderer (infra/delivery/crd_postrender.py), as Terraform sees it, like chart_path.
CRD_POSTRENDER = "../../../scripts/crd-postrender"


def ray_training_values(env: Environment) -> dict[str, Any]:
    """Values of the ray-training chart: every number from the slice, every name from the config."""
    training = env.training
    if training is None:
        raise ValueError(f"environment {env.name!r} has no `training` section")
    spec = env.slices[training.slice]
    slice_ = spec.slice
    pools = spec.pools(training.slice)
    return {
        "image": env.release.images[training.image],
        "rayVersion": RAY_VERSION,
        "runs": training.runs,
        "launcher": training.launcher,
        **({"submitter": dict(SUBMITTER)} if training.runs == "jobs" and training.launcher == "ray" else {}),
        "resilience": {
            "maxRestarts": training.resilience.max_restarts,
            "retryExitCodes": training.resilience.exit_codes,
        },
        "megascalePort": MEGASCALE_PORT,
        "localTier": local_tier_values(env),
        "serviceAccountName": env.identities[training.identity].service_account,
        "head": {"resources": {"cpu": training.head.cpu, "memory": training.head.memory}, "nodeSelector": {}},
        "worker": {
            # One group per slice, on its own pool (another slice of the same shape, a serving slice, matches the
            # accelerator labels too).
            "groups": [{"name": _group_name(slice_, i), "pool": pool} for i, pool in enumerate(pools)],
            "numOfHosts": slice_.hosts,
            "acceleratorResource": slice_.resource_name,
            "acceleratorsPerHost": slice_.chips_per_host,
            "resources": {"cpu": training.worker.cpu, "memory": training.worker.memory},
            "nodeSelector": dict(slice_.node_selector),
            "sharedMemory": training.shared_memory,
            "env": dict(TPU_WORKER_ENV) if slice_.kind == "tpu" else {},
        },
        "checkpoints": {"bucket": env.bucket_name(training.bucket), "mountPath": CHECKPOINT_MOUNT},
        **({"queue": training_queue_values(env)} if training.queue else {}),
    }


def local_tier_values(env: Environment) -> dict[str, Any]:
    """GKE's multi-tier checkpointing for the training slices (training.resilience.local_tier): the
    CheckpointConfiguration's bucket, RAM disk and node selector, and the CSI volume each JobSet pod mounts."""
    training = env.training
    assert training is not None
    tier = training.resilience.local_tier
    if tier is None:
        return {}
    return {
        "bucket": env.bucket_name(tier.bucket),
        "ramDisk": tier.ram_disk,
        "mountPath": MTC_MOUNT,
        "csiDriver": MTC_CSI_DRIVER,
        "nodeSelector": dict(env.slices[training.slice].slice.node_selector),
        "fuseMountOptions": list(MTC_FUSE_OPTIONS),
    }


# The submitter pod of a run that is a RayJob (training.runs: jobs): `ray job submit`, on no accelerator.
SUBMITTER = {"cpu": "500m", "memory": "512Mi"}


def _times(quantity: str, n: int) -> str:
    """A Kubernetes quantity of the forms the config allows (`24`, `500m`, `200Gi`) times n."""
    number = quantity.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    return f"{int(number) * n}{quantity[len(number) :]}"


def training_queue_values(env: Environment) -> dict[str, Any]:
    """The training cluster's Kueue queue: a flavor for the head (no node labels: it runs where its node selector
    says) and one per slice's pool, each with exactly what that part of the cluster asks for, so Kueue admits the
    whole cluster or none of it, and a second cluster in the queue waits."""
    training = env.training
    assert training is not None and training.queue is not None
    spec = env.slices[training.slice]
    slice_ = spec.slice
    resource = slice_.resource_name
    hosts = slice_.hosts
    # The head's flavor holds the head, and where each run is a RayJob its submitter too (Kueue admits the RayJob's
    # submitter pod with its cluster: kueue pkg/controller/jobs/rayjob addSubmitterPodSet @ v0.17 and v0.19.2).
    cpu, memory = millicores(training.head.cpu), mebibytes(training.head.memory)
    if training.runs == "jobs":
        cpu, memory = cpu + millicores(SUBMITTER["cpu"]), memory + mebibytes(SUBMITTER["memory"])
    head = {
        "name": f"{training.queue}-head",
        "nodeLabels": {},
        "quota": {
            "cpu": f"{cpu}m" if cpu % 1000 else str(cpu // 1000),
            "memory": f"{memory}Mi" if memory % 1024 else f"{memory // 1024}Gi",
            resource: "0",
        },
    }

    def flavor(name: str, labels: dict[str, str], hosts: int) -> dict[str, Any]:
        quota = {
            "cpu": _times(training.worker.cpu, hosts),
            "memory": _times(training.worker.memory, hosts),
            resource: str(slice_.chips_per_host * hosts),
        }
        return {"name": name, "nodeLabels": labels, "quota": quota}

    if training.launcher == "jobset":
        # A JobSet run is one pod set of every slice's hosts (one replicated Job, as multi-tier checkpointing needs),
        # which Kueue admits in one flavor: the slices' shape, every slice's quota; JobSet keeps each slice's Job
        # on a pool of its own (exclusive-topology). No head.
        (name,) = training_flavors(env)
        flavors = [flavor(name, dict(slice_.node_selector), hosts * spec.count)]
    else:
        flavors = [head] + [
            flavor(name, {NODEPOOL_LABEL: pool}, hosts)
            for name, pool in zip(training_flavors(env), spec.pools(training.slice), strict=True)
        ]
    values: dict[str, Any] = {
        "name": training.queue,
        "coveredResources": ["cpu", "memory", resource],
        "flavors": flavors,
    }
    if lends_training(env):
        # In the teams' cohort, lending its slice while its cluster is away, and taking it back (preempting the
        # borrowers) when the cluster returns; it never borrows (its quota is exactly its cluster).
        values["cohort"] = COHORT
        values["preemption"] = {
            "reclaimWithinCohort": "Any",
            "borrowWithinCohort": {"policy": "Never"},
            "withinClusterQueue": "Never",
        }
    return values


def lends_training(env: Environment) -> bool:
    """Whether a team may borrow the training slice (through the training cluster's queue, in the teams' cohort)."""
    return (
        env.batch is not None
        and env.training is not None
        and env.training.queue is not None
        and any(t.borrow_training for t in env.teams.values())
    )


def _lent_flavors(env: Environment) -> list[dict[str, Any]]:
    """The training queue's slice flavors as the teams' ClusterQueues name them (the ray-training release makes the
    ResourceFlavors): no quota of their own; a team that may borrow them has no limit, every other queue 0."""
    training = env.training
    assert training is not None and training.queue is not None
    quota = {"cpu": "0", "memory": "0", env.slices[training.slice].slice.resource_name: "0"}
    return [{"name": name, "external": True, "quota": quota} for name in training_flavors(env)]


def _group_name(slice_: Slice, index: int) -> str:
    """The Ray worker group of the `index`-th slice: the slice's name (v6e-16), then v6e-16-1, v6e-16-2 ..."""
    return slice_.name if index == 0 else f"{slice_.name}-{index}"


NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"

PROVISIONING_CHECK = "dws-provisioning"
# The service account whose token Managed Prometheus sends to Kueue's metrics server (kueue-queues' metrics.yaml;
# not `kueue-metrics-reader`, the ClusterRole Kueue's own chart makes).
KUEUE_METRICS_READER = "kueue-metrics-scraper"
GPUDIRECT_NETWORK = "vpc{n}"  # GKE Network object of the n-th GPUDirect NIC (eth<n> in the pod)


def pool_selector(slice_: Slice, pool: str) -> dict[str, str]:
    """Node selector of one slice's own node pool: its accelerator labels and the pool's name."""
    return {**slice_.node_selector, NODEPOOL_LABEL: pool}


def slice_selector(env: Environment, key: str) -> dict[str, str]:
    """Node selector of slice `key`: its own pool, or, where it falls back through capacity tiers, its
    ComputeClass (whose pools are the tiers')."""
    spec = env.slices[key]
    if spec.falls_back:
        return {**spec.slice.node_selector, COMPUTE_CLASS_LABEL: compute_class(key)}
    return pool_selector(spec.slice, key)


def slice_tolerations(env: Environment, key: str) -> list[dict[str, str]]:
    """Tolerations a pod on slice `key` needs beyond its accelerator's: its ComputeClass's taint, if it has one."""
    if not env.slices[key].falls_back:
        return []
    return [{"key": COMPUTE_CLASS_LABEL, "operator": "Equal", "value": compute_class(key), "effect": "NoSchedule"}]


def gpudirect_network_names(count: int) -> list[str]:
    return [GPUDIRECT_NETWORK.format(n=n) for n in range(1, count + 1)]


def gpu_networking_values(env: Environment) -> dict[str, Any]:
    """Values of the gpu-networking chart: one GKE Network per GPUDirect VPC, installers per transport."""
    vpcs = env.network.gpudirect_names(env.region, env.gke_gpudirect_networks)
    transports: dict[str, dict[str, Any]] = {}
    for spec in env.gke_slices.values():
        direct = spec.slice.gpudirect
        if direct is None:
            continue
        installer = transports.setdefault(
            direct.transport, {"transport": direct.transport, "image": direct.installer_image, "acceleratorLabels": []}
        )
        if spec.slice.accelerator.node_label not in installer["acceleratorLabels"]:
            installer["acceleratorLabels"].append(spec.slice.accelerator.node_label)
    return {
        "networks": [
            {"name": name, "vpc": vpc, "subnet": subnet}
            for name, (vpc, subnet) in zip(gpudirect_network_names(len(vpcs)), vpcs, strict=True)
        ],
        "installers": [transports[t] for t in sorted(transports)],
        "deviceInjectorImage": upstream.DEVICE_INJECTOR,
        "pauseImage": upstream.PAUSE,
        "hostSetupImage": upstream.HOST_SETUP,
    }


def _quantities(share: dict[str, int]) -> dict[str, str]:
    """Kueue quantities of a share (memory in GB)."""
    return {r: f"{n}G" if r == "memory" else str(n) for r, n in share.items()}


def _weight(weight: float) -> str:
    """A fair-sharing weight as a Kubernetes quantity (`3`, `0.5`): Python writes a float of 0.001 to 1000 (the
    config's range) without an exponent."""
    return str(weight).removesuffix(".0")


def _preemption(queue: QueueShare) -> dict[str, Any]:
    """A ClusterQueue's `preemption`, as Kueue names its fields."""
    p = queue.preemption
    return {
        "reclaimWithinCohort": p.reclaim_within_cohort,
        "borrowWithinCohort": {"policy": p.borrow_within_cohort},
        "withinClusterQueue": p.within_cluster_queue,
    }


def kueue_values(env: Environment) -> dict[str, Any]:
    """Values of the kueue-queues chart: a flavor per batch slice; the platform's queue with each slice's quota (less
    the teams' shares), and with teams, a queue of each team's in one cohort and Kueue's priority classes."""
    batch = env.batch
    assert batch is not None
    platform, *teams = queue_shares(env)
    flavors: list[dict[str, Any]] = []
    for key in batch.slices:
        spec = env.slices[key]
        slice_ = spec.slice
        tolerations = [{"key": slice_.resource_name, "operator": "Exists", "effect": "NoSchedule"}]
        if spec.primary.type == "queued":
            tolerations.append({"key": "cloud.google.com/gke-queued", "operator": "Exists", "effect": "NoSchedule"})
        flavors.append(
            {
                "name": key,
                "nodeLabels": {NODEPOOL_LABEL: key},
                "tolerations": tolerations,
                "quota": _quantities(platform.nominal[key]),
                "provisioningRequest": spec.primary.type == "queued",
            }
        )
    lent = _lent_flavors(env) if lends_training(env) else []
    resources = sorted({r for f in flavors + lent for r in f["quota"]})
    none = {f["name"]: f["quota"] for f in lent}  # nominal 0; as a borrowing limit: may not borrow
    values: dict[str, Any] = {
        "clusterQueue": batch.queue,
        "borrowingLimit": none,
        "localQueue": {"name": batch.queue, "namespace": env.identities[batch.identity].namespace},
        "coveredResources": resources,
        "flavors": flavors + lent,
        "provisioning": {
            "name": PROVISIONING_CHECK,
            "className": "queued-provisioning.gke.io",
            "managedResources": sorted({env.slices[key].slice.resource_name for key in batch.slices}),
        },
    }
    kueue = CONTROLLERS["kueue"]
    if kueue.metrics_port is not None:
        values["metrics"] = {
            "serviceAccount": KUEUE_METRICS_READER,
            "tokenSecret": f"{KUEUE_METRICS_READER}-token",
            "podLabels": dict(kueue.metrics_pod_labels),
            "port": kueue.metrics_port[0],
            "interval": "30s",
            "collector": COLLECTOR,
        }
    if teams:
        values["cohort"] = COHORT
        values["preemption"] = _preemption(platform)
        values["priorityClasses"] = [{"name": n, "value": v} for n, v in PRIORITIES.items()]
        values["teams"] = [
            {
                "name": t.name,
                "namespace": t.namespace,
                "quota": {**{key: _quantities(share) for key, share in t.nominal.items()}, **none},
                "borrowingLimit": {
                    **{k: _quantities(limit) for k, limit in t.borrowing_limit.items() if limit is not None},
                    **({} if env.teams[t.name].borrow_training else none),
                },
                "preemption": _preemption(t),
                **({"weight": _weight(t.weight)} if t.weight is not None else {}),
            }
            for t in teams
        ]
    return values


def kueue_controller_values(env: Environment) -> dict[str, Any] | None:
    """The Kueue release's values where the platform sets something of Kueue's Configuration (the chart takes the
    whole file as one value): fair sharing, on where a team has a weight; how long an admitted workload's pods may
    take to be Ready, at a Kueue that always waits for them (KUEUE_WAIT_FOR_PODS_READY, its timeouts from the measured
    starts where every queued slice has one: pods_ready_timeout). None otherwise: the chart's own Configuration."""
    version = env.release.controllers["kueue"]
    timeout = pods_ready_timeout(env)
    settings = {
        **({"fairSharing": KUEUE_FAIR_SHARING} if fair_sharing(env) else {}),
        **(
            {"waitForPodsReady": {**KUEUE_WAIT_FOR_PODS_READY[version], **timeout.durations()}}
            if timeout is not None
            else {}
        ),
    }
    if not settings:
        return None
    if version not in KUEUE_MANAGER_CONFIG:
        raise KeyError(f"Kueue {version}: its chart's Configuration is not in infra/catalogue/controllers.py "
                       "KUEUE_MANAGER_CONFIG (charts/kueue/values.yaml managerConfig at that version)")  # fmt: skip
    config = {**KUEUE_MANAGER_CONFIG[version], **settings}
    why = f"{WAIT_WHY}{timeout.why}\n" if timeout is not None else ""
    return {"managerConfig": {"controllerManagerConfigYaml": why + yaml.safe_dump(config, sort_keys=False)}}


def _gpu_pod_values(env: Environment, key: str, nodes: int) -> dict[str, Any]:
    """What every GPU JobSet pod on slice `key` needs: placement, queue, resources, GPUDirect."""
    batch = env.batch
    assert batch is not None
    slice_: Slice = env.slices[key].slice
    direct = slice_.gpudirect
    return {
        "queue": batch.queue,
        "serviceAccountName": env.identities[batch.identity].service_account,
        "nodes": nodes,
        "acceleratorResource": slice_.resource_name,
        "acceleratorsPerNode": slice_.chips_per_host,
        "nodeSelector": pool_selector(slice_, key),
        "gpudirect": None
        if direct is None
        else {
            "transport": direct.transport,
            "daemonImage": direct.daemon_image,
            "networks": gpudirect_network_names(direct.extra_nics),
            "ncclEnv": nccl_env(direct, GPU_HOSTS["gke"]),
        },
    }


def nccl_test_values(env: Environment) -> dict[str, Any]:
    """Values of the gpu-jobset chart running the NCCL all-gather test."""
    batch = env.batch
    assert batch is not None and batch.nccl_test is not None
    test = batch.nccl_test
    slice_ = env.slices[test.slice].slice
    direct = slice_.gpudirect
    assert direct is not None, "every GPU machine in the catalogue has GPUDirect NICs"
    return {
        **_gpu_pod_values(env, test.slice, test.nodes or slice_.hosts),
        "workload": "nccl-test",
        "run": test.run,
        # The NCCL plugin image carries nccl-tests, MPI and the launch scripts.
        "image": direct.installer_image,
        "ncclTest": {"minBusBandwidthGbps": test.min_bus_bandwidth_gbps},
    }


def gpu_training_values(env: Environment) -> dict[str, Any]:
    """Values of the gpu-jobset chart training the canary with JAX, one process per node."""
    batch = env.batch
    assert batch is not None and batch.training is not None
    training = batch.training
    slice_ = env.slices[training.slice].slice
    return {
        **_gpu_pod_values(env, training.slice, slice_.hosts),
        "workload": "train",
        "run": training.run,
        "image": env.release.images[training.image],
        "training": {
            "steps": training.steps,
            "bucket": env.bucket_name(training.bucket),
            "mountPath": CHECKPOINT_MOUNT,
            "maxRestarts": training.resilience.max_restarts,
            "retryExitCodes": training.resilience.exit_codes or None,
        },
    }


def without_nulls(values: Any) -> Any:
    """`values` with every null dropped: Helm reads a null as "delete this key", so it is never sent."""
    if isinstance(values, dict):
        return {k: without_nulls(v) for k, v in values.items() if v is not None}
    if isinstance(values, list):
        return [without_nulls(v) for v in values]
    return values


# A first install that fails leaves Helm's record of the release (status failed) but nothing in Terraform's state:
# the helm provider's Create sets no state when the install returns an error (hashicorp/terraform-provider-helm
# v3.1.2 helm/resource_helm_release.go Create: the `err != nil && rel != nil` path returns before resp.State.Set), so
# every later apply installs again and Helm refuses: "cannot re-use a name that is still in use". With
# upgrade_install the next apply finds that record and upgrades it (the provider's "Upgrade Mode", docs/index.md),
# as `helm upgrade --install` does; an atomic release is uninstalled on failure and leaves no record either. Rule
# helm.first-install-recoverable holds every release to one or the other.
UPGRADE_INSTALL = True


class ControllerRelease(Construct):
    """An upstream controller's chart from its OCI registry, at the environment's pinned version.

    Its CRDs are the platform's, not left to where the chart keeps them: `skip_crds` leaves the chart's crds/ to
    the post-renderer, which adds the version's pinned files to the release (installed and upgraded with it) and
    marks every CRD `helm.sh/resource-policy: keep` (left on uninstall and when an upgrade no longer renders
    it): infra/delivery/crd_postrender.py, infra/catalogue/controller_crds.py.
    """

    def __init__(
        self, scope: Construct, id_: str, *, version: str, depends_on: list[Any], values: dict[str, Any] | None = None
    ) -> None:
        super().__init__(scope, id_)
        controller = CONTROLLERS[id_]
        self.release = helm("release").Release(
            self,
            "release",
            name=id_,
            repository=controller.repository,
            chart=controller.chart,
            version=version,
            namespace=controller.namespace,
            create_namespace=True,
            atomic=True,
            wait=True,
            upgrade_install=UPGRADE_INSTALL,
            timeout=900,
            skip_crds=True,
            postrender={"binary_path": CRD_POSTRENDER, "args": ["render", id_, version]},
            **({"values": [json.dumps(values, sort_keys=True)]} if values else {}),
            depends_on=depends_on,
        )


class ChartRelease(Construct):
    """A Helm release of one of the repository's charts, values passed as one JSON document."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        chart: str,
        namespace: str,
        values: dict[str, Any],
        depends_on: list[Any],
        wait: bool = True,
        create_namespace: bool = False,
    ) -> None:
        super().__init__(scope, id_)
        version = local_chart_versions()[chart]
        self.release = helm("release").Release(
            self,
            "release",
            name=id_,
            chart=chart_path(chart),
            version=version,
            namespace=namespace,
            **({"create_namespace": True} if create_namespace else {}),
            values=[json.dumps(without_nulls(values), sort_keys=True)],
            atomic=wait,
            wait=wait,
            upgrade_install=UPGRADE_INSTALL,
            timeout=900,
            depends_on=depends_on,
        )
