"""The gate at the apply: plan to a file, review that plan, show it, apply that same file.

  python -m scripts.apply plan  <stack dir> --stack platform-<env> [--lock=false]
      terraform init; terraform plan -out=plan.tfplan; terraform show -json plan.tfplan > plan.json; the review
      gate (infra/review/diff.py's review_plan; confirmed: CONFIRM_CHANGE, and the `confirm:` entries of the stack's
      environment file that match its configuration, infra/delivery/confirmations.py) on it, with what the cluster
      itself refuses (cluster_holds: each release's upgrade from the revision Helm's record says runs, each custom
      resource against the CRDs the cluster serves); its Markdown into the
      job summary ($GITHUB_STEP_SUMMARY) and the plan's digest into $GITHUB_OUTPUT (`digest=`). Exit 3 when the
      gate blocks.
  python -m scripts.apply drift <stack dir> --stack platform-<env>
      terraform init; a plan of the live state (no lock: it writes nothing); each resource changed outside
      Terraform that the next apply would change back (infra/review/drift.py), with what the gate says of such a
      change and who made it where the Admin Activity audit log says (infra/delivery/audit.py); into the job
      summary too. Exit 0 nothing drifted, 2 something did, 1 the plan failed.
  python -m scripts.apply apply <stack dir> --stack platform-<env> [--approved DIGEST]
      the same plan, gate and summary, then `terraform apply plan.tfplan`: the file just reviewed, never a new
      plan. With --approved, the plan's digest must equal the one the approver saw (the plan job's output); where
      the environment has a Slurm cluster (deployed after the apply), the digest covers its blueprint too; a plan
      that changes nothing, with the approved blueprint, is the approved plan applied by an earlier run (a rerun).

Why two jobs for prod. GitHub asks an environment's required reviewers before the job starts ("Jobs that
reference an environment configured with required reviewers will wait for an approval before starting",
https://docs.github.com/en/actions/managing-workflow-runs-and-deployments/managing-deployments/reviewing-deployments),
so the approver of prod's apply job cannot see a plan that job makes. The plan job (prod's read-only planner)
shows it in its summary and outputs its digest; the apply job (prod's deployer, after the approval) plans again to
a file, gates it, and applies that file only when its digest equals the approved one. The plan file itself never
leaves the runner that made it (it holds every value of the plan, secrets included). A saved plan also refuses to
apply when the state changed since it was made (Terraform: "Saved plan is stale").

The digest is of what the plan changes (address, actions, before, after, after_unknown of every change that is not a
no-op or a read), so two plans of one commit against one state agree. That two real plans agree, and that the
planner's identity can read what a plan refreshes (Helm's release records among it: ConfigMaps, infra/constructs/
providers.py HELM_DRIVER), only a real project shows.

Terraform is `terraform` on PATH unless PLATFORM_TERRAFORM names another (tests use a stand-in).
Exit codes: 0 applied (or planned and passed), 3 blocked by the gate, 4 the plan is not the approved one,
5 not confirmed at the terminal (or no terminal to ask and no --auto-approve), 2 bad input, else Terraform's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from infra import settings
from infra.cdk.layout import STACK_FILE
from infra.config import ConfigError, Environment, environments_dir
from infra.delivery import confirmations
from infra.delivery.apply_paths import unresolved
from infra.review import BLOCKED, PlanFormatError, render, review_plan
from infra.review.diff import planned
from infra.review.served import dropped_fields
from infra.review.upgrades import refused_against_deployed
from infra.settings import SettingError
from infra.synth.load import load_environment
from scripts.cluster_access import (
    ToolsMissing,
    Unreachable,
    cluster_env,
    deployed_objects,
    interrupted,
    served_crds,
)
from scripts.parser import ArgumentParser, refuse

NOT_APPROVED = 4
NOT_CONFIRMED = 5
PLAN_FILE = "plan.tfplan"
PLAN_JSON = "plan.json"  # `terraform show -json` of PLAN_FILE, what the gate reads


def _terraform() -> list[str]:
    return settings.TERRAFORM.command()


def plan_digest(plan: Mapping[str, Any]) -> str:
    """sha256 of what the plan changes, in a canonical form."""
    changes = []
    for entry in plan.get("resource_changes") or []:
        change = entry.get("change") or {}
        actions = change.get("actions") or []
        if actions in (["no-op"], ["read"]):
            continue
        changes.append(
            {
                "address": entry.get("address"),
                "actions": actions,
                "before": change.get("before"),
                "after": change.get("after"),
                "after_unknown": change.get("after_unknown"),
            }
        )
    changes.sort(key=lambda c: str(c["address"]))
    return hashlib.sha256(json.dumps(changes, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def already_applied(digest: str, approved: str) -> bool:
    """Whether a plan of `digest` is what is left once the approved plan was applied: it changes nothing, and the
    Slurm blueprint (the digest's second part, where there is one) is the approved one. Then applying it changes
    nothing either, and a rerun of a job that applied the plan and failed after it (the Slurm deployment) goes on."""
    platform, _, slurm = digest.partition(".")
    return platform == plan_digest({}) and approved.partition(".")[2] == slurm


def _tf(stack_dir: Path, *args: str, stdout: Any = None) -> int:
    """Run Terraform in the stack's folder. Its own output goes to stderr (the job's log): stdout carries the review
    alone, which a pull request's comment is made of (a real first plan's raw output passes GitHub's limit)."""
    command = [*_terraform(), *args]
    print(f"running (in {stack_dir}): {shlex.join(command)}", file=sys.stderr, flush=True)
    return subprocess.run(command, cwd=stack_dir, stdout=2 if stdout is None else stdout, check=False).returncode


