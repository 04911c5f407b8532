"""Cloud Storage IAM: each identity has a role on every bucket it reads and a write role where it writes (an
environment's identities, checked at load); an identity that writes one prefix of a bucket others write too is
granted that prefix only, by an IAM condition on the object's name (the synthesized stack).

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
from typing import TYPE_CHECKING, Any

from infra.catalogue.storage_roles import OBJECT_WRITE_ROLES, ROLES_DOC
from infra.config.serving import SaxmlServing, VllmServing, bucket_fields
from infra.rules import Finding, rule
from infra.rules.terraform_subject import resources

if TYPE_CHECKING:
    from infra.config import Environment


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
    types=("google_storage_bucket_iam_member",),
)
def _within_prefix(grants: list[tuple[str, dict[str, Any]]], stack: dict[str, Any]) -> Iterator[Finding]:
    accounts = {
        logical_id: body.get("account_id")
        for logical_id, body in (stack.get("resource", {}).get("google_service_account") or {}).items()
    }
    converters = conversion_writers(stack, accounts)
    for where, grant in grants:
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


def _writes(env: Environment) -> Iterator[tuple[tuple[str | int, ...], str, str, str]]:
    """(field path, identity key, bucket, what it writes) of every job that writes to a bucket as an identity."""
    if env.training is not None:
        yield ("training", "identity"), env.training.identity, env.training.bucket, "checkpoints"
    if env.batch is not None and env.batch.training is not None:
        yield ("batch", "identity"), env.batch.identity, env.batch.training.bucket, "checkpoints"
    for key, d in env.serving.items():
        if isinstance(d, VllmServing):
            yield ("serving", key, "identity"), d.identity, d.cache_bucket, "its compilation cache"
        conversion = getattr(d, "conversion", None)
        if conversion is not None:
            at = ("serving", key, "conversion", "identity")
            yield at, conversion.identity, d.bucket, "the converted checkpoint"


@rule(
    id="gcs.identity-writes-where-it-writes",
    system="Cloud Storage IAM",
    layer="engine-start",
    summary=(
        "An identity that writes a bucket (the trainers' checkpoints, vLLM's compilation cache, a conversion's "
        "model) holds roles/storage.objectUser or objectAdmin there; with objectViewer or no role, the first write "
        "fails with 403."
    ),
    source=ROLES_DOC + " (objectViewer reads; objectUser and objectAdmin create, overwrite and delete objects)",
    subject="environment",
)
def _writers(env: Environment) -> Iterator[Finding]:
    for where, key, bucket, what in _writes(env):
        identity = env.identities.get(key)
        if identity is None or bucket not in env.buckets:
            continue  # a name that does not exist: refused by the schema
        role = identity.bucket_roles.get(bucket)
        if role not in OBJECT_WRITE_ROLES:
            yield Finding(
                where,
                key,
                f"must be able to write {what} to bucket {bucket!r}: give it roles/storage.objectUser there (it has "
                f"{role or 'no role'})",
            )


def _reads(env: Environment) -> Iterator[tuple[tuple[str | int, ...], str, str, str]]:
    """(field path, identity key, bucket, the field naming the bucket) of every bucket a server or conversion
    reads (or mounts) as an identity."""
    for key, d in env.serving.items():
        for field, bucket in bucket_fields(d):
            yield ("serving", key, "identity"), d.identity, bucket, field
        conversion = getattr(d, "conversion", None)
        if conversion is not None and conversion.identity != d.identity:
            at = ("serving", key, "conversion", "identity")
            yield at, conversion.identity, conversion.source_bucket, "conversion.source_bucket"


@rule(
    id="gcs.identity-reads-its-buckets",
    system="Cloud Storage IAM",
    layer="mount",
    summary=(
        "A server reads (or mounts) every bucket its deployment names, and a conversion its source, as its identity: "
        "the identity holds a role on each, or the mount or the first read fails with 403."
    ),
    source=ROLES_DOC,
    subject="environment",
)
def _readers(env: Environment) -> Iterator[Finding]:
    for where, key, bucket, field in _reads(env):
        identity = env.identities.get(key)
        if identity is None or bucket not in env.buckets or bucket in identity.bucket_roles:
            continue
        yield Finding(
            where, key, f"has no role on bucket {bucket!r} ({field}); add one to identities.{key}.bucket_roles"
        )


@rule(
    id="platform.servers-read-their-models",
    system="ML platform (least privilege)",
    layer="platform",
    summary=(
        "A model server only reads its model: a write role on the models' bucket would let any server (and whoever "
        "takes one over) overwrite or delete every model there. Writing the models is the conversion's, under its "
        "own identity (Saxml's bucket is its admin state, which it writes)."
    ),
    source=f"docs/serving.md; {ROLES_DOC}",
    subject="environment",
)
def _servers_read(env: Environment) -> Iterator[Finding]:
    for key, d in env.serving.items():
        if isinstance(d, SaxmlServing):
            continue
        identity = env.identities.get(d.identity)
        role = identity.bucket_roles.get(d.bucket) if identity is not None else None
        if role in OBJECT_WRITE_ROLES:
            yield Finding(
                ("identities", d.identity, "bucket_roles", d.bucket),
                role,
                f"serving.{key} runs as {d.identity!r} and only reads its model from bucket {d.bucket!r}: give it "
                "roles/storage.objectViewer there (a checkpoint conversion writes with its own identity, "
                "conversion.identity)",
            )


def _identity_users(env: Environment, identity: str) -> list[str]:
    """The sections whose workloads run as `identity`."""
    return sorted(
        {f"serving.{k}" for k, s in env.serving.items() if s.identity == identity}
        | ({"training"} if env.training is not None and env.training.identity == identity else set())
        | ({"batch"} if env.batch is not None and env.batch.identity == identity else set())
    )


@rule(
    id="platform.conversion-runs-as-its-own-identity",
    system="ML platform (least privilege)",
    layer="platform",
    summary=(
        "A checkpoint conversion writes the models, so it runs as an identity of its own, which no server, trainer "
        "or batch job shares (those that share it could overwrite every model)."
    ),
    source=f"docs/serving.md; {ROLES_DOC}",
    subject="environment",
)
def _conversion_identity(env: Environment) -> Iterator[Finding]:
    for key, d in env.serving.items():
        conversion = getattr(d, "conversion", None)
        if conversion is None:
            continue
        users = _identity_users(env, conversion.identity)
        if users:
            yield Finding(
                ("serving", key, "conversion", "identity"),
                conversion.identity,
                f"{', '.join(users)} run(s) as {conversion.identity!r} too: the conversion writes the models, so it "
                "runs as an identity of its own, which no server shares (servers that share it can overwrite every "
                "model)",
            )


@rule(
    id="platform.saxml-identity-owns-its-bucket-only",
    system="ML platform (least privilege)",
    layer="platform",
    summary=(
        "Saxml runs as its own Google service account (impersonation), admin (roles/storage.objectAdmin) of the "
        "Saxml bucket, where its admin server keeps its state, and of no other bucket."
    ),
    source=f"docs/serving.md (Saxml); {ROLES_DOC}",
    subject="environment",
)
def _saxml_identity(env: Environment) -> Iterator[Finding]:
    for key, d in env.serving.items():
        identity = env.identities.get(d.identity) if isinstance(d, SaxmlServing) else None
        if identity is None:
            continue
        if identity.mode != "impersonation":
            yield Finding(
                ("serving", key, "identity"),
                d.identity,
                "Saxml runs as a Google service account: use mode impersonation",
            )
        others = sorted(set(identity.bucket_roles) - {d.bucket})
        if others or identity.bucket_roles.get(d.bucket) != "roles/storage.objectAdmin":
            yield Finding(
                ("identities", d.identity, "bucket_roles"),
                dict(identity.bucket_roles),
                f"Saxml's identity gets roles/storage.objectAdmin on bucket {d.bucket!r} and no other role"
                + (f" (remove {', '.join(others)})" if others else ""),
            )
