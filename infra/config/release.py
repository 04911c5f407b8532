"""The release: images pinned by digest, charts and controllers by exact version."""

from __future__ import annotations

from pydantic import field_validator, model_validator

from infra.catalogue.charts import local_chart_versions
from infra.catalogue.controllers import CONTROLLERS
from infra.config.base import ExactVersion, ImageDigest, Model, Problem, _CrossReferenceError, did_you_mean
from infra.config.findings import Finding

PLACEHOLDER_DIGEST = "sha256:" + "0" * 64


class Release(Model):
    """What runs: pinned by digest and exact version, promoted as a whole from dev to prod."""

    # RUF012: pydantic copies `{}` defaults; ruff cannot see that Model (imported) is a pydantic model.
    images: dict[str, ImageDigest] = {}  # noqa: RUF012
    """Images by name, each pinned by digest (`<registry>/<name>@sha256:...`)."""
    charts: dict[str, ExactVersion] = {}  # noqa: RUF012
    controllers: dict[str, ExactVersion] = {}  # noqa: RUF012

    @field_validator("controllers")
    @classmethod
    def _known_controllers(cls, controllers: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(controllers) - set(CONTROLLERS))
        if unknown:
            raise ValueError(f"unknown controller(s) {', '.join(unknown)}; known: {', '.join(CONTROLLERS)}")
        return controllers

    @model_validator(mode="after")
    def _known_versions(self) -> Release:
        problems: list[Problem] = [
            Finding(
                ("release", "controllers", name),
                version,
                f"not a version the platform knows (its CRDs pinned in infra/charts/crds.yaml, its webhooks' "
                f"rules in infra/rules); known: {', '.join(CONTROLLERS[name].versions)}",
            )
            for name, version in self.controllers.items()
            if version not in CONTROLLERS[name].versions
        ]
        charts = local_chart_versions()
        for name, version in self.charts.items():
            if name not in charts:
                problems.append(
                    Finding(
                        ("release", "charts", name),
                        name,
                        f"not a chart of workloads/charts: {', '.join(charts)}"
                        + (f"; {hint}" if (hint := did_you_mean(name, charts)) else ""),
                    )
                )
            elif version != charts[name]:
                problems.append(
                    Finding(
                        ("release", "charts", name),
                        version,
                        f"the repository's {name} chart is {charts[name]} (workloads/charts/{name}/Chart.yaml)",
                    )
                )
        if problems:
            raise _CrossReferenceError(problems)
        return self
