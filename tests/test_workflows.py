"""The GitHub workflows: who may plan and apply, that the deploys finish, the gate, and the fork pull requests'
review comment.

Nothing here reaches GitHub or Google Cloud. What these tests hold is the workflows' text and what their
`run:` steps do with stand-ins for the cloud CLIs (terraform, gcloud, packer, gcluster, gh) on PATH. That the
OIDC claims reach Google as the attribute conditions expect, that the `prod` environment's reviewers and
branch policy are set, and that a saved plan applies on a real project: only a real repository and project
show that (docs/delivery.md, "Deploying for real").
"""

from __future__ import annotations

import copy
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.delivery import runner
from tests.stand_ins import HELM_OPENS, PROVIDER_EXECS

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = REPO / ".github" / "workflows"
BIN = Path(sys.executable).parent


def _load(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((WORKFLOWS / name).read_text())
    # YAML 1.1 reads the key `on` as True.
    doc["on"] = doc.pop(True, doc.get("on"))
    return doc


def _auth_steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in job.get("steps", []) if str(s.get("uses", "")).startswith("google-github-actions/auth@")]


# --- linters -------------------------------------------------------------------------------------------------


def test_workflows_pass_actionlint() -> None:
    workflows = sorted(WORKFLOWS.glob("*.yml"))
    command = [str(BIN / "actionlint"), "-no-color", *map(str, workflows)]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_workflows_pass_zizmor_with_every_ignore_explained() -> None:
    """zizmor (pinned in pyproject's dev extra), offline audits; .github/zizmor.yml may ignore a finding only
    with a comment above it saying why."""
    result = subprocess.run(
        [str(BIN / "zizmor"), "--offline", "--no-progress", "--format", "plain", str(WORKFLOWS)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    config = REPO / ".github" / "zizmor.yml"
    if config.exists():
        lines = config.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.strip().startswith("- ") and "ignore" in "".join(lines[max(0, i - 6) : i]):
                assert lines[i - 1].strip().startswith("#"), f"zizmor.yml:{i + 1}: an ignore without its reason"


# --- who may plan and who may apply ---------------------------------------------------------------


def test_pull_requests_never_reach_a_deployer() -> None:
    """The pull-request jobs run the PR's own code: they authenticate only as a read-only planner, through a
    `*-plan` GitHub environment whose variables name the planner, and never with write permissions on
    contents."""
    doc = _load("pull-request.yml")
    assert "pull_request_target" not in doc["on"]
    assert doc.get("permissions") == {}
    for name, job in doc["jobs"].items():
        auths = _auth_steps(job)
        if not auths:
            continue
        env = job.get("environment")
        env_name = env["name"] if isinstance(env, dict) else env
        assert env_name and str(env_name).endswith("-plan"), f"{name}: authenticates outside a planner environment"
        for step in auths:
            assert step["with"]["service_account"] == "${{ vars.GCP_PLANNER_SERVICE_ACCOUNT }}", name
        assert job["permissions"].get("contents") == "read", name


def test_a_pull_request_plans_for_real_only_the_environments_whose_planner_admits_it(
    envs: dict[str, Any],
) -> None:
    """prod's planner is admitted from main only (delivery.pull_request_plans: offline): its pull-request job takes
    no credentials and posts the offline review; dev's plans for real."""
    job = _load("pull-request.yml")["jobs"]["plan-review"]
    matrix = {entry["env"]: entry["real"] for entry in job["strategy"]["matrix"]["include"]}
    assert matrix == {name: env.delivery.pull_request_plans == "real" for name, env in envs.items()}
    assert job["env"]["WIF_PROVIDER"] == "${{ matrix.real && vars.GCP_WORKLOAD_IDENTITY_PROVIDER || '' }}"
    for step in _auth_steps(job):
        assert "env.WIF_PROVIDER != ''" in step["if"]


def test_only_an_approved_prod_job_on_main_impersonates_prods_deployer() -> None:
    """Every job that names a deployer runs in the `dev` or `prod` GitHub environment, on main only, in a
    workflow that no pull request starts; the bootstrap stack's binding checks the same claims on Google's side
    (tests/test_bootstrap.py)."""
    deployers = []
    for path in sorted(WORKFLOWS.glob("*.yml")):
        doc = _load(path.name)
        for name, job in doc["jobs"].items():
            for step in _auth_steps(job):
                if step["with"]["service_account"] == "${{ vars.GCP_DEPLOYER_SERVICE_ACCOUNT }}":
                    deployers.append((path.name, name, job, doc))
    assert {job["environment"] for _, _, job, _ in deployers} == {"dev", "prod"}, deployers
    for workflow, name, job, doc in deployers:
        assert set(doc["on"]) <= {"push", "workflow_dispatch"}, workflow
        if "push" in doc["on"]:
            assert doc["on"]["push"]["branches"] == ["main"], workflow
        assert job.get("if") == "github.ref == 'refs/heads/main'", (workflow, name)


# --- the deploy workflows finish -------------------------------------------------------------------


def test_promotion_is_a_pull_request_recorded_before_prod_applies_it() -> None:
    """The promotion pushes a branch and opens a pull request; it applies nothing. Prod is applied by
    deploy-prod.yml, which runs on main when prod.yaml changes there."""
    doc = _load("promote.yml")
    text = (WORKFLOWS / "promote.yml").read_text()
    assert "HEAD:main" not in text
    assert "gh pr create --base main" in text
    for job in doc["jobs"].values():
        assert "make deploy" not in json.dumps(job) and "scripts.deploy" not in json.dumps(job)
        assert job["permissions"]["contents"].startswith("write")
    prod = _load("deploy-prod.yml")
    assert prod["on"]["push"] == {"branches": ["main"], "paths": ["infra/environments/prod.yaml"]}


# --- the deploy workflows, run -------------------------------------------------------------------------------

STANDINS = {
    # terraform: init, plan -out=FILE (writes FILE), show -json FILE (prints $STANDIN_PLAN_JSON), apply FILE
    # (which must exist), version. Every call is logged with its folder; plan opens what the helm provider opens.
    "terraform": r"""#!/bin/bash
echo "terraform $* (in $PWD)" >> "$STANDIN_LOG"
case "$1" in
  version) echo "Terraform v1.12.2" ;;
  plan) "$STANDIN_PYTHON" -c "$STANDIN_HELM_OPENS" || exit 1
        "$STANDIN_PYTHON" -c "$STANDIN_PROVIDER_EXECS" || exit 1
        for a in "$@"; do case "$a" in -out=*) echo "saved plan" > "${a#-out=}" ;; esac; done ;;
  show) cat "$STANDIN_PLAN_JSON" ;;
  apply) test -f "${*: -1}" || { echo "no plan file ${*: -1}" >&2; exit 1; } ;;
esac
""",
    "packer": '#!/bin/bash\necho "packer $*" >> "$STANDIN_LOG"\necho "Packer v1.15.3"\n',
    # GCLUSTER_EXIT: a deployment that fails (its version still answers).
    "gcluster": '#!/bin/bash\necho "gcluster $*" >> "$STANDIN_LOG"\n'
    'echo "Built from: main, commit: 079cf8349a96cfd433cb89945bc467af21818424"\n'
    '[ "$1" = --version ] || exit "${GCLUSTER_EXIT:-0}"\n',
    # gcloud: logged; `logging read` answers $STANDIN_GCLOUD_LOGGING (recorded audit log entries) where set.
    "gcloud": '#!/bin/bash\necho "gcloud $*" >> "$STANDIN_LOG"\n'
    'if [ "$1 $2" = "logging read" ] && [ -n "$STANDIN_GCLOUD_LOGGING" ]; then cat "$STANDIN_GCLOUD_LOGGING"; fi\n',
    # gh: logged with what it reads on stdin; `issue list` answers $STANDIN_GH_ISSUES where set, else no issue.
    "gh": r"""#!/bin/bash
echo "gh $*" >> "$STANDIN_LOG"
case "$*" in
  *--body-file\ -*) sed 's/^/  | /' >> "$STANDIN_LOG" ;;
esac
case "$1 $2" in
  "issue list") if [ -n "$STANDIN_GH_ISSUES" ]; then cat "$STANDIN_GH_ISSUES"; else echo "[]"; fi ;;
  "issue create") echo "https://github.com/acme/ml-platform/issues/7" ;;
esac
""",
    "gke-gcloud-auth-plugin": '#!/bin/bash\necho "gke-gcloud-auth-plugin $*" >> "$STANDIN_LOG"\n',
    # bq: logged (its first four arguments); a query answers $STANDIN_BQ_ANSWER (rows as `bq --format=json` prints).
    "bq": '#!/bin/bash\necho "bq $1 $2 $3 $4" >> "$STANDIN_LOG"\ncat "$STANDIN_BQ_ANSWER"\n',
    # make: `make plan` and `make synth` synthesize (the policy gate and the rules plan also runs are
    # tests/test_plan.py's), once per content of the environment files (the jobs of one test share a workspace, and
    # its code does not change between them); the set-up targets are logged only (this checkout has them).
    "make": r"""#!/bin/bash
echo "make $*" >> "$STANDIN_LOG"
if [ "$1" = plan ] || [ "$1" = synth ]; then
  key=$(cat "$PLATFORM_ENVIRONMENTS_DIR"/*.yaml | sha256sum)
  [ -f cdktf.out/.synthesized ] && [ "$(cat cdktf.out/.synthesized)" = "$key" ] && exit 0
  "$STANDIN_PYTHON" -m infra > /dev/null && echo "$key" > cdktf.out/.synthesized
fi
""",
}

PLAN_JSON = {
    "format_version": "1.2",
    "terraform_version": "1.12.2",
    "resource_changes": [
        {
            "address": "google_storage_bucket.models",
            "mode": "managed",
            "type": "google_storage_bucket",
            "name": "models",
            "change": {
                "actions": ["update"],
                "before": {"labels": {}},
                "after": {"labels": {"a": "b"}},
                "after_unknown": {},
            },
        }
    ],
}


def _workspace(tmp_path: Path) -> Path:
    """The checkout as the runner sees it: every entry of this one linked, with a cdktf.out of its own and
    environment files whose images are built (no placeholder digest)."""
    work = tmp_path / "work"
    work.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in {"cdktf.out", ".git"}:
            (work / entry.name).symlink_to(entry)
    envs = tmp_path / "environments"
    envs.mkdir()
    for path in (REPO / "infra" / "environments").glob("*.yaml"):
        (envs / path.name).write_text(path.read_text().replace("sha256:" + "0" * 64, "sha256:" + "1" * 64))
    return work


def _standins(tmp_path: Path) -> tuple[Path, Path]:
    bin_dir = tmp_path / "standins"
    bin_dir.mkdir()
    for name, body in STANDINS.items():
        path = bin_dir / name
        path.write_text(body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "calls.log"
    log.touch()
    return bin_dir, log


# Every command the runner model knows: one not on a step's PATH there is "not found" in the test too, whatever this
# machine has installed (it may have terraform or the plugin in /usr/bin).
KNOWN = runner.RUNNER_COMMANDS.union(
    *runner.ACTION_COMMANDS.values(), *runner.COMPONENT_COMMANDS.values(), *runner.RUN_INSTALLS.values(), STANDINS
) - {"bash", "python", "python3", "node", "npm", "npx", "pip", "git", "curl"}


def _step_path(bin_dir: Path, step: str, have: frozenset[str]) -> str:
    """PATH for a step: the stand-ins of what the runner has there, and "not found" for what it has not."""
    folder = bin_dir.parent / f"path-{step}"
    if not folder.exists():
        folder.mkdir()
        for name in KNOWN:
            target = folder / name
            if name in have and (bin_dir / name).exists():
                target.symlink_to(bin_dir / name)
            elif name not in have:
                target.write_text(f'#!/bin/bash\necho "{name}: command not found (not on the runner)" >&2\nexit 127\n')
                target.chmod(0o755)
    return f"{folder}:{os.environ['PATH']}"


def _run_job(
    workflow: str, job_name: str, tmp_path: Path, extra_env: dict[str, str] | None = None
) -> tuple[str, dict[str, str], str]:
    """Every `run:` step of the job in order, under `bash -e` as GitHub runs them, with the stand-ins first on
    PATH; returns the calls, the job's step outputs and its summary. A step's `env:` comes from extra_env (an
    expression inside `run:` itself fails the test: it would be a template injection)."""
    work = tmp_path / "work" if (tmp_path / "work").exists() else _workspace(tmp_path)
    bin_dir, log = (
        (tmp_path / "standins", tmp_path / "calls.log") if (tmp_path / "standins").exists() else _standins(tmp_path)
    )
    plan_json = tmp_path / "plan.json"
    plan_json.write_text(json.dumps(PLAN_JSON))
    adc = tmp_path / "adc.json"  # what the workflow's auth step leaves (a credential file), never used here
    adc.write_text(
        json.dumps({"type": "authorized_user", "client_id": "c", "client_secret": "s", "refresh_token": "r"})
    )
    job = _load(workflow)["jobs"][job_name]
    outputs: dict[str, str] = {}
    summary = tmp_path / f"{job_name}-summary.md"
    summary.touch()
    ran = 0
    for index, step, have in runner.commands_at(job):
        if "run" not in step:
            continue
        script = step["run"]
        assert "${{" not in script, f"{workflow} {job_name} step {index}: an expression inside run:"
        output = tmp_path / f"{job_name}-output-{index}"
        output.touch()
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "PLATFORM_"))},
            # An installing step (scripts.tools install) finds its stand-ins already there: its install is a no-op.
            "PATH": _step_path(bin_dir, f"{workflow}-{job_name}-{index}", have | runner.installs(step)),
            "STANDIN_LOG": str(log),
            "STANDIN_PLAN_JSON": str(plan_json),
            "STANDIN_PYTHON": sys.executable,
            "STANDIN_HELM_OPENS": HELM_OPENS,
            "STANDIN_PROVIDER_EXECS": PROVIDER_EXECS,
            "PLATFORM_ENVIRONMENTS_DIR": str(tmp_path / "environments"),
            "GITHUB_OUTPUT": str(output),
            "GITHUB_STEP_SUMMARY": str(summary),
            "GITHUB_PATH": str(tmp_path / "github_path"),
            "GITHUB_REPOSITORY": "acme/ml-platform",
            "GITHUB_RUN_ID": "42",
            "RUNNER_TEMP": str(tmp_path),
            # The deploy's preflight: recorded answers of a project where every check passes (tests/test_preflight.py).
            "PLATFORM_PREFLIGHT_ANSWERS": str(REPO / "tests" / "fixtures" / "preflight" / "granted"),
            "GOOGLE_APPLICATION_CREDENTIALS": str(adc),
            **(extra_env or {}),
        }
        missing = set(step.get("env") or {}) - set(env)
        assert not missing, f"{workflow} {job_name} step {index}: give the test {missing}"
        done = subprocess.run(["bash", "-e", "-c", script], cwd=work, env=env, capture_output=True, text=True)
        where = f"{workflow} {job_name} step {index} ({step.get('name')})"
        assert done.returncode == 0, f"{where}:\n{done.stdout}{done.stderr}"
        ran += 1
        step_id = step.get("id")
        for line in output.read_text().splitlines():
            key, _, value = line.partition("=")
            outputs[f"{step_id}.{key}"] = value
    assert ran, f"{workflow} {job_name}: no run steps"
    return log.read_text(), outputs, summary.read_text()


