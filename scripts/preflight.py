"""Preflight: what an apply of one environment needs, checked with the user's credentials before anything is applied.

  python -m scripts.preflight <env> [--skip-image] [--infra-only] [--stack FILE]
  python -m scripts.preflight <env> --print-roles [--stack FILE]

Checks, in order (each line says ok, FAIL or not checked, and what to do):
  tools        terraform at the pinned version (the platform stack's apply runs it); where the environment has a
               Slurm cluster, gcluster at the pinned Cluster Toolkit commit and packer at its pinned version (not
               with --skip-image) (infra/catalogue/cluster_toolkit.py)
  credentials  Application Default Credentials exist (google-auth), and how to log in where they do not
  apis         every API the stack uses is enabled (Service Usage), and preflight's own (Cloud Quotas for TPUs)
  roles        the permissions of the roles the deployer needs for the resources the stack declares
               (infra/catalogue/deployer_roles.py), tested with Resource Manager's projects.testIamPermissions
  quota        per region, every CPU family, GPU and TPU quota the node pools draw on at their max nodes,
               against its limit (Compute Engine regions.get; TPU v6e, v5p, TPU7x: Cloud Quotas quotaInfos.get)
               (infra/catalogue/quota_metrics.py)

The stack is synthesized here (in a temporary folder) unless --stack names one (cdktf.out/stacks/platform-<env>/
cdk.tf.json after `make plan`). --print-roles prints the roles and permissions for whoever grants them, and needs no
credentials. `make deploy` runs the same checks first and applies nothing when one fails.

PLATFORM_PREFLIGHT_ANSWERS names a folder of recorded API answers (index.json: method, url, status, answer file)
that stands in for Google Cloud (the tests); PLATFORM_GCLUSTER the gcluster to run. Exit codes: 0 every check
passed; 1 a check failed (nothing was applied); 2 a bad environment file or usage.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from infra.catalogue.accelerators import accelerator_for_machine
from infra.catalogue.cluster_toolkit import CLUSTER_TOOLKIT, PACKER_VERSION, TERRAFORM_VERSION
from infra.catalogue.cpu_machines import CPU_MACHINES
from infra.catalogue.deployer_roles import CHECKED as ROLES_CHECKED
from infra.catalogue.deployer_roles import SOURCE as ROLES_SOURCE
from infra.catalogue.deployer_roles import UnknownResourceType, roles_for
from infra.catalogue.gcp_apis import BOOTSTRAP_APIS, platform_apis
from infra.catalogue.quota_metrics import QuotaMetric, UnknownQuota, cpu_metric, gpu_metric, tpu_metric
from infra.config import ConfigError, Environment
from infra.constructs.providers import CREDENTIAL_PLUGIN
from infra.load import load_named
from scripts import tools

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
SERVICE_USAGE = "https://serviceusage.googleapis.com/v1"
RESOURCE_MANAGER = "https://cloudresourcemanager.googleapis.com/v3"
COMPUTE = "https://compute.googleapis.com/compute/v1"
CLOUD_QUOTAS = "https://cloudquotas.googleapis.com/v1"
CLOUD_QUOTAS_API = "cloudquotas.googleapis.com"
# Resource Manager answers at most 100 permissions per testIamPermissions call
# (https://cloud.google.com/resource-manager/reference/rest/v3/projects/testIamPermissions).
PERMISSIONS_PER_CALL = 100
LOGIN = (
    "log in with `gcloud auth application-default login` (a person), or point GOOGLE_APPLICATION_CREDENTIALS at a "
    "credential file (CI: the Workload Identity Federation configuration of the environment's deployer)"
)


# --- the HTTP layer: one request method, answered by Google Cloud or by recorded answers ----------------------


@dataclass(frozen=True)
class Answer:
    """One HTTP answer: its status and its JSON body."""

    status: int
    body: dict[str, Any]


class Transport(Protocol):
    """What the checks call Google Cloud's REST APIs through."""

    def request(self, method: str, url: str, body: dict[str, Any] | None = None) -> Answer: ...


class CredentialsRefused(Exception):
    """The credentials were found but could not be used (expired, revoked, reauthentication needed)."""


class GoogleTransport:
    """Google Cloud's REST APIs with the Application Default Credentials (google-auth's AuthorizedSession)."""

    def __init__(self, credentials: Any) -> None:
        from google.auth.transport.requests import AuthorizedSession

        self._session = AuthorizedSession(credentials)

    def request(self, method: str, url: str, body: dict[str, Any] | None = None) -> Answer:
        from google.auth.exceptions import RefreshError, TransportError

        try:
            response = self._session.request(method, url, json=body, timeout=60)
        except RefreshError as err:
            raise CredentialsRefused(str(err)) from err
        except TransportError as err:
            return Answer(0, {"error": {"message": f"no answer from {url}: {err}"}})
        try:
            parsed = response.json()
        except ValueError:
            parsed = {"error": {"message": response.text[:300]}}
        return Answer(response.status_code, parsed if isinstance(parsed, dict) else {})


class RecordedTransport:
    """Recorded answers of Google Cloud's APIs, from a folder: index.json lists each request (method, url) with the
    status and the file of the answer, shaped as the API's own response body."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        index = json.loads((folder / "index.json").read_text())
        self._answers = {(entry["method"], entry["url"]): entry for entry in index}
        self.requests: list[tuple[str, str]] = []

    def request(self, method: str, url: str, body: dict[str, Any] | None = None) -> Answer:
        self.requests.append((method, url))
        entry = self._answers.get((method, url))
        if entry is None:
            raise KeyError(f"{self.folder}/index.json: no recorded answer for {method} {url}")
        return Answer(entry["status"], json.loads((self.folder / entry["answer"]).read_text()))


def _error(answer: Answer) -> str:
    """A Google API error as one line: status, message, and the reason where the API gives one."""
    error = answer.body.get("error") or {}
    reasons = [str(d["reason"]) for d in error.get("details") or [] if isinstance(d, dict) and d.get("reason")]
    status = error.get("status") or answer.status
    reason = f" ({', '.join(reasons)})" if reasons else ""
    return f"{status}{reason}: {error.get('message', 'no message')}"


def _disabled(answer: Answer) -> bool:
    return "SERVICE_DISABLED" in json.dumps(answer.body)


# --- results -------------------------------------------------------------------------------------------------


@dataclass
class Result:
    """One check's verdict and what it says (each line a finding, or what was found)."""

    check: str
    status: Literal["ok", "fail", "skip"]
    lines: list[str] = field(default_factory=list)


# --- tools ---------------------------------------------------------------------------------------------------


def gcluster_command() -> list[str]:
    return shlex.split(os.environ.get("PLATFORM_GCLUSTER") or "gcluster")


def check_tools(env: Environment, *, skip_image: bool) -> Result:
    """The pinned terraform; gcluster and packer where the environment has a Slurm cluster; the providers'
    credential plugin."""
    found = {"terraform": (tools.terraform_found(), TERRAFORM_VERSION)}
    if env.slurm is not None:
        found["gcluster"] = (tools.gcluster_found(command=gcluster_command()), CLUSTER_TOOLKIT.commit)
        if not skip_image:
            found["packer"] = (tools.packer_found(), PACKER_VERSION)
    lines, failed = [], False
    for tool, (version, pinned) in found.items():
        accepted = {pinned, CLUSTER_TOOLKIT.tag} if tool == "gcluster" else {pinned}
        if version in accepted:
            lines.append(f"{tool} {version}")
            continue
        failed = True
        shown = f"Cluster Toolkit {CLUSTER_TOOLKIT.tag} ({pinned})" if tool == "gcluster" else f"{tool} {pinned}"
        install = (
            f"https://releases.hashicorp.com/terraform/{pinned}/"
            if tool == "terraform"
            else "python -m scripts.tools install"
        )
        lines.append(
            f"{tool} {version or '(none on PATH)'}: the platform pins {shown} (infra/catalogue/cluster_toolkit.py); "
            f"install it: {install}"
        )
    plugin = CREDENTIAL_PLUGIN["command"]
    found = shutil.which(plugin)
    # GKE's "Install kubectl and configure cluster access" checks the plugin with `gke-gcloud-auth-plugin --version`.
    answer = subprocess.run([found, "--version"], capture_output=True, text=True, check=False) if found else None
    if answer is not None and answer.returncode == 0:
        said = (answer.stdout or answer.stderr).strip().splitlines()
        lines.append(f"{plugin} on PATH{f' ({said[0]})' if said else ''}")
    else:
        failed = True
        why = "none on PATH" if answer is None else f"{found} --version exits {answer.returncode}"
        lines.append(
            f"{plugin} ({why}): the stack's kubernetes and helm providers run it for every Kubernetes resource "
            "(infra/constructs/providers.py), so the apply would stop at the first one, after the cluster and its "
            f"pools are made; install it: gcloud components install {plugin} (apt: google-cloud-cli-{plugin})"
        )
    return Result("tools", "fail" if failed else "ok", lines)


