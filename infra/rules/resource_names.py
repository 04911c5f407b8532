"""Names of Google Cloud resources, checked at load at the field that writes them (or from which they are
derived), so a bad name fails naming the YAML field rather than a resource of `cdk.tf.json`. The Terraform
rules `gcs.bucket-names` and `iam.service-account-id` check the synthesized stack again."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from infra.catalogue.gcp_names import (
    BUCKET_NAMING,
    PROJECT_ID,
    SERVICE_ACCOUNT_ID,
    bucket_name_problem,
    project_id_problem,
    service_account_id_problem,
)
from infra.config.identity import gsa_account_id
from infra.rules import Finding, rule
from infra.rules.terraform_subject import resources

if TYPE_CHECKING:
    from infra.config import Environment


@rule(
    id="gcp.names-where-written",
    system="Cloud Storage / IAM / Resource Manager",
    layer="apply",
    summary=(
        "The project id, every bucket name (a bucket's default `<project>-<key>` and the state bucket included) "
        "and every service account id the stack derives are names Google Cloud accepts."
    ),
    source=f"{BUCKET_NAMING}; {SERVICE_ACCOUNT_ID}; {PROJECT_ID}",
    subject="environment",
)
def _names(env: Environment) -> Iterator[Finding]:
    if problem := project_id_problem(env.project):
        yield Finding("project", env.project, problem)
    if problem := bucket_name_problem(env.state.bucket):
        yield Finding("state.bucket", env.state.bucket, problem)
    for key, spec in env.buckets.items():
        name = env.bucket_name(key)
        if problem := bucket_name_problem(name):
            field, note = (f"buckets.{key}.name", "") if spec.name else (f"buckets.{key}", " (the default name)")
            yield Finding(field, name, f"{problem}{note}")
    derived = [f"{env.cluster.name}-nodes"] + ([f"{env.cluster.name}-pathways"] if env.pathways_slices else [])
    for account in derived:
        if problem := service_account_id_problem(account):
            yield Finding("cluster.name", env.cluster.name, f"the node service account {account!r}: {problem}")
    for key, identity in env.identities.items():
        if identity.mode == "impersonation" and (problem := service_account_id_problem(gsa_account_id(key))):
            yield Finding(f"identities.{key}", key, f"its Google service account {gsa_account_id(key)!r}: {problem}")


@rule(
    id="iam.service-account-id",
    system="IAM",
    layer="apply",
    summary="A service account id is 6-30 characters: a lowercase letter, then letters, digits or hyphens.",
    source=SERVICE_ACCOUNT_ID,
    subject="terraform",
)
def _sa_ids(stack: dict[str, Any]) -> Iterator[Finding]:
    for where, body in resources(stack, "google_service_account"):
        account = body.get("account_id", "")
        if problem := service_account_id_problem(account):
            yield Finding(f"{where}.account_id", account, problem)


@rule(
    id="gcs.bucket-names",
    system="Cloud Storage",
    layer="apply",
    summary="Bucket names are 3-63 characters of a-z, 0-9, - and _, with no 'goog' prefix and no 'google'.",
    source=BUCKET_NAMING,
    subject="terraform",
)
def _bucket_names(stack: dict[str, Any]) -> Iterator[Finding]:
    for where, body in resources(stack, "google_storage_bucket"):
        name = body.get("name", "")
        if problem := bucket_name_problem(name):
            yield Finding(f"{where}.name", name, problem)