def _applied(calls: str, stack: str) -> list[str]:
    return [line.split(" (in ")[0] for line in calls.splitlines() if line.startswith("terraform") and stack in line]


@pytest.mark.slow
def test_dev_deploy_runs_to_the_end_with_stand_ins(tmp_path: Path) -> None:
    """main.yml's job: tools, make plan, then platform-dev planned to a file, gated, shown, that file applied,
    then gcluster deploy of dev's Slurm cluster (which used to stop the workflow: no packer, no gcluster)."""
    calls, _, summary = _run_job("main.yml", "deploy", tmp_path)
    assert _applied(calls, "platform-dev") == [
        "terraform init -input=false -no-color",
        "terraform plan -input=false -no-color -out=plan.tfplan",
        "terraform show -json plan.tfplan",
        "terraform apply -input=false -no-color plan.tfplan",
    ], calls
    assert "google_storage_bucket.models" in summary and "Plan digest" in summary
    gcluster = [line for line in calls.splitlines() if line.startswith("gcluster deploy")]
    assert len(gcluster) == 1 and "cdktf.out/slurm/dev/blueprint.yaml" in gcluster[0], calls
    assert calls.index("terraform apply") < calls.index("gcluster deploy")


@pytest.mark.slow
def test_prod_deploy_applies_only_the_plan_the_approver_saw(tmp_path: Path) -> None:
    """deploy-prod.yml: the plan job's summary and digest; the apply job applies its own plan file when the
    digest is the approved one, and refuses (applies nothing) when the plan changed in between."""
    calls, outputs, summary = _run_job("deploy-prod.yml", "plan", tmp_path)
    digest = outputs["plan.digest"]
    platform, slurm = digest.split(".")  # the plan's, then the Slurm blueprint's
    assert len(platform) == len(slurm) == 64 and digest in summary
    assert "terraform plan -input=false -no-color -lock=false -out=plan.tfplan" in calls
    assert "terraform apply" not in calls
    calls, _, _ = _run_job("deploy-prod.yml", "apply", tmp_path, {"APPROVED": digest})
    assert "terraform apply -input=false -no-color plan.tfplan" in calls
    assert calls.index("terraform show") < calls.index("gcloud services enable") < calls.index("terraform apply")
    assert "gcluster deploy" in calls

    (tmp_path / "calls.log").write_text("")
    changed = json.loads(json.dumps(PLAN_JSON))
    changed["resource_changes"][0]["change"]["after"] = {"labels": {"a": "c"}}
    (tmp_path / "plan.json").write_text(json.dumps(changed))
    with pytest.raises(AssertionError, match="is not the one approved"):
        _run_job_with_plan("deploy-prod.yml", "apply", tmp_path, {"APPROVED": digest}, changed)
    assert "terraform apply" not in (tmp_path / "calls.log").read_text()
    # Nor did it change the project first (review 9: APIs enabled and CRDs adopted before the digest check).
    refused = (tmp_path / "calls.log").read_text()
    assert "services enable" not in refused and "label customresourcedefinition" not in refused, refused


