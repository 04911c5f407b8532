"""Every environment together: what one file cannot see alone. `make plan` and every entry point load
all environments at once (`infra.synth.load.load_all`), and these hold them together.

- Bucket names share one global namespace (https://cloud.google.com/storage/docs/buckets#naming): no bucket of
  one environment is named like a bucket of another, or like any environment's Terraform state bucket.
- Two environments in one project share its namespaces of VPC networks, GKE clusters (per region), Artifact
  Registry repositories (per region) and service accounts
  (https://cloud.google.com/compute/docs/naming-resources, https://cloud.google.com/iam/docs/service-accounts-create):
  their names must differ.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infra.config.findings import field_path
from infra.config.identity import gsa_account_id

if TYPE_CHECKING:
    from infra.config.environment import Environment

BUCKETS_SOURCE = "https://cloud.google.com/storage/docs/buckets#naming (one global namespace)"
PROJECT_SOURCE = (
    "https://cloud.google.com/compute/docs/naming-resources; https://cloud.google.com/iam/docs/service-accounts-create"
)


def _project_names(env: Environment) -> dict[tuple[str | int, ...], tuple[str, str]]:
    """(field path) -> (kind, name) of what the environment names inside its project."""
    names: dict[tuple[str | int, ...], tuple[str, str]] = {
        ("network", "name"): ("VPC network", env.network.name),
        ("cluster", "name"): ("GKE cluster", f"{env.region}/{env.cluster.name}"),
        ("registry", "repository"): ("Artifact Registry repository", f"{env.region}/{env.registry.repository}"),
    }
    for key, ident in env.identities.items():
        if ident.mode == "impersonation":
            names[("identities", key)] = ("service account", gsa_account_id(key))
    for key in env.vm_groups:
        names[("vm_groups", key)] = ("service account", f"vm-{key}")
    # What every platform stack makes under a fixed name in its project (two environments in one
    # project both made them): `make image`'s build account and its sources' bucket (infra/stacks/platform.py).
    names[("project",)] = ("build service account", env.build_service_account)
    return names


def together_problems(envs: dict[str, Environment]) -> dict[str, list[str]]:
    """Problem lines by environment name (each names the field, the value, the other environment and the source)."""
    found: dict[str, list[str]] = {name: [] for name in envs}
    states = {env.state.bucket: name for name, env in envs.items()}
    owners: dict[str, tuple[str, str]] = {}
    for name, env in envs.items():
        for key, spec in env.buckets.items():
            bucket = env.bucket_name(key)
            where = field_path(("buckets", key, "name") if spec.name else ("buckets", key))
            if bucket in states and bucket != env.state.bucket:
                found[name].append(
                    f"{where}: {bucket!r}: the Terraform state bucket of {states[bucket]}.yaml (state.bucket) "
                    f"[source: {BUCKETS_SOURCE}]"
                )
            if bucket in owners and owners[bucket][0] != name:
                other, other_where = owners[bucket]
                found[name].append(
                    f"{where}: {bucket!r}: also the name of {other}.yaml's {other_where}: bucket names are global "
                    f"[source: {BUCKETS_SOURCE}]"
                )
            owners.setdefault(bucket, (name, where))
    by_project: dict[str, list[str]] = {}
    for name, env in envs.items():
        by_project.setdefault(env.project, []).append(name)
    for project, names in by_project.items():
        for i, name in enumerate(names):
            mine = _project_names(envs[name])
            for other in names[:i]:
                theirs = {v: k for k, v in _project_names(envs[other]).items()}
                for path, (kind, value) in mine.items():
                    if (kind, value) in theirs:
                        found[name].append(
                            f"{field_path(path)}: {value!r}: {other}.yaml names its {kind} the same in project "
                            f"{project} ({field_path(theirs[(kind, value)])}): one would take the other's "
                            f"[source: {PROJECT_SOURCE}]"
                        )
    return {name: lines for name, lines in found.items() if lines}
