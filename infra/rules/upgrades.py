"""What an upgrade may not change: the fields the API server and the controllers' webhooks keep as they were created.

`helm upgrade` patches every object a release keeps (same group, kind, namespace and name); the API server runs the
update through the CRD's transition rules and the controller's validating webhook, and one refusal fails the whole
upgrade (the release is left `failed`, its other objects half-moved). These rules hold each object the upgrade keeps
against the object it replaces: at plan, the review renders its baseline's releases from the baseline's own charts
(`infra/review/upgrades.py`) and blocks a release whose upgrade would be refused. The way through is to let the
object be new: name it after what cannot change (the Saxml chart's JobSet, the training RayCluster, the GPU JobSets
carry a hash of it), or take the release down and up again on purpose (docs/operations.md, "Replace a release").

Both sides are compared as rendered, with the CRD's defaults applied; the controllers' own defaulting runs the same
on both, so equal renderings stay equal.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from infra.rules import Finding, rule, where

JOBSET_WEBHOOK = "kubernetes-sigs/jobset @ v0.12.0 pkg/webhooks/jobset_webhook.go (ValidateUpdate)"
LWS_WEBHOOK = "kubernetes-sigs/lws @ v0.7.0 pkg/webhooks/leaderworkerset_webhook.go (ValidateUpdate)"
K8S_VALIDATION = "kubernetes/kubernetes @ v1.35.4"
# The pod spec fields a suspended JobSet or Job may change, beside the template's labels and annotations: what
# Kueue sets when it admits a workload (JobSet's ValidateUpdate, "Pod values which must be mutable for Kueue";
# Job's validatePodTemplateUpdate).
KUEUE_POD_SPEC = ("nodeSelector", "tolerations", "schedulingGates")
# StatefulSet spec fields an update may change (ValidateStatefulSetUpdate); every other one is forbidden.
STATEFULSET_MUTABLE = (
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "revisionHistoryLimit",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
)


def _spec(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("spec") or {}


def _normal(value: Any) -> Any:
    """`value` with absent, empty and null fields alike: the API server compares Go values, where a nil map or
    slice equals an empty one (apimachinery's equality.Semantic.DeepEqual)."""
    if isinstance(value, dict):
        out = {k: _normal(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


def _changed(old: Any, new: Any) -> bool:
    return _normal(old) != _normal(new)


@rule(
    id="k8s.crd-transition-rules",
    system="Kubernetes API server (CRD validation rules)",
    layer="admission",
    summary=(
        "An upgrade keeps every custom resource within its pinned CRD's transition rules (x-kubernetes-validations "
        "naming oldSelf, such as `self == oldSelf`), evaluated with the deployed object as oldSelf."
    ),
    source=(
        "https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/"
        "#transition-rules; the CRDs pinned in infra/charts/crds.yaml"
    ),
    subject="upgrade",
)
def _transition_rules(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> Iterator[Finding]:
    from infra.charts.cel import evaluate_update
    from infra.charts.check import crd_openapi, is_custom
    from infra.charts.crds import CrdsMissing

    custom = [(old, new) for old, new in pairs if is_custom(new)]
    if not custom:
        return
    try:
        known = crd_openapi()
    except CrdsMissing as err:
        yield Finding("custom resources", len(custom), f"cannot evaluate their CRDs' transition rules: {err}")
        return
    for old, new in custom:
        schema = known.get((new["apiVersion"], new["kind"]))
        if schema is None:
            continue  # k8s.crd-validation-rules names an object of a kind with no pinned CRD
        for failure in evaluate_update(old, new, schema):
            yield Finding(f"{where(new)}: {failure.path}", failure.rule, failure.message)


def _suspended(obj: dict[str, Any]) -> bool:
    return bool(_spec(obj).get("suspend"))


def _kueue_fields_kept(
    old_template: dict[str, Any], new_template: dict[str, Any], *, node_affinity: bool
) -> dict[str, Any]:
    """`new_template` (a pod template) with the fields Kueue sets on admission set back to `old_template`'s: what
    JobSet's and Job's validation let a suspended workload change (labels, annotations, node selector, tolerations,
    scheduling gates; a Job's node affinity too)."""
    kept = copy.deepcopy(new_template)
    for section, key in (("metadata", "annotations"), ("metadata", "labels"), *(("spec", k) for k in KUEUE_POD_SPEC)):
        value = (old_template.get(section) or {}).get(key)
        part = kept.setdefault(section, {})
        if value is None:
            part.pop(key, None)
        else:
            part[key] = copy.deepcopy(value)
    if node_affinity:
        old_affinity = ((old_template.get("spec") or {}).get("affinity") or {}).get("nodeAffinity")
        affinity = kept["spec"].setdefault("affinity", {})
        if old_affinity is None:
            affinity.pop("nodeAffinity", None)
        else:
            affinity["nodeAffinity"] = copy.deepcopy(old_affinity)
    return kept


def _jobset_munged(old: dict[str, Any], new: dict[str, Any]) -> list[Any]:
    """The new JobSet's replicated jobs with what its webhook lets change set back to the old values: the pod
    template fields Kueue sets, when either JobSet is suspended."""
    jobs = [dict(j) for j in _spec(new).get("replicatedJobs") or []]
    if not (_suspended(old) or _suspended(new)):
        return jobs
    before = {j.get("name"): j for j in _spec(old).get("replicatedJobs") or []}
    for job in jobs:
        was = before.get(job.get("name"))
        if was is None:
            continue
        spec = dict(job.get("template", {}).get("spec") or {})
        old_template = ((was.get("template") or {}).get("spec") or {}).get("template") or {}
        spec["template"] = _kueue_fields_kept(old_template, spec.get("template") or {}, node_affinity=False)
        job["template"] = {**job.get("template", {}), "spec": spec}
    return jobs


@rule(
    id="jobset.replicated-jobs-immutable",
    system="JobSet",
    layer="admission",
    summary=(
        "An upgrade changes neither a JobSet's spec.replicatedJobs (the pod template's labels, annotations, node "
        "selector, tolerations and scheduling gates aside while it is suspended) nor its spec.managedBy."
    ),
    source=JOBSET_WEBHOOK,
    subject="upgrade",
    kinds=("JobSet",),
)
def _jobset_immutable(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> Iterator[Finding]:
    for old, new in pairs:
        if _changed(_spec(old).get("replicatedJobs") or [], _jobset_munged(old, new)):
            yield Finding(f"{where(new)}: spec.replicatedJobs", "changed", "field is immutable")
        if _changed(_spec(old).get("managedBy"), _spec(new).get("managedBy")):
            yield Finding(f"{where(new)}: spec.managedBy", _spec(new).get("managedBy"), "field is immutable")


@rule(
    id="lws.subgroup-size-immutable",
    system="LeaderWorkerSet",
    layer="admission",
    summary=(
        "An upgrade neither changes a LeaderWorkerSet's spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize nor "
        "adds or removes its subGroupPolicy."
    ),
    source=LWS_WEBHOOK,
    subject="upgrade",
    kinds=("LeaderWorkerSet",),
)
def _lws_subgroup(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> Iterator[Finding]:
    for old, new in pairs:
        was = (_spec(old).get("leaderWorkerTemplate") or {}).get("subGroupPolicy")
        now = (_spec(new).get("leaderWorkerTemplate") or {}).get("subGroupPolicy")
        path = f"{where(new)}: spec.leaderWorkerTemplate.subGroupPolicy"
        if was is None and now is not None:
            yield Finding(path, now.get("subGroupSize"), "cannot enable subGroupSize after the lws is already created")
        elif was is not None and now is None:
            yield Finding(path, was.get("subGroupSize"), "cannot remove subGroupSize after enabled")
        elif was is not None and now is not None and _changed(was.get("subGroupSize"), now.get("subGroupSize")):
            yield Finding(
                f"{path}.subGroupSize",
                now.get("subGroupSize"),
                f"field is immutable (was {was.get('subGroupSize')})",
            )


@rule(
    id="k8s.workload-fields-immutable",
    system="Kubernetes API server",
    layer="admission",
    summary=(
        "An upgrade changes no immutable field of a built-in workload: a Deployment's or DaemonSet's "
        "spec.selector, a StatefulSet's spec beyond replicas, ordinals, template, updateStrategy, "
        "revisionHistoryLimit, persistentVolumeClaimRetentionPolicy and minReadySeconds, a Job's selector, pod "
        "template, completionMode, podFailurePolicy, successPolicy and managedBy."
    ),
    source=(
        f"{K8S_VALIDATION} pkg/apis/apps/validation/validation.go (ValidateDeploymentUpdate, "
        "ValidateDaemonSetSpecUpdate, ValidateStatefulSetUpdate), pkg/apis/batch/validation/validation.go "
        "(validateJobSpecUpdate)"
    ),
    subject="upgrade",
    kinds=("Deployment", "DaemonSet", "StatefulSet", "Job"),
)
def _workload_immutable(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> Iterator[Finding]:
    for old, new in pairs:
        before, after = _spec(old), _spec(new)
        kind = new.get("kind")
        if kind in ("Deployment", "DaemonSet"):
            fields = ["selector"]
        elif kind == "StatefulSet":
            fields = sorted((before.keys() | after.keys()) - set(STATEFULSET_MUTABLE))
        else:
            fields = ["selector", "template", "completionMode", "podFailurePolicy", "successPolicy", "managedBy"]
            if _suspended(old) or _suspended(new):  # only where Kueue places its pods
                after = {
                    **after,
                    "template": _kueue_fields_kept(
                        before.get("template") or {}, after.get("template") or {}, node_affinity=True
                    ),
                }
        for name in fields:
            if _changed(before.get(name), after.get(name)):
                shown = after.get(name) if not isinstance(after.get(name), (dict, list)) else "changed"
                yield Finding(f"{where(new)}: spec.{name}", shown, "field is immutable")
