"""The Helm upgrades the API server would refuse: each local chart release the change updates, rendered as the
baseline had it (from the baseline's own chart, beside its `cdktf.out`) and as it is now, held to the upgrade rules
(`infra/rules/upgrades.py`: the CRDs' transition rules, the controllers' webhooks, the built-in workloads'
immutable fields)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from infra.rules import check_upgrade
from infra.rules.run import render_release
from workloads.charts.check import ChartCheckError

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
        address = f"helm_release.{name}"
        base_chart = (baseline / "stacks" / stack / was["chart"]).resolve()
        try:
            if not (base_chart / "Chart.yaml").is_file():
                raise FileNotFoundError(f"the baseline's chart is not at {base_chart}")
            violations = check_upgrade(render_release(was, base_chart.parent), render_release(now))
        except (OSError, ValueError, ChartCheckError) as err:  # a baseline without its charts; values Helm refuses
            out[address] = (
                f"its upgrade could not be held to what the API server refuses ({' '.join(str(err).split())}): "
                "confirm once the objects it changes are checked by hand",
                True,
            )
            continue
        if violations:
            found = "; ".join(f"{v.field}: {v.message} (rule {v.rule.id}, {v.rule.source})" for v in violations)
            out[address] = (
                f"the API server would refuse this Helm upgrade: {found}. The way through: {WAY_THROUGH}",
                False,
            )
    return out
