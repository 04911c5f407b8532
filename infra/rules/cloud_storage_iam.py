"""Cloud Storage IAM: an identity that writes one prefix of a bucket others write too is
granted that prefix only, by an IAM condition on the object's name.

Without a condition, roles/storage.objectUser on a bucket lets its holder overwrite or delete every object in it
(the GKE trainer's checkpoints, from a Vertex AI job or any Slurm user; every model, from a conversion Job).
Conditions on `resource.name` hold a bucket role to a prefix
(https://cloud.google.com/storage/docs/access-control/iam#conditions;
https://cloud.google.com/iam/docs/conditions-attribute-reference).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from fnmatch import fnmatch
from typing import Any

from infra.rules import Finding, rule
from infra.rules.terraform_subject import resources

# Service accounts (account_id, fnmatch patterns) that write one prefix of a shared bucket, and that prefix:
# Vertex AI jobs write under their base output directory (infra/vertex/job.py output_dir: vertex/<env>-train), the
# Slurm cluster's login and compute nodes (slurm-<name>, every OS Login user holds its token) under slurm/
# (infra/slurm/jobs.py BUCKET_PREFIX). The checkpoint conversion Jobs' accounts are found in the stack: each writes
# the output its release's values name (`conversion.output`), as its Kubernetes service account.
PREFIX_WRITERS = {"vertex-jobs": "vertex/", "slurm-*": "slurm/"}
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
        "A service account that writes one prefix of a shared bucket (Vertex AI jobs: vertex/; the Slurm nodes: "
        "slurm/; a checkpoint conversion: its output) holds its bucket role under an IAM condition on that prefix, "
        "not on the whole bucket."
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
    converters = conversion_writers(stack, accounts)
    for where, grant in resources(stack, "google_storage_bucket_iam_member"):
        m = re.search(r"\$\{google_service_account\.([^.}]+)\.", str(grant.get("member", "")))
        account = str(accounts.get(m.group(1)) if m else None)
        prefixes = converters.get(account) or [p for pattern, p in PREFIX_WRITERS.items() if fnmatch(account, pattern)]
        if not prefixes or grant.get("role") not in WRITE_ROLES:
            continue
        expression = str((grant.get("condition") or {}).get("expression", ""))
        missing = [
            prefix
            for prefix in prefixes
            if not re.search(
                r'resource\.name\.startsWith\("projects/_/buckets/[^"]+/objects/' + re.escape(prefix), expression
            )
        ]
        if missing:
            yield Finding(
                f"{where}.condition",
                grant.get("condition"),
                f"{account} writes under {', '.join(prefixes)} only: condition the grant on resource.name.startsWith("
                f'"projects/_/buckets/<bucket>/objects/{missing[0]}...")',
            )


def conversion_writers(stack: dict[str, Any], accounts: dict[str, Any]) -> dict[str, list[str]]:
    """{account_id: the output prefixes its conversion Jobs write}: each release whose values hold a `conversion`
    (the jetstream-pathways chart) runs it as `conversion.serviceAccountName` in the release's namespace, whose
    Kubernetes service account names its Google service account (iam.gke.io/gcp-service-account)."""
    gsa_of: dict[tuple[str, str], str] = {}
    for _, ksa in resources(stack, "kubernetes_service_account_v1"):
        meta = ksa.get("metadata") or {}
        email = str((meta.get("annotations") or {}).get("iam.gke.io/gcp-service-account", ""))
        m = re.search(r"\$\{google_service_account\.([^.}]+)\.", email)
        if m and m.group(1) in accounts:
            gsa_of[(str(meta.get("namespace")), str(meta.get("name")))] = str(accounts[m.group(1)])
    out: dict[str, list[str]] = {}
    for _, release in resources(stack, "helm_release"):
        try:
            conversion = json.loads((release.get("values") or ["{}"])[0]).get("conversion")
        except (json.JSONDecodeError, TypeError, AttributeError):
            continue
        if not isinstance(conversion, dict):
            continue
        account = gsa_of.get((str(release.get("namespace")), str(conversion.get("serviceAccountName"))))
        output = str(conversion.get("output", ""))
        if account and output.startswith("gs://") and "/" in output[5:]:
            out.setdefault(account, []).append(output[5:].split("/", 1)[1].strip("/") + "/")
    return out
