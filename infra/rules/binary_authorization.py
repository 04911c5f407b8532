"""Binary Authorization: the project policy the cluster enforces admits the environment's
registry and upstream images by digest; an image by tag alone is refused.

The policy: infra/constructs/binary_authorization.py. The upstream images and their digests (or why one is
still missing): infra/catalogue/upstream.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from infra.catalogue.upstream import AWAITING_DIGEST
from infra.rules import Finding, containers, rule
from infra.rules.manifest_subject import ReleaseContext, _pods
from infra.rules.terraform_subject import resources

POLICY_DOC = "https://cloud.google.com/binary-authorization/docs/configuring-policy-cli"
POLICY_REFERENCE = "https://cloud.google.com/binary-authorization/docs/policy-yaml-reference"
BY_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def by_digest(image: str) -> bool:
    return bool(BY_DIGEST.search(image))


@rule(
    id="binauthz.images-pinned-by-digest",
    system="Binary Authorization",
    layer="admission",
    summary=(
        "Every container image is pinned by digest (image@sha256:...), unless infra/catalogue/upstream.py "
        "AWAITING_DIGEST says why no digest could be found for it: a tag can be moved, a digest cannot, and the "
        "project policy allowlists upstream images by digest."
    ),
    source=(
        f"{POLICY_REFERENCE} (admissionWhitelistPatterns; defaultAdmissionRule); "
        "https://cloud.google.com/kubernetes-engine/docs/concepts/about-container-images (tags are mutable, "
        "digests are not)"
    ),
    subject="manifest",
)
def _images(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for at, _meta, spec in _pods(objects):
        for path, c in containers(spec):
            image = str(c.get("image", ""))
            if not by_digest(image) and image not in AWAITING_DIGEST:
                yield Finding(
                    f"{at}.spec.{path}.image",
                    image,
                    "pin it by digest (image@sha256:...; `make image-digests` resolves a tag where its registry is "
                    "reachable), or name it in infra/catalogue/upstream.py AWAITING_DIGEST with why",
                )


@rule(
    id="binauthz.policy-denies-by-default",
    system="Binary Authorization",
    layer="apply",
    summary=(
        "A stack whose cluster enforces the project policy declares it: default rule ALWAYS_DENY or "
        "REQUIRE_ATTESTATION, allowlist entries only the environment's registry or images by digest, dry run only "
        "while an upstream image still waits for its digest (a project's default policy allows every image)."
    ),
    source=f"{POLICY_DOC} (the default policy: evaluationMode ALWAYS_ALLOW); {POLICY_REFERENCE}",
    subject="terraform",
)
def _policy(stack: dict[str, Any]) -> Iterator[Finding]:
    enforcing = [
        where
        for where, c in resources(stack, "google_container_cluster")
        if (c.get("binary_authorization") or {}).get("evaluation_mode") == "PROJECT_SINGLETON_POLICY_ENFORCE"
    ]
    if not enforcing:
        return
    policies = list(resources(stack, "google_binary_authorization_policy"))
    if not policies:
        yield Finding(
            f"{enforcing[0]}.binary_authorization",
            "PROJECT_SINGLETON_POLICY_ENFORCE",
            "the stack declares no google_binary_authorization_policy: the project's default allows every image",
        )
        return
    registries = {
        f"{r.get('location')}-docker.pkg.dev/{r.get('project')}/{r.get('repository_id')}/**"
        for _, r in resources(stack, "google_artifact_registry_repository")
    }
    for where, policy in policies:
        rule_ = policy.get("default_admission_rule") or {}
        if rule_.get("evaluation_mode") not in ("ALWAYS_DENY", "REQUIRE_ATTESTATION"):
            yield Finding(
                f"{where}.default_admission_rule.evaluation_mode",
                rule_.get("evaluation_mode"),
                "must be ALWAYS_DENY or REQUIRE_ATTESTATION",
            )
        if rule_.get("enforcement_mode") != "ENFORCED_BLOCK_AND_AUDIT_LOG" and not AWAITING_DIGEST:
            yield Finding(
                f"{where}.default_admission_rule.enforcement_mode",
                rule_.get("enforcement_mode"),
                "every upstream image is pinned by digest: enforce (ENFORCED_BLOCK_AND_AUDIT_LOG)",
            )
        if policy.get("global_policy_evaluation_mode") != "ENABLE":
            yield Finding(
                f"{where}.global_policy_evaluation_mode",
                policy.get("global_policy_evaluation_mode"),
                "ENABLE, so GKE's own system images pass",
            )
        for i, pattern in enumerate(policy.get("admission_whitelist_patterns") or []):
            name = str(pattern.get("name_pattern", ""))
            if not by_digest(name) and name not in registries:
                yield Finding(
                    f"{where}.admission_whitelist_patterns[{i}].name_pattern",
                    name,
                    "allowlist an upstream image by digest, or the environment's own registry (<registry>/**)",
                )