# --- credentials ---------------------------------------------------------------------------------------------


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


# --- the stack: resource types and what its node pools ask for -----------------------------------------------


@dataclass(frozen=True)
class Ask:
    """What one node pool asks of one quota at its max nodes."""

    region: str
    metric: QuotaMetric
    amount: int
    pool: str
    # flex-start and queued provisioning: standard quota is used where the preemptible one is short
    fallback: QuotaMetric | None = None


def _region(location: str) -> str:
    parts = location.split("-")
    return "-".join(parts[:2]) if len(parts) > 2 else location


def _max_nodes(pool: dict[str, Any], zones: int) -> int:
    autoscaling = pool.get("autoscaling") or {}
    if "total_max_node_count" in autoscaling:
        return int(autoscaling["total_max_node_count"])
    if "max_node_count" in autoscaling:
        return int(autoscaling["max_node_count"]) * zones
    return int(pool.get("node_count") or pool.get("initial_node_count") or 0) * zones


def _vcpus(machine_type: str) -> int:
    if machine_type in CPU_MACHINES:
        return CPU_MACHINES[machine_type].vcpus
    found = accelerator_for_machine(machine_type)
    if found is None:
        raise UnknownQuota(f"machine type {machine_type} (its vCPUs: infra/catalogue/cpu_machines.py)")
    return found[1].vcpus


def asks(stack: dict[str, Any]) -> tuple[list[Ask], list[str]]:
    """What every node pool of the stack asks of each quota at its max nodes, and the pools that ask nothing of
    quota (a specific reservation holds their machines)."""
    resources = stack.get("resource") or {}
    clusters = list((resources.get("google_container_cluster") or {}).values())
    cluster_zones = len((clusters[0].get("node_locations") or []) if clusters else []) or 1
    out: list[Ask] = []
    reserved: list[str] = []
    for pool in (resources.get("google_container_node_pool") or {}).values():
        name = pool.get("name", "?")
        config = pool.get("node_config") or {}
        machine = config["machine_type"]
        zones = len(pool.get("node_locations") or []) or cluster_zones
        nodes = _max_nodes(pool, zones)
        region = _region(pool.get("location") or (pool.get("node_locations") or ["?"])[0])
        affinity = (config.get("reservation_affinity") or {}).get("consume_reservation_type")
        if affinity == "SPECIFIC_RESERVATION":
            reservation = ", ".join((config.get("reservation_affinity") or {}).get("values") or [])
            reserved.append(f"{name}: {nodes} x {machine} from reservation {reservation} (no quota drawn)")
            continue
        flex = bool((pool.get("queued_provisioning") or {}).get("enabled") or config.get("flex_start"))
        preemptible = bool(config.get("spot") or config.get("preemptible") or flex)

        draws: list[tuple[QuotaMetric, int, QuotaMetric | None]] = []
        cpu = cpu_metric(machine, preemptible=preemptible)
        if cpu is not None:
            draws.append((cpu, _vcpus(machine) * nodes, cpu_metric(machine, preemptible=False)))
        for accelerator in config.get("guest_accelerator") or []:
            kind = accelerator["type"]
            standard = gpu_metric(kind, preemptible=False)
            draws.append((gpu_metric(kind, preemptible=preemptible), int(accelerator["count"]) * nodes, standard))
        found = accelerator_for_machine(machine)
        if found is not None and found[0].kind == "tpu":
            generation, shape = found
            standard = tpu_metric(generation.name, preemptible=False)
            draws.append((tpu_metric(generation.name, preemptible=preemptible), shape.chips * nodes, standard))
        out += [
            Ask(region, metric, amount, name, standard if flex else None)
            for metric, amount, standard in draws
            if amount
        ]
    return out, reserved


