"""JobSet's webhook: job names within DNS limits, policies that name real replicated jobs."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from infra.rules import Finding, rule, where
from infra.rules.manifest_subject import ReleaseContext


@rule(
    id="jobset.job-names-dns-1035",
    system="JobSet webhook",
    layer="admission",
    summary="<jobset>-<replicatedJob>-<index> (each child Job's name) is a DNS-1035 label of at most 63 characters.",
    source=(
        "kubernetes-sigs/jobset pkg/webhooks/jobset_webhook.go L63, L236-242 @ v0.12.0: 'JobSet name is too long, "
        "job names generated for this JobSet will exceed 63 characters'"
    ),
    kinds=("JobSet",),
    subject="manifest",
)
def _jobset_names(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for obj in objects:
        name = obj["metadata"]["name"]
        for i, job in enumerate(obj["spec"].get("replicatedJobs") or []):
            longest = f"{name}-{job['name']}-{int(job.get('replicas', 1)) - 1}"
            if len(longest) > 63 or not re.match(r"^[a-z]([-a-z0-9]*[a-z0-9])?$", longest):
                yield Finding(
                    f"{where(obj)}: spec.replicatedJobs[{i}].name", job["name"], f"job name {longest!r} is invalid"
                )


@rule(
    id="jobset.policies-name-replicated-jobs",
    system="JobSet webhook",
    layer="admission",
    summary="successPolicy and failurePolicy rules target replicatedJobs that exist.",
    source=(
        "kubernetes-sigs/jobset pkg/webhooks/jobset_webhook.go L178-180, L259-263 @ v0.12.0: 'invalid "
        "replicatedJob name ... does not appear in .spec.ReplicatedJobs'"
    ),
    kinds=("JobSet",),
    subject="manifest",
)
def _jobset_policies(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for obj in objects:
        spec = obj["spec"]
        names = {j["name"] for j in spec.get("replicatedJobs") or []}
        targets = [("spec.successPolicy.targetReplicatedJobs", (spec.get("successPolicy") or {}))]
        targets += [
            (f"spec.failurePolicy.rules[{i}].targetReplicatedJobs", r)
            for i, r in enumerate((spec.get("failurePolicy") or {}).get("rules") or [])
        ]
        for path, holder in targets:
            for name in holder.get("targetReplicatedJobs") or []:
                if name not in names:
                    yield Finding(f"{where(obj)}: {path}", name, f"not a replicatedJob: {', '.join(sorted(names))}")
