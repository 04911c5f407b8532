"""Names, places and labels of Google Cloud resources, checked at load at the field that writes them (or from which
they are derived), so a bad one fails naming the YAML field rather than a resource of `cdk.tf.json`. The Terraform
rules `gcs.bucket-names` and `iam.service-account-id` check the synthesized stack again."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from infra.catalogue import labels as label_limits
from infra.catalogue.gcp_names import (
    BUCKET_NAMING,
    PROJECT_ID,
    SERVICE_ACCOUNT_ID,
    bucket_name_problem,
    project_id_problem,
    service_account_id_problem,
)
from infra.catalogue.storage_locations import CHECKED as LOCATIONS_CHECKED
from infra.catalogue.storage_locations import SOURCE as LOCATIONS_SOURCE
from infra.catalogue.storage_locations import location_problem
from infra.config.identity import gsa_account_id
from infra.rules import Finding, rule

if TYPE_CHECKING:
    from infra.config import Environment


@rule(
    id="gcp.names-where-written",
    system="Cloud Storage / IAM / Resource Manager",
    layer="apply",
    summary=(
        "The project id, every bucket name (a bucket's default `<project>-<key>` and the state bucket included) "
        "and every service account id the stack derives are names Google Cloud accepts, and so is every VM name."
    ),
    source=f"{BUCKET_NAMING}; {SERVICE_ACCOUNT_ID}; {PROJECT_ID}; https://cloud.google.com/compute/docs/naming-resources",
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
    for name, group in env.vm_groups.items():
        # Instance names `<env>-<group>-<n>` are RFC 1035 labels of at most 63 characters; the group's service
        # account id `vm-<group>` has 6 to 30.
        hosts = env.slices[group.slice].slice.hosts if group.slice in env.slices else 1
        longest = f"{env.name}-{name}-{hosts - 1}"
        if len(longest) > 63:
            yield Finding(("vm_groups", name), name, f"too long: its VM name {longest!r} would exceed 63 characters")
        if len(f"vm-{name}") > 30:
            yield Finding(
                ("vm_groups", name), name, f"too long: its service account id 'vm-{name}' would exceed 30 characters"
            )
        if len(f"vm-{name}") < 6:
            yield Finding(
                ("vm_groups", name), name, f"too short: its service account id 'vm-{name}' would be under 6 characters"
            )


@rule(
    id="iam.service-account-id",
    system="IAM",
    layer="apply",
    summary="A service account id is 6-30 characters: a lowercase letter, then letters, digits or hyphens.",
    source=SERVICE_ACCOUNT_ID,
    subject="terraform",
    types=("google_service_account",),
)
def _sa_ids(accounts: list[tuple[str, dict[str, Any]]], stack: dict[str, Any]) -> Iterator[Finding]:
    for where, body in accounts:
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
    types=("google_storage_bucket",),
)
def _bucket_names(buckets: list[tuple[str, dict[str, Any]]], stack: dict[str, Any]) -> Iterator[Finding]:
    for where, body in buckets:
        name = body.get("name", "")
        if problem := bucket_name_problem(name):
            yield Finding(f"{where}.name", name, problem)


@rule(
    id="gcp.labels-per-resource",
    system="Resource Manager labels",
    layer="apply",
    summary=(
        f"A resource carries at most {label_limits.MAX_LABELS} labels and Terraform adds its own: the environment's "
        "`labels`, which every resource gets, leave room for it."
    ),
    source=label_limits.SOURCE,
    subject="environment",
)
def _labels(env: Environment) -> Iterator[Finding]:
    room = label_limits.MAX_LABELS - len(label_limits.ADDED_BY_TERRAFORM)
    if len(env.labels) > room:
        yield Finding(
            ("labels",),
            f"{len(env.labels)} labels",
            f"a resource carries at most {label_limits.MAX_LABELS} labels, and Terraform adds "
            f"{', '.join(label_limits.ADDED_BY_TERRAFORM)}: at most {room} here",
        )


@rule(
    id="gcs.bucket-names-unique",
    system="Cloud Storage",
    layer="apply",
    summary=(
        "Bucket names share one global namespace: no two buckets of an environment take one name, and none takes the "
        "name of the Terraform state bucket (the stack would create the bucket that holds its own state)."
    ),
    source=f"{BUCKET_NAMING} (one global namespace)",
    subject="environment",
)
def _bucket_names_unique(env: Environment) -> Iterator[Finding]:
    holders: dict[str, list[str]] = {}
    for key in env.buckets:
        holders.setdefault(env.bucket_name(key), []).append(key)
    for key, spec in env.buckets.items():
        name = env.bucket_name(key)
        where = ("buckets", key, "name") if spec.name else ("buckets", key)
        others = [k for k in holders[name] if k != key]
        # Named at the keys that write a name (the default name of another key is what they collide with).
        if others and (spec.name or (all(not env.buckets[k].name for k in holders[name]) and key != holders[name][0])):
            yield Finding(where, name, f"the same bucket name as buckets.{', buckets.'.join(others)}")
        if name == env.state.bucket:
            yield Finding(
                where,
                name,
                "the Terraform state bucket's name (state.bucket): the stack would create the bucket that holds its "
                "own state",
            )


@rule(
    id="gcs.bucket-location-exists",
    system="Cloud Storage",
    layer="apply",
    summary="A bucket's location is a Cloud Storage region, multi-region or predefined dual-region.",
    source=f"{LOCATIONS_SOURCE}, checked {LOCATIONS_CHECKED} (infra/catalogue/storage_locations.py)",
    subject="environment",
)
def _bucket_locations(env: Environment) -> Iterator[Finding]:
    for key, spec in env.buckets.items():
        if spec.location is not None and (why := location_problem(spec.location)):
            yield Finding(("buckets", key, "location"), spec.location, why)


@rule(
    id="artifact-registry.images-in-own-registry",
    system="Artifact Registry",
    layer="pod-start",
    summary=(
        "Every release image is in the environment's own registry, under its own name, as `make image` pushes it "
        "and `make promote` copies it: the nodes' service account reads that repository alone."
    ),
    source="https://cloud.google.com/artifact-registry/docs/docker/names; scripts/promote.py",
    subject="environment",
)
def _images(env: Environment) -> Iterator[Finding]:
    registry = env.registry_url
    for name, ref in env.release.images.items():
        repository = ref.split("@", 1)[0]
        if repository != f"{registry}/{name}":
            yield Finding(
                ("release", "images", name),
                repository,
                f"not this environment's registry: images are {registry}/{name}@sha256:... (`make image` pushes "
                "there; `make promote` copies another environment's images there first)",
            )
