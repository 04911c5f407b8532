"""The accelerators a stack holds: chips per generation and zone, and the GPUs each orchestrator (GKE, Slurm,
Vertex AI, Compute Engine) would hold at most."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from infra.catalogue.accelerators import accelerator_for_machine
from infra.derive.names import COMPUTE_CLASS_LABEL
from infra.review.costs import capacity_of
from infra.review.model import Holding, block


def accelerator_inventory(stack_json: Mapping[str, Any]) -> Counter[tuple[str, str]]:
    """Chips per (accelerator generation, zone) that the stack's node pools hold."""
    return pool_inventory((stack_json.get("resource") or {}).get("google_container_node_pool", {}).values())


def pool_inventory(pools: Iterable[Mapping[str, Any]]) -> Counter[tuple[str, str]]:
    """Chips per (accelerator generation, zone) of node pool bodies (config or plan values). The capacity tiers of
    one ComputeClass count once, at the largest: together they hold no more than one tier's most nodes."""
    inventory: Counter[tuple[str, str]] = Counter()
    classes: dict[str, Counter[tuple[str, str]]] = {}
    for body in pools:
        node_config = block(body.get("node_config"))  # plan values hold blocks as lists
        found = accelerator_for_machine(str(node_config.get("machine_type", "")))
        if found is None:
            continue
        acc, shape = found
        nodes = body.get("node_count")
        if nodes is None:
            autoscaling = block(body.get("autoscaling"))
            # Per-zone limits (TPU slices) or a total over the pool's zones (GPU pools).
            nodes = autoscaling.get("max_node_count") or autoscaling.get("total_max_node_count") or 0
        zones = body.get("node_locations") or [body.get("location", "?")]
        chips = Counter({(acc.name, zone): int(nodes) * shape.chips for zone in zones})
        compute_class = block(node_config.get("labels")).get(COMPUTE_CLASS_LABEL)
        if compute_class:
            held = classes.setdefault(str(compute_class), Counter())
            for key, n in chips.items():  # the larger of the tiers, per generation and zone
                held[key] = max(held[key], n)
        else:
            inventory.update(chips)
    for held in classes.values():
        inventory.update(held)
    return inventory


def gke_holdings(stack_json: Mapping[str, Any]) -> list[Holding]:
    """The GPUs of the stack's GPU node pools, each at its maximum size."""
    out = []
    for body in ((stack_json.get("resource") or {}).get("google_container_node_pool") or {}).values():
        config = body.get("node_config") or {}
        found = accelerator_for_machine(str(config.get("machine_type", "")))
        if found is None or found[0].kind != "gpu":
            continue
        autoscaling = body.get("autoscaling") or {}
        nodes = int(body.get("node_count") or autoscaling.get("total_max_node_count") or 0)
        capacity, how = capacity_of(config, body)
        out.append(
            Holding(
                "GKE",
                f"node pool {body.get('name')}",
                nodes * found[1].chips,
                f"{config['machine_type']} x{nodes}, {how}",
                nodes,
                str(config["machine_type"]),
                str((body.get("node_locations") or [""])[0]),
                capacity,
            )
        )
    return out


def slurm_holdings(blueprint: Mapping[str, Any]) -> list[Holding]:
    """The GPUs of a Slurm blueprint's nodesets: static nodes always, dynamic ones while jobs run."""
    out = []
    for group in blueprint.get("deployment_groups") or []:
        for module in group.get("modules") or []:
            if not str(module.get("source", "")).endswith("schedmd-slurm-gcp-v6-nodeset"):
                continue
            settings = module.get("settings") or {}
            found = accelerator_for_machine(str(settings.get("machine_type", "")))
            if found is None or found[0].kind != "gpu":
                continue
            static, dynamic = int(settings.get("node_count_static", 0)), int(settings.get("node_count_dynamic_max", 0))
            how = f"{settings['machine_type']} x{static + dynamic}: {static} static"
            how += f", {dynamic} created for jobs and deleted when idle" if dynamic else ""
            if settings.get("enable_spot_vm"):
                capacity = "spot"
            elif (settings.get("dws_flex") or {}).get("enabled"):
                capacity = "flex-start"
            else:
                capacity = "reservation" if settings.get("reservation_name") else "on-demand"
            nodes = static + dynamic
            out.append(
                Holding(
                    "Slurm",
                    f"nodeset {module.get('id')}",
                    nodes * found[1].chips,
                    how,
                    nodes,
                    str(settings["machine_type"]),
                    str(settings.get("zone", "")),
                    capacity,
                )
            )
    return out


def vertex_holdings(requests: Mapping[str, Mapping[str, Any]]) -> list[Holding]:
    """The GPUs of each Vertex AI job request (by job name): every replica's, only while the job runs."""
    out = []
    for name, request in requests.items():
        spec = request.get("jobSpec") or {}
        pools = spec.get("workerPoolSpecs") or []
        replicas = sum(int(p.get("replicaCount", 0)) for p in pools)
        gpus = sum(int(p.get("replicaCount", 0)) * int(p["machineSpec"].get("acceleratorCount", 0)) for p in pools)
        machine = (pools[0].get("machineSpec") or {}).get("machineType", "?") if pools else "?"
        strategy = (spec.get("scheduling") or {}).get("strategy", "STANDARD")
        if any((p.get("machineSpec") or {}).get("reservationAffinity") for p in pools):
            strategy += " on its reservation"
        how = f"{machine} x{replicas}, {strategy}: only while the job runs (Vertex AI bills its own rates)"
        out.append(Holding("Vertex AI", f"job {name}", gpus, how, replicas, str(machine)))
    return out


def vm_holdings(stack_json: Mapping[str, Any]) -> list[Holding]:
    """The GPUs of the stack's VM groups: empty until `make vm-up`, then every VM of its template's group."""
    res = stack_json.get("resource") or {}
    templates = {f"${{google_compute_instance_template.{k}.self_link_unique}}": v for k, v in
                 (res.get("google_compute_instance_template") or {}).items()}  # fmt: skip
    out = []
    for group in (res.get("google_compute_instance_group_manager") or {}).values():
        template = templates.get(group["version"][0]["instance_template"]) or {}
        found = accelerator_for_machine(str(template.get("machine_type", "")))
        if found is None or found[0].kind != "gpu":
            continue
        vms = len(str((template.get("metadata") or {}).get("platform-hosts", "")).split(","))
        sched = template.get("scheduling") or {}
        model = sched.get("provisioning_model", "STANDARD")
        reserved = (template.get("reservation_affinity") or {}).get("type") == "SPECIFIC_RESERVATION"
        capacity = {"SPOT": "spot", "FLEX_START": "flex-start"}.get(model, "reservation" if reserved else "on-demand")
        how = f"{template['machine_type']} x{vms}, {capacity}: none until `make vm-up`, all until `make vm-down`"
        if capacity == "flex-start":
            how += " or the run ends"
        out.append(
            Holding(
                "VMs",
                f"group {group.get('name')}",
                vms * found[1].chips,
                how,
                vms,
                str(template["machine_type"]),
                str(group.get("zone", "")),
                capacity,
            )
        )
    return out