def _append(variable: str, text: str) -> None:
    path = os.environ.get(variable)
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(text)


def plan_and_gate(
    stack_dir: Path, stack: str, confirmed: Iterable[str], *, lock: bool = True, env: Environment | None = None
) -> tuple[int, str]:
    """(exit code, digest): plan to `stack_dir/plan.tfplan`, review it, write the summary and the digest; 2 before
    Terraform runs when a local file the apply opens (a chart, a post-renderer) is not there from `stack_dir`.
    `env`: the stack's environment, whose `confirm:` entries confirm the changes they were written for."""
    body = json.loads((stack_dir / STACK_FILE).read_text())
    problems = unresolved(stack_dir, body)
    for problem in problems:
        print(f"error: {stack}: {problem}", file=sys.stderr)
    if problems:
        return 2, ""
    in_file, stale = confirmations.from_file(env, body) if env is not None else ([], [])
    for line in stale:
        print(f"note: {line}", file=sys.stderr)
    try:  # PLATFORM_CONFIRMED_AT read before Terraform runs: a ref that is no commit stops here
        settled = confirmations.settled(env, in_file, body) if env is not None else []
    except SettingError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2, ""
    code = _plan_to_file(stack_dir, lock=lock)
    if code:
        return code, ""
    plan_json = stack_dir / PLAN_JSON
    try:
        plan = json.loads(plan_json.read_text())
        forget: list[str] = []
        if env is not None:  # an entry an earlier apply carried out confirms nothing more
            in_file, spent = confirmations.spent(env, in_file, plan)
            for line in spent:
                print(f"note: {line}", file=sys.stderr)
            forget = confirmations.forgotten(env, body, plan)
        holds = cluster_holds(stack_dir, body, plan, env)
        if env is not None:  # an entry confirms the change from the values it was written for, not another one
            changes = review_plan(stack, plan, (), holds).changes
            in_file, drifted = confirmations.bound(env, in_file, {c.address: c.before_values for c in changes})
            for line in drifted:
                print(f"note: {line}", file=sys.stderr)
            confirmed = [*confirmed, *(a for a in settled if a in in_file)]
        review = review_plan(stack, plan, list(confirmed), holds, in_change=in_file)
    except (json.JSONDecodeError, PlanFormatError) as err:
        print(f"error: {plan_json}: {err}", file=sys.stderr)
        return 2, ""
    digest = plan_digest(plan)
    markdown = render(review)
    slurm = slurm_blueprint(env) if env is not None else None
    if slurm is not None:
        # The Slurm cluster is deployed after this plan is applied (gcluster deploy, no plan an approver sees): the
        # approved digest covers its blueprint too, so the apply job deploys the cluster the approver read.
        # In two parts, `<the plan's>.<the blueprint's>`, so a rerun after a partial success (the plan applied, the
        # Slurm deployment failed) can tell the approved plan applied from another one (apply: already_applied).
        digest = f"{digest}.{hashlib.sha256(slurm.encode()).hexdigest()}"
        markdown += (
            "\n## The Slurm cluster deployed after it\n\n<details><summary>Cluster Toolkit blueprint and deployment "
            f"(in the digest)</summary>\n\n```json\n{slurm}\n```\n\n</details>\n"
        )
    _append("GITHUB_STEP_SUMMARY", f"{markdown}\nPlan digest: `{digest}`\n")
    _append("GITHUB_OUTPUT", f"digest={digest}\n")
    print(markdown, end="")
    print(f"plan digest: {digest}")
    if env is not None:
        gated = [c.address for c in review.gated]
        for line in confirmations.unused(env, in_file, gated):
            print(f"note: {line}", file=sys.stderr)
    for change in review.blocking:
        how = confirmations.how_to_confirm(
            change.address, change.confirmable, env, body, change.kinds, change.before_values
        )
        print(f"BLOCKING: {change.action} {change.address} ({stack}): {change.blocked}; {how}", file=sys.stderr)
    for line in forget:
        print(f"BLOCKING: {line}", file=sys.stderr)
    return (BLOCKED if review.blocking or forget else 0), digest


