"""Deploy and tear down one environment with the pinned cdktf CLI (and `gcluster` for its Slurm cluster), with
the guards a real project needs.

  python -m scripts.deploy deploy <env> [--infra-only] [--skip-image] [--auto-approve] [--dry-run]
  python -m scripts.deploy destroy <env> [--confirm platform-<env>] [--auto-approve] [--dry-run]

deploy      refuses while a release image is still at the placeholder digest, and says how a fresh
            environment gets there: `--infra-only` first (everything but the releases that run those
            images: the registry included), then `make image` for each, then deploy again. Then, where the
            environment has a Slurm cluster, `gcluster deploy` of its blueprint (written and validated as
            `make plan` does, in cdktf.out/slurm/<env>), with the Terraform and Packer the platform pins;
            `--skip-image` leaves out the node image's Packer build when its inputs have not changed.
            Before any apply, the environment's APIs are enabled and called until each one answers
            (scripts/apis.py: a just-enabled API refuses calls for minutes, and the provider does not retry).
            Then, where the cluster exists, the controllers' crds/ CRDs a first install left to no release are
            marked as their releases' (scripts/adopt_crds.py), as the post-renderer now applies them.
destroy     shows what would go, refuses while anything is protected (prevent_destroy, GKE deletion
            protection) or a bucket would fail to delete half-way (no force_destroy), and runs only with
            `--confirm platform-<env>` typed out. The Slurm cluster and the VM groups' VMs go first: they
            hold the platform's networks, and neither Slurm's nodes nor a bulkInsert's VMs are in any state.
            Before them, what GKE's controllers built outside Terraform: each Inference Gateway's load balancer
            (scripts/teardown.py: its objects deleted, then gcloud listings until GKE has removed it all).

Each command synthesizes the environment once, in a temporary folder at the repository root (where the stack's
relative chart and post-renderer paths resolve: infra/delivery/apply_paths.py): the preflight checks that stack, every
local file its apply opens is checked to be there. A deploy plans that stack to a file, runs the review's gate on
the plan, shows it and applies that same file (scripts/apply.py; without --auto-approve only after a typed "yes");
a destroy runs `cdktf destroy <stack> --skip-synth --output <folder>`, without running the app again.
The CLIs are `npx --no-install cdktf`, `gcluster` and `python -m scripts.vms` unless PLATFORM_CDKTF /
PLATFORM_GCLUSTER / PLATFORM_VMS name others, and `gcloud`, `kubectl` unless PLATFORM_GCLOUD / PLATFORM_KUBECTL
do (tests use stand-ins). Exit codes (a dry run exits as the deploy would, after showing every step): 0 done, 2 bad
input or refused deploy, 1 a failed preflight (scripts/preflight.py; nothing applied), 3 refused destroy, else the
CLI's.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from infra import settings
from infra.cdk.layout import STACK_FILE, stack_dir, stack_name
from infra.config import PLACEHOLDER_DIGEST, ConfigError, Environment, environments_dir
from infra.delivery.apply_paths import synth_folder, unresolved
from infra.synth.load import load_named
from scripts import preflight, teardown
from scripts.adopt_crds import adopt
from scripts.apis import enable_and_wait
from scripts.parser import ArgumentParser, refuse

OUT = Path("cdktf.out")


def _cdktf() -> list[str]:
    return settings.CDKTF.command()


def _gcluster() -> list[str]:
    return settings.GCLUSTER.command()


def _vms() -> list[str]:
    return settings.VMS.command([sys.executable, "-m", "scripts.vms"])


def _tool_version(tool: str) -> str | None:
    """The version of `tool` on PATH (terraform, packer), or None when there is none."""
    if shutil.which(tool) is None:
        return None
    done = subprocess.run([tool, "version"], capture_output=True, text=True, check=False)
    match = re.search(r"v?([0-9]+\.[0-9]+\.[0-9]+)", done.stdout)
    return match.group(1) if match else None


def tool_problems(needs: dict[str, str]) -> list[str]:
    """Why the tools on PATH are not the versions the platform pins (empty: they are)."""
    problems = []
    for tool, pinned in needs.items():
        found = _tool_version(tool)
        if found != pinned:
            problems.append(
                f"{tool} {found or '(none on PATH)'}: the platform pins {tool} {pinned} "
                f"(infra/catalogue/cluster_toolkit.py; "
                "Cluster Toolkit's modules require Terraform >= 1.12.2 and Packer >= 1.15.3, and gcluster would "
                "otherwise fetch Packer 1.15.0)"
            )
    return problems


def _slurm_dir(env: Environment) -> Path:
    return OUT / "slurm" / env.name


def _write_slurm(env: Environment, *, dry_run: bool) -> int:
    """Write and validate the environment's blueprint as `make plan` does (a dry run only validates it, in a
    temporary directory); 2 when refused."""
    from infra.slurm import interfaces
    from scripts.slurm import write

    with tempfile.TemporaryDirectory() as tmp:
        try:
            report = write(env, Path(tmp) if dry_run else OUT, interfaces.locate())
        except interfaces.InterfacesMissing as err:
            return refuse(err)
    for finding in report.findings:
        print(f"error: {_slurm_dir(env)}/blueprint.yaml: {finding.path}: {finding.message}", file=sys.stderr)
    if not report.ok:
        return 2
    print(f"slurm: {_slurm_dir(env)}/blueprint.yaml: {report.summary()}")
    return 0


def _gcluster_create_flags(env: Environment) -> list[str]:
    folder = _slurm_dir(env)
    return [str(folder / "blueprint.yaml"), "-d", str(folder / "deployment.yaml"), "-o", str(folder / "gcluster"), "-w"]


def deploy_slurm(env: Environment, *, skip_image: bool, auto_approve: bool, dry_run: bool) -> int:
    """`gcluster deploy` of the environment's Slurm cluster, after the platform stack it reuses."""
    from infra.catalogue.cluster_toolkit import PACKER_VERSION, TERRAFORM_VERSION

    code = _write_slurm(env, dry_run=dry_run)
    if code:
        return code
    needs = {"terraform": TERRAFORM_VERSION, **({} if skip_image else {"packer": PACKER_VERSION})}
    if not dry_run:
        problems = tool_problems(needs)
        if problems:
            print(f"error: slurm-{env.name}: not deployed:", *problems, sep="\n  ", file=sys.stderr)
            return 2
    command = [
        *_gcluster(),
        "deploy",
        *_gcluster_create_flags(env),
        *(["--skip", "image"] if skip_image else []),
        *(["--auto-approve"] if auto_approve else []),
    ]
    return _run(command, {}, dry_run=dry_run)