@pytest.mark.slow
def test_prod_deploys_the_slurm_cluster_the_approver_saw(tmp_path: Path) -> None:
    """prod's Slurm cluster was deployed with --auto-approve after the approved plan, from whatever the
    blueprint had become. The approved digest covers the blueprint: changed between the plan job and the apply job,
    nothing is applied and no cluster deployed."""
    _, outputs, summary = _run_job("deploy-prod.yml", "plan", tmp_path)
    assert "The Slurm cluster deployed after it" in summary and '"blueprint_name": "platform-prod-slurm"' in summary
    prod = tmp_path / "environments" / "prod.yaml"
    prod.write_text(
        prod.read_text().replace("  login: {machine_type: n2-standard-4}", "  login: {machine_type: n2-standard-8}")
    )
    (tmp_path / "calls.log").write_text("")
    with pytest.raises(AssertionError, match="is not the one approved"):
        _run_job("deploy-prod.yml", "apply", tmp_path, {"APPROVED": outputs["plan.digest"]})
    calls = (tmp_path / "calls.log").read_text()
    assert "terraform apply" not in calls and "gcluster deploy" not in calls


@pytest.mark.slow
def test_a_prod_apply_that_failed_after_its_plan_was_applied_is_rerun_to_its_end(tmp_path: Path) -> None:
    """The apply job applied the approved plan, then the Slurm deployment failed. Re-running the job planned again,
    found nothing to change (another digest) and refused (exit 4): only a new approval of a new run went on (review
    9, C7). Now the rerun applies nothing and deploys the Slurm cluster; a plan that changes something is still
    refused."""
    _, outputs, _ = _run_job("deploy-prod.yml", "plan", tmp_path)
    approved = {"APPROVED": outputs["plan.digest"]}
    with pytest.raises(AssertionError, match="gcluster"):
        _run_job("deploy-prod.yml", "apply", tmp_path, {**approved, "GCLUSTER_EXIT": "1"})
    first = (tmp_path / "calls.log").read_text()
    assert "terraform apply -input=false -no-color plan.tfplan" in first and "gcluster deploy" in first

    applied = {**json.loads(json.dumps(PLAN_JSON)), "resource_changes": []}  # the state matches the code now
    (tmp_path / "calls.log").write_text("")
    _run_job_with_plan("deploy-prod.yml", "apply", tmp_path, approved, applied)
    rerun = (tmp_path / "calls.log").read_text()
    assert "terraform apply" not in rerun and "gcluster deploy" in rerun, rerun

    (tmp_path / "calls.log").write_text("")
    with pytest.raises(AssertionError, match="is not the one approved"):
        _run_job("deploy-prod.yml", "apply", tmp_path, {"APPROVED": "0" * 64 + "." + outputs["plan.digest"][65:]})
    assert "gcluster deploy" not in (tmp_path / "calls.log").read_text()