def drift(stack_dir: Path, stack: str, *, env: Environment | None = None) -> int:
    """The `drift` phase: 0 nothing changed outside Terraform, 2 something did (listed), 1 the plan failed."""
    from infra.delivery.audit import who_changed
    from infra.review.drift import report
    from infra.review.model import Change

    body = json.loads((stack_dir / STACK_FILE).read_text())
    problems = unresolved(stack_dir, body)
    for problem in problems:
        print(f"error: {stack}: {problem}", file=sys.stderr)
    if problems:
        return 1
    if _plan_to_file(stack_dir, lock=False):
        print(f"error: drift: {stack}: terraform failed (its output above)", file=sys.stderr)
        return 1
    plan_json = stack_dir / PLAN_JSON
    try:
        plan = json.loads(plan_json.read_text())
        review = review_plan(stack, plan)
    except (json.JSONDecodeError, PlanFormatError) as err:
        print(f"error: {plan_json}: {err}", file=sys.stderr)
        return 1
    if not _applied_resources(plan):
        env_name = stack.removeprefix("platform-")
        print(
            f"error: drift: {stack}: the state holds no resource: the environment was never applied (or its "
            f"backend is another one), so nothing can have drifted; deploy it first (make deploy ENV={env_name})",
            file=sys.stderr,
        )
        return 1
    before = {
        e.get("address"): (e.get("change") or {}).get("before")
        for e in plan.get("resource_drift") or []
        if isinstance(e, dict)
    }

    def who(change: Change) -> str:
        if env is None:
            return "who: not looked up (no environment file for this stack)"
        deployer = env.delivery_identities.deployer_email
        return who_changed(env.project, change.resource_type, before.get(change.address), deployer)

    code, lines = report(stack, review, who=who)
    print("\n".join(lines))
    _append("GITHUB_STEP_SUMMARY", "## Drift: " + stack + "\n\n```\n" + "\n".join(lines) + "\n```\n")
    return code


def _plan_to_file(stack_dir: Path, *, lock: bool) -> int:
    """terraform init, plan to PLAN_FILE (without the state lock unless `lock`) and show -json of it into PLAN_JSON,
    in `stack_dir`: 0, or the first failing command's code (Terraform prints why)."""
    code = _tf(stack_dir, "init", "-input=false", "-no-color")
    if code:
        return code
    lock_flags = [] if lock else ["-lock=false"]
    code = _tf(stack_dir, "plan", "-input=false", "-no-color", *lock_flags, f"-out={PLAN_FILE}")
    if code:
        return code
    with (stack_dir / PLAN_JSON).open("w") as handle:
        return _tf(stack_dir, "show", "-json", PLAN_FILE, stdout=handle)


