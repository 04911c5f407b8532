"""`make preflight` against recorded API answers (tests/fixtures/preflight/granted: every API on, every permission
held, quota for every pool), each failure made by changing one answer in a copy: missing credentials, an API off, a
role missing, a quota short, a wrong Terraform; each a clear message and exit 1, and, through `make deploy`, nothing
applied. The answers are held to the APIs' own shapes (the client libraries' types where installed)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from google.cloud import compute_v1
from google.iam.v1 import iam_policy_pb2
from google.protobuf import json_format

from infra.catalogue.cluster_toolkit import CLUSTER_TOOLKIT, PACKER_VERSION, TERRAFORM_VERSION
from infra.catalogue.deployer_roles import RESOURCE_ROLES, roles_for
from infra.catalogue.gcp_apis import platform_apis
from infra.catalogue.quota_metrics import QuotaMetric
from infra.cdk.layout import read_stack, stack_file
from infra.config import Environment
from scripts import preflight
from tests.helpers import REPO

GRANTED = REPO / "tests" / "fixtures" / "preflight" / "granted"
ADC = {
    "type": "authorized_user",
    "client_id": "test.apps.googleusercontent.com",
    "client_secret": "s",
    "refresh_token": "r",
}


def _index() -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = json.loads((GRANTED / "index.json").read_text())
    return entries


def _answers_of(kind: str) -> list[Path]:
    return [GRANTED / e["answer"] for e in _index() if kind in e["url"]]


# --- the recorded answers are the APIs' shapes -----------------------------------------------------------------


def test_recorded_region_answers_parse_as_compute_engines_region_type() -> None:
    answers = _answers_of("/regions/")
    assert answers
    for path in answers:
        # Strict: a field the Compute Engine API does not have fails the parse.
        region = compute_v1.Region.from_json(path.read_text(), ignore_unknown_fields=False)
        assert region.quotas and all(q.metric for q in region.quotas), path


def test_recorded_reservation_answers_parse_as_compute_engines_reservation_type() -> None:
    answers = _answers_of("/reservations/")
    assert answers
    for path in answers:
        reservation = compute_v1.Reservation.from_json(path.read_text(), ignore_unknown_fields=False)
        assert reservation.specific_reservation.count > 0, path


def test_recorded_permission_answers_parse_as_test_iam_permissions_responses() -> None:
    answers = _answers_of(":testIamPermissions")
    assert answers
    for path in answers:
        message = json_format.Parse(path.read_text(), iam_policy_pb2.TestIamPermissionsResponse())
        assert list(message.permissions), path


# Service Usage v1 (https://cloud.google.com/service-usage/docs/reference/rest/v1/services/list and
# .../rest/v1/services#Service) and Cloud Quotas v1
# (https://cloud.google.com/docs/quotas/reference/rest/v1/projects.locations.services.quotaInfos#QuotaInfo):
# no client library of theirs is installed, so their fields are written out from the REST references.
LIST_SERVICES = {"services", "nextPageToken"}
SERVICE = {"name", "parent", "config", "state"}
SERVICE_CONFIG = {"name", "title", "apis", "documentation", "quota", "authentication", "usage", "endpoints",
                  "monitoredResources", "monitoring"}  # fmt: skip
SERVICE_STATES = {"STATE_UNSPECIFIED", "DISABLED", "ENABLED"}
QUOTA_INFO = {"name", "quotaId", "metric", "service", "isPrecise", "refreshInterval", "containerType", "dimensions",
              "metricDisplayName", "quotaDisplayName", "metricUnit", "quotaIncreaseEligibility", "isFixed",
              "dimensionsInfos", "isConcurrent", "serviceRequestQuotaUri"}  # fmt: skip
DIMENSIONS_INFO = {"dimensions", "details", "applicableLocations"}


def test_recorded_service_usage_and_cloud_quotas_answers_have_only_their_apis_fields() -> None:
    for path in _answers_of("serviceusage.googleapis.com"):
        body = json.loads(path.read_text())
        assert set(body) <= LIST_SERVICES, path
        for service in body["services"]:
            assert set(service) <= SERVICE and set(service["config"]) <= SERVICE_CONFIG, path
            assert service["state"] in SERVICE_STATES and service["name"].endswith("/" + service["config"]["name"])
    infos = _answers_of("cloudquotas.googleapis.com")
    assert infos
    for path in infos:
        body = json.loads(path.read_text())
        assert set(body) <= QUOTA_INFO and body["service"] == "compute.googleapis.com", path
        for entry in body["dimensionsInfos"]:
            assert set(entry) <= DIMENSIONS_INFO and isinstance(entry["details"]["value"], str), path  # int64: a string


# --- what the stack asks for -----------------------------------------------------------------------------------


def test_every_resource_type_of_every_stack_has_its_role(stacks: dict[str, dict[str, Any]]) -> None:
    for name, stack in stacks.items():
        roles = roles_for(set(stack["resource"]))
        assert "roles/container.admin" in roles and "roles/iam.serviceAccountUser" in roles, name
    # And a stack that declares a type the table does not know is refused by name.
    with pytest.raises(KeyError, match="google_sql_database_instance: no role known for it; add it to"):
        roles_for({"google_sql_database_instance"})
    assert all(need.permissions for needs in RESOURCE_ROLES.values() for need in needs)


def test_every_pool_draws_on_a_known_quota_at_its_max_nodes(stacks: dict[str, dict[str, Any]]) -> None:
    dev, dev_reserved = preflight.asks(stacks["dev"])
    by_pool = {(a.pool, a.metric.key): a for a in dev}
    # The system pool at its autoscaler's total max (5 x e2-standard-8), on the CPUS quota E2 draws on.
    assert by_pool["system", "CPUS"].amount == 5 * 8
    # Queued provisioning (flex-start): the preemptible GPU quota, falling back to the standard one.
    gpu = by_pool["a3mega", "PREEMPTIBLE_NVIDIA_H100_MEGA_GPUS"]
    assert gpu.amount == 16 and gpu.fallback == QuotaMetric("NVIDIA_H100_MEGA_GPUS", "GPUs")
    assert not any(a.pool == "a3mega" and "CPUS" in a.metric.key for a in dev), "A3 draws on GPU quota only"
    # TPU v6e on-demand: Cloud Quotas' TPU family quota; v5e: Compute Engine's regional metric.
    assert by_pool["train", "TPUS-PER-TPU-FAMILY-per-project-region,tpu_family=CT6E"].amount == 16
    assert by_pool["sax-a", "PREEMPTIBLE_TPU_LITE_PODSLICE_V5"].amount == 32
    assert dev_reserved == []
    # The vLLM slice's three capacity tiers hold its 3 hosts once: spot and flex-start share one ask of the
    # preemptible quota (no fallback: the spot tier has none), on-demand asks the standard one.
    spot = by_pool["vllm, vllm-flex-start", "PREEMPTIBLE-TPU-V6E-per-project-region"]
    assert spot.amount == 24 and spot.fallback is None
    assert by_pool["vllm-on-demand", "TPUS-PER-TPU-FAMILY-per-project-region,tpu_family=CT6E"].amount == 24
    # Every pool of every environment (a new one from `make new-env` included) draws on a quota the table knows.
    for name, stack in stacks.items():
        found, reserved = preflight.asks(stack)
        pools = {p["name"] for p in stack["resource"]["google_container_node_pool"].values()}
        asking = {pool for a in found for pool in a.pool.split(", ")}
        assert asking | {line.split(":")[0] for line in reserved} == pools, name
    prod, prod_reserved = preflight.asks(stacks["prod"])
    assert {line.split(":")[0] for line in prod_reserved} == {"a3mega", "train"}, "a reservation draws no quota"
    assert not any(a.pool in {"a3mega", "train"} for a in prod)


# --- the checks, through the command line, against recorded answers ----------------------------------------------


def _tools(folder: Path, terraform: str = TERRAFORM_VERSION) -> Path:
    """terraform, packer and gcluster answering `version` as the real ones do."""
    folder.mkdir(exist_ok=True)
    answers = {
        "terraform": f"Terraform v{terraform}\non linux_amd64",
        "packer": f"Packer v{PACKER_VERSION}",
        "gcluster": f"Built from: main, commit: {CLUSTER_TOOLKIT.commit}",
    }
    answers["gke-gcloud-auth-plugin"] = "Kubernetes v1.30.0+stand-in"
    for tool, text in answers.items():
        (folder / tool).write_text(f"#!/bin/sh\ncat <<'EOF'\n{text}\nEOF\n")
        (folder / tool).chmod(0o755)
    return folder


@pytest.fixture
def cloud(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the granted answers the test may change, credentials a login would leave, the pinned tools."""
    answers = tmp_path / "answers"
    shutil.copytree(GRANTED, answers)
    (tmp_path / "adc.json").write_text(json.dumps(ADC))
    monkeypatch.setenv("PATH", f"{_tools(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("PLATFORM_GCLUSTER", raising=False)
    monkeypatch.setenv("PLATFORM_PREFLIGHT_ANSWERS", str(answers))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "adc.json"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("NO_GCE_CHECK", "True")  # google-auth: no metadata server to ask
    return answers


def _edit(answers: Path, name: str, change: Any) -> None:
    path = answers / name
    body = json.loads(path.read_text())
    change(body)
    path.write_text(json.dumps(body))


def _preflight(synth_dir: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    stack = stack_file(synth_dir, "platform-dev")
    code = preflight.main(["dev", "--stack", str(stack), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_every_check_passes_against_the_granted_answers(
    cloud: Path, synth_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _preflight(synth_dir, capsys)
    assert code == 0, err
    for check in ("tools", "credentials", "apis", "roles", "planner", "billing", "quota", "billing-export"):
        assert f"preflight dev: ok   {check}" in out
    assert "us-east5 PREEMPTIBLE_NVIDIA_H100_MEGA_GPUS: 16 GPUs at most, limit 16, in use now 0" in out
    # The training slice's 16 chips and the vLLM servers' 24 should every one land on their on-demand tier.
    assert "us-east5 TPUS-PER-TPU-FAMILY-per-project-region,tpu_family=CT6E: 40 TPU chips at most, limit 64" in out


def test_json_says_what_the_lines_say_with_the_same_exit_code(
    cloud: Path, synth_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = _preflight(synth_dir, capsys, "--json")
    report = json.loads(out)
    assert code == 0 and report["passed"] is True and report["failed"] == []
    assert [c["check"] for c in report["checks"]] == [
        "tools",
        "credentials",
        "apis",
        "roles",
        "planner",
        "billing",
        "quota",
        "billing-export",
    ]
    quota = next(c for c in report["checks"] if c["check"] == "quota")
    assert "us-east5 PREEMPTIBLE_NVIDIA_H100_MEGA_GPUS: 16 GPUs at most, limit 16, in use now 0" in quota["lines"]
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS")
    code, out, _ = _preflight(synth_dir, capsys, "--json")
    report = json.loads(out)
    assert code == 1 and report["passed"] is False and report["failed"] == ["credentials"]
    assert {c["check"]: c["status"] for c in report["checks"]}["quota"] == "skip"


def test_missing_credentials_say_how_to_log_in_and_nothing_is_asked(
    cloud: Path, synth_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS")
    code, out, err = _preflight(synth_dir, capsys)
    assert code == 1
    assert "FAIL credentials" in err and "no Application Default Credentials" in err
    assert "gcloud auth application-default login" in err
    assert "preflight dev: --   quota\n    not checked: no credentials" in out
    assert "error: preflight dev: credentials failed; nothing was applied" in err


def test_an_api_off_is_named_with_the_command_that_enables_it(
    cloud: Path, synth_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def off(body: dict[str, Any]) -> None:
        body["services"] = [s for s in body["services"] if s["config"]["name"] != "container.googleapis.com"]

    _edit(cloud, "services-dev.json", off)
    code, _, err = _preflight(synth_dir, capsys)
    assert code == 1
    assert "FAIL apis\n" in err and "\n    off in acme-ml-platform-dev: container.googleapis.com\n" in err
    assert "enable them: gcloud services enable container.googleapis.com --project=acme-ml-platform-dev" in err


def test_before_a_deploy_an_api_the_deploy_enables_is_no_failure_and_its_quota_waits(
    cloud: Path, envs: dict[str, Environment], synth_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A fresh project: Compute Engine off, so regions.get answers SERVICE_DISABLED (Google's error shape).
    def off(body: dict[str, Any]) -> None:
        body["services"] = [s for s in body["services"] if s["config"]["name"] != "compute.googleapis.com"]

    _edit(cloud, "services-dev.json", off)
    index = json.loads((cloud / "index.json").read_text())
    for entry in index:
        if entry["url"].endswith("/regions/us-east5") and "acme-ml-platform-dev" in entry["url"]:
            entry["status"], entry["answer"] = 403, "disabled.json"
    (cloud / "index.json").write_text(json.dumps(index))
    disabled = {
        "error": {
            "code": 403,
            "message": "Compute Engine API has not been used in project 100000000001 before or it is disabled.",
            "status": "PERMISSION_DENIED",
            "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "SERVICE_DISABLED",
                         "domain": "googleapis.com", "metadata": {"service": "compute.googleapis.com"}}],
        }
    }  # fmt: skip
    (cloud / "disabled.json").write_text(json.dumps(disabled))
    stack = read_stack(synth_dir, "platform-dev")
    dev = envs["dev"]
    enabled_by_deploy = platform_apis(vertex=dev.vertex is not None, inference_gateway=dev.inference_gateway)
    results = preflight.run(
        dev, stack=lambda: stack, transport=preflight.default_transport, deploy_enables=enabled_by_deploy
    )
    assert preflight.report(dev, results) == 0
    out = capsys.readouterr().out
    assert "off, enabled by this deploy before the apply: compute.googleapis.com" in out
    assert "us-east5 CPUS: not checked: compute.googleapis.com is off until this deploy enables it" in out
    # Standing alone, the same answers fail: the API is off, and its quota could not be read.
    standalone = preflight.run(dev, stack=lambda: stack, transport=preflight.default_transport)
    assert preflight.report(dev, standalone) == 1
    assert "not read: Compute Engine did not answer regions.get us-east5: PERMISSION_DENIED (SERVICE_DISABLED)" in (
        capsys.readouterr().err
    )


def test_a_missing_role_is_named_with_the_permissions_it_lacks(
    cloud: Path, synth_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def revoke(body: dict[str, Any]) -> None:
        revoked = {"container.clusters.create", "container.clusters.delete"}
        body["permissions"] = [p for p in body["permissions"] if p not in revoked]

    _edit(cloud, "permissions-dev.json", revoke)
    code, _, err = _preflight(synth_dir, capsys)
    assert code == 1
    assert (
        "FAIL roles\n    missing roles/container.admin (lacks container.clusters.create, container.clusters.delete)\n"
        in err
    )
    assert "python -m scripts.preflight dev --print-roles" in err


def test_a_planner_without_the_cluster_reader_role_is_named_with_what_it_lacks_and_the_fix(
    cloud: Path, synth_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review 10 C5: the prod plan job reads Helm's records and the CRDs through the cluster's DNS endpoint as the
    planner, and nothing checked it could; a planner without the role had every release update held."""
    role = "projects/acme-ml-platform-dev/roles/platformPlannerClusterReader"
    _edit(cloud, "iam-policy-dev.json", lambda b: b.update(bindings=[x for x in b["bindings"] if x["role"] != role]))
    code, _, err = _preflight(synth_dir, capsys)
    assert code == 1
    assert (
        "FAIL planner\n    serviceAccount:platform-planner@acme-ml-platform-dev.iam.gserviceaccount.com lacks "
        f"{role}: the plan jobs' calls that need them are refused (what the gate at the apply reads"
    ) in err
    assert "apply the bootstrap stack of dev" in err


def test_a_planner_without_the_quota_role_where_the_budgets_provider_names_the_project_is_named(
    cloud: Path, synth_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """dev's planner is its own project's, but dev has a budget: the platform stack's billing provider names dev's
    project as its calls' quota project, which needs serviceusage.services.use there (roles/viewer lacks it), so a
    real plan's refresh of the budget is refused without serviceUsageConsumer."""
    consumer = "roles/serviceusage.serviceUsageConsumer"
    _edit(
        cloud, "iam-policy-dev.json", lambda b: b.update(bindings=[x for x in b["bindings"] if x["role"] != consumer])
    )
    code, _, err = _preflight(synth_dir, capsys)
    assert code == 1
    assert f"lacks {consumer}: " in err and "the calls that name acme-ml-platform-dev as their quota project" in err


def test_prods_planner_is_looked_up_in_its_seed_project_with_its_quota_role(
    cloud: Path, synth_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """prod's planner is planner-prod of its seed project (delivery.seed); it names prod's project as its calls'
    quota project, so it also holds serviceUsageConsumer there. Looked up as platform-planner of prod's own project,
    a correctly bootstrapped prod would read as a planner with no role at all."""
    _, out, err = _preflight_prod(stack_file(synth_dir, "platform-prod"), capsys)
    assert (
        "ok   planner\n    serviceAccount:planner-prod@acme-ml-platform-seed.iam.gserviceaccount.com holds its 5 roles"
    ) in out, out + err

    def revoke(body: dict[str, Any]) -> None:
        body["bindings"] = [b for b in body["bindings"] if b["role"] != "roles/serviceusage.serviceUsageConsumer"]

    _edit(cloud, "iam-policy-prod.json", revoke)
    _, out, err = _preflight_prod(stack_file(synth_dir, "platform-prod"), capsys)
    assert (
        "FAIL planner\n    serviceAccount:planner-prod@acme-ml-platform-seed.iam.gserviceaccount.com lacks "
        "roles/serviceusage.serviceUsageConsumer"
    ) in err


def test_recorded_iam_policies_parse_as_google_iam_policies() -> None:
    from google.iam.v1 import policy_pb2

    answers = _answers_of(":getIamPolicy")
    assert len(answers) == 2
    for path in answers:
        policy = json_format.Parse(path.read_text(), policy_pb2.Policy())
        assert policy.bindings, path


def test_a_budget_the_deployer_cannot_manage_is_named_with_the_billing_account_and_the_grant(
    cloud: Path, synth_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The budget lives on the billing account: the project's roles do not reach it, so preflight asks Cloud Billing."""

    def revoke(body: dict[str, Any]) -> None:
        body["permissions"] = [p for p in body["permissions"] if p != "billing.budgets.create"]

    _edit(cloud, "billing-permissions.json", revoke)
    code, _, err = _preflight(synth_dir, capsys)
    assert code == 1
    assert (
        "FAIL billing\n    missing roles/billing.costsManager on billing account 01A2B3-C4D5E6-F7A8B9 (lacks "
        "billing.budgets.create)\n" in err
    )
    assert "gcloud billing accounts add-iam-policy-binding 01A2B3-C4D5E6-F7A8B9 --member=MEMBER" in err


EXPORT_TABLE = "billing-export-table.json"


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (
            {"status": 404, "body": {"error": {"code": 404, "status": "NOT_FOUND", "message": "Not found: Table"}}},
            "no such table (NOT_FOUND: Not found: Table)",
        ),
        (
            {
                "status": 403,
                "body": {"error": {"code": 403, "status": "PERMISSION_DENIED", "message": "Access Denied"}},
            },
            "roles/bigquery.dataViewer on the dataset",
        ),
        ({"columns": ["resource", "labels"]}, "not the detailed usage cost export: it lacks labels, resource"),
        ({"columns": ["credits.amount"]}, "it lacks credits.amount"),
    ],
)
def test_a_billing_export_make_cost_cannot_read_is_a_warning_that_does_not_stop_the_deploy(
    cloud: Path, synth_dir: Path, capsys: pytest.CaptureFixture[str], answer: dict[str, Any], said: str
) -> None:
    if "columns" in answer:

        def drop(body: dict[str, Any]) -> None:
            for column in answer["columns"]:
                top, _, sub = column.partition(".")
                fields = body["schema"]["fields"]
                if sub:
                    (record,) = [f for f in fields if f["name"] == top]
                    record["fields"] = [f for f in record["fields"] if f["name"] != sub]
                else:
                    body["schema"]["fields"] = [f for f in fields if f["name"] != top]

        _edit(cloud, EXPORT_TABLE, drop)
    else:
        index = json.loads((cloud / "index.json").read_text())
        (entry,) = [e for e in index if e["answer"] == EXPORT_TABLE]
        entry["status"] = answer["status"]
        (cloud / "index.json").write_text(json.dumps(index))
        (cloud / EXPORT_TABLE).write_text(json.dumps(answer["body"]))
    code, out, _ = _preflight(synth_dir, capsys)
    assert code == 0, "a warning is no failure"
    table = "acme-billing.billing_export.gcp_billing_export_resource_v1_01A2B3_C4D5E6_F7A8B9"
    assert f"preflight dev: WARN billing-export\n    monitoring.billing_export {table}: " in out
    assert said in out and "every check passed" in out


def _limit(metric: str, limit: float) -> Any:
    def change(body: dict[str, Any]) -> None:
        for quota in body["quotas"]:
            if quota["metric"] == metric:
                quota["limit"] = limit

    return change


def test_a_short_gpu_quota_names_the_region_metric_pools_and_limit(
    cloud: Path, synth_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _edit(cloud, "region-dev-us-east5.json", _limit("PREEMPTIBLE_NVIDIA_H100_MEGA_GPUS", 8.0))
    code, _, err = _preflight(synth_dir, capsys)
    assert code == 1
    assert (
        "short: us-east5 PREEMPTIBLE_NVIDIA_H100_MEGA_GPUS: pools a3mega ask for up to 16 GPUs, the limit is 8, "
        "in use now 0 (regions.get us-east5)"
    ) in err


def test_flex_start_falls_back_to_the_standard_quota_where_the_preemptible_one_is_short(
    cloud: Path, synth_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _edit(cloud, "region-dev-us-east5.json", _limit("PREEMPTIBLE_NVIDIA_H100_MEGA_GPUS", 8.0))
    _edit(cloud, "region-dev-us-east5.json", _limit("NVIDIA_H100_MEGA_GPUS", 16.0))
    code, out, err = _preflight(synth_dir, capsys)
    assert code == 0, err
    assert "flex-start falls back to NVIDIA_H100_MEGA_GPUS (limit 16)" in out


def test_a_short_tpu_quota_of_cloud_quotas_is_refused(
    cloud: Path, synth_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def lower(body: dict[str, Any]) -> None:
        body["dimensionsInfos"][0]["details"]["value"] = "8"

    _edit(cloud, "quotainfo-dev-TPUS-PER-TPU-FAMILY-per-project-region.json", lower)
    code, _, err = _preflight(synth_dir, capsys)
    assert code == 1
    assert (
        "short: us-east5 TPUS-PER-TPU-FAMILY-per-project-region,tpu_family=CT6E: pools train, vllm-on-demand ask for "
        "up to 40 TPU chips, the limit is 8 (Cloud Quotas"
    ) in err


def test_a_multislice_job_asks_the_quota_for_every_slice(
    cloud: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """dev on two v6e 4x4 slices (docs/examples/multislice): its two pools ask for 32 chips (with the vLLM servers'
    on-demand tier, 24 more); a limit of 16 (one slice's) refuses the deploy naming every pool."""
    from infra.synth.app import synth
    from infra.synth.load import load_environment

    example = REPO / "docs/examples/multislice"
    monkeypatch.setenv("PLATFORM_ENVIRONMENTS_DIR", str(example))
    synth({"dev": load_environment(example / "dev.yaml")}, tmp_path / "out")

    def lower(body: dict[str, Any]) -> None:
        body["dimensionsInfos"][0]["details"]["value"] = "16"

    _edit(cloud, "quotainfo-dev-TPUS-PER-TPU-FAMILY-per-project-region.json", lower)
    code, _, err = _preflight(tmp_path / "out", capsys)
    assert code == 1
    assert (
        "short: us-east5 TPUS-PER-TPU-FAMILY-per-project-region,tpu_family=CT6E: pools train, train-1, vllm-on-demand "
        "ask for up to 56 TPU chips, the limit is 16 (Cloud Quotas"
    ) in err


def test_a_quota_id_cloud_quotas_does_not_know_names_the_table(
    cloud: Path, synth_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = json.loads((cloud / "index.json").read_text())
    for entry in index:
        if entry["url"].endswith("/PREEMPTIBLE-TPU-V6E-per-project-region"):
            entry["status"], entry["answer"] = 404, "not-found.json"
    (cloud / "index.json").write_text(json.dumps(index))
    not_found = {"error": {"code": 404, "message": "QuotaInfo not found.", "status": "NOT_FOUND"}}
    (cloud / "not-found.json").write_text(json.dumps(not_found))
    code, _, err = _preflight(synth_dir, capsys)
    assert code == 1
    assert "Cloud Quotas knows no quota PREEMPTIBLE-TPU-V6E-per-project-region" in err
    assert "infra/catalogue/quota_metrics.py" in err


def test_a_wrong_terraform_fails_the_tools_check(
    cloud: Path, synth_dir: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{_tools(tmp_path / 'old', terraform='1.11.4')}{os.pathsep}{os.environ['PATH']}")
    code, _, err = _preflight(synth_dir, capsys)
    assert code == 1
    assert "terraform 1.11.4: the platform pins terraform 1.12.2" in err
    assert "https://releases.hashicorp.com/terraform/1.12.2/" in err


def test_a_runner_without_the_kubernetes_credential_plugin_fails_the_tools_check(
    cloud: Path, synth_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """GitHub's runner images install the Cloud CLI without gke-gcloud-auth-plugin: the apply would make the cluster
    and its pools, then stop at the first Kubernetes resource. The preflight says so before anything is applied."""
    tools = Path(os.environ["PATH"].split(os.pathsep)[0])
    (tools / "gke-gcloud-auth-plugin").unlink()
    path = [d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "gke-gcloud-auth-plugin").exists()]
    monkeypatch.setenv("PATH", os.pathsep.join(path))
    code, _, err = _preflight(synth_dir, capsys)
    assert code == 1
    assert "gke-gcloud-auth-plugin (none on PATH): the stack's kubernetes and helm providers run it" in err
    assert "gcloud components install gke-gcloud-auth-plugin" in err
    # One that is on PATH but does not run (a broken install) fails the same way, by its exit code.
    (tools / "gke-gcloud-auth-plugin").write_text("#!/bin/sh\nexit 127\n")
    (tools / "gke-gcloud-auth-plugin").chmod(0o755)
    monkeypatch.setenv("PATH", os.pathsep.join([str(tools), *path]))
    code, _, err = _preflight(synth_dir, capsys)
    assert code == 1 and "gke-gcloud-auth-plugin --version exits 127)" in err


def test_refused_credentials_read_as_a_login_problem_not_as_the_service_refusing(
    cloud: Path, envs: dict[str, Environment], synth_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    class Expired:
        def request(self, method: str, url: str, body: dict[str, Any] | None = None) -> preflight.Answer:
            raise preflight.CredentialsRefused("Reauthentication is needed. Please run `gcloud auth login`")

    stack = read_stack(synth_dir, "platform-dev")
    results = preflight.run(envs["dev"], stack=lambda: stack, transport=lambda _: Expired())
    code = preflight.report(envs["dev"], results)
    err = capsys.readouterr().err
    assert code == 1
    assert "the credentials were refused (Reauthentication is needed." in err
    assert "gcloud auth application-default login" in err


def test_user_credentials_bill_the_calls_to_the_environments_project(
    cloud: Path, envs: dict[str, Environment], synth_dir: Path
) -> None:
    seen: list[str | None] = []

    def recorded(credentials: Any) -> preflight.Transport:
        seen.append(credentials.quota_project_id)
        return preflight.RecordedTransport(cloud)

    stack = read_stack(synth_dir, "platform-dev")
    results = preflight.run(envs["dev"], stack=lambda: stack, transport=recorded)
    assert seen == ["acme-ml-platform-dev"]
    assert [r.status for r in results] == ["ok"] * 8, [r.check for r in results]


def test_print_roles_needs_no_credentials_and_gives_the_grant_commands(
    cloud: Path, synth_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS")
    monkeypatch.delenv("PLATFORM_PREFLIGHT_ANSWERS")
    code, out, _ = _preflight(synth_dir, capsys, "--print-roles")
    assert code == 0
    assert "roles/container.admin\tcontainer.clusterRoleBindings.create," in out
    assert (
        "gcloud projects add-iam-policy-binding acme-ml-platform-dev --member=MEMBER "
        "--role=roles/resourcemanager.projectIamAdmin --condition=None"
    ) in out
    # The budget's role is the billing account's, with Cloud Billing's own command.
    assert "roles/billing.costsManager\tbilling.budgets.create, billing.budgets.delete" in out
    assert (
        "gcloud billing accounts add-iam-policy-binding 01A2B3-C4D5E6-F7A8B9 --member=MEMBER "
        "--role=roles/billing.costsManager"
    ) in out


# --- through `make deploy`: nothing applied -----------------------------------------------------------------------


def test_a_deploy_without_credentials_applies_nothing(tmp_path: Path) -> None:
    from tests.deploy_harness import built_environments, recorded_calls, recorded_order
    from tests.deploy_harness import run_deploy as deploy

    done = deploy(
        ["deploy", "dev", "--auto-approve"],
        tmp_path,
        built_environments(tmp_path),
        GOOGLE_APPLICATION_CREDENTIALS=str(tmp_path / "none.json"),
        NO_GCE_CHECK="True",
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "gcloud auth application-default login" in done.stderr
    assert "error: preflight dev: credentials failed; nothing was applied" in done.stderr
    assert (
        recorded_calls(tmp_path) == [] and recorded_calls(tmp_path, "gcluster") == [] and recorded_order(tmp_path) == []
    )


def test_a_deploy_short_of_quota_applies_nothing(tmp_path: Path) -> None:
    from tests.deploy_harness import built_environments, recorded_calls, recorded_order
    from tests.deploy_harness import run_deploy as deploy

    answers = tmp_path / "answers"
    shutil.copytree(GRANTED, answers)
    _edit(answers, "region-dev-us-east5.json", _limit("C4_CPUS", 96.0))
    done = deploy(
        ["deploy", "dev", "--auto-approve"],
        tmp_path,
        built_environments(tmp_path),
        PLATFORM_PREFLIGHT_ANSWERS=str(answers),
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "short: us-east5 C4_CPUS: pools convert ask for up to 288 vCPUs, the limit is 96" in done.stderr
    assert (
        recorded_calls(tmp_path) == [] and recorded_calls(tmp_path, "gcluster") == [] and recorded_order(tmp_path) == []
    )


def _preflight_prod(stack: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = preflight.main(["prod", "--stack", str(stack)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_each_reservation_holds_what_its_pools_take(
    cloud: Path, synth_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """prod's training slice and A3 Mega pool each draw on a reservation of their machines: read and held."""
    _, out, err = _preflight_prod(stack_file(synth_dir, "platform-prod"), capsys)
    assert "preflight prod: ok   reservations" in out, out + err
    assert (
        "reservation ml-platform-v6e-train (acme-ml-platform-prod, us-east5-b): 4 x ct6e-standard-4t taken by pools "
        "train, holds 4, in use now 0"
    ) in out


def test_a_counted_slice_beyond_its_reservation_is_refused(
    cloud: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """prod's reserved training slice at count 2 (review 10: it loaded and planned): two pools of four hosts draw
    on a reservation of four machines; the preflight names the reservation, the pools and both numbers."""
    from infra.synth.app import synth
    from infra.synth.load import load_environment

    folder = tmp_path / "environments"
    shutil.copytree(REPO / "infra" / "environments", folder)
    prod = folder / "prod.yaml"
    text = prod.read_text()
    reserved = "      type: reservation\n      reservation: ml-platform-v6e-train\n"
    assert reserved in text
    text = text.replace(reserved, reserved + "    count: 2\n", 1)
    prod.write_text(text.replace("  recipe: llama3-8b\n", "  recipe: llama3-8b-2-slices\n", 1))
    monkeypatch.setenv("PLATFORM_ENVIRONMENTS_DIR", str(folder))
    synth({"prod": load_environment(prod)}, tmp_path / "out")
    code, _, err = _preflight_prod(stack_file(tmp_path / "out", "platform-prod"), capsys)
    assert code == 1
    assert (
        "short: reservation ml-platform-v6e-train (acme-ml-platform-prod, us-east5-b) holds 4 x ct6e-standard-4t; "
        "pools train, train-1 take up to 8"
    ) in err
