"""KubeRay: the TPU webhook's host count, the TPU worker environment, worker group names."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from infra.catalogue.accelerators import TPU_TOPOLOGY_LABEL, tpu_slice_for_machine
from infra.rules import Finding, containers, rule, where
from infra.rules.manifest_subject import NODEPOOL_LABEL, ReleaseContext, _tpu_chips
from infra.rules.sources import RAY_TUTORIAL


@rule(
    id="kuberay.tpu.num-of-hosts-matches-topology",
    system="KubeRay TPU webhook",
    layer="admission",
    summary="A TPU worker group's numOfHosts is the number of hosts of its topology.",
    source=(
        "ray-project/kuberay ray-operator/pkg/webhooks (TPU multi-host validation: numOfHosts must match the "
        "topology); https://docs.ray.io/en/latest/cluster/kubernetes/user-guides/tpu.html"
    ),
    subject="manifest",
    kinds=("RayCluster",),
)
def _num_of_hosts(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    pools = ctx.pools()
    for obj in objects:
        for i, group in enumerate(obj["spec"].get("workerGroupSpecs") or []):
            spec = group["template"]["spec"]
            chips = _tpu_chips(spec)
            selector = spec.get("nodeSelector") or {}
            topology = selector.get(TPU_TOPOLOGY_LABEL)
            if not chips or not topology:
                continue
            per_host = chips[0][1]
            pool = pools.get(selector.get(NODEPOOL_LABEL, ""))
            machine = pool["node_config"]["machine_type"] if pool else None
            total = math.prod(int(d) for d in topology.split("x"))
            hosts = tpu_slice_for_machine(machine, topology).hosts if machine else total // per_host
            if group.get("numOfHosts", 1) != hosts:
                yield Finding(
                    f"{where(obj)}: spec.workerGroupSpecs[{i}].numOfHosts",
                    group.get("numOfHosts", 1),
                    f"topology {topology} with {per_host} chips per host is {hosts} hosts",
                )


@rule(
    id="kuberay.tpu.worker-env",
    system="libtpu / JAX on KubeRay",
    layer="engine-start",
    summary="TPU Ray workers run with JAX_PLATFORMS=tpu and ENABLE_PJRT_COMPATIBILITY=true, as the tutorial sets them.",
    source=RAY_TUTORIAL,
    subject="manifest",
    kinds=("RayCluster",),
)
def _ray_env(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    wanted = {"JAX_PLATFORMS": "tpu", "ENABLE_PJRT_COMPATIBILITY": "true"}
    for obj in objects:
        for i, group in enumerate(obj["spec"].get("workerGroupSpecs") or []):
            spec = group["template"]["spec"]
            for path, c in containers(spec):
                if not _tpu_chips({"containers": [c]}):
                    continue
                env = {e["name"]: e.get("value") for e in c.get("env") or []}
                for name, value in wanted.items():
                    if env.get(name) != value:
                        yield Finding(
                            f"{where(obj)}: spec.workerGroupSpecs[{i}].template.spec.{path}.env.{name}",
                            env.get(name),
                            f"must be {value!r}",
                        )


@rule(
    id="kuberay.worker-group-names-unique",
    system="KubeRay",
    layer="admission",
    summary="Worker group names of a RayCluster are unique (KubeRay creates no pods for an invalid spec).",
    source="ray-project/kuberay ray-operator/controllers/ray/utils/validation.go ValidateRayClusterSpec @ v1.7.0",
    kinds=("RayCluster",),
    subject="manifest",
)
def _ray_groups(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for obj in objects:
        names = [g.get("groupName") for g in obj["spec"].get("workerGroupSpecs") or []]
        for name in sorted({n for n in names if names.count(n) > 1}):
            yield Finding(
                f"{where(obj)}: spec.workerGroupSpecs[].groupName", name, "used by more than one worker group"
            )


RAY_TOKEN_AUTH = (2, 52)


@rule(
    id="kuberay.token-authentication",
    system="Ray / KubeRay",
    layer="engine-start",
    summary=(
        "A RayCluster of Ray 2.52 or later turns on token authentication (spec.authOptions.mode: token): "
        "otherwise whoever reaches its dashboard, Jobs API or client port runs code as the cluster."
    ),
    source=(
        "https://docs.ray.io/en/latest/ray-security/token-auth.html (Ray 2.52.0 or later; disabled by default); "
        "https://docs.ray.io/en/latest/cluster/kubernetes/user-guides/kuberay-auth.html (authOptions, KubeRay "
        "v1.5.1); CVE-2023-48022"
    ),
    kinds=("RayCluster",),
    subject="manifest",
)
def _token_auth(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for obj in objects:
        version = tuple(int(n) for n in str(obj["spec"].get("rayVersion", "0.0")).split(".")[:2])
        mode = (obj["spec"].get("authOptions") or {}).get("mode")
        if version >= RAY_TOKEN_AUTH and mode != "token":
            yield Finding(
                f"{where(obj)}: spec.authOptions.mode", mode, "set it to token: Ray's APIs answer anyone otherwise"
            )
