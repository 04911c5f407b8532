"""What Terraform rules share: a synthesized stack (`cdk.tf.json`) as the rules read it.

A Terraform rule gets the stack's JSON, exactly what Terraform will apply, and yields (field, value,
message) for every resource that GCP, GKE or the google provider would refuse."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from infra.catalogue.accelerators import tpu_accelerator_for_machine


def resources(stack: dict[str, Any], rtype: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(`<type>.<name or logical id>`, body) of every resource of one type."""
    for logical_id, body in (stack.get("resource", {}).get(rtype) or {}).items():
        yield f"{rtype}.{body.get('name', logical_id)}", body


def _ref(rtype: str, stack: dict[str, Any], value: str) -> dict[str, Any] | None:
    """The resource body a `${<rtype>.<id>.<attr>}` reference points at."""
    m = re.search(r"\$\{" + re.escape(rtype) + r"\.([^.}]+)", value or "")
    return (stack.get("resource", {}).get(rtype) or {}).get(m.group(1)) if m else None


def _is_tpu(node_config: dict[str, Any]) -> bool:
    return tpu_accelerator_for_machine(str(node_config.get("machine_type", ""))) is not None


def _queued(pool: dict[str, Any]) -> bool:
    return bool((pool.get("queued_provisioning") or {}).get("enabled"))


def _flex(node_config: dict[str, Any]) -> bool:
    return bool(node_config.get("flex_start"))


def _clusters(stack: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (logical_id, f"google_container_cluster.{body.get('name')}", body)
        for logical_id, body in (stack.get("resource", {}).get("google_container_cluster") or {}).items()
    ]


_NAME_RULES: dict[str, tuple[str, str]] = {
    # resource type: (pattern, what GCP allows)
    "google_container_cluster": (r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$", "1-40 lowercase letters, digits, hyphens"),
    "google_container_node_pool": (r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$", "1-40 lowercase letters, digits, hyphens"),
    "google_compute_network": (r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$", "1-63 characters, RFC 1035"),
    "google_compute_subnetwork": (r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$", "1-63 characters, RFC 1035"),
    "google_compute_firewall": (r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$", "1-63 characters, RFC 1035"),
}


_REFERENCE = re.compile(r"\$\{([a-z0-9_]+\.[A-Za-z0-9_-]+)")


def dependency_graph(stack: dict[str, Any]) -> dict[str, set[str]]:
    """`type.logical_id` -> the resources it depends on directly (depends_on and references)."""
    out = {}
    for rtype, items in (stack.get("resource") or {}).items():
        for logical_id, body in items.items():
            text = json.dumps({k: v for k, v in body.items() if k != "depends_on"})
            out[f"{rtype}.{logical_id}"] = set(body.get("depends_on") or []) | set(_REFERENCE.findall(text))
    return out


def reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every address `start` waits for, directly or through what it waits for (Terraform's order)."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for dep in graph.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen
