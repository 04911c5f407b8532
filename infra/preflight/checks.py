"""The checks that need the user's credentials, in order: credentials, APIs, roles (on the billing account too,
where the environment has a budget), quota."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from infra.catalogue.deployer_roles import CHECKED as ROLES_CHECKED
from infra.catalogue.deployer_roles import SOURCE as ROLES_SOURCE
from infra.catalogue.deployer_roles import UnknownResourceType, billing_roles_for, roles_for
from infra.catalogue.gcp_apis import BOOTSTRAP_APIS, platform_apis
from infra.catalogue.quota_metrics import UnknownQuota
from infra.config import Environment
from infra.preflight.quota import Ask, asks, check_quota
from infra.preflight.reservations import check_reservations, draws
from infra.preflight.result import Result
from infra.preflight.transport import (
    BIGQUERY,
    CLOUD_BILLING,
    CLOUD_PLATFORM_SCOPE,
    CLOUD_QUOTAS_API,
    LOGIN,
    RESOURCE_MANAGER,
    SERVICE_USAGE,
    CredentialsRefused,
    Transport,
    error_line,
)

# Resource Manager answers at most 100 permissions per testIamPermissions call
# (https://cloud.google.com/resource-manager/reference/rest/v3/projects/testIamPermissions).
PERMISSIONS_PER_CALL = 100


def load_credentials() -> tuple[Any, Result]:
    """Application Default Credentials, as every Google client library (and the Terraform provider) finds them."""
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
    except DefaultCredentialsError as err:
        first = str(err).split(". ")[0]
        return None, Result("credentials", "fail", [f"no Application Default Credentials ({first}); {LOGIN}"])
    who = getattr(credentials, "service_account_email", None) or type(credentials).__name__
    return credentials, Result("credentials", "ok", [f"Application Default Credentials: {who}"])


def needed_apis(env: Environment, stack_asks: Iterable[Ask]) -> tuple[str, ...]:
    own = {CLOUD_QUOTAS_API} if any(a.metric.api == "cloudquotas" for a in stack_asks) else set()
    return tuple(
        sorted(
            {
                *BOOTSTRAP_APIS,
                *platform_apis(
                    vertex=env.vertex is not None,
                    inference_gateway=env.inference_gateway,
                    budget=env.monitoring.budget is not None,
                ),
                *own,
            }
        )
    )


def check_apis(
    env: Environment, wanted: tuple[str, ...], transport: Transport, *, deploy_enables: tuple[str, ...] = ()
) -> tuple[Result, set[str]]:
    """Every wanted API enabled: Service Usage's services.list, filtered to the enabled ones. Before a deploy, an API
    off that the deploy enables itself (`deploy_enables`: scripts/apis.py, before the apply) is no failure; returns
    those too (their quota cannot be read until then)."""
    enabled: set[str] = set()
    url = f"{SERVICE_USAGE}/projects/{env.project}/services?filter=state:ENABLED&pageSize=200"
    page = url
    while True:
        answer = transport.request("GET", page)
        if answer.status != 200:
            lines = [
                f"Service Usage did not list the enabled APIs of {env.project}: {error_line(answer)}",
                "the deployer needs serviceusage.services.list (roles/serviceusage.serviceUsageViewer), and "
                f"serviceusage.googleapis.com must be on: gcloud services enable {' '.join(BOOTSTRAP_APIS)} "
                f"--project={env.project}",
            ]
            return Result("apis", "fail", lines), set()
        enabled |= {s["config"]["name"] for s in answer.body.get("services") or [] if s.get("state") == "ENABLED"}
        token = answer.body.get("nextPageToken")
        if not token:
            break
        page = f"{url}&pageToken={token}"
    off = [api for api in wanted if api not in enabled]
    pending = {api for api in off if api in deploy_enables}
    refused = [api for api in off if api not in pending]
    lines = [f"{len(wanted) - len(off)} of {len(wanted)} APIs enabled in {env.project}"]
    if pending:
        lines.append(f"off, enabled by this deploy before the apply: {', '.join(sorted(pending))}")
    if refused:
        lines.append(f"off in {env.project}: {', '.join(refused)}")
        lines.append(f"enable them: gcloud services enable {' '.join(refused)} --project={env.project}")
    return Result("apis", "fail" if refused else "ok", lines), pending


def required_roles(stack: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    return roles_for(set(stack.get("resource") or {}))


def required_billing_roles(stack: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    return billing_roles_for(set(stack.get("resource") or {}))


def print_roles(
    env: Environment, roles: dict[str, tuple[str, ...]], billing: dict[str, tuple[str, ...]] | None = None
) -> None:
    print(
        f"# The roles the deployer of {env.name} needs on {env.project} (derived from the resources platform-{env.name}"
    )
    print(f"# declares: infra/catalogue/deployer_roles.py, checked {ROLES_CHECKED} against {ROLES_SOURCE})")
    for role, permissions in roles.items():
        print(f"{role}\t{', '.join(permissions)}")
    print("# Grant them (MEMBER: user:<email>, group:<email> or serviceAccount:<email>):")
    for role in roles:
        print(f"gcloud projects add-iam-policy-binding {env.project} --member=MEMBER --role={role} --condition=None")
    if billing and env.monitoring.budget is not None:
        account = env.monitoring.budget.billing_account
        print(f"# On the billing account {account} (the budget; the bootstrap stack grants them to the deployer):")
        for role, permissions in billing.items():
            print(f"{role}\t{', '.join(permissions)}")
            print(f"gcloud billing accounts add-iam-policy-binding {account} --member=MEMBER --role={role}")


def _missing(roles: dict[str, tuple[str, ...]], granted: set[str]) -> dict[str, list[str]]:
    """Each role with the permissions of it that testIamPermissions did not grant, where any."""
    missing = {role: [p for p in perms if p not in granted] for role, perms in roles.items()}
    return {role: perms for role, perms in missing.items() if perms}


def check_roles(env: Environment, roles: dict[str, tuple[str, ...]], transport: Transport) -> Result:
    """testIamPermissions of every permission the roles give, with the caller's credentials."""
    wanted = sorted({p for perms in roles.values() for p in perms})
    granted: set[str] = set()
    url = f"{RESOURCE_MANAGER}/projects/{env.project}:testIamPermissions"
    for start in range(0, len(wanted), PERMISSIONS_PER_CALL):
        answer = transport.request("POST", url, {"permissions": wanted[start : start + PERMISSIONS_PER_CALL]})
        if answer.status != 200:
            return Result(
                "roles",
                "fail",
                [f"Resource Manager did not test the permissions on {env.project}: {error_line(answer)}"],
            )
        granted |= set(answer.body.get("permissions") or [])
    missing = _missing(roles, granted)
    if not missing:
        return Result("roles", "ok", [f"every permission of {len(roles)} roles on {env.project}"])
    lines = [f"missing {role} (lacks {', '.join(perms)})" for role, perms in missing.items()]
    lines.append(
        f"ask whoever grants roles on {env.project} for them (`python -m scripts.preflight {env.name} --print-roles` "
        "lists every role with the gcloud command)"
    )
    return Result("roles", "fail", lines)


def check_billing(env: Environment, roles: dict[str, tuple[str, ...]], transport: Transport) -> Result:
    """Cloud Billing's testIamPermissions on the budget's billing account, with the caller's credentials."""
    assert env.monitoring.budget is not None
    account = env.monitoring.budget.billing_account
    wanted = sorted({p for perms in roles.values() for p in perms})
    answer = transport.request(
        "POST", f"{CLOUD_BILLING}/billingAccounts/{account}:testIamPermissions", {"permissions": wanted}
    )
    if answer.status != 200:
        return Result(
            "billing", "fail", [f"Cloud Billing did not test the permissions on {account}: {error_line(answer)}"]
        )
    granted = set(answer.body.get("permissions") or [])
    missing = _missing(roles, granted)
    if not missing:
        return Result("billing", "ok", [f"every permission of {len(roles)} role(s) on billing account {account}"])
    lines = [
        f"missing {role} on billing account {account} (lacks {', '.join(perms)})" for role, perms in missing.items()
    ]
    lines.append(
        f"the bootstrap stack grants it to the deployer (its applier must administer {account}); by hand: gcloud "
        f"billing accounts add-iam-policy-binding {account} --member=MEMBER --role={next(iter(missing))}"
    )
    return Result("billing", "fail", lines)


def check_planner(env: Environment, transport: Transport) -> Result:
    """The planner holds what the gate at the apply reads as it (review 10, C5): its project roles and the
    platform's cluster reader role (container.clusters.connect: the release records and CRDs through the cluster's
    DNS endpoint), read from the project's IAM policy (the deployer may read it: projectIamAdmin)."""
    from infra.constructs.bootstrap import PLANNER_CLUSTER_ROLE_ID, planner_roles

    identities = env.delivery_identities
    member = f"serviceAccount:{identities.planner_email}"
    answer = transport.request(
        "POST", f"{RESOURCE_MANAGER}/projects/{env.project}:getIamPolicy", {"options": {"requestedPolicyVersion": 3}}
    )
    if answer.status != 200:
        return Result(
            "planner", "fail", [f"Resource Manager did not read {env.project}'s IAM policy: {error_line(answer)}"]
        )
    held = {
        str(b.get("role"))
        for b in answer.body.get("bindings") or []
        if isinstance(b, dict) and member in (b.get("members") or []) and not b.get("condition")
    }
    wanted = [
        *planner_roles(quota_consumer=env.names_its_quota_project),
        f"projects/{env.project}/roles/{PLANNER_CLUSTER_ROLE_ID}",
    ]
    missing = [role for role in wanted if role not in held]
    if not missing:
        return Result("planner", "ok", [f"{member} holds its {len(wanted)} roles (the gate's reads included)"])
    return Result(
        "planner",
        "fail",
        [
            f"{member} lacks {', '.join(missing)}: the plan jobs' calls that need them are refused (what the gate "
            "at the apply reads, where every release update of a plan is then held; the calls that name "
            f"{env.project} as their quota project)",
            f"apply the bootstrap stack of {env.name} (cdktf.out/bootstrap/stacks/bootstrap-{env.name}; "
            "docs/delivery.md, the first steps), which grants them",
        ],
    )


def check_billing_export(env: Environment, transport: Transport) -> Result:
    """The table `make cost` and cost.yml read (monitoring.billing_export) is there, readable by the caller, and the
    detailed usage cost export's (BigQuery tables.get: its schema). A warning, not a failure: the deploy does not
    need it."""
    from infra.catalogue.billing_export import EXPORT_COLUMNS

    table = str(env.monitoring.billing_export)
    project, dataset, name = table.split(".")
    answer = transport.request("GET", f"{BIGQUERY}/projects/{project}/datasets/{dataset}/tables/{name}")
    field = f"monitoring.billing_export {table}"
    if answer.status == 404:
        return Result("billing-export", "warn", [
            f"{field}: no such table ({error_line(answer)})",
            "turn on the detailed usage cost export to BigQuery for the billing account (Billing > Billing export) "
            "into that dataset: make cost reads it, from the day it is on (no backfill)",
        ])  # fmt: skip
    if answer.status != 200:
        return Result("billing-export", "warn", [
            f"{field}: not read ({error_line(answer)})",
            "make cost needs roles/bigquery.dataViewer on the dataset and roles/bigquery.jobUser in the project, for "
            "whoever runs it (cost.yml: the planner)",
        ])  # fmt: skip
    schema = (answer.body.get("schema") or {}).get("fields") or []
    fields = {f.get("name"): {g.get("name") for g in f.get("fields") or []} for f in schema}
    lacking = []
    for column, wanted in EXPORT_COLUMNS.items():
        if column not in fields:
            lacking.append(column)
        lacking += [f"{column}.{sub}" for sub in sorted(wanted - fields.get(column, wanted))]
    if lacking:
        return Result("billing-export", "warn", [
            f"{field}: not the detailed usage cost export: it lacks {', '.join(lacking)} (the standard export has "
            "no resource column and no GKE cost allocation)",
        ])  # fmt: skip
    return Result("billing-export", "ok", [f"{table}: the detailed usage cost export, readable"])


def run(
    env: Environment,
    *,
    stack: Callable[[], dict[str, Any]],
    transport: Callable[[Any], Transport],
    deploy_enables: tuple[str, ...] = (),
) -> list[Result]:
    """The checks that need credentials, in order (credentials first). `stack` gives the synthesized stack (asked for
    only when credentials exist); `transport` makes the HTTP layer from the credentials."""
    credentials, found = load_credentials()
    results = [found]
    export = ["billing-export"] if env.monitoring.billing_export else []
    remote = ("apis", "roles", "planner", *(["billing"] if env.monitoring.budget is not None else []), "quota", *export)
    if credentials is None:
        return results + [Result(name, "skip", ["not checked: no credentials"]) for name in remote]
    try:
        the_stack = stack()
        stack_asks, reserved = asks(the_stack)
        roles = required_roles(the_stack)
        billing = required_billing_roles(the_stack)
    except (UnknownQuota, UnknownResourceType) as err:
        return [*results, Result("stack", "fail", [str(err)])]
    # User credentials carry no quota project, and Service Usage and Cloud Quotas refuse such calls ("requires a
    # quota project, which is not set by default": https://cloud.google.com/docs/authentication/adc-troubleshooting/user-creds);
    # bill them to the environment's project, as `gcloud auth application-default set-quota-project` would.
    if getattr(credentials, "quota_project_id", "") is None and hasattr(credentials, "with_quota_project"):
        credentials = credentials.with_quota_project(env.project)
    http = transport(credentials)
    try:
        apis, pending = check_apis(env, needed_apis(env, stack_asks), http, deploy_enables=deploy_enables)
        results.append(apis)
        results.append(check_roles(env, roles, http))
        results.append(check_planner(env, http))
        if billing and env.monitoring.budget is not None:
            results.append(check_billing(env, billing, http))
        results.append(check_quota(env, stack_asks, reserved, http, pending=pending))
        reservations = draws(the_stack, env.project)
        if reservations:
            results.append(check_reservations(env, reservations, http))
        if env.monitoring.billing_export:
            results.append(check_billing_export(env, http))
    except CredentialsRefused as err:
        done = {r.check for r in results}
        results[0] = Result("credentials", "fail", [f"the credentials were refused ({err}); {LOGIN}"])
        results += [Result(name, "skip", ["not checked: credentials refused"]) for name in remote if name not in done]
    return results
