"""GKE versions: a pinned minor still supported by its channel on today's date, and new enough for every
feature the environment uses. The calendar and the minimums are dated data in `infra/catalogue/gke_versions.py`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import date
from typing import TYPE_CHECKING

from infra.catalogue import gke_versions as gv
from infra.rules import Finding, rule

if TYPE_CHECKING:
    from infra.config import Environment

FIELD = "cluster.min_master_version"


def _support(env: Environment, on: date) -> tuple[list[Finding], list[str]]:
    """(refusals, warnings) for the pinned minor on the day `on`."""
    version, channel = env.cluster.min_master_version, env.cluster.release_channel
    minor = gv.minor_of(version)
    known = ", ".join(gv.MINORS)
    info = gv.MINORS.get(minor)
    if info is None:
        return [Finding(FIELD, version, f"GKE {minor} is not in the platform's calendar ({known}; {gv.SCHEDULE})")], []
    refusals: list[Finding] = []
    offered = gv.CHANNELS[channel]
    if minor not in offered:
        refusals.append(Finding(FIELD, version, f"the {channel} channel offers {', '.join(offered)} ({gv.SCHEDULE})"))
    end, kind = (info.end_of_extended, "extended") if channel == "EXTENDED" else (info.end_of_standard, "standard")
    if on >= end:
        refusals.append(
            Finding(FIELD, version, f"GKE {minor} left {kind} support on {end.isoformat()} ({gv.SCHEDULE})")
        )
        return refusals, []
    left = (end - on).days
    warnings = []
    if left <= gv.WARN_DAYS:
        warnings.append(
            f"{FIELD}: {version!r}: GKE {minor} leaves {kind} support on {end.isoformat()}, in {left} days "
            f"({gv.SCHEDULE}): move to a newer minor"
        )
    return refusals, warnings


@rule(
    id="gke.version-in-support",
    system="GKE",
    layer="apply",
    summary=(
        "The pinned GKE minor is offered by the cluster's release channel and has not left (standard, or on "
        "EXTENDED extended) support today; `make plan` warns 60 days before."
    ),
    source=(
        f"{gv.SCHEDULE}; https://cloud.google.com/kubernetes-engine/versioning (about 14 months of standard and "
        "10 of extended support after Regular availability)"
    ),
    subject="environment",
)
def _in_support(env: Environment) -> Iterator[Finding]:
    refusals, _ = _support(env, gv.today())
    yield from refusals


def support_warnings(env: Environment) -> list[str]:
    """What `make plan` warns about: a pinned minor within 60 days of the end of its support."""
    return _support(env, gv.today())[1]


def features_used(env: Environment) -> dict[str, str]:
    """GKE feature (a key of `gke_versions.FEATURES`) -> the field of `env` that uses it."""
    used: dict[str, str] = {}
    for key, spec in env.gke_slices.items():  # the node pools GKE runs (not Slurm's)
        accelerator = {"v6e": "tpu-v6e", "tpu7x": "tpu7x", "a3-mega": "a3-mega-tcpxo"}.get(spec.accelerator)
        if accelerator:
            used.setdefault(accelerator, f"slices.{key}.accelerator")
        for i, tier in enumerate(spec.tiers):
            capacity = {"flex-start": "flex-start", "queued": "queued-provisioning"}.get(tier.type)
            if capacity:
                used.setdefault(capacity, f"slices.{key}.capacity" + (f"[{i}]" if spec.falls_back else "") + ".type")
        if spec.falls_back:
            used.setdefault("compute-class", f"slices.{key}.capacity")
    if env.training is not None:
        used["ray-operator"] = "training"
        if env.training.resilience.local_tier is not None:
            used["multi-tier-checkpointing"] = "training.resilience.local_tier"
    for key, d in env.serving.items():
        if d.engine == "jetstream":
            used.setdefault("native-sidecars", f"serving.{key}.engine")
        if getattr(d, "gateway", False):
            used.setdefault("gateway-inference-crds", f"serving.{key}.gateway")
        scaling = getattr(d, "autoscaling", None)
        if scaling is not None and scaling.min == 0:
            used.setdefault("hpa-scale-to-zero", f"serving.{key}.autoscaling.min")
    return used


GKE_DOCS = "https://cloud.google.com/kubernetes-engine/docs/"


def _feature_sources() -> str:
    """The features' pages, GKE's under one prefix: a refusal names them all and stays short enough to read."""
    urls = sorted({re.search(r"https://[^\s;]+", f.source).group(0) for f in gv.FEATURES.values()})  # type: ignore[union-attr]
    gke = [u.removeprefix(GKE_DOCS) for u in urls if u.startswith(GKE_DOCS)]
    return "; ".join([f"{GKE_DOCS}{{{', '.join(gke)}}}", *(u for u in urls if not u.startswith(GKE_DOCS))])


@rule(
    id="gke.features-need-versions",
    system="GKE",
    layer="apply",
    summary="The pinned GKE version is at or above the minimum of every feature the environment uses.",
    source=_feature_sources(),
    subject="environment",
)
def _features(env: Environment) -> Iterator[Finding]:
    version = env.cluster.min_master_version
    for feature, where in features_used(env).items():
        need = gv.FEATURES[feature]
        if not gv.meets(version, need.minimum):
            yield Finding(FIELD, version, f"{where} needs GKE {need.minimum} or newer ({feature}: {need.source})")