def _applied_resources(plan: dict[str, Any]) -> list[Any]:
    """The managed resources of the plan's prior state (what the last apply left), its modules' included."""
    found: list[Any] = []
    modules = [((plan.get("prior_state") or {}).get("values") or {}).get("root_module") or {}]
    while modules:
        module = modules.pop()
        found += [r for r in module.get("resources") or [] if r.get("mode") == "managed"]
        modules += module.get("child_modules") or []
    return found


def cluster_holds(
    stack_dir: Path, body: Mapping[str, Any], plan: Mapping[str, Any], env: Environment | None
) -> dict[str, tuple[str, bool]]:
    """What the cluster the plan applies to refuses, read from it through the environment's cluster credentials:
    each local chart release the plan updates, held from the revision the cluster runs (Helm's record) to the one
    the apply installs; and each release it creates or updates, held to the CRDs the cluster serves (a field the
    API server would drop). A cluster that cannot be read holds each update until a person confirms it."""
    updates = planned(plan, "helm_release", "update")
    changed = planned(plan, "helm_release", "create", "update")
    if not changed:
        return {}

    def cannot(why: str) -> Callable[[str, str], list[dict[str, Any]]]:
        def read(name: str, namespace: str) -> list[dict[str, Any]]:
            raise ValueError(f"the deployed revision of {namespace}/{name} cannot be read: {why}")

        return read

    if env is None:
        return refused_against_deployed(stack_dir, body, updates, cannot("no environment file names its cluster"))
    try:
        with cluster_env(env) as run_env:
            held = refused_against_deployed(
                stack_dir, body, updates, lambda name, namespace: deployed_objects(run_env, name, namespace)
            )
            held.update(interrupted_releases(body, changed, lambda n, ns: interrupted(run_env, n, ns)))
            try:
                served = served_crds(run_env)
            except ValueError as err:
                served = {}
                print(f"warning: {err}: the releases are not held to the CRDs the cluster serves", file=sys.stderr)
    except (ToolsMissing, Unreachable) as err:
        return refused_against_deployed(stack_dir, body, updates, cannot(str(err)))
    for address, (why, confirmable) in dropped_fields(stack_dir, body, changed, served).items():
        was = held.get(address)
        held[address] = (f"{was[0]}; {why}", False) if was else (why, confirmable)
    return held


def interrupted_releases(
    body: Mapping[str, Any], addresses: list[str], read: Callable[[str, str], tuple[str, str] | None]
) -> dict[str, tuple[str, bool]]:
    """Each release of `addresses` that an interrupted apply left pending in the cluster (`read`: its newest Helm
    record, when pending): held, not confirmable, with the next step. The apply would fail on it ("another operation
    (install/upgrade/rollback) is in progress"), and so would every one after."""
    releases = (body.get("resource") or {}).get("helm_release") or {}
    held = {}
    for address in addresses:
        release = releases.get(address.removeprefix("helm_release.")) or {}
        name, namespace = str(release.get("name", "")), str(release.get("namespace", ""))
        pending = read(name, namespace) if name else None
        if pending is not None:
            record, status = pending
            held[address] = (
                f"release {namespace}/{name} is {status}: an earlier apply was interrupted during it, and Helm "
                "refuses every install or upgrade of it until that record goes. Next: `kubectl delete configmap "
                f"{record} -n {namespace}` (the last finished revision is current again; a first install is made "
                "again and adopts what the interrupted one created), then run the deploy again",
                False,
            )
    return held


def slurm_blueprint(env: Environment) -> str | None:
    """The environment's Slurm blueprint and deployment file as canonical JSON (None without a `slurm` section)."""
    if env.slurm is None:
        return None
    from infra.slurm.blueprint import blueprint, deployment

    return json.dumps({"blueprint": blueprint(env), "deployment": deployment(env)}, indent=1, sort_keys=True)