def synthesized(env: Environment, *, infra_only: bool) -> dict[str, Any]:
    """The environment's stack, synthesized in a temporary folder (what `cdktf deploy` will apply)."""
    from infra.app import synth

    with tempfile.TemporaryDirectory() as tmp:
        synth({env.name: env}, Path(tmp), omit_unbuilt=infra_only)
        stack: dict[str, Any] = json.loads((Path(tmp) / "stacks" / f"platform-{env.name}" / "cdk.tf.json").read_text())
    return stack


# --- APIs ----------------------------------------------------------------------------------------------------


def needed_apis(env: Environment, stack_asks: Iterable[Ask]) -> tuple[str, ...]:
    own = {CLOUD_QUOTAS_API} if any(a.metric.api == "cloudquotas" for a in stack_asks) else set()
    return tuple(
        sorted(
            {
                *BOOTSTRAP_APIS,
                *platform_apis(vertex=env.vertex is not None, inference_gateway=env.inference_gateway),
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
                f"Service Usage did not list the enabled APIs of {env.project}: {_error(answer)}",
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


# --- roles ---------------------------------------------------------------------------------------------------


def required_roles(stack: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    return roles_for(set(stack.get("resource") or {}))


def print_roles(env: Environment, roles: dict[str, tuple[str, ...]]) -> None:
    print(
        f"# The roles the deployer of {env.name} needs on {env.project} (derived from the resources platform-{env.name}"
    )
    print(f"# declares: infra/catalogue/deployer_roles.py, checked {ROLES_CHECKED} against {ROLES_SOURCE})")
    for role, permissions in roles.items():
        print(f"{role}\t{', '.join(permissions)}")
    print("# Grant them (MEMBER: user:<email>, group:<email> or serviceAccount:<email>):")
    for role in roles:
        print(f"gcloud projects add-iam-policy-binding {env.project} --member=MEMBER --role={role} --condition=None")


def check_roles(env: Environment, roles: dict[str, tuple[str, ...]], transport: Transport) -> Result:
    """testIamPermissions of every permission the roles give, with the caller's credentials."""
    wanted = sorted({p for perms in roles.values() for p in perms})
    granted: set[str] = set()
    url = f"{RESOURCE_MANAGER}/projects/{env.project}:testIamPermissions"
    for start in range(0, len(wanted), PERMISSIONS_PER_CALL):
        answer = transport.request("POST", url, {"permissions": wanted[start : start + PERMISSIONS_PER_CALL]})
        if answer.status != 200:
            return Result(
                "roles", "fail", [f"Resource Manager did not test the permissions on {env.project}: {_error(answer)}"]
            )
        granted |= set(answer.body.get("permissions") or [])
    missing = {role: [p for p in perms if p not in granted] for role, perms in roles.items()}
    missing = {role: perms for role, perms in missing.items() if perms}
    if not missing:
        return Result("roles", "ok", [f"every permission of {len(roles)} roles on {env.project}"])
    lines = [f"missing {role} (lacks {', '.join(perms)})" for role, perms in missing.items()]
    lines.append(
        f"ask whoever grants roles on {env.project} for them (`python -m scripts.preflight {env.name} --print-roles` "
        "lists every role with the gcloud command)"
    )
    return Result("roles", "fail", lines)


# --- quota ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Limit:
    """A quota's limit in one region (None: unlimited) and its usage where the API reports it."""

    limit: float | None
    usage: float | None
    source: str


class QuotaReader:
    """Reads each region's Compute Engine quotas and each Cloud Quotas quota id once."""

    def __init__(self, project: str, transport: Transport) -> None:
        self.project = project
        self.transport = transport
        self._regions: dict[str, dict[str, tuple[float, float]] | str] = {}
        self._infos: dict[str, dict[str, Any] | str] = {}

    def limit(self, region: str, metric: QuotaMetric) -> Limit | str:
        """The limit, or why it could not be read."""
        if metric.api == "compute":
            quotas = self._region(region)
            if isinstance(quotas, str):
                return quotas
            limit, usage = quotas.get(metric.name, (0.0, 0.0))
            return Limit(limit, usage, f"regions.get {region}")
        info = self._info(metric.name)
        if isinstance(info, str):
            return info
        wanted = {"region": region, **metric.dimensions}
        best: tuple[int, dict[str, Any]] | None = None
        for entry in info.get("dimensionsInfos") or []:
            dims = entry.get("dimensions") or {}
            if all(wanted.get(k) == v for k, v in dims.items()) and (best is None or len(dims) > best[0]):
                best = (len(dims), entry)
        if best is None:
            return Limit(0.0, None, f"Cloud Quotas {metric.name} (no value for {region})")
        value = int((best[1].get("details") or {}).get("value", 0))
        return Limit(None if value == -1 else float(value), None, f"Cloud Quotas {metric.key}")

    def _region(self, region: str) -> dict[str, tuple[float, float]] | str:
        if region not in self._regions:
            answer = self.transport.request("GET", f"{COMPUTE}/projects/{self.project}/regions/{region}")
            if answer.status != 200:
                self._regions[region] = f"Compute Engine did not answer regions.get {region}: {_error(answer)}"
            else:
                self._regions[region] = {
                    q["metric"]: (float(q.get("limit", 0)), float(q.get("usage", 0)))
                    for q in answer.body.get("quotas") or []
                }
        return self._regions[region]

    def _info(self, quota_id: str) -> dict[str, Any] | str:
        if quota_id not in self._infos:
            url = (
                f"{CLOUD_QUOTAS}/projects/{self.project}/locations/global/services/compute.googleapis.com/"
                f"quotaInfos/{quota_id}"
            )
            answer = self.transport.request("GET", url)
            if answer.status == 404:
                self._infos[quota_id] = (
                    f"Cloud Quotas knows no quota {quota_id} of compute.googleapis.com "
                    "(infra/catalogue/quota_metrics.py names it; check the Quotas page of the console)"
                )
            elif answer.status != 200:
                self._infos[quota_id] = f"Cloud Quotas did not answer {quota_id}: {_error(answer)}"
            else:
                self._infos[quota_id] = answer.body
        return self._infos[quota_id]


def _fmt(value: float | None) -> str:
    return "unlimited" if value is None else f"{value:g}"


def check_quota(
    env: Environment,
    stack_asks: list[Ask],
    reserved: list[str],
    transport: Transport,
    *,
    pending: AbstractSet[str] = frozenset(),
) -> Result:
    """Each region's quota against what the pools ask for at their max nodes (the limit: the environment must fit
    it whole; what else runs in the project is in `usage`, shown)."""
    reader = QuotaReader(env.project, transport)
    totals: dict[tuple[str, str], list[Ask]] = {}
    for ask in stack_asks:
        totals.setdefault((ask.region, ask.metric.key), []).append(ask)
    lines: list[str] = []
    failed = unread = False
    for (region, _), group in sorted(totals.items()):
        metric = group[0].metric
        amount = sum(a.amount for a in group)
        pools = ", ".join(sorted({a.pool for a in group}))
        found = reader.limit(region, metric)
        if isinstance(found, str):
            service = "compute.googleapis.com" if metric.api == "compute" else CLOUD_QUOTAS_API
            if service in pending:
                lines.append(f"{region} {metric.key}: not checked: {service} is off until this deploy enables it")
                continue
            unread = True
            lines.append(f"{region} {metric.key}: not read: {found}")
            continue
        used = f", in use now {_fmt(found.usage)}" if found.usage is not None else ""
        if found.limit is None or amount <= found.limit:
            lines.append(f"{region} {metric.key}: {amount} {metric.unit} at most, limit {_fmt(found.limit)}{used}")
            continue
        fallback = group[0].fallback
        if fallback is not None and all(a.fallback == fallback for a in group):
            standard = reader.limit(region, fallback)
            standard_asked = sum(a.amount for a in stack_asks if a.region == region and a.metric.key == fallback.key)
            if isinstance(standard, Limit) and (standard.limit is None or standard.limit >= amount + standard_asked):
                lines.append(
                    f"{region} {metric.key}: {amount} {metric.unit} at most, over its limit {_fmt(found.limit)}; "
                    f"flex-start falls back to {fallback.key} (limit {_fmt(standard.limit)})"
                )
                continue
        failed = True
        lines.append(
            f"short: {region} {metric.key}: pools {pools} ask for up to {amount} {metric.unit}, the limit is "
            f"{_fmt(found.limit)}{used} ({found.source}); request more on the Quotas page "
            f"(https://console.cloud.google.com/iam-admin/quotas?project={env.project}) or lower the pools' max nodes"
        )
    lines += [f"reserved: {line}" for line in reserved]
    if failed:
        return Result("quota", "fail", lines)
    if unread:
        return Result("quota", "fail", lines)
    return Result("quota", "ok", lines)


# --- the run -------------------------------------------------------------------------------------------------


def run(
    env: Environment,
    *,
    stack: Callable[[], dict[str, Any]],
    transport: Callable[[Any], Transport],
    skip_image: bool = False,
    deploy_enables: tuple[str, ...] = (),
) -> list[Result]:
    """Every check, in order. `stack` gives the synthesized stack (asked for only when credentials exist);
    `transport` makes the HTTP layer from the credentials."""
    results = [check_tools(env, skip_image=skip_image)]
    credentials, found = load_credentials()
    results.append(found)
    remote = ("apis", "roles", "quota")
    if credentials is None:
        return results + [Result(name, "skip", ["not checked: no credentials"]) for name in remote]
    try:
        the_stack = stack()
        stack_asks, reserved = asks(the_stack)
        roles = required_roles(the_stack)
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
        results.append(check_quota(env, stack_asks, reserved, http, pending=pending))
    except CredentialsRefused as err:
        done = {r.check for r in results}
        results[1] = Result("credentials", "fail", [f"the credentials were refused ({err}); {LOGIN}"])
        results += [Result(name, "skip", ["not checked: credentials refused"]) for name in remote if name not in done]
    return results


def report(env: Environment, results: list[Result]) -> int:
    """Print every result (failures to stderr as well); 1 when one failed."""
    failed = [r for r in results if r.status == "fail"]
    for result in results:
        mark = {"ok": "ok  ", "fail": "FAIL", "skip": "--  "}[result.status]
        out = sys.stderr if result.status == "fail" else sys.stdout
        print(f"preflight {env.name}: {mark} {result.check}", file=out)
        for line in result.lines:
            print(f"    {line}", file=out)
    if failed:
        print(
            f"error: preflight {env.name}: {', '.join(r.check for r in failed)} failed; nothing was applied",
            file=sys.stderr,
        )
        return 1
    print(f"preflight {env.name}: every check passed")
    return 0


def default_transport(credentials: Any) -> Transport:
    recorded = os.environ.get("PLATFORM_PREFLIGHT_ANSWERS")
    return RecordedTransport(Path(recorded)) if recorded else GoogleTransport(credentials)


def for_deploy(env: Environment, *, skip_image: bool, stack: Callable[[], dict[str, Any]]) -> int:
    """What `make deploy` runs first: every check on the stack it is about to apply (`stack`: the deploy's own
    synth, asked for only when credentials exist); 1 when one failed."""
    results = run(
        env,
        stack=stack,
        transport=default_transport,
        skip_image=skip_image,
        deploy_enables=platform_apis(vertex=env.vertex is not None, inference_gateway=env.inference_gateway),
    )
    return report(env, results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.preflight",
        description=__doc__.split("\n\n")[0],
        epilog="Exit codes: 0 every check passed; 1 a check failed; 2 a bad environment file or usage.",
    )
    parser.add_argument("env", help="the environment (infra/environments/<env>.yaml)")
    parser.add_argument(
        "--skip-image", action="store_true", help="the deploy leaves out the Slurm image build: no packer"
    )
    parser.add_argument("--infra-only", action="store_true", help="check the stack `make deploy-infra` applies")
    parser.add_argument("--stack", type=Path, help="a synthesized cdk.tf.json to check instead of synthesizing")
    parser.add_argument("--print-roles", action="store_true", help="print the roles the deployer needs; no credentials")
    args = parser.parse_args(argv)
    try:
        env = load_named(args.env)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2

    def stack() -> dict[str, Any]:
        if args.stack is not None:
            loaded: dict[str, Any] = json.loads(args.stack.read_text())
            return loaded
        return synthesized(env, infra_only=args.infra_only)

    if args.print_roles:
        try:
            roles = required_roles(stack())
        except UnknownResourceType as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        print_roles(env, roles)
        return 0
    return report(env, run(env, stack=stack, transport=default_transport, skip_image=args.skip_image))


if __name__ == "__main__":
    sys.exit(main())