def _run_job_with_plan(
    workflow: str, job: str, tmp_path: Path, extra_env: dict[str, str], plan: dict[str, Any]
) -> tuple[str, dict[str, str], str]:
    global PLAN_JSON
    saved = PLAN_JSON
    PLAN_JSON = plan
    try:
        return _run_job(workflow, job, tmp_path, extra_env)
    finally:
        PLAN_JSON = saved


@pytest.mark.slow
def test_the_gate_blocks_the_apply(tmp_path: Path) -> None:
    """A plan that destroys a protected bucket stops the deploy at exit 3 before any apply."""
    blocked = json.loads(json.dumps(PLAN_JSON))
    blocked["resource_changes"][0]["change"] = {
        "actions": ["delete"],
        "before": {"name": "models"},
        "after": None,
        "after_unknown": {},
    }
    with pytest.raises(AssertionError, match="BLOCKING"):
        _run_job_with_plan("main.yml", "deploy", tmp_path, {}, blocked)
    assert "terraform apply" not in (tmp_path / "calls.log").read_text()


TRAIN_POOL = "google_container_node_pool.slice-train_pool_11E2D2E2"


@pytest.mark.slow
def test_a_gated_change_goes_through_the_pipeline_confirmed_in_the_environment_file(
    tmp_path: Path, stacks: dict[str, dict[str, Any]]
) -> None:
    """CONFIRM_CHANGE was read from the environment only and no workflow can set it, so a
    gated change (here the training slice's pool replaced) failed every deploy. Confirmed in dev.yaml, it goes
    through; an entry written for another configuration of the pool confirms nothing and says so."""
    from infra.config.delivery import APPLIED_CONFIRMATIONS, config_sha256

    replace = json.loads(json.dumps(PLAN_JSON))
    pool = {"name": "train", "node_config": [{"machine_type": "ct6e-standard-4t"}]}
    replace["resource_changes"] = [
        {
            "address": TRAIN_POOL,
            "mode": "managed",
            "type": "google_container_node_pool",
            "name": TRAIN_POOL.split(".")[1],
            "change": {"actions": ["delete", "create"], "before": pool, "after": pool, "after_unknown": {}},
        }
    ]
    _workspace(tmp_path)
    dev = tmp_path / "environments" / "dev.yaml"
    text = dev.read_text()
    entry = 'confirm:\n  - address: {}\n    config_sha256: "{}"\n    reason: the slice moves to a new reservation\n'
    dev.write_text(text + entry.format(TRAIN_POOL, "0" * 64))
    with pytest.raises(AssertionError) as refused:
        _run_job_with_plan("main.yml", "deploy", tmp_path, {}, replace)
    said = str(refused.value)
    assert f"BLOCKING: replace {TRAIN_POOL} (platform-dev)" in said and "confirm it in dev.yaml" in said
    assert f"dev.yaml: confirm: {TRAIN_POOL}: written for configuration 000000000000" in said
    assert "terraform apply" not in (tmp_path / "calls.log").read_text()

    sha = config_sha256(stacks["dev"], TRAIN_POOL)
    dev.write_text(text + entry.format(TRAIN_POOL, sha))
    calls, _, summary = _run_job_with_plan("main.yml", "deploy", tmp_path, {}, replace)
    assert "terraform apply -input=false -no-color plan.tfplan" in calls
    assert TRAIN_POOL in summary

    # Applied, the entry is in the state (the stack's output); left in the file, it confirmed the next replacement of
    # the same configuration too (drift: the pool changed outside Terraform). Now that one blocks.
    again = json.loads(json.dumps(replace))
    again["prior_state"] = {"values": {"outputs": {APPLIED_CONFIRMATIONS: {"value": [f"{TRAIN_POOL}@{sha}"]}}}}
    (tmp_path / "calls.log").unlink()
    with pytest.raises(AssertionError) as refused:
        _run_job_with_plan("main.yml", "deploy", tmp_path, {}, again)
    said = str(refused.value)
    assert f"BLOCKING: replace {TRAIN_POOL} (platform-dev)" in said
    assert f"dev.yaml: confirm: {TRAIN_POOL}: carried out by an earlier apply (the state records it)" in said
    assert "terraform apply" not in (tmp_path / "calls.log").read_text()