def destroy_slurm(env: Environment, *, auto_approve: bool, dry_run: bool) -> int:
    """`gcluster destroy` of the environment's Slurm cluster: the deployment folder is written again from the
    blueprint first (the state is in the bucket), so a fresh clone can destroy what another one deployed."""
    assert env.slurm is not None
    code = _write_slurm(env, dry_run=dry_run)
    if code:
        return code
    folder = _slurm_dir(env) / "gcluster" / env.slurm.name
    code = _run([*_gcluster(), "create", *_gcluster_create_flags(env)], {}, dry_run=dry_run)
    if code:
        return code
    return _run(
        [*_gcluster(), "destroy", str(folder), *(["--auto-approve"] if auto_approve else [])], {}, dry_run=dry_run
    )


def _run(command: list[str], extra_env: dict[str, str], *, dry_run: bool) -> int:
    shown = " ".join([*(f"{k}={v}" for k, v in extra_env.items()), *map(shlex.quote, command)])
    if dry_run:
        print(f"dry run, would run: {shown}")
        return 0
    print(f"running: {shown}", flush=True)
    return subprocess.run(command, env={**os.environ, **extra_env}, check=False).returncode


class Synthesized:
    """One environment's stack, synthesized once per command into a temporary folder, on first use: what the
    preflight checks, what the gate reviews and what cdktf applies (`cdktf deploy --skip-synth --output <folder>`,
    so the CLI does not run the app a second time)."""

    def __init__(self, env: Environment, folder: Path, *, omit_unbuilt: bool = False) -> None:
        self.env, self.folder, self.omit_unbuilt = env, folder, omit_unbuilt

    @functools.cached_property
    def left_out(self) -> list[str]:
        """Synthesizes (once); the releases left out until their images are built (with omit_unbuilt)."""
        from infra.synth.app import synth

        return synth({self.env.name: self.env}, self.folder, omit_unbuilt=self.omit_unbuilt)[self.env.name]

    @property
    def stack_dir(self) -> Path:
        """The synthesized stack's folder (synthesized on first use)."""
        _ = self.left_out
        return stack_dir(self.folder, stack_name(self.env.name))

    def stack(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads((self.stack_dir / STACK_FILE).read_text())
        return loaded

    def unresolved(self) -> int:
        """2, each missing file named, when a local file the apply opens (a chart, a post-renderer) is not there
        from the stack's folder, where Terraform runs; else 0."""
        problems = unresolved(self.stack_dir, self.stack())
        for problem in problems:
            print(f"error: {self.stack_dir.name}: {problem}", file=sys.stderr)
        return 2 if problems else 0

    def cdktf(self, action: str, auto_approve: bool) -> list[str]:
        """The cdktf CLI's command for `action` (deploy, destroy) on this synthesized output."""
        skip = ["--skip-synth", "--output", str(self.folder)]
        return [*_cdktf(), action, self.stack_dir.name, *skip, *(["--auto-approve"] if auto_approve else [])]


def deploy(
    env: Environment,
    path: Path,
    *,
    infra_only: bool,
    skip_image: bool,
    auto_approve: bool,
    dry_run: bool,
    approved: str | None = None,
) -> int:
    stack = f"platform-{env.name}"
    # What a real deploy would stop at; a dry run says it and goes on, to show every command (offline included).
    stops: list[str] = []
    would_exit = 0  # the code the first of them makes a real deploy exit with
    placeholders = env.placeholder_images()
    if placeholders and not infra_only:
        names = ", ".join(placeholders)
        print(
            f"{'dry run: a deploy refuses: ' if dry_run else 'error: '}{path}: release.images: {names} still at the "
            f"placeholder digest {PLACEHOLDER_DIGEST[:10]}...; build and pin them first.\n"
            "A fresh environment is deployed in three steps:\n"
            f"  1. make deploy-infra ENV={env.name}    everything except the releases that run those images "
            "(the registry included)\n"
            f"  2. make images ENV={env.name}    every image built, then all their digests pinned in one change "
            f"(or make image IMAGE=<name> ENV={env.name} for one: {names})\n"
            f"  3. make deploy ENV={env.name}",
            file=sys.stderr,
        )
        if not dry_run:
            return 2
        stops.append("images at the placeholder digest")
        would_exit = would_exit or 2
    with synth_folder(stack, keep=dry_run) as tmp:
        synthesized = Synthesized(env, Path(tmp), omit_unbuilt=infra_only)
        code = synthesized.unresolved()
        if code:
            return code
        if dry_run:
            print(
                f"dry run: {stack} synthesized as the deploy applies it, kept: {synthesized.stack_dir / 'cdk.tf.json'}"
            )
        # Preflight: the pinned tools, credentials, APIs, roles and quota, before anything is applied.
        code = preflight.for_deploy(env, skip_image=skip_image, stack=synthesized.stack)
        if code and not dry_run:
            return code
        if code:
            print("dry run: the preflight above failed: a deploy would stop there and apply nothing; going on")
            stops.append("the preflight")
            would_exit = would_exit or code
        if infra_only:
            if synthesized.left_out:
                print(f"{stack}: left out until their images are built: {', '.join(synthesized.left_out)}")
        elif not placeholders:
            print(f"{stack}: every release image is pinned to a built digest")

        def prepare() -> int:
            """Once the plan is the one to apply (gated, approved, confirmed): the APIs, waited for until each
            answers (the provider does not retry a just-enabled API's refusal), then the controllers' crds/ CRDs a
            first install left to no release, made theirs (the post-renderer applies them). Before, both ran ahead
            of the plan's approval check: an apply job refused for a changed plan had already changed the project."""
            code = enable_and_wait(env, dry_run=dry_run)
            return code or adopt(env, dry_run=dry_run)

        # Always through the gate: plan to a file, gate it, show it, apply that same file (scripts/apply.py);
        # without --auto-approve, after a "yes".
        from scripts.apply import apply, commands, confirmed_from_env

        if dry_run:
            *planning, applying = commands()
            for command in planning:
                print(f"dry run, would run (in {synthesized.stack_dir}): {command}")
            code = prepare()
            print(f"dry run, would run (in {synthesized.stack_dir}): {applying}")
        else:
            code = apply(
                synthesized.stack_dir,
                stack,
                confirmed_from_env(),
                approved=approved,
                env=env,
                ask=not auto_approve,
                before_apply=prepare,
            )
    if not code and env.slurm is not None:
        # The Slurm cluster reuses the stack's network, service accounts and firewall rules: it comes after.
        code = deploy_slurm(env, skip_image=skip_image, auto_approve=auto_approve, dry_run=dry_run)
    if dry_run and not code:
        said = f"a deploy would stop at {' and '.join(stops)}" if stops else "nothing above would stop a deploy"
        print(f"dry run: done, nothing changed; {said}" + (f" (exit {would_exit}, as it would)" if stops else ""))
        return would_exit  # a script that branches on a dry run learns what the deploy would do
    return code


# What each guard is called in the environment file.
GUARD_FIELDS = {
    "google_container_cluster": "cluster.deletion_protection",
    "google_storage_bucket": "buckets.<key>.protect",
    "google_artifact_registry_repository": "registry.protect",
}
STATEFUL = ("google_container_cluster", "google_storage_bucket", "google_artifact_registry_repository")


def destroy_report(stack: dict[str, Any]) -> tuple[list[str], list[str], list[str]]:
    """(summary lines, guarded resources, buckets that would stop a destroy half-way) of a stack."""
    resources = stack.get("resource") or {}
    counts = Counter({rtype: len(bodies) for rtype, bodies in resources.items()})
    lines = [f"  {n:3d} {rtype}" for rtype, n in sorted(counts.items())]
    guarded, stuck = [], []
    for rtype, bodies in sorted(resources.items()):
        for body in bodies.values():
            name = body.get("name") or body.get("repository_id") or "?"
            if rtype in STATEFUL:
                lines.append(f"  stateful: {rtype} {name}")
            protected = (body.get("lifecycle") or {}).get("prevent_destroy") or body.get("deletion_protection")
            if protected:
                guarded.append(f"{rtype} {name} (set {GUARD_FIELDS.get(rtype, 'its protect field')}: false, deploy)")
            if rtype == "google_storage_bucket" and not protected and not body.get("force_destroy"):
                stuck.append(f"{rtype} {name}: no force_destroy, a non-empty bucket would stop the destroy half-way")
    return lines, guarded, stuck


def destroy(env: Environment, *, confirm: str | None, auto_approve: bool, dry_run: bool) -> int:
    stack_name = f"platform-{env.name}"
    with synth_folder(stack_name, keep=dry_run) as tmp:
        return _destroy(env, Synthesized(env, Path(tmp)), confirm=confirm, auto_approve=auto_approve, dry_run=dry_run)


def _destroy(
    env: Environment, synthesized: Synthesized, *, confirm: str | None, auto_approve: bool, dry_run: bool
) -> int:
    stack_name = synthesized.stack_dir.name
    stack = synthesized.stack()
    lines, guarded, stuck = destroy_report(stack)
    total = sum(len(b) for b in (stack.get("resource") or {}).values())
    print(f"{stack_name}: destroy would remove {total} resources:")
    print("\n".join(lines))
    outside = teardown.describe(env)
    if outside:
        print(f"{stack_name}: and first, what controllers made outside Terraform:")
        print("\n".join(f"  {line}" for line in outside))
    refusals = [f"protected: {g}" for g in guarded] + stuck
    if confirm != stack_name:
        refusals.append(f"not confirmed: pass CONFIRM={stack_name} (make destroy ENV={env.name} CONFIRM={stack_name})")
    if refusals:
        print(f"error: {stack_name}: destroy refused; nothing was changed:", file=sys.stderr)
        for line in refusals:
            print(f"  {line}", file=sys.stderr)
        return 3
    # First: GKE's load balancers of the Inference Gateways, while the cluster that can remove them is up.
    code = teardown.Teardown(env, dry_run=dry_run).run()
    if code:
        print(
            f"error: {stack_name}: what GKE made outside Terraform is still there; {stack_name} was left as it is",
            file=sys.stderr,
        )
        return code
    if env.slurm is not None:
        # Then: the Slurm nodes hold the platform's networks, and the nodes Slurm created are not in any state.
        code = destroy_slurm(env, auto_approve=auto_approve, dry_run=dry_run)
        if code:
            print(f"error: slurm-{env.name}: destroy failed; {stack_name} was left as it is", file=sys.stderr)
            return code
    for group in env.vm_groups:
        # A VM made by a bulkInsert is in no state, and holds the platform's networks: delete the group's VMs first.
        code = _run([*_vms(), "down", "--env", env.name, "--group", group], {}, dry_run=dry_run)
        if code:
            print(f"error: VM group {group}: deleting its VMs failed; {stack_name} was left as it is", file=sys.stderr)
            return code
    return _run(synthesized.cdktf("destroy", auto_approve), {}, dry_run=dry_run)


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m scripts.deploy", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["deploy", "destroy"])
    parser.add_argument("env")
    parser.add_argument("--infra-only", action="store_true", help="deploy: leave out releases of unbuilt images")
    parser.add_argument("--skip-image", action="store_true", help="deploy: leave out the Slurm node image's build")
    parser.add_argument("--confirm", help="destroy: the stack's name, platform-<env>")
    parser.add_argument("--auto-approve", action="store_true")
    parser.add_argument("--dry-run", action="store_true", help="show what would run; change nothing")
    parser.add_argument("--approved", default=None, help="deploy: the plan digest the approver saw (prod's workflow)")
    args = parser.parse_args(argv)
    path = environments_dir() / f"{args.env}.yaml"
    try:
        env = load_named(args.env)
    except ConfigError as err:
        return refuse(err)
    if args.action == "deploy":
        return deploy(
            env,
            path,
            infra_only=args.infra_only,
            skip_image=args.skip_image,
            auto_approve=args.auto_approve,
            dry_run=args.dry_run,
            approved=args.approved or None,
        )
    return destroy(env, confirm=args.confirm, auto_approve=args.auto_approve, dry_run=args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
