"""Offline checks of the charts: render with the Helm SDK, lint, validate every object strictly.

Core objects are validated against the Kubernetes schemas of `KUBERNETES_VERSION`
(`kubernetes-validate`, strict: unknown fields are errors). Custom resources
(RayCluster, JobSet, LeaderWorkerSet, Kueue, GKE's Network and GKENetworkParamSet) are
validated against the upstream CRD schemas pinned in `crds.yaml` (see `crds.py`), made strict
the way the API server would need them to be to catch a misspelled field instead of pruning it,
and then against the CRDs' own CEL rules (`x-kubernetes-validations`, see `cel.py`), which the
API server evaluates on every create.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from infra.charts.cel import CelFailure, evaluate
from infra.charts.crds import pins

REPO = Path(__file__).resolve().parents[2]
CHARTS = REPO / "workloads" / "charts"
KUBERNETES_VERSION = "1.33.0"

# libyaml's loader where PyYAML was built with it (its wheels are): the same documents, parsed in C. The pinned CRDs
# are megabytes of YAML, and the pure-Python parser took about 4 s of every rules step on them.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ChartCheckError(Exception):
    """A chart that does not render, lint or validate; the message says where."""


def render(
    chart: str, values: dict[str, Any], *, name: str, namespace: str, charts: Path | None = None
) -> list[dict[str, Any]]:
    """Render `chart` (a folder of `charts`, this checkout's charts by default) with `values` (schema-checked by
    Helm) into its objects, in template order."""
    import helm_python as helm

    loaded = helm.Chart.load((charts or CHARTS) / chart)
    try:
        manifests = loaded.render(values, name=name, namespace=namespace, is_install=True)
    except helm.HelmError as err:
        raise ChartCheckError(f"{chart}: {err}") from None
    objects = []
    for template in sorted(manifests):
        for doc in yaml.load_all(manifests[template], Loader=_Loader):
            if doc:
                objects.append(doc)
    return objects


def lint(chart: str, values: dict[str, Any]) -> list[str]:
    """Helm lint findings of warning level or worse, as lines."""
    import helm_python as helm

    report = helm.lint(CHARTS / chart, values, strict=True, kube_version=f"v{KUBERNETES_VERSION}")
    return [f"{m['path']}: {m['error']}" for m in report.get("messages", []) if m.get("severity", 0) >= 2]


def _strict(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    pattern = out.get("pattern")
    if isinstance(pattern, str) and "(?i)" in pattern[1:]:
        # Go allows inline flags anywhere (`^(?i)...`); Python only at the start.
        out["pattern"] = "(?i)" + pattern.replace("(?i)", "")
    if out.pop("x-kubernetes-int-or-string", False):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    if "properties" in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        out.setdefault("additionalProperties", False)
    return out


# Kubernetes' own API groups whose names have dots (validated against Kubernetes' schemas, not a CRD's).
BUILTIN_GROUPS = {
    "rbac.authorization.k8s.io",
    "networking.k8s.io",
    "storage.k8s.io",
    "scheduling.k8s.io",
    "apiregistration.k8s.io",
}

# The kinds of the optional pinned CRDs (GKE's Gateway policies): validated against their schema where it is
# available, else held to their CEL rules by a rule (infra/rules/inference_gateway.py:
# gke.inference-gateway-policies); and
# GKE's ComputeClass, whose CRD GKE serves but publishes in no repository to pin: rule gke.compute-class-tiers
# holds it to the CRD's CEL rules.
OPTIONAL_KINDS = {
    ("networking.gke.io/v1", "HealthCheckPolicy"),
    ("networking.gke.io/v1", "GCPBackendPolicy"),
    ("monitoring.googleapis.com/v1", "PodMonitoring"),
    ("cloud.google.com/v1", "ComputeClass"),
    # GKE's multi-tier checkpointing (rule gke.checkpoint-configuration-fields where its CRD is not here).
    ("checkpointing.gke.io/v1", "CheckpointConfiguration"),
}


@cache
def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """Strict JSON schemas by (apiVersion, kind) from the pinned upstream CRDs (GKE's networking objects too)."""
    return {key: _strict(copy.deepcopy(schema)) for key, schema in crd_openapi().items()}


@cache
def crd_openapi() -> dict[tuple[str, str], dict[str, Any]]:
    """The pinned CRDs' openAPIV3Schema by (apiVersion, kind), as published (CEL rules and defaults included)."""
    from infra.charts.crds import locate, optional_found

    schemas = {}
    paths = {name: locate() / name for name in pins()} | optional_found()
    for _, path in sorted(paths.items()):
        crd = yaml.load(path.read_text(), Loader=_Loader)
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schemas[(f"{group}/{version['name']}", kind)] = version["schema"]["openAPIV3Schema"]
    return schemas


def is_custom(obj: dict[str, Any]) -> bool:
    """Whether an object is a custom resource (its group has a dot and is not one of Kubernetes' own)."""
    api = str(obj.get("apiVersion", ""))
    group = api.split("/")[0] if "/" in api else ""
    return "." in group and group not in BUILTIN_GROUPS


def cel_failures(obj: dict[str, Any]) -> list[CelFailure]:
    """The CEL rules of its CRD that a custom resource breaks on create."""
    return evaluate(obj, crd_openapi()[(obj["apiVersion"], obj["kind"])])


def pruned_fields(obj: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """The fields of a custom resource that an API server serving its CRD's `schema` (openAPIV3Schema) drops
    without a word: a structural schema prunes every field it does not name, unless it preserves unknown fields
    (https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#field-pruning;
    apiVersion, kind and metadata are the API server's own)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(obj, list) and isinstance(schema.get("items"), dict):
        return [f for i, item in enumerate(obj) for f in pruned_fields(item, schema["items"], f"{path}[{i}]")]
    if not isinstance(obj, dict):
        return []
    properties, extra = schema.get("properties"), schema.get("additionalProperties")
    out = []
    for key, value in obj.items():
        here = f"{path}.{key}" if path else key
        if not path and key in ("apiVersion", "kind", "metadata"):
            continue
        if properties is not None and key in properties:
            out += pruned_fields(value, properties[key], here)
        elif isinstance(extra, dict):
            out += pruned_fields(value, extra, here)
        elif properties is not None or extra is False:
            out.append(here)
    return out


def validate(obj: dict[str, Any]) -> None:
    """Validate one rendered object; raise ChartCheckError naming the object and the field."""
    import jsonschema
    import kubernetes_validate

    where = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
    key = (obj.get("apiVersion", ""), obj.get("kind", ""))
    if is_custom(obj):
        schema = crd_schemas().get(key)
        if schema is None and key in OPTIONAL_KINDS and key not in crd_openapi():
            # An optional CRD not available here (crds.yaml says why): its rule checks the object instead, and
            # `make rules` says which kinds went without their schema.
            return
        if schema is None:
            known = ", ".join(sorted(f"{a} {k}" for a, k in crd_schemas()))
            raise ChartCheckError(f"{where}: no CRD schema for {key[0]} {key[1]}; known: {known}")
        errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(obj), key=lambda e: list(e.path))
        if errors:
            lines = [f"{'.'.join(map(str, e.path)) or '(root)'}: {e.message}" for e in errors[:10]]
            raise ChartCheckError(f"{where}: " + "; ".join(lines))
        failures = cel_failures(obj)
        if failures:
            raise ChartCheckError(f"{where}: " + "; ".join(f.line() for f in failures))
        return
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as err:
        path = ".".join(map(str, err.path)) or "(root)"
        raise ChartCheckError(f"{where}: {path}: {err.message}") from None
