"""The Kubernetes API server's own validation of custom resources: the CEL rules their CRDs carry."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from infra.rules import Finding, rule, where


@rule(
    id="k8s.crd-validation-rules",
    system="Kubernetes API server (CRD validation rules)",
    layer="admission",
    summary=(
        "Every rendered custom resource satisfies its pinned CRD's x-kubernetes-validations (CEL) rules, "
        "evaluated with the schema's defaults as the API server does on create."
    ),
    source=(
        "https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/"
        "#validation-rules; the CRDs pinned in infra/charts/crds.yaml"
    ),
    subject="manifest",
)
def _cel(objects: list[dict[str, Any]], ctx: Any) -> Iterator[Finding]:
    from infra.charts.check import OPTIONAL_KINDS, cel_failures, crd_openapi, is_custom
    from infra.charts.crds import CrdsMissing

    custom = [o for o in objects if is_custom(o)]
    if not custom:
        return
    try:
        known = crd_openapi()
    except CrdsMissing as err:
        yield Finding("custom resources", len(custom), f"cannot evaluate their CRDs' rules: {err}")
        return
    for obj in custom:
        key = (obj["apiVersion"], obj["kind"])
        if key not in known and key in OPTIONAL_KINDS:
            continue  # an optional CRD not available here: its own rule holds the object (see OPTIONAL_KINDS)
        if key not in known:
            yield Finding(where(obj), obj["apiVersion"], "no pinned CRD for this kind: its rules cannot be evaluated")
            continue
        for failure in cel_failures(obj):
            yield Finding(f"{where(obj)}: {failure.path}", failure.rule, failure.message)
