"""The Helm upgrades the API server would refuse: each local chart release the change updates, rendered as the
baseline had it (from the baseline's own chart, beside its `cdktf.out`) and as it is now, held to the upgrade rules
(`infra/rules/upgrades.py`: the CRDs' transition rules, the controllers' webhooks, the built-in workloads'
immutable fields)."""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from infra.catalogue.helm_records import newest
from infra.charts.check import ChartCheckError
from infra.rules import check_upgrade
from infra.rules.run import render_release

# How the review says a refused upgrade can go through (docs/operations.md, "Replace a release on purpose").
WAY_THROUGH = (
    "name the object after what cannot change, as the charts' JobSets and RayCluster are, or replace the release on "
    'purpose (docs/operations.md, "Replace a release on purpose")'
)


def refused_upgrades(
    stack: str,
    after: Mapping[str, Any],
    before: Mapping[str, Any],
    baseline: Path,
) -> dict[str, tuple[str, bool]]:
    """By helm_release address: why its upgrade stops the apply, and whether a person may confirm it (a refusal
    the API server would make: no; an upgrade the review could not check: yes, once checked by hand). The new side
    renders from this checkout's charts (what `make plan` renders); the old from the chart its stack in `baseline`
    opens, as Terraform resolves it (`infra.delivery.apply_paths`)."""
    old = (before.get("resource") or {}).get("helm_release") or {}
    new = (after.get("resource") or {}).get("helm_release") or {}
    out: dict[str, tuple[str, bool]] = {}
    for name in sorted(old.keys() & new.keys()):
        was, now = old[name], new[name]
        if "repository" in now or "repository" in was or was == now:
            continue  # a controller's chart from its repository (the controller bump gate), or no change
        base_chart = (baseline / "stacks" / stack / was["chart"]).resolve()
        found = _refused(partial(_from_baseline, was, base_chart), partial(render_release, now))
        if found is not None:
            out[f"helm_release.{name}"] = found
    return out


def _from_baseline(release: dict[str, Any], chart: Path) -> list[dict[str, Any]]:
    if not (chart / "Chart.yaml").is_file():
        raise FileNotFoundError(f"the baseline's chart is not at {chart}")
    return render_release(release, chart.parent)


def refused_against_deployed(
    stack_dir: Path,
    stack_json: Mapping[str, Any],
    addresses: list[str],
    deployed: Callable[[str, str], list[dict[str, Any]]],
) -> dict[str, tuple[str, bool]]:
    """As `refused_upgrades`, for the apply's real plan: each of `addresses` (the helm_release updates the plan
    makes) held from the revision the cluster runs, `deployed(name, namespace)` (Helm's record), to the release
    rendered from the chart the apply opens in `stack_dir`. A record that cannot be read blocks until confirmed."""
    releases = (stack_json.get("resource") or {}).get("helm_release") or {}
    out: dict[str, tuple[str, bool]] = {}
    for address in addresses:
        now = releases.get(address.removeprefix("helm_release."))
        if now is None or "repository" in now:
            continue  # a controller's chart from its repository (the controller bump gate)
        chart = (stack_dir / now["chart"]).resolve()
        found = _refused(partial(deployed, now["name"], now["namespace"]), partial(render_release, now, chart.parent))
        if found is not None:
            out[address] = found
    return out


def _refused(
    old: Callable[[], list[dict[str, Any]]], new: Callable[[], list[dict[str, Any]]]
) -> tuple[str, bool] | None:
    """Why an upgrade from the objects `old()` gives to those `new()` gives stops the apply, and whether a person
    may confirm it (a refusal the API server would make: no; an upgrade that could not be checked: yes, once checked
    by hand); None when it may go."""
    try:
        violations = check_upgrade(old(), new())
    except (OSError, ValueError, ChartCheckError) as err:  # no baseline to read; values Helm refuses
        return (
            f"its upgrade could not be held to what the API server refuses ({' '.join(str(err).split())}): "
            "confirm once the objects it changes are checked by hand",
            True,
        )
    if not violations:
        return None
    found = "; ".join(f"{v.field}: {v.message} (rule {v.rule.id}, {v.rule.source})" for v in violations)
    return f"the API server would refuse this Helm upgrade: {found}. The way through: {WAY_THROUGH}", False


def helm_record_objects(configmaps: Mapping[str, Any], release: str) -> list[dict[str, Any]]:
    """The objects of the newest deployed revision among Helm's records of `release` (a ConfigMap list, as
    `kubectl get configmaps -l owner=helm,name=<release>,status=deployed -o json` gives it). Helm's configmap driver
    keeps each revision's release as base64 of its gzipped JSON in `data.release`, labelled owner, name, status and
    version (helm.sh/helm/v3 v3.18.4 pkg/storage/driver/cfgmaps.go, util.go encodeRelease); the manifest it
    applied is the release's `manifest`, hooks apart. ValueError when there is no deployed revision."""
    record = newest(configmaps)
    if record is None:
        raise ValueError(f"no deployed revision of release {release} in Helm's records")
    raw = base64.b64decode(record["data"]["release"])
    if raw[:3] == b"\x1f\x8b\x08":  # Helm writes it gzipped; an older record may be plain JSON
        raw = gzip.decompress(raw)
    manifest = json.loads(raw).get("manifest") or ""
    return [doc for doc in yaml.safe_load_all(manifest) if isinstance(doc, dict)]
