"""Where the scheduler could place each pod of dev and prod, decided by its own predicates (node affinity,
taints and tolerations, requests against allocatable), and the pods it would leave Pending."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from infra.derive.gke_nodes import allocatable_cpu, allocatable_memory_gib
from infra.rules import RULES
from infra.rules.manifest_subject import ReleaseContext
from infra.rules.run import stack_releases
from infra.rules.scheduler import pod_requests, quantity, verdicts
from tests.helpers import one_of_kind

# Every pod template the stacks create and the pools that can take it (the same in dev and prod).
EXPECTED = {
    ("gpu-networking", "DaemonSet/device-injector"): ["a3mega"],
    ("gpu-networking", "DaemonSet/nccl-tcpxo-installer"): ["a3mega"],
    ("nccl-test", "JobSet"): ["a3mega"],
    ("gpu-training", "JobSet"): ["a3mega"],
    ("ray-training", "spec.headGroupSpec"): ["system"],
    ("ray-training", "spec.workerGroupSpecs[0]"): ["train"],
    ("serve-canary", "Deployment/serve-canary"): ["system"],
    ("metrics-adapter", "Deployment/metrics-adapter"): ["system"],
    ("serve-llama405b", "Job/"): ["convert"],
    ("serve-llama405b", "leaderTemplate"): ["system"],
    ("serve-llama405b", "workerTemplate"): ["serve"],
    ("serve-llama70b-disagg", "Job/"): ["convert"],
    ("serve-llama70b-disagg", "leaderTemplate"): ["system"],
    ("serve-llama70b-disagg", "workerTemplate"): ["decode", "prefill"],
    ("serve-llama70b-vllm", "workerTemplate"): ["vllm"],
    ("serve-llama70b-vllm", "Deployment/serve-llama70b-vllm-epp"): ["system"],
    ("serve-llama70b-vllm-mh", "leaderTemplate"): ["vllm-multihost"],
    ("serve-llama70b-vllm-mh", "workerTemplate"): ["vllm-multihost"],
    ("serve-saxml", "Deployment/serve-saxml-admin"): ["system"],
    ("serve-saxml", "Deployment/serve-saxml-http"): ["system"],
    ("serve-saxml", "replicatedJobs[0]"): ["sax-a"],
    ("serve-saxml", "replicatedJobs[1]"): ["sax-b"],
}
# Where an environment differs: dev's vLLM servers select their slice's ComputeClass, over three capacity tiers, and
# its multi-host servers any of their slice's two pools (one group to a pool).
MULTIHOST = ["vllm-multihost", "vllm-multihost-1"]
EXPECTED_IN = {
    "dev": {
        ("serve-llama70b-vllm", "workerTemplate"): ["vllm", "vllm-flex-start", "vllm-on-demand"],
        ("serve-llama70b-vllm-mh", "leaderTemplate"): MULTIHOST,
        ("serve-llama70b-vllm-mh", "workerTemplate"): MULTIHOST,
    }
}


def _releases(stack: dict[str, Any]) -> tuple[dict[str, list[dict[str, Any]]], dict[str, str]]:
    releases = stack_releases(stack)
    return {n: objs for n, (_, objs) in releases.items()}, {n: r["namespace"] for n, (r, _) in releases.items()}


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_the_verdict_for_every_pod_of_the_stack(env: str, stacks: dict[str, dict[str, Any]]) -> None:
    objects, namespaces = _releases(stacks[env])
    seen = set()
    for pod, result in verdicts(stacks[env], objects, namespaces):
        fits = sorted(pool for pool, refusal in result.items() if refusal is None)
        (key,) = [k for k in EXPECTED if k[0] == pod.release and k[1] in pod.at]
        assert fits == EXPECTED_IN.get(env, {}).get(key, EXPECTED[key]), (pod.at, result)
        seen.add(key)
    # prod runs no GPU training and no autoscaled server (so no metrics adapter).
    assert seen == {k for k in EXPECTED if env == "dev" or k[0] not in ("gpu-training", "metrics-adapter")}


def _run(stacks: dict[str, dict[str, Any]], release: str, change: Callable[[list[dict[str, Any]]], Any]) -> list:
    objects, namespaces = _releases(stacks["dev"])
    mine = copy.deepcopy(objects[release])
    change(mine)
    ctx = ReleaseContext(name=release, namespace=namespaces[release], stack=stacks["dev"], stack_objects=objects)
    return RULES["k8s.scheduler-places-every-pod"].run(mine, ctx)


def _worker(objs: list[dict[str, Any]]) -> dict[str, Any]:
    return one_of_kind(objs, "RayCluster")["spec"]["workerGroupSpecs"][0]["template"]["spec"]


def _misspelled_selector(objs: list[dict[str, Any]]) -> None:
    selector = _worker(objs)["nodeSelector"]
    selector["cloud.google.com/gke-nodepol"] = selector.pop("cloud.google.com/gke-nodepool")


def _no_toleration(objs: list[dict[str, Any]]) -> None:
    one_of_kind(objs, "Job")["spec"]["template"]["spec"].pop("tolerations")


def _oversized(objs: list[dict[str, Any]]) -> None:
    _worker(objs)["containers"][0]["resources"]["requests"]["memory"] = "800Gi"


@pytest.mark.parametrize(
    ("release", "change", "refusal"),
    [
        ("ray-training", _misspelled_selector, "train: nodeSelector cloud.google.com/gke-nodepol=train"),
        ("serve-llama405b", _no_toleration, "convert: taint platform.pool=convert:NoSchedule not tolerated"),
        ("ray-training", _oversized, "train: requests 800.25 GiB of memory; a node has 698.1 GiB allocatable"),
    ],
    ids=["misspelled selector", "missing toleration", "oversized request"],
)
def test_a_pod_no_pool_can_take_is_refused_naming_each_pools_predicate(
    release: str, change: Callable[[list[dict[str, Any]]], Any], refusal: str, stacks: dict[str, dict[str, Any]]
) -> None:
    (found,) = _run(stacks, release, change)
    assert found.message.startswith("no node pool can take this pod (") and refusal in found.message
    assert "system: " in found.message  # every pool is named with its reason


def test_kueue_gives_queued_pods_their_flavors_toleration_of_the_queued_taint(
    stacks: dict[str, dict[str, Any]],
) -> None:
    """The A3 Mega pool is tainted cloud.google.com/gke-queued; the JobSet's pods get the toleration from the
    ResourceFlavor when Kueue admits them. Without it in the flavor they would never start."""
    objects, _ = _releases(stacks["dev"])
    flavor = one_of_kind(objects["kueue-queues"], "ResourceFlavor")
    flavor["spec"]["tolerations"] = [t for t in flavor["spec"]["tolerations"] if "queued" not in t["key"]]
    ctx = ReleaseContext(name="nccl-test", namespace="ml-gpu", stack=stacks["dev"], stack_objects=objects)
    (found,) = RULES["k8s.scheduler-places-every-pod"].run(objects["nccl-test"], ctx)
    assert "a3mega: taint cloud.google.com/gke-queued=true:NoSchedule not tolerated" in found.message


def test_a_daemonset_must_fit_every_node_it_selects(stacks: dict[str, dict[str, Any]]) -> None:
    def greedy(objs: list[dict[str, Any]]) -> None:
        ds = next(o for o in objs if o["kind"] == "DaemonSet")
        ds["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "300"}}

    found = _run(stacks, "gpu-networking", greedy)
    assert any(v.message.startswith("selects pool a3mega but does not fit there: requests 300 cores") for v in found)


def test_requests_count_sidecars_init_containers_and_the_fuse_sidecar() -> None:
    template = {
        "metadata": {"annotations": {"gke-gcsfuse/volumes": "true", "gke-gcsfuse/memory-request": "1Gi"}},
        "spec": {
            "initContainers": [
                {"name": "setup", "resources": {"requests": {"cpu": "8"}}},
                {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
            ],
            "containers": [{"name": "main", "resources": {"limits": {"cpu": "2", "memory": "4Gi"}}}],
        },
    }
    # Running: main 2 + proxy 0.5 + the FUSE sidecar 0.25 (injected first) = 2.75 cores; while `setup` runs,
    # the FUSE sidecar already does: 8 + 0.25 = 8.25 cores, the larger. Memory: 4 + 1.
    assert pod_requests(template) == {"cpu": 8.25, "memory": 5.0}
    template["spec"]["initContainers"].reverse()  # proxy before setup: 8 + 0.5 + 0.25
    assert pod_requests(template)["cpu"] == 8.75


def test_gke_allocatable_follows_the_reservation_bands() -> None:
    """plan-node-sizes: 32 GiB -> 25% of 4 + 20% of 4 + 10% of 8 + 6% of 16 + 100 MiB eviction; 8 cores -> 6% + 1%
    + 2 x 0.5% + 4 x 0.25%."""
    assert allocatable_memory_gib(32) == pytest.approx(32 - (1 + 0.8 + 0.8 + 0.96) - 0.1)
    assert allocatable_cpu(8) == pytest.approx(8 - 0.09)
    assert quantity("1536Mi", "memory") == 1.5 and quantity("250m", "cpu") == 0.25


# Every pod of a stack together -------------------------------------------------------------------------


def _system_pool(stack: dict[str, Any]) -> dict[str, Any]:
    pools = stack["resource"]["google_container_node_pool"].values()
    return next(p for p in pools if p["name"] == "system")


def test_the_system_pool_of_three_e2_standard_8_cannot_hold_the_stacks_cpu_pods(
    stacks: dict[str, dict[str, Any]],
) -> None:
    """Before the fix dev's system pool had at most 3 nodes: the controllers, the endpoint picker, the Pathways
    leaders, the Ray head and Saxml's servers ask for 23.5 CPU together, 7.5 per node fits 3 x 7.5: one pod stays
    Pending. Each release alone fit, so the per-release simulation passed."""
    from infra.rules.cluster_autoscaler import pack

    stack = copy.deepcopy(stacks["dev"])
    releases = {name: objs for name, (_, objs) in stack_releases(stack).items()}
    namespaces = {name: r["namespace"] for name, (r, _) in stack_releases(stack).items()}
    assert pack(stack, releases, namespaces).left_out == []
    _system_pool(stack)["autoscaling"]["total_max_node_count"] = 3
    left = pack(stack, releases, namespaces).left_out
    assert [(pod.release, pod.at, n) for pod, n, _ in left] == [
        ("serve-llama70b-vllm", "Deployment/serve-llama70b-vllm-epp: spec.template", 1)
    ]
    assert "find no room in system (at most 3 nodes)" in left[0][2]
    ctx = ReleaseContext(name="serve-llama70b-vllm", namespace="serving", stack=stack, stack_objects=releases)
    found = RULES["gke.pools-hold-their-pods-together"].run(releases["serve-llama70b-vllm"], ctx)
    assert [v.field for v in found] == ["Deployment/serve-llama70b-vllm-epp: spec.template"]


def test_queued_workloads_are_held_alone_and_controllers_land_on_the_system_pool(
    stacks: dict[str, dict[str, Any]],
) -> None:
    """Kueue admits the NCCL test and the GPU training one at a time on the 2-node A3 Mega pool: each must fit
    there alone, not both at once; the three controllers' pods (their charts' requests) count on the system pool."""
    from infra.rules.cluster_autoscaler import pack

    stack = stacks["dev"]
    rendered = stack_releases(stack)
    packing = pack(
        stack, {n: o for n, (_, o) in rendered.items()}, {n: r["namespace"] for n, (r, _) in rendered.items()}
    )
    assert sorted(w.split("/")[0] for w in packing.queued) == ["gpu-training", "nccl-test"]
    for trial in packing.queued.values():
        assert len(trial["a3mega"].nodes) == 2 and trial["a3mega"].max_nodes == 2
    system = {pod.release for pod, _ in packing.pools["system"].placed}
    assert {"jobset", "kueue", "lws"} <= system


@pytest.mark.parametrize(
    ("obj", "path", "count"),
    [
        ({"kind": "Deployment", "spec": {"replicas": 3}}, "spec.template", 3),
        ({"kind": "Job", "spec": {}}, "spec.template", 1),
        (
            {
                "kind": "LeaderWorkerSet",
                "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 5, "leaderTemplate": {}}},
            },
            "spec.leaderWorkerTemplate.workerTemplate",
            8,
        ),
        (
            {
                "kind": "LeaderWorkerSet",
                "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 5, "leaderTemplate": {}}},
            },
            "spec.leaderWorkerTemplate.leaderTemplate",
            2,
        ),
        (
            {"kind": "LeaderWorkerSet", "spec": {"leaderWorkerTemplate": {"size": 4}}},
            "spec.leaderWorkerTemplate.workerTemplate",
            4,
        ),
        (
            {"kind": "JobSet", "spec": {"replicatedJobs": [{"replicas": 2, "template": {"spec": {"parallelism": 4}}}]}},
            "spec.replicatedJobs[0].template.spec.template",
            8,
        ),
        (
            {"kind": "RayCluster", "spec": {"workerGroupSpecs": [{"replicas": 1, "numOfHosts": 4}]}},
            "spec.workerGroupSpecs[0].template",
            4,
        ),
    ],
)
def test_how_many_pods_each_template_runs(obj: dict[str, Any], path: str, count: int) -> None:
    from infra.rules.cluster_autoscaler import copies

    assert copies(obj, path) == count
