"""`platform` (`python -m scripts.cli`): one command line for the platform's commands, whose exit codes reach the
caller.

    platform <command> [its arguments]      runs the command's `main(argv)` in this process and exits with its code
    platform <command> --help               the command's own help

`make` turns every failing recipe into its own exit 2, so a caller that branches on the code (CI, a script: 3 a
blocked review or destroy, 1 a refusal, 2 bad input) calls `.venv/bin/platform ...` (what the make targets run)
instead of `make`. Each command's codes are its module's (docs/reference.md, "Exit codes").
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from dataclasses import dataclass, field

from infra import settings
from scripts.parser import ArgumentParser, refuse


@dataclass(frozen=True)
class Command:
    """A command of `platform`: the module whose `main(argv)` runs it, and the arguments put before the caller's."""

    module: str
    summary: str
    prefix: list[str] = field(default_factory=list)


COMMANDS: dict[str, Command] = {
    "plan": Command("scripts.plan", "synth, policy, rules, blueprints, requests, scripts, review: all or nothing"),
    "review": Command("scripts.review", "the plan review of a real plan (--plan) or of cdktf.out; 3 blocked"),
    "preflight": Command("scripts.preflight", "check an environment with your credentials before anything is applied"),
    "deploy": Command("scripts.deploy", "deploy an environment (its Slurm cluster after)", ["deploy"]),
    "deploy-infra": Command(
        "scripts.deploy", "first deploy: everything but the releases of unbuilt images", ["deploy", "--infra-only"]
    ),
    "destroy": Command("scripts.deploy", "tear an environment down; 3 refused", ["destroy"]),
    "apply": Command("scripts.apply", "plan a stack to a file, gate it, apply that file (the deploy workflows)"),
    "drift": Command(
        "scripts.apply", "what changed in an environment outside Terraform since its last apply", ["drift"]
    ),
    "cost": Command("scripts.cost", "what an environment spent by team, node pool and service; 2 over a budget"),
    "image": Command("scripts.image", "build, push and pin one image, or every image with --all"),
    "promote": Command("scripts.promote", "copy the release pins from one environment to another"),
    "pin": Command("scripts.pin", "set one release pin (a controller version, a chart, an image digest)"),
    "rollback": Command("scripts.pin", "put one release pin back to its previous value (git history)", ["--rollback"]),
    "blue-green": Command("scripts.blue_green", "replace a GKE slice beside the old one: start, then --finish"),
    "new-env": Command("scripts.new_env", "write a new environment file from another one"),
    "image-digests": Command("scripts.image_digests", "resolve the upstream images still pinned by tag"),
    "vertex-submit": Command("scripts.vertex", "create an environment's Vertex AI job", ["submit"]),
    "vm-up": Command("scripts.vms", "create a VM group's VMs", ["up"]),
    "vm-down": Command("scripts.vms", "delete a VM group's VMs", ["down"]),
    "rules": Command("scripts.rules", "every rule on the synthesized stacks and rendered releases"),
    "slurm": Command("scripts.slurm", "the Slurm blueprints; fetch Cluster Toolkit's pinned module interfaces"),
    "shell": Command("scripts.shell", "the generated shell scripts; fetch the pinned files they source"),
    "tools": Command("scripts.tools", "packer and gcluster at their pinned versions"),
    "logs": Command("scripts.logs", "where each workload of an environment writes its logs (queries, commands)"),
    "recipes": Command("scripts.recipes", "which training recipes run on each environment's training slice"),
    "deploy-local": Command(
        "scripts.deploy_local",
        "the deploy's path applied to the local cluster (OpenTofu, real providers and controllers)",
    ),
    "destroy-local": Command(
        "scripts.deploy_local", "destroy what deploy-local applied; list what is left behind", ["--destroy"]
    ),
    "drift-local": Command(
        "scripts.deploy_local", "what changed on the local cluster outside OpenTofu since deploy-local", ["--drift"]
    ),
    "rehearse-local": Command(
        "scripts.rehearse",
        "a contention rehearsal on the local cluster: each queue filled, who ran, waited, was preempted",
    ),
    "cluster-local": Command("scripts.cluster_local", "a local control plane with an environment's nodes (KWOK)"),
    "tofu": Command("scripts.tofu", "the real Terraform engine: build OpenTofu and the providers, validate the stacks"),
    "train": Command(
        "scripts.train",
        "train: local (JaxTrainer on CPU workers), submit (a queued RayJob, or to the Ray cluster) or args",
    ),
    "training-pause": Command(
        "scripts.training", "lend the queued training cluster's slices to the teams that borrow them", ["pause"]
    ),
    "training-resume": Command(
        "scripts.training", "take the training slices back (Kueue preempts the borrowers)", ["resume"]
    ),
    "status": Command("scripts.status", "what runs on an environment's cluster: queue, state, slices, cost so far"),
    "serve-local": Command("workloads.server.__main__", "serve the canary checkpoint of a local run over HTTP"),
    "saxml": Command("scripts.saxml", "the Saxml client: publish, list, generate, unpublish"),
    "plot": Command("scripts.plot", "the local run's loss, step time and goodput, and each review's cost, as PNGs"),
    "completion": Command(
        "scripts.completion", 'print the bash or zsh completion script (eval "$(platform completion bash)")'
    ),
}


def _prog() -> str:
    return "platform" if os.path.basename(sys.argv[0]) == "platform" else "python -m scripts.cli"


def run(name: str, argv: list[str]) -> int:
    """Run command `name` with `argv`; its exit code (argparse's usage error included: 2)."""
    command = COMMANDS[name]
    main = importlib.import_module(command.module).main
    try:
        code = main([*command.prefix, *argv])
    except SystemExit as exit_:  # argparse: --help (0) and usage errors (2)
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except settings.SettingError as err:  # a PLATFORM_* variable that does not parse, wherever it is read
        code = refuse(err)
    return int(code or 0)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["__complete"]:  # the completion script's question at a tab (scripts/completion.py)
        from scripts.completion import names

        print("\n".join(names(args[1] if len(args) > 1 else "")))
        return 0
    parser = ArgumentParser(
        prog=_prog(),
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="commands:\n"
        + "\n".join(f"  {name:14} {c.summary}" for name, c in COMMANDS.items())
        + "\n\nexit codes: the command's own (docs/reference.md); 2 an unknown command",
    )
    parser.add_argument("command", choices=sorted(COMMANDS), metavar="command", help="one of the commands below")
    if not args or args[0] not in COMMANDS:
        try:
            parser.parse_args(args[:1])  # --help, or the usage error naming the commands
        except SystemExit as exit_:
            return int(exit_.code or 0)
        return 2
    return run(args[0], args[1:])


if __name__ == "__main__":
    sys.exit(main())