def commands() -> list[str]:
    """What `apply` runs in the stack's folder, as a dry run shows it."""
    tf = " ".join(map(shlex.quote, _terraform()))
    return [
        f"{tf} init -input=false -no-color",
        f"{tf} plan -input=false -no-color -out={PLAN_FILE}",
        f"{tf} show -json {PLAN_FILE} (then the review's gate on it: exit 3 blocks)",
        f"{tf} apply -input=false -no-color {PLAN_FILE}",
    ]


def apply(
    stack_dir: Path,
    stack: str,
    confirmed: Iterable[str],
    *,
    approved: str | None,
    env: Environment | None = None,
    ask: bool = False,
    before_apply: Callable[[], int] | None = None,
) -> int:
    """Plan, gate, and apply that same plan file (when its digest is the approved one; with `ask`, when the person
    at the terminal types yes, as `terraform apply` asks). `before_apply` runs only once the plan is known to be the
    one to apply (the deploy's API enables and CRD adoption: nothing changes the project before then); its non-zero
    exit stops the apply."""
    code, digest = plan_and_gate(stack_dir, stack, confirmed, env=env)
    if code:
        print(f"error: {stack}: not applied (the plan or its gate stopped it, exit {code})", file=sys.stderr)
        return code
    if approved is not None and digest != approved:
        if already_applied(digest, approved):
            print(
                f"{stack}: this plan changes nothing and the approved one ({approved}) is applied: an earlier run "
                "of this job applied it and stopped after (a rerun after a partial success); nothing to apply, the "
                "steps after it run",
                file=sys.stderr,
            )
            return 0
        print(
            f"error: {stack}: not applied: this plan ({digest}) is not the one approved ({approved}); "
            "the state or the code moved since the plan job, run the workflow again",
            file=sys.stderr,
        )
        return NOT_APPROVED
    if ask:
        if not sys.stdin.isatty():
            print(
                f"error: {stack}: not applied: nothing here can answer whether to apply the plan above (no "
                "terminal); review it and pass --auto-approve (make deploy AUTO_APPROVE=1)",
                file=sys.stderr,
            )
            return NOT_CONFIRMED
        answer = input(f"Apply this plan to {stack}? Only 'yes' will be accepted: ")
        if answer.strip() != "yes":
            print(f"{stack}: not applied", file=sys.stderr)
            return NOT_CONFIRMED
    if before_apply is not None:
        code = before_apply()
        if code:
            return code
    return _tf(stack_dir, "apply", "-input=false", "-no-color", PLAN_FILE)


def confirmed_from_env() -> list[str]:
    return [a for a in re.split(r"[\s,]+", os.environ.get("CONFIRM_CHANGE", "").strip()) if a]


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m scripts.apply", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("phase", choices=["plan", "drift", "apply"])
    parser.add_argument("stack_dir", type=Path, help="a synthesized stack: cdktf.out/stacks/platform-<env>")
    parser.add_argument("--stack", default=None, help="the stack's name (default: the folder's)")
    parser.add_argument("--lock", choices=["true", "false"], default="true", help="plan: take the state lock")
    parser.add_argument("--approved", default=None, help="apply: the digest of the plan the approver saw")
    args = parser.parse_args(argv)
    if not (args.stack_dir / STACK_FILE).is_file():
        print(f"error: {args.stack_dir}: no cdk.tf.json (synthesize first: make synth)", file=sys.stderr)
        return 2
    stack = args.stack or args.stack_dir.name
    try:
        env = environment_of(stack)
    except ConfigError as err:
        return refuse(err)
    if args.phase == "drift":
        return drift(args.stack_dir, stack, env=env)
    if args.phase == "plan":
        return plan_and_gate(args.stack_dir, stack, confirmed_from_env(), lock=args.lock == "true", env=env)[0]
    return apply(args.stack_dir, stack, confirmed_from_env(), approved=args.approved or None, env=env)


def environment_of(stack: str) -> Environment | None:
    """The environment file of `platform-<env>` (PLATFORM_ENVIRONMENTS_DIR), None for a stack that has none."""
    path = environments_dir() / f"{stack.removeprefix('platform-')}.yaml"
    return load_environment(path) if stack.startswith("platform-") and path.is_file() else None


if __name__ == "__main__":
    sys.exit(main())
