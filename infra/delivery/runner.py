"""The workflow runner as a host: the commands a job of `.github/workflows/` finds on PATH at each step.

A step can call what GitHub's pinned runner image has, what an earlier `uses:` step of the same job put on PATH, and
what an earlier `run:` step installed with the platform's own installer. The stack's providers also run a command
of their own during every plan and apply (the Kubernetes and Helm providers' credential plugin,
infra/constructs/providers.py), which must be there too; `missing` says, per step, what is not.

The image's commands are those the runner-images build scripts install that the workflows may call. Where a script
installs a package and removes its apt source (the Google Cloud CLI), only that package's commands are there: the
GKE credential plugin is a package of its own, `google-cloud-cli-gke-gcloud-auth-plugin`, so a job installs it
(google-github-actions/setup-gcloud's `install_components`) or does without.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

RUNNER_IMAGE = "ubuntu-24.04"
# The Cloud CLI a setup-gcloud step installs (its `version` input; the action's default, 'latest', floats). Its
# gke-gcloud-auth-plugin component has the same version (Debian/Ubuntu's google-cloud-cli-gke-gcloud-auth-plugin
# 547.0.0 beside google-cloud-cli 547.0.0).
CLOUD_SDK_VERSION = "547.0.0"
SOURCES = (
    "actions/runner-images images/ubuntu/scripts/build/install-google-cloud-cli.sh (apt-get install "
    "google-cloud-cli, then the apt source is removed; no gke-gcloud-auth-plugin)",
    "actions/runner-images images/ubuntu/scripts/build/install-kubernetes-tools.sh (kubectl, helm, kustomize, kind, "
    "minikube)",
    "actions/runner-images images/ubuntu/scripts/build/install-github-cli.sh (gh), install-git.sh (git)",
    "https://cloud.google.com/kubernetes-engine/docs/how-to/cluster-access-for-kubectl#install_plugin (the plugin "
    "is its own component: gcloud components install gke-gcloud-auth-plugin, or the apt package "
    "google-cloud-cli-gke-gcloud-auth-plugin)",
    "google-github-actions/setup-gcloud @ v3.0.1 action.yml (inputs version, default 'latest'; install_components)",
)
# What the image has that the workflows may call (the base system's shell tools are taken as there).
RUNNER_COMMANDS = frozenset(
    {"bash", "git", "gh", "make", "curl", "gcloud", "gsutil", "bq", "kubectl", "helm", "kustomize", "kind", "minikube"}
)
# What each action the workflows use puts on PATH (owner/name, without the pinned ref).
ACTION_COMMANDS: dict[str, frozenset[str]] = {
    "actions/checkout": frozenset(),
    "actions/setup-python": frozenset({"python", "python3", "pip"}),
    "actions/setup-node": frozenset({"node", "npm", "npx"}),
    "google-github-actions/auth": frozenset(),
    "hashicorp/setup-terraform": frozenset({"terraform"}),
    "google-github-actions/setup-gcloud": frozenset({"gcloud", "gsutil", "bq"}),
}
# The commands of the Cloud CLI components a setup-gcloud step may install (`install_components`).
COMPONENT_COMMANDS: dict[str, frozenset[str]] = {"gke-gcloud-auth-plugin": frozenset({"gke-gcloud-auth-plugin"})}
# `run:` steps that install commands for the later steps (scripts/tools.py adds its folder to $GITHUB_PATH).
RUN_INSTALLS: dict[str, frozenset[str]] = {"scripts.tools install": frozenset({"packer", "gcluster"})}
# `run:` steps that plan or apply a stack with Terraform (scripts/apply.py, scripts/deploy.py).
APPLIES = re.compile(r"scripts\.apply plan|scripts\.deploy deploy")


def action(step: dict[str, Any]) -> str | None:
    """owner/name of a `uses:` step (None for a `run:` step)."""
    uses = step.get("uses")
    return str(uses).split("@", 1)[0] if uses else None


def installs(step: dict[str, Any]) -> frozenset[str]:
    """What a step puts on PATH for the steps after it. An unknown action is refused: its commands are not known."""
    name = action(step)
    if name is None:
        run = str(step.get("run", ""))
        return frozenset().union(*(cmds for words, cmds in RUN_INSTALLS.items() if words in run))
    if name not in ACTION_COMMANDS:
        raise KeyError(f"action {name}: what it puts on PATH is not recorded in infra/delivery/runner.py")
    commands = ACTION_COMMANDS[name]
    if name == "google-github-actions/setup-gcloud":
        components = str((step.get("with") or {}).get("install_components", ""))
        for component in filter(None, (c.strip() for c in components.split(","))):
            commands |= COMPONENT_COMMANDS.get(component, frozenset())
    return commands


def commands_at(job: dict[str, Any]) -> Iterator[tuple[int, dict[str, Any], frozenset[str]]]:
    """(index, step, commands on PATH when it runs) of each step of `job`."""
    have = RUNNER_COMMANDS
    for index, step in enumerate(job.get("steps") or []):
        yield index, step, have
        have = have | installs(step)


def provider_commands(stack: dict[str, Any]) -> frozenset[str]:
    """The commands the stack's providers run while Terraform plans or applies it (client-go exec plugins)."""
    found: set[str] = set()
    for name, blocks in (stack.get("provider") or {}).items():
        for block in blocks:
            execs = block.get("exec") if name == "kubernetes" else (block.get("kubernetes") or {}).get("exec")
            for one in execs if isinstance(execs, list) else [execs] if execs else []:
                found.add(str(one["command"]))
    return frozenset(found)


