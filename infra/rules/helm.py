"""Helm releases meeting each other in one apply: a release is applied after the release that installs the
kinds it renders and after the service accounts its pods run as; and what a release's record holds."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from infra.catalogue.controllers import CONTROLLERS, intercepted, owner_of, webhook_owners
from infra.rules import Finding, pod_templates, rule, where
from infra.rules.manifest_subject import ReleaseContext
from infra.rules.terraform_subject import dependency_graph, reaches

HELM_RELEASE = "helm_release"


def _addresses(stack: dict[str, Any]) -> dict[str, str]:
    """{release name: its Terraform address} of every Helm release of the stack."""
    releases = stack.get("resource", {}).get(HELM_RELEASE) or {}
    return {r["name"]: f"{HELM_RELEASE}.{logical_id}" for logical_id, r in releases.items()}


def _waits_for(ctx: ReleaseContext) -> set[str] | None:
    """Every address the release's apply waits for (Terraform's order); None for a release rendered outside a
    stack (chart CI values): nothing is applied."""
    mine = _addresses(ctx.stack).get(ctx.name)
    return None if mine is None else reaches(dependency_graph(ctx.stack), mine)


@rule(
    id="helm.release-after-its-kinds",
    system="Helm / Terraform",
    layer="apply",
    summary=(
        "A release whose objects are custom resources of a controller the stack installs (JobSet, Kueue, "
        "LeaderWorkerSet) is applied after that controller's release; otherwise a first apply sends the objects "
        "before their CRD exists ('no matches for kind') or before LWS's conversion webhook answers."
    ),
    source=(
        "https://helm.sh/docs/chart_best_practices/custom_resource_definitions/ (the CRD must be registered "
        "before resources of its kind are installed); "
        "https://developer.hashicorp.com/terraform/language/meta-arguments/depends_on; "
        "kubernetes-sigs/lws charts/lws/templates/crds @ v0.7.0 (CRD with conversion webhook lws-webhook-service)"
    ),
    subject="manifest",
)
def _after_owner(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    addresses = _addresses(ctx.stack)
    waits_for = _waits_for(ctx)
    if waits_for is None:
        return
    for obj in objects:
        owner = owner_of(str(obj.get("apiVersion", "")))
        if owner is None or owner == ctx.name:
            continue
        at = f"{where(obj)}: apiVersion"
        if owner not in addresses:
            yield Finding(
                at,
                obj.get("apiVersion"),
                f"no release of the stack installs {CONTROLLERS[owner].chart} ({CONTROLLERS[owner].api_group}): "
                f"pin it in release.controllers",
            )
        elif addresses[owner] not in waits_for:
            yield Finding(
                at,
                obj.get("apiVersion"),
                f"release {ctx.name} is not ordered after release {owner}, which installs the kind: "
                f"its depends_on must reach {addresses[owner]}",
            )


@rule(
    id="helm.release-after-its-service-accounts",
    system="Kubernetes / Terraform",
    layer="apply",
    summary=(
        "A release whose pods run as a Kubernetes service account the stack creates is applied after that "
        "account; otherwise the first apply can send the pods' controller before the account exists, the pods are "
        "refused ('serviceaccount not found') and their controller retries with a back-off that doubles up to a "
        "minute, so a Job (the checkpoint conversion) starts late by as much."
    ),
    source=(
        "https://kubernetes.io/docs/reference/access-authn-authz/service-accounts-admin/#serviceaccount-admission-"
        "controller (a pod naming a missing service account is rejected); kubernetes/kubernetes "
        "pkg/controller/job/job_controller.go @ v1.35.4 (DefaultJobApiBackOff 1 s, MaxJobApiBackOff 1 min); "
        "https://developer.hashicorp.com/terraform/language/meta-arguments/depends_on; found by deploy-local "
        "(infra/localcluster): the conversion Jobs' pods were refused until the converter account came after them"
    ),
    subject="manifest",
)
def _after_service_accounts(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    waits_for = _waits_for(ctx)
    if waits_for is None:
        return
    accounts = {
        ((body.get("metadata") or {}).get("namespace"), (body.get("metadata") or {}).get("name")): (
            f"kubernetes_service_account_v1.{logical_id}"
        )
        for logical_id, body in (ctx.stack.get("resource", {}).get("kubernetes_service_account_v1") or {}).items()
    }
    for obj in objects:
        namespace = (obj.get("metadata") or {}).get("namespace") or ctx.namespace
        for path, template in pod_templates(obj):
            name = (template.get("spec") or {}).get("serviceAccountName")
            address = accounts.get((namespace, name))
            if address is not None and address not in waits_for:
                yield Finding(
                    f"{where(obj)}: {path}.spec.serviceAccountName",
                    name,
                    f"release {ctx.name} is not ordered after the service account its pods run as: its depends_on "
                    f"must reach {address}",
                )


@rule(
    id="helm.release-holds-no-secret-data",
    system="Helm / Terraform",
    layer="apply",
    summary=(
        "A chart release renders no Secret with data or stringData: Helm stores every rendered manifest in the "
        "release's record (ConfigMaps here, which the read-only planner reads) and Terraform stores the values in "
        "its state. Secrets are made by hand or by their controller and referenced by name (secretKeyRef)."
    ),
    source=(
        "https://helm.sh/docs/topics/advanced/#storage-backends (the release record holds the release, in Secrets by "
        "default or ConfigMaps with the configmap driver); hashicorp/terraform-provider-helm docs/index.md @ v3.1.1 "
        "(helm_driver); https://developer.hashicorp.com/terraform/language/state/sensitive-data"
    ),
    subject="manifest",
    kinds=("Secret",),
)
def _no_secret_data(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for obj in objects:
        if obj.get("data") or obj.get("stringData"):
            field = "stringData" if obj.get("stringData") else "data"
            yield Finding(
                f"{where(obj)}: {field}",
                sorted(obj.get(field) or {}),
                "a Secret with data in a chart: its values would be stored in Helm's release record and Terraform's "
                "state; create the Secret outside the chart and reference it by name",
            )


@rule(
    id="helm.first-install-recoverable",
    system="Helm / Terraform helm provider",
    layer="apply",
    summary=(
        "Every release sets upgrade_install (or atomic): a first install that fails leaves Helm's record of the "
        "release but nothing in Terraform's state, so without it every later apply installs again and Helm refuses "
        "'cannot re-use a name that is still in use'."
    ),
    source=(
        "hashicorp/terraform-provider-helm v3.1.2 helm/resource_helm_release.go Create (an install error returns "
        "before resp.State.Set); docs/resources/release.md upgrade_install and docs/index.md 'Upgrade Mode'"
    ),
    subject="terraform",
    types=("helm_release",),
)
def _recoverable(releases: list[tuple[str, dict[str, Any]]], stack: dict[str, Any]) -> Iterator[Finding]:
    for at, release in releases:
        if release.get("upgrade_install") is not True and release.get("atomic") is not True:
            yield Finding(
                f"{at}.upgrade_install",
                release.get("upgrade_install"),
                "a failed first install would block every later apply: set upgrade_install = true",
            )


WEBHOOK_SOURCE = (
    "https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/#failure-policy "
    "(Fail: an error calling the webhook rejects the request); kubernetes-sigs/kueue charts/kueue/templates/webhook/"
    "manifests.yaml and values.yaml integrations.frameworks @ v0.17.3 and v0.19.2; "
    "https://opentofu.org/docs/cli/commands/apply/ (-parallelism, default 10: what does not depend on each other is "
    "applied at once)"
)


@rule(
    id="helm.release-after-the-webhooks-it-meets",
    system="Kubernetes admission / Terraform",
    layer="apply",
    summary=(
        "A release that writes an object a controller's admission webhooks intercept with failurePolicy Fail "
        "(Kueue's: Deployments, StatefulSets, Pods, Jobs, JobSets, LeaderWorkerSets, Ray's kinds) is applied after "
        "that controller's release; otherwise the first apply sends it while the controller's pod is not Ready and "
        "the API server refuses it."
    ),
    source=WEBHOOK_SOURCE,
    subject="manifest",
)
def _after_webhooks(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    addresses = _addresses(ctx.stack)
    waits_for = _waits_for(ctx)
    if waits_for is None:
        return
    seen = set()
    for obj in objects:
        group = str(obj.get("apiVersion", "")).rpartition("/")[0]
        namespace = (obj.get("metadata") or {}).get("namespace") or ctx.namespace
        for controller in addresses.keys() & set(CONTROLLERS):
            if controller == ctx.name or (controller, obj.get("kind")) in seen:
                continue
            met = intercepted(controller, (group, str(obj.get("kind"))), namespace)
            if met and addresses[controller] not in waits_for:
                seen.add((controller, obj.get("kind")))
                yield Finding(
                    f"{where(obj)}: kind",
                    obj.get("kind"),
                    f"release {ctx.name} is not ordered after release {controller}, whose webhooks refuse this kind "
                    f"until its pod is Ready: its depends_on must reach {addresses[controller]}",
                )


@rule(
    id="helm.controller-after-the-webhooks-it-meets",
    system="Kubernetes admission / Terraform",
    layer="apply",
    summary=(
        "A controller's release whose chart writes what another controller's Fail webhooks intercept (JobSet's and "
        "LWS's manager Deployments, which Kueue's Deployment webhook intercepts) is applied after that release."
    ),
    source=WEBHOOK_SOURCE,
    subject="terraform",
    types=(HELM_RELEASE,),
)
def _controllers_after_webhooks(releases: list[tuple[str, dict[str, Any]]], stack: dict[str, Any]) -> Iterator[Finding]:
    addresses = _addresses(stack)
    graph = dependency_graph(stack)
    for at, release in releases:
        name = release.get("name")
        if name not in CONTROLLERS or not release.get("repository"):
            continue
        waits_for = reaches(graph, addresses[name])
        namespace = CONTROLLERS[name].namespace
        for other in webhook_owners(CONTROLLERS[name].chart_kinds, besides=name):
            kinds = [k for k in CONTROLLERS[name].chart_kinds if intercepted(other, k, namespace)]
            if other in addresses and kinds and addresses[other] not in waits_for:
                yield Finding(
                    f"{at}.depends_on",
                    release.get("depends_on"),
                    f"release {name} writes {', '.join(k for _, k in sorted(kinds))}, which release {other}'s webhooks "
                    f"refuse until its pod is Ready: its depends_on must reach {addresses[other]}",
                )
