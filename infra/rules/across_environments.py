"""Every environment together: what one file cannot see alone. `make plan` and every entry point load all
environments at once (`infra.synth.load.load_all`), and these rules hold them together; each finding is reported
in the file that comes second (by name) and names the other.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from infra.config.findings import field_path
from infra.config.identity import gsa_account_id
from infra.rules import Finding, rule

if TYPE_CHECKING:
    from infra.config.environment import Environment


@rule(
    id="gcs.bucket-names-are-global",
    system="Cloud Storage",
    layer="apply",
    summary=(
        "Bucket names share one global namespace: no bucket of one environment is named like a bucket of another, "
        "or like any environment's Terraform state bucket (the second create fails, or takes the state's bucket)."
    ),
    source="https://cloud.google.com/storage/docs/buckets#naming (one global namespace)",
    subject="environments",
)
def _global_buckets(envs: dict[str, Environment]) -> Iterator[Finding]:
    states = {env.state.bucket: name for name, env in envs.items()}
    owners: dict[str, tuple[str, str]] = {}
    for name, env in sorted(envs.items()):
        for key, spec in env.buckets.items():
            bucket = env.bucket_name(key)
            path = ("buckets", key, "name") if spec.name else ("buckets", key)
            if bucket in states and bucket != env.state.bucket:
                yield Finding(
                    (name, *path), bucket, f"the Terraform state bucket of {states[bucket]}.yaml (state.bucket)"
                )
            if bucket in owners and owners[bucket][0] != name:
                other, other_where = owners[bucket]
                yield Finding(
                    (name, *path), bucket, f"also the name of {other}.yaml's {other_where}: bucket names are global"
                )
            owners.setdefault(bucket, (name, field_path(path)))


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


@rule(
    id="gcp.names-unique-in-a-project",
    system="Compute Engine / GKE / Artifact Registry / IAM",
    layer="apply",
    summary=(
        "Two environments in one project share its namespaces of VPC networks, GKE clusters and Artifact Registry "
        "repositories (per region) and service accounts: what both name alike, one would take from the other."
    ),
    source=(
        "https://cloud.google.com/compute/docs/naming-resources; "
        "https://cloud.google.com/iam/docs/service-accounts-create"
    ),
    subject="environments",
)
def _project_namespaces(envs: dict[str, Environment]) -> Iterator[Finding]:
    by_project: dict[str, list[str]] = {}
    for name, env in sorted(envs.items()):
        by_project.setdefault(env.project, []).append(name)
    for project, names in by_project.items():
        for i, name in enumerate(names):
            mine = _project_names(envs[name])
            for other in names[:i]:
                theirs = {v: k for k, v in _project_names(envs[other]).items()}
                for path, (kind, value) in mine.items():
                    if (kind, value) in theirs:
                        yield Finding(
                            (name, *path),
                            value,
                            f"{other}.yaml names its {kind} the same in project {project} "
                            f"({field_path(theirs[(kind, value)])}): one would take the other's",
                        )


@rule(
    id="gcp.project-number-is-the-projects",
    system="Resource Manager",
    layer="apply",
    summary=(
        "A project number names one project and a project has one number: two environments of different projects "
        "with one number (prod with dev's: dev's Vertex AI agent granted prod's registry, Workload Identity "
        "principals that match nothing), or one project with two numbers, are refused; seed projects "
        "(delivery.seed) likewise, whose number names their federation's principals."
    ),
    source=(
        "https://cloud.google.com/resource-manager/docs/creating-managing-projects#identifying_projects (the "
        "project number: a unique identifier Google assigns, one per project)"
    ),
    subject="environments",
)
def _project_numbers(envs: dict[str, Environment]) -> Iterator[Finding]:
    by_number: dict[str, tuple[str, str, str]] = {}
    by_project: dict[str, tuple[str, str, str]] = {}
    for name, path, what, project, number in _numbered_projects(envs):
        if number in by_number and by_number[number][2] != project:
            other, other_what, other_project = by_number[number]
            yield Finding(
                (name, *path),
                number,
                f"the number of {other}.yaml's {other_what} {other_project}, not of {project}: give {project}'s own "
                f"(gcloud projects describe {project} --format='value(projectNumber)')",
            )
        if project in by_project and by_project[project][2] != number:
            other, other_what, other_number = by_project[project]
            yield Finding(
                (name, *path),
                number,
                f"{other}.yaml gives {other_what} {project} the number {other_number}: a project has one number",
            )
        by_number.setdefault(number, (name, what, project))
        by_project.setdefault(project, (name, what, number))


def _numbered_projects(envs: dict[str, Environment]) -> list[tuple[str, tuple[str, ...], str, str, str]]:
    """(environment, field path, what, project, number): every environment's project, then every seed project."""
    named = sorted(envs.items())
    seeds = [(name, env.delivery.seed) for name, env in named if env.delivery is not None]
    return [(name, ("project_number",), "project", env.project, str(env.project_number)) for name, env in named] + [
        (name, ("delivery", "seed", "project_number"), "seed project", seed.project, seed.project_number)
        for name, seed in seeds
        if seed is not None
    ]


@rule(
    id="iam.seed-project-out-of-every-deployers-reach",
    system="IAM",
    layer="apply",
    summary=(
        "A seed project (delivery.seed) is no environment's own project: each environment's deployer administers "
        "the service accounts of its project (roles/iam.serviceAccountAdmin), so a seed that is dev's project puts "
        "prod's deployer within dev's deployer's reach."
    ),
    source=(
        "https://cloud.google.com/iam/docs/reference/rest/v1/projects.serviceAccounts/setIamPolicy (grants a "
        "principal the ability to impersonate the service account); terraform-example-foundation 0-bootstrap (a "
        "seed project of its own)"
    ),
    subject="environments",
)
def _seed_projects(envs: dict[str, Environment]) -> Iterator[Finding]:
    projects = {env.project: name for name, env in envs.items()}
    for name, env in sorted(envs.items()):
        seed = env.delivery.seed if env.delivery is not None else None
        if seed is not None and seed.project in projects and projects[seed.project] != name:
            yield Finding(
                (name, "delivery", "seed", "project"),
                seed.project,
                f"the project of {projects[seed.project]}.yaml, whose deployer administers its service accounts: "
                "this environment's deployer would be within its reach; give a seed project no environment deploys "
                "into",
            )


@rule(
    id="gce.reservation-not-another-environments",
    system="Compute Engine",
    layer="apply",
    summary=(
        "An environment draws on no reservation of another environment's project: a shared reservation is for "
        "capacity made to be shared, not for one environment (prod) to take another's (dev's) reserved machines."
    ),
    source="https://cloud.google.com/compute/docs/instances/reservations-shared",
    subject="environments",
)
def _reservation_of_another(envs: dict[str, Environment]) -> Iterator[Finding]:
    from infra.rules.compute_engine import reservations_of

    projects = {env.project: name for name, env in envs.items()}
    for name, env in sorted(envs.items()):
        for key, project, reservation in reservations_of(env):
            other = projects.get(project)
            if project != env.project and other is not None and other != name:
                yield Finding(
                    (name, "slices", key, "capacity"),
                    f"projects/{project}/reservations/{reservation}",
                    f"a reservation of {other}.yaml's project {project}: {name} would take {other}'s reserved "
                    "machines; reserve in this environment's project",
                )