def missing(job: dict[str, Any], stack: dict[str, Any]) -> list[tuple[int, str, list[str]]]:
    """(index, step name, commands not on PATH) of each step that plans or applies the stack without what Terraform
    and the stack's providers run, and what the gate reads the deployed releases with (gcloud's credentials and
    kubectl: scripts/cluster_access.py)."""
    needed = frozenset({"terraform", "gcloud", "kubectl"}) | provider_commands(stack)
    out = []
    for index, step, have in commands_at(job):
        if APPLIES.search(str(step.get("run", ""))) and not needed <= have:
            out.append((index, str(step.get("name", "")), sorted(needed - have)))
    return out


def unpinned(job: dict[str, Any]) -> list[tuple[int, str]]:
    """(index, version given) of each setup-gcloud step that does not install CLOUD_SDK_VERSION exactly."""
    out = []
    for index, step in enumerate(job.get("steps") or []):
        if action(step) == "google-github-actions/setup-gcloud":
            version = str((step.get("with") or {}).get("version", "latest"))
            if version != CLOUD_SDK_VERSION:
                out.append((index, version))
    return out


AUTH = "google-github-actions/auth"
# Steps that download or install software: every action that sets up a tool, and the run steps that install
# packages (make's venv, node and cluster-toolkit targets; make plan installs the policy gate's environment; the
# other targets need only the venv, installed by an earlier step; scripts.tools builds and downloads; pip, npm).
INSTALLING_RUN = re.compile(
    r"make (venv|node|cluster-toolkit|plan)\b|scripts\.tools install|pip install|npm (ci|install)"
)


def installs_after_credentials(job: dict[str, Any]) -> list[tuple[int, str]]:
    """(index, what) of each step that downloads or installs software after the job's credentials exist: a package
    or tool fetched then could be made to read them (~500 packages were installed after the deployer's
    credentials were live)."""
    steps = job.get("steps") or []
    first = next((i for i, step in enumerate(steps) if action(step) == AUTH), None)
    if first is None:
        return []
    out = []
    for index, step in enumerate(steps[first + 1 :], start=first + 1):
        name = action(step)
        if name is not None and name.split("/", 1)[1].startswith("setup-"):
            out.append((index, name))
        elif name is None and INSTALLING_RUN.search(str(step.get("run", ""))):
            out.append((index, str(step.get("name") or step.get("run"))))
    return out
