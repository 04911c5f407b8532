"""Every shell script the platform generates, with the host it runs on: the inventory `make plan` runs and checks.

`generated_scripts(env)` lists them (the Slurm cluster's batch jobs, its prolog and epilog, the boot-time runners of
its blueprint; VM startup scripts and Vertex AI entry scripts are registered here by their packages); `infra.shell.run`
runs each under bash with `set -euo pipefail` against its host's record (`infra.catalogue.hosts`), with stand-ins
for cloud and host commands and the real pinned upstream files it sources, and ShellCheck reads each one; the rules
of `infra/rules/host_scripts.py` hold each to its host's facts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from infra.config import Environment


@dataclass(frozen=True)
class Pinned:
    """A file's content that is a pinned upstream file (`infra/shell/pinned-files.yaml`), by key."""

    key: str


@dataclass(frozen=True)
class GeneratedScript:
    env: str  # environment name
    name: str  # e.g. "slurm/prolog.sh", "vms/a3mega/startup.sh", "vertex/nccl-test/entry.sh"
    text: str
    host: str  # HOSTS key it runs on
    sources: tuple[
        str, ...
    ] = ()  # pinned upstream files it sources, by pinned-file key (e.g. "tcpxo-nccl-env-profile")
    runtime_env: tuple[tuple[str, str], ...] = ()  # variables the runtime gives it (SLURM_JOB_ID, CLUSTER_SPEC, ...)
    # Files on the host when it runs (absolute path -> content, or a pinned file): what other parts of the platform
    # (or a pinned upstream file) put there first, e.g. the batch jobs the controller installs, the TCPXO profile.
    files: tuple[tuple[str, str | Pinned], ...] = ()
    # Commands the image has besides its host record's: what the environment's own image build installs.
    image_commands: frozenset[str] = frozenset()
    # Whether the environment's image build lifts the host's user-namespace restriction (sysctl set to 0).
    userns_lifted: bool = False
    # The script's positional parameters ($1 ...): a container's `bash -c <script> <$0> <$1> ...`.
    args: tuple[str, ...] = ()
    # What a stand-in answers for this script, where the harness's general one would not do (command -> shell body).
    standins: tuple[tuple[str, str], ...] = ()
    # Mounts the host has when it runs, as the host mounts them: (path, owner uid, mode), e.g. a gcsfuse bucket
    # mounted by root with the blueprint's dir_mode.
    mounts: tuple[tuple[str, int, int], ...] = ()
    # Commands of the image its `srun --container-image` steps run in (beside the host's own).
    container_commands: frozenset[str] = frozenset()

    @property
    def label(self) -> str:
        return f"{self.env}: {self.name}"


def generated_scripts(env: Environment) -> list[GeneratedScript]:
    """Every shell script the platform generates for `env`, each with the host it runs on."""
    from infra.shell import slurm, vertex, vms

    scripts: list[GeneratedScript] = []
    if env.slurm is not None:
        scripts += slurm.scripts(env)
    scripts += vms.scripts(env)
    scripts += vertex.scripts(env)
    return scripts
