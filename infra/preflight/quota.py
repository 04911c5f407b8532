"""What the stack's node pools ask of each quota at their max nodes, and whether the project's limits hold it
(Compute Engine regions.get; TPU v6e, v5p, TPU7x: Cloud Quotas quotaInfos.get; infra/catalogue/quota_metrics.py)."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from typing import Any

from infra.catalogue.accelerators import accelerator_for_machine
from infra.catalogue.cpu_machines import CPU_MACHINES
from infra.catalogue.quota_metrics import QuotaMetric, UnknownQuota, cpu_metric, gpu_metric, tpu_metric
from infra.config import Environment
from infra.derive.names import COMPUTE_CLASS_LABEL
from infra.preflight.result import Result
from infra.preflight.transport import CLOUD_QUOTAS, CLOUD_QUOTAS_API, COMPUTE, Transport, error_line


@dataclass(frozen=True)
class Ask:
    """What one node pool asks of one quota at its max nodes."""

    region: str
    metric: QuotaMetric
    amount: int
    pool: str
    # flex-start and queued provisioning: standard quota is used where the preemptible one is short
    fallback: QuotaMetric | None = None


def _region(location: str) -> str:
    parts = location.split("-")
    return "-".join(parts[:2]) if len(parts) > 2 else location


def max_nodes(pool: dict[str, Any], zones: int) -> int:
    """The most nodes a node pool of the stack runs: its autoscaling's maximum, else its fixed count, per zone."""
    autoscaling = pool.get("autoscaling") or {}
    if "total_max_node_count" in autoscaling:
        return int(autoscaling["total_max_node_count"])
    if "max_node_count" in autoscaling:
        return int(autoscaling["max_node_count"]) * zones
    return int(pool.get("node_count") or pool.get("initial_node_count") or 0) * zones


def _vcpus(machine_type: str) -> int:
    if machine_type in CPU_MACHINES:
        return CPU_MACHINES[machine_type].vcpus
    found = accelerator_for_machine(machine_type)
    if found is None:
        raise UnknownQuota(f"machine type {machine_type} (its vCPUs: infra/catalogue/cpu_machines.py)")
    return found[1].vcpus


def asks(stack: dict[str, Any]) -> tuple[list[Ask], list[str]]:
    """What every node pool of the stack asks of each quota at its max nodes (the tiers of one ComputeClass once per
    quota), and the pools that ask nothing of quota (a specific reservation holds their machines)."""
    resources = stack.get("resource") or {}
    clusters = list((resources.get("google_container_cluster") or {}).values())
    cluster_zones = len((clusters[0].get("node_locations") or []) if clusters else []) or 1
    out: list[Ask] = []
    reserved: list[str] = []
    # The capacity tiers of one ComputeClass hold its nodes once: each quota is asked for them once (all on the tiers
    # that draw on it), not once per tier.
    class_asks: dict[tuple[str, str, str], int] = {}
    for pool in (resources.get("google_container_node_pool") or {}).values():
        name = pool.get("name", "?")
        config = pool.get("node_config") or {}
        compute_class = (config.get("labels") or {}).get(COMPUTE_CLASS_LABEL)
        machine = config["machine_type"]
        zones = len(pool.get("node_locations") or []) or cluster_zones
        nodes = max_nodes(pool, zones)
        region = _region(pool.get("location") or (pool.get("node_locations") or ["?"])[0])
        affinity = (config.get("reservation_affinity") or {}).get("consume_reservation_type")
        if affinity == "SPECIFIC_RESERVATION":
            reservation = ", ".join((config.get("reservation_affinity") or {}).get("values") or [])
            reserved.append(f"{name}: {nodes} x {machine} from reservation {reservation} (no quota drawn)")
            continue
        flex = bool((pool.get("queued_provisioning") or {}).get("enabled") or config.get("flex_start"))
        preemptible = bool(config.get("spot") or config.get("preemptible") or flex)

        draws: list[tuple[QuotaMetric, int, QuotaMetric | None]] = []
        cpu = cpu_metric(machine, preemptible=preemptible)
        if cpu is not None:
            draws.append((cpu, _vcpus(machine) * nodes, cpu_metric(machine, preemptible=False)))
        for accelerator in config.get("guest_accelerator") or []:
            kind = accelerator["type"]
            standard = gpu_metric(kind, preemptible=False)
            draws.append((gpu_metric(kind, preemptible=preemptible), int(accelerator["count"]) * nodes, standard))
        found = accelerator_for_machine(machine)
        if found is not None and found[0].kind == "tpu":
            generation, shape = found
            standard = tpu_metric(generation.name, preemptible=False)
            draws.append((tpu_metric(generation.name, preemptible=preemptible), shape.chips * nodes, standard))
        for metric, amount, fallback in draws:
            if not amount:
                continue
            ask = Ask(region, metric, amount, name, fallback if flex else None)
            key = (str(compute_class), region, repr(metric))
            if compute_class and key in class_asks:
                # Another tier of the class draws on this quota: one ask for both, its pools named, the fallback
                # quota only where every such tier has one (a spot tier has none).
                first = out[class_asks[key]]
                out[class_asks[key]] = replace(
                    first,
                    pool=", ".join(sorted([*first.pool.split(", "), name])),
                    amount=max(first.amount, amount),
                    fallback=first.fallback if first.fallback == ask.fallback else None,
                )
                continue
            if compute_class:
                class_asks[key] = len(out)
            out.append(ask)
    return out, reserved


@dataclass(frozen=True)
class Limit:
    """A quota's limit in one region (None: unlimited) and its usage where the API reports it."""

    limit: float | None
    usage: float | None
    source: str


