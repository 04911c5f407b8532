"""Preflight: what an apply of one environment needs, checked with the user's credentials before anything is applied.

  python -m scripts.preflight <env> [--skip-image] [--infra-only] [--stack FILE] [--json]
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

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infra import settings
from infra.catalogue.cluster_toolkit import CLUSTER_TOOLKIT, PACKER_VERSION, TERRAFORM_VERSION
from infra.catalogue.deployer_roles import UnknownResourceType
from infra.catalogue.gcp_apis import platform_apis
from infra.cdk.layout import read_stack, stack_name
from infra.config import ConfigError, Environment
from infra.constructs.providers import CREDENTIAL_PLUGIN
from infra.preflight import checks
from infra.preflight.checks import print_roles, required_billing_roles, required_roles
from infra.preflight.quota import asks
from infra.preflight.result import Result
from infra.preflight.transport import Answer, CredentialsRefused, RecordedTransport, Transport, default_transport
from infra.synth.load import load_named
from scripts import tools
from scripts.parser import ArgumentParser, refuse

__all__ = [
    "Answer",
    "CredentialsRefused",
    "RecordedTransport",
    "Transport",
    "asks",
    "default_transport",
    "for_deploy",
    "main",
    "report",
    "run",
]


def gcluster_command() -> list[str]:
    return settings.GCLUSTER.command()


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


def synthesized(env: Environment, *, infra_only: bool) -> dict[str, Any]:
    """The environment's stack, synthesized in a temporary folder (what `cdktf deploy` will apply)."""
    from infra.synth.app import synth

    with tempfile.TemporaryDirectory() as tmp:
        synth({env.name: env}, Path(tmp), omit_unbuilt=infra_only)
        stack = read_stack(Path(tmp), stack_name(env.name))
    return stack


def run(
    env: Environment,
    *,
    stack: Callable[[], dict[str, Any]],
    transport: Callable[[Any], Transport],
    skip_image: bool = False,
    deploy_enables: tuple[str, ...] = (),
) -> list[Result]:
    """Every check, in order: the tools here, then those that need credentials (infra/preflight/checks.py)."""
    tools_found = check_tools(env, skip_image=skip_image)
    return [tools_found, *checks.run(env, stack=stack, transport=transport, deploy_enables=deploy_enables)]


def report(env: Environment, results: list[Result]) -> int:
    """Print every result (failures to stderr as well); 1 when one failed."""
    failed = [r for r in results if r.status == "fail"]
    for result in results:
        mark = {"ok": "ok  ", "fail": "FAIL", "warn": "WARN", "skip": "--  "}[result.status]
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
    parser = ArgumentParser(
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
    parser.add_argument(
        "--json", action="store_true", help="print the checks as one JSON document (the exit code is the same)"
    )
    args = parser.parse_args(argv)
    try:
        env = load_named(args.env)
    except ConfigError as err:
        return refuse(err)

    def stack() -> dict[str, Any]:
        if args.stack is not None:
            loaded: dict[str, Any] = json.loads(args.stack.read_text())
            return loaded
        return synthesized(env, infra_only=args.infra_only)

    if args.print_roles:
        try:
            the_stack = stack()
            roles = required_roles(the_stack)
        except UnknownResourceType as err:
            return refuse(err, 1)
        print_roles(env, roles, required_billing_roles(the_stack))
        return 0
    results = run(env, stack=stack, transport=default_transport, skip_image=args.skip_image)
    if args.json:
        failed = [r.check for r in results if r.status == "fail"]
        checks = [{"check": r.check, "status": r.status, "lines": r.lines} for r in results]
        print(json.dumps({"environment": env.name, "passed": not failed, "failed": failed, "checks": checks}, indent=1))
        return 1 if failed else 0
    return report(env, results)


if __name__ == "__main__":
    sys.exit(main())
