"""The rules of `infra/rules/helm.py`, each failing on its example: a change to one of dev's rendered releases (the
dev stack as it ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from infra.rules import RULES
from infra.rules.manifest_subject import ReleaseContext
from tests.helpers import of_type, one_of_kind
from tests.rules.examples import (
    ManifestExample,
    TerraformExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
)

MANIFEST: dict[str, ManifestExample] = {
    # Helm's release records are ConfigMaps the read-only planner reads; a Secret with data in a chart would
    # be stored in one (and in Terraform's state with the values).
    "helm.release-holds-no-secret-data": (
        "serve-canary",
        lambda o: o.append(
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "api-key"}, "stringData": {"token": "t"}}
        ),
        "a Secret with data in a chart",
    ),
    # A chart that starts writing a LeaderWorkerSet without its release waiting for the lws release.
    "helm.release-after-its-kinds": (
        "serve-canary",
        lambda o: o.append(
            {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "x"}}
        ),
        "is not ordered after release lws",
    ),
    # A pod running as the converter's account, which the canary's release does not wait for.
    "helm.release-after-its-service-accounts": (
        "serve-canary",
        lambda o: one_of_kind(o, "Deployment")["spec"]["template"]["spec"].update(
            serviceAccountName="checkpoint-converter"
        ),
        "is not ordered after the service account its pods run as",
    ),
    # Before the fix: the metrics adapter's Deployment went out beside the kueue release; Kueue's Deployment webhook
    # (failurePolicy Fail) refused it until Kueue's pod was Ready.
    "helm.release-after-the-webhooks-it-meets": (
        "metrics-adapter",
        lambda o: None,
        "is not ordered after release kueue, whose webhooks refuse this kind",
        lambda stack: _not_after_kueue(stack, "metrics-adapter"),
    ),
}


def test_a_conversion_job_whose_release_does_not_wait_for_its_account_is_refused(
    stacks: dict[str, dict[str, Any]], releases: dict[str, list[dict[str, Any]]]
) -> None:
    """Before the fix the JetStream releases waited for the servers' account only: deploy-local (and a first real
    apply) sent the conversion Job before the converter's account, its pods were refused and the Job controller's
    back-off delayed them past the settle."""
    stack = copy.deepcopy(stacks["dev"])
    release = next(r for r in of_type(stack, "helm_release").values() if r["name"] == "serve-llama405b")
    converter = next(
        f"kubernetes_service_account_v1.{k}"
        for k, a in of_type(stack, "kubernetes_service_account_v1").items()
        if a["metadata"]["name"] == "checkpoint-converter"
    )
    assert converter in release["depends_on"]
    release["depends_on"].remove(converter)
    ctx = ReleaseContext(name="serve-llama405b", namespace=release["namespace"], stack=stack, stack_objects=releases)
    found = RULES["helm.release-after-its-service-accounts"].run(releases["serve-llama405b"], ctx)
    assert [v.value for v in found] == ["checkpoint-converter"], [v.line() for v in found]


def test_a_vllm_release_not_waiting_for_lws_is_refused(
    stacks: dict[str, dict[str, Any]], releases: dict[str, list[dict[str, Any]]]
) -> None:
    """Before the fix the vLLM releases did not depend on the lws release (the stack kept an engine -> controller
    map without vllm): a first apply sent the LeaderWorkerSet before its CRD existed."""
    stack = copy.deepcopy(stacks["dev"])
    release = next(r for r in of_type(stack, "helm_release").values() if r["name"] == "serve-llama70b-vllm")
    lws = next(f"helm_release.{k}" for k, r in of_type(stack, "helm_release").items() if r["name"] == "lws")
    assert lws in release["depends_on"]
    release["depends_on"].remove(lws)
    ctx = ReleaseContext(
        name="serve-llama70b-vllm", namespace=release["namespace"], stack=stack, stack_objects=releases
    )
    found = RULES["helm.release-after-its-kinds"].run(releases["serve-llama70b-vllm"], ctx)
    assert [v.field for v in found] == ["LeaderWorkerSet/serve-llama70b-vllm: apiVersion"], [v.line() for v in found]


def _not_after_kueue(stack: dict[str, Any], name: str) -> None:
    """Release `name` as dev shipped it before the fix: nothing orders it after the kueue release."""
    releases = of_type(stack, "helm_release")
    kueue = next(f"helm_release.{k}" for k, r in releases.items() if r["name"] == "kueue")
    release = next(r for r in releases.values() if r["name"] == name)
    release["depends_on"] = [d for d in release["depends_on"] if d != kueue]


def _as_before_the_fix(stack: dict[str, Any]) -> None:
    """Every release as dev shipped before the fix: neither upgrade_install nor, where it did not wait, atomic."""
    for release in of_type(stack, "helm_release").values():
        release.pop("upgrade_install")


TERRAFORM: dict[str, TerraformExample] = {
    # Before the fix: 7 of prod's 13 releases were neither atomic nor upgrade_install (the servers, which do not
    # wait); one failed first install blocked every later apply.
    "helm.first-install-recoverable": (_as_before_the_fix, "set upgrade_install = true"),
    # Before the fix: the jobset and lws releases went out beside kueue's, their managers' Deployments refused.
    "helm.controller-after-the-webhooks-it-meets": (
        lambda s: _not_after_kueue(s, "jobset"),
        "release jobset writes Deployment, which release kueue's webhooks refuse",
    ),
}

EXAMPLES = {**MANIFEST, **TERRAFORM}


@pytest.mark.parametrize("rule_id", sorted(EXAMPLES))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, EXAMPLES[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("helm", EXAMPLES)