class QuotaReader:
    """Reads each region's Compute Engine quotas and each Cloud Quotas quota id once."""

    def __init__(self, project: str, transport: Transport) -> None:
        self.project = project
        self.transport = transport
        self._regions: dict[str, dict[str, tuple[float, float]] | str] = {}
        self._infos: dict[str, dict[str, Any] | str] = {}

    def limit(self, region: str, metric: QuotaMetric) -> Limit | str:
        """The limit, or why it could not be read."""
        if metric.api == "compute":
            quotas = self._region(region)
            if isinstance(quotas, str):
                return quotas
            limit, usage = quotas.get(metric.name, (0.0, 0.0))
            return Limit(limit, usage, f"regions.get {region}")
        info = self._info(metric.name)
        if isinstance(info, str):
            return info
        wanted = {"region": region, **metric.dimensions}
        best: tuple[int, dict[str, Any]] | None = None
        for entry in info.get("dimensionsInfos") or []:
            dims = entry.get("dimensions") or {}
            if all(wanted.get(k) == v for k, v in dims.items()) and (best is None or len(dims) > best[0]):
                best = (len(dims), entry)
        if best is None:
            return Limit(0.0, None, f"Cloud Quotas {metric.name} (no value for {region})")
        value = int((best[1].get("details") or {}).get("value", 0))
        return Limit(None if value == -1 else float(value), None, f"Cloud Quotas {metric.key}")

    def _region(self, region: str) -> dict[str, tuple[float, float]] | str:
        if region not in self._regions:
            answer = self.transport.request("GET", f"{COMPUTE}/projects/{self.project}/regions/{region}")
            if answer.status != 200:
                self._regions[region] = f"Compute Engine did not answer regions.get {region}: {error_line(answer)}"
            else:
                self._regions[region] = {
                    q["metric"]: (float(q.get("limit", 0)), float(q.get("usage", 0)))
                    for q in answer.body.get("quotas") or []
                }
        return self._regions[region]

    def _info(self, quota_id: str) -> dict[str, Any] | str:
        if quota_id not in self._infos:
            url = (
                f"{CLOUD_QUOTAS}/projects/{self.project}/locations/global/services/compute.googleapis.com/"
                f"quotaInfos/{quota_id}"
            )
            answer = self.transport.request("GET", url)
            if answer.status == 404:
                self._infos[quota_id] = (
                    f"Cloud Quotas knows no quota {quota_id} of compute.googleapis.com "
                    "(infra/catalogue/quota_metrics.py names it; check the Quotas page of the console)"
                )
            elif answer.status != 200:
                self._infos[quota_id] = f"Cloud Quotas did not answer {quota_id}: {error_line(answer)}"
            else:
                self._infos[quota_id] = answer.body
        return self._infos[quota_id]


def _fmt(value: float | None) -> str:
    return "unlimited" if value is None else f"{value:g}"


def check_quota(
    env: Environment,
    stack_asks: list[Ask],
    reserved: list[str],
    transport: Transport,
    *,
    pending: AbstractSet[str] = frozenset(),
) -> Result:
    """Each region's quota against what the pools ask for at their max nodes (the limit: the environment must fit
    it whole; what else runs in the project is in `usage`, shown)."""
    reader = QuotaReader(env.project, transport)
    totals: dict[tuple[str, str], list[Ask]] = {}
    for ask in stack_asks:
        totals.setdefault((ask.region, ask.metric.key), []).append(ask)
    lines: list[str] = []
    failed = unread = False
    for (region, _), group in sorted(totals.items()):
        metric = group[0].metric
        amount = sum(a.amount for a in group)
        pools = ", ".join(sorted({a.pool for a in group}))
        found = reader.limit(region, metric)
        if isinstance(found, str):
            service = "compute.googleapis.com" if metric.api == "compute" else CLOUD_QUOTAS_API
            if service in pending:
                lines.append(f"{region} {metric.key}: not checked: {service} is off until this deploy enables it")
                continue
            unread = True
            lines.append(f"{region} {metric.key}: not read: {found}")
            continue
        used = f", in use now {_fmt(found.usage)}" if found.usage is not None else ""
        if found.limit is None or amount <= found.limit:
            lines.append(f"{region} {metric.key}: {amount} {metric.unit} at most, limit {_fmt(found.limit)}{used}")
            continue
        fallback = group[0].fallback
        if fallback is not None and all(a.fallback == fallback for a in group):
            standard = reader.limit(region, fallback)
            standard_asked = sum(a.amount for a in stack_asks if a.region == region and a.metric.key == fallback.key)
            if isinstance(standard, Limit) and (standard.limit is None or standard.limit >= amount + standard_asked):
                lines.append(
                    f"{region} {metric.key}: {amount} {metric.unit} at most, over its limit {_fmt(found.limit)}; "
                    f"flex-start falls back to {fallback.key} (limit {_fmt(standard.limit)})"
                )
                continue
        failed = True
        lines.append(
            f"short: {region} {metric.key}: pools {pools} ask for up to {amount} {metric.unit}, the limit is "
            f"{_fmt(found.limit)}{used} ({found.source}); request more on the Quotas page "
            f"(https://console.cloud.google.com/iam-admin/quotas?project={env.project}) or lower the pools' max nodes"
        )
    lines += [f"reserved: {line}" for line in reserved]
    if failed:
        return Result("quota", "fail", lines)
    if unread:
        return Result("quota", "fail", lines)
    return Result("quota", "ok", lines)