def test_no_workflow_tells_an_author_to_set_what_no_workflow_reads() -> None:
    """The pipeline reads no person's environment: a gated change is confirmed by a `confirm:` entry. The pull
    request's failure message told authors to set CONFIRM_CHANGE, which no job reads (review 9, C10)."""
    for path in sorted((REPO / ".github" / "workflows").glob("*.yml")):
        assert "CONFIRM_CHANGE" not in path.read_text(), path.name


def test_workflows_install_the_pinned_packer_and_gcluster_before_deploying() -> None:
    for workflow, job in (("main.yml", "deploy"), ("deploy-prod.yml", "apply")):
        runs = [s.get("run", "") for s in _load(workflow)["jobs"][job]["steps"]]
        install = next(i for i, r in enumerate(runs) if "scripts.tools install" in r)
        deploy = next(i for i, r in enumerate(runs) if "scripts.deploy deploy" in r)
        assert install < deploy, workflow


def test_nothing_is_downloaded_or_installed_once_a_job_holds_credentials() -> None:
    """the deploy jobs installed ~500 packages, Terraform and the Cloud CLI after the deployer's
    credentials were live in the job. The credentials come last, just before the step that uses them."""
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for name, job in _load(path.name)["jobs"].items():
            assert runner.installs_after_credentials(job) == [], f"{path.name} {name}"
    job = copy.deepcopy(_load("main.yml")["jobs"]["deploy"])
    auth = next(i for i, s in enumerate(job["steps"]) if runner.action(s) == runner.AUTH)
    job["steps"].insert(1, job["steps"].pop(auth))
    assert [what for _, what in runner.installs_after_credentials(job)][:2] == [
        "actions/setup-python",
        "actions/setup-node",
    ]


