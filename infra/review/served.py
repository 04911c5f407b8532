"""What the cluster itself serves, held against what a release sends it: a custom resource's field that the
cluster's CRD does not name is dropped by the API server without a word (field pruning). GKE serves some CRDs
itself at versions no file pins (the Ray operator add-on's KubeRay among them), so the gate at the apply reads
them from the cluster (scripts/apply.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from infra.charts.check import ChartCheckError, is_custom, pruned_fields
from infra.rules.run import render_release

PRUNING = (
    "https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#field-pruning"
)


def dropped_fields(
    stack_dir: Path,
    stack_json: Mapping[str, Any],
    addresses: list[str],
    served: Mapping[tuple[str, str], dict[str, Any]],
) -> dict[str, tuple[str, bool]]:
    """By helm_release address (of `addresses`, a plan's creates and updates): the fields of its custom resources
    that the CRDs the cluster serves (`served`: openAPIV3Schema by (apiVersion, kind)) would drop. Not confirmable:
    the release would run without what the review shows (a RayCluster without token authentication, for one)."""
    releases = (stack_json.get("resource") or {}).get("helm_release") or {}
    out: dict[str, tuple[str, bool]] = {}
    for address in addresses:
        now = releases.get(address.removeprefix("helm_release."))
        if now is None or "repository" in now:
            continue  # a controller's own chart: it brings its CRDs
        chart = (stack_dir / now["chart"]).resolve()
        try:
            objects = render_release(now, chart.parent)
        except (OSError, ValueError, ChartCheckError) as err:  # Helm's own refusal: the apply would fail the same
            out[address] = (f"it could not be rendered ({' '.join(str(err).split())})", False)
            continue
        found = []
        for obj in objects:
            key = (str(obj.get("apiVersion")), str(obj.get("kind")))
            if is_custom(obj) and key in served:
                dropped = pruned_fields(obj, served[key])
                if dropped:
                    found.append(f"{key[1]}/{obj['metadata']['name']}: {', '.join(dropped)}")
        if found:
            out[address] = (
                f"the cluster's CRDs do not have {'; '.join(found)}: the API server would drop these fields without "
                f"a word ({PRUNING}). A CRD the cluster serves itself (GKE's Ray operator add-on: KubeRay) is older "
                "than the chart needs: upgrade the cluster's GKE version first (docs/operations.md, \"What the "
                'cluster serves")',
                False,
            )
    return out
