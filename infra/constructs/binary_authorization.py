"""The project's Binary Authorization policy.

The cluster enforces the project singleton policy (`PROJECT_SINGLETON_POLICY_ENFORCE`), and a project that
declares none has the default policy, which allows every image (`defaultAdmissionRule.evaluationMode:
ALWAYS_ALLOW`, https://cloud.google.com/binary-authorization/docs/configuring-policy-cli). This declares it:

- the default rule denies every image;
- the environment's own registry is allowlisted (`<registry>/**`: the platform's images, pushed by `make image`
  and deployed by digest);
- each upstream image pinned by digest is allowlisted by that digest (a name pattern matches the whole image
  reference, tag or digest included: "gcr.io/nginx* matches gcr.io/nginx@latest", AdmissionWhitelistPattern,
  https://cloud.google.com/python/docs/reference/binaryauthorization/latest);
- Google's system images (GKE's own pods) pass by the global policy (`globalPolicyEvaluationMode: ENABLE`,
  https://cloud.google.com/binary-authorization/docs/policy-yaml-reference).

Enforcement: while an upstream image the platform runs still waits for a digest
(infra/catalogue/upstream.py AWAITING_DIGEST), or the controllers' upstream charts (Kueue, JobSet, LWS) pull
theirs by tag, denying would stop those pods; the rule is then `DRYRUN_AUDIT_LOG_ONLY`: every image it would
refuse is written to Cloud Audit Logs, nothing is stopped. It becomes `ENFORCED_BLOCK_AND_AUDIT_LOG` once nothing
waits. Rule binauthz.policy-denies-by-default holds the policy to this.
"""

from __future__ import annotations

from constructs import Construct

from infra.cdk.bindings import google

DRY_RUN = "DRYRUN_AUDIT_LOG_ONLY"
ENFORCED = "ENFORCED_BLOCK_AND_AUDIT_LOG"


class BinaryAuthorizationPolicy(Construct):
    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        project: str,
        registry_url: str,
        pinned_images: list[str],
        waiting: list[str],
    ) -> None:
        super().__init__(scope, id_)
        patterns = [f"{registry_url}/**", *sorted(set(pinned_images))]
        ba = google("binary_authorization_policy")
        self.policy = ba.BinaryAuthorizationPolicy(
            self,
            "policy",
            project=project,
            description=(
                "Platform images from this environment's registry, upstream images by digest "
                f"({len(waiting)} still by tag: {'dry run' if waiting else 'enforced'})"
            ),
            global_policy_evaluation_mode="ENABLE",
            admission_whitelist_patterns=[
                ba.BinaryAuthorizationPolicyAdmissionWhitelistPatterns(name_pattern=p) for p in patterns
            ],
            default_admission_rule=ba.BinaryAuthorizationPolicyDefaultAdmissionRule(
                evaluation_mode="ALWAYS_DENY", enforcement_mode=DRY_RUN if waiting else ENFORCED
            ),
        )