def test_every_step_that_plans_or_applies_a_stack_finds_terraform_and_the_providers_credential_plugin(
    stacks: dict[str, dict[str, Any]],
) -> None:
    """The runner is a host: the kubernetes and helm providers run gke-gcloud-auth-plugin at
    every plan and apply, and GitHub's image has the Cloud CLI without it. Before the fix no workflow installed it:
    every plan of a live cluster failed at its first Kubernetes resource."""
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for name, job in _load(path.name)["jobs"].items():
            for stack in stacks.values():
                assert runner.missing(job, stack) == [], f"{path.name} {name}"
            assert runner.unpinned(job) == [], f"{path.name} {name}: setup-gcloud's version must be pinned"
    job = copy.deepcopy(_load("main.yml")["jobs"]["deploy"])
    job["steps"] = [s for s in job["steps"] if runner.action(s) != "google-github-actions/setup-gcloud"]
    ((_, step, lacking),) = runner.missing(job, stacks["dev"])
    assert lacking == ["gke-gcloud-auth-plugin"] and "apply that file" in step
    job["steps"].insert(0, {"uses": "google-github-actions/setup-gcloud@x", "with": {"version": ">= 416.0.0"}})
    assert runner.unpinned(job) == [(0, ">= 416.0.0")]


def test_fork_pull_requests_get_the_review_in_the_job_summary() -> None:
    """A fork's GITHUB_TOKEN cannot comment: the review goes to the job summary and the job does not fail."""
    job = _load("pull-request.yml")["jobs"]["plan-review"]
    assert job["env"]["FORK"] == "${{ github.event.pull_request.head.repo.full_name != github.repository }}"
    post = next(s for s in job["steps"] if s.get("name", "").startswith("Post or update"))
    assert 'if [ "$FORK" = "true" ]; then' in post["run"] and "GITHUB_STEP_SUMMARY" in post["run"]
    for step in job["steps"]:
        if str(step.get("uses", "")).startswith(("google-github-actions/auth@", "hashicorp/setup-terraform@")):
            assert "env.FORK == 'false'" in step["if"]


