"""Cloud Storage IAM (issue 25, finding 7): an identity that writes one prefix of a bucket others write too is
granted that prefix only, by an IAM condition on the object's name.

Without a condition, roles/storage.objectUser on a bucket lets its holder overwrite or delete every object in it
(the GKE trainer's checkpoints, from a Vertex AI job). Conditions on `resource.name` hold a bucket role to a
prefix (https://cloud.google.com/storage/docs/access-control/iam#conditions;
https://cloud.google.com/iam/docs/conditions-attribute-reference).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from infra.rules import Finding, rule
from infra.rules.terraform_subject import resources

# Service accounts (account_id) that write one prefix of a shared bucket, and that prefix: Vertex AI jobs write
# under their base output directory (infra/vertex/job.py output_dir: vertex/<env>-train). The Slurm nodes'
# grant (slurm/) belongs here too once the Slurm blueprint's owners condition it.
PREFIX_WRITERS = {"vertex-jobs": "vertex/"}
WRITE_ROLES = (
    "roles/storage.objectUser",
    "roles/storage.objectAdmin",
    "roles/storage.objectCreator",
    "roles/storage.admin",
)


@rule(
    id="gcs.grant-within-its-prefix",
    system="Cloud Storage IAM",
    layer="apply",
    summary=(
        "A service account that writes one prefix of a shared bucket (Vertex AI jobs: vertex/) holds its bucket "
        "role under an IAM condition on that prefix, not on the whole bucket."
    ),
    source=(
        "https://cloud.google.com/storage/docs/access-control/iam#conditions (resource.name.startsWith on "
        "projects/_/buckets/<bucket>/objects/<prefix>); https://cloud.google.com/iam/docs/conditions-overview"
    ),
    subject="terraform",
)
def _within_prefix(stack: dict[str, Any]) -> Iterator[Finding]:
    accounts = {
        logical_id: body.get("account_id")
        for logical_id, body in (stack.get("resource", {}).get("google_service_account") or {}).items()
    }
    for where, grant in resources(stack, "google_storage_bucket_iam_member"):
        m = re.search(r"\$\{google_service_account\.([^.}]+)\.", str(grant.get("member", "")))
        account = accounts.get(m.group(1)) if m else None
        prefix = PREFIX_WRITERS.get(str(account))
        if prefix is None or grant.get("role") not in WRITE_ROLES:
            continue
        expression = str((grant.get("condition") or {}).get("expression", ""))
        if not re.search(
            r'resource\.name\.startsWith\("projects/_/buckets/[^"]+/objects/' + re.escape(prefix), expression
        ):
            yield Finding(
                f"{where}.condition",
                grant.get("condition"),
                f"{account} writes under {prefix} only: condition the grant on resource.name.startsWith("
                f'"projects/_/buckets/<bucket>/objects/{prefix}...")',
            )