@pytest.mark.slow
def test_the_scheduled_cost_check_opens_the_environments_budget_issue_when_a_team_is_over(tmp_path: Path) -> None:
    """cost.yml's job on dev: research's namespace has spent more than its budget this month; the planner's check
    reads it from the billing export and opens the issue `Over budget: platform-dev` with the report."""
    answer = tmp_path / "bq.json"
    row = {"namespace": "ml-gpu", "node_pool": "a3mega", "service": "Compute Engine", "currency": "USD"}
    answer.write_text(json.dumps([{**row, "cost": "80000", "credits": "0"}]))
    extra = {"ENV_NAME": "dev", "GH_TOKEN": "token", "STANDIN_BQ_ANSWER": str(answer)}
    calls, _, summary = _run_job("cost.yml", "cost", tmp_path, extra)
    assert "bq --project_id=acme-ml-platform-dev --format=json query --nouse_legacy_sql" in calls, calls
    assert "gh issue create --title Over budget: platform-dev --body-file -" in calls, calls
    assert "  | | research | 80,000.00 |" in calls and "over budget |" in calls, calls
    assert "**Over or forecast over its budget: research" in summary


@pytest.mark.slow
def test_the_scheduled_drift_check_reports_a_hand_change_with_who_made_it_in_the_environments_issue(
    tmp_path: Path,
) -> None:
    """drift.yml's job on dev: the planner's plan of the live state finds the models bucket's public access
    prevention turned off by hand; the check names the field, what the gate says of such a change and who made it
    (the Admin Activity audit log), and opens the issue `Drift: platform-dev` with it."""
    bucket = "google_storage_bucket.models"

    def entry(before: str, after: str) -> dict[str, Any]:
        return {
            "address": bucket, "mode": "managed", "type": "google_storage_bucket", "name": "models",
            "change": {
                "actions": ["update"],
                "before": {"id": "acme-ml-platform-dev-models", "public_access_prevention": before},
                "after": {"id": "acme-ml-platform-dev-models", "public_access_prevention": after},
                "after_unknown": {},
            },
        }  # fmt: skip

    plan = {
        "format_version": "1.2",
        "terraform_version": "1.12.2",
        "resource_drift": [entry("enforced", "inherited")],
        "resource_changes": [entry("inherited", "enforced")],
        "prior_state": {"values": {"root_module": {"resources": [{"address": bucket, "mode": "managed"}]}}},
    }
    audit = tmp_path / "audit.json"
    audit.write_text(
        json.dumps(
            [
                {
                    "timestamp": "2026-12-02T09:14:03Z",
                    "protoPayload": {
                        "methodName": "storage.buckets.update",
                        "authenticationInfo": {"principalEmail": "alice@acme.example"},
                    },
                }
            ]
        )
    )
    extra = {"ENV_NAME": "dev", "GH_TOKEN": "token", "STANDIN_GCLOUD_LOGGING": str(audit)}
    calls, _, summary = _run_job_with_plan("drift.yml", "drift", tmp_path, extra, plan)
    assert _applied(calls, "platform-dev") == [
        "terraform init -input=false -no-color",
        "terraform plan -input=false -no-color -lock=false -out=plan.tfplan",
        "terraform show -json plan.tfplan",
    ], calls
    (query,) = [line for line in calls.splitlines() if line.startswith("gcloud logging read")]
    assert (
        'protoPayload.resourceName:"acme-ml-platform-dev-models"' in query and "--project=acme-ml-platform-dev" in query
    )
    assert 'NOT protoPayload.authenticationInfo.principalEmail="platform-deployer@acme-ml-platform-dev' in query
    assert "gh issue create --title Drift: platform-dev --body-file -" in calls, calls
    said = f"  |   update {bucket} (public_access_prevention): security weakened"
    assert said in calls and "by alice@acme.example at 2026-12-02T09:14:03Z (storage.buckets.update)" in calls, calls
    assert "## Drift: platform-dev" in summary
