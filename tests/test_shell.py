"""Every generated shell script runs: the inventory (infra/shell), the host records it runs against
(infra/catalogue/hosts.py), ShellCheck, execution under bash -euo pipefail with stand-ins, and the host rules."""

from __future__ import annotations

from infra.catalogue.hosts import HOSTS
from infra.config import Environment
from infra.shell import generated_scripts


def test_the_inventory_holds_every_slurm_script_with_a_known_host(envs: dict[str, Environment]) -> None:
    scripts = generated_scripts(envs["dev"])
    names = {s.name for s in scripts}
    assert {
        "slurm/image_script/install_slurm.sh",
        "slurm/image_script/install_tcpxo_host.sh",
        "slurm/compute_startup/wait_for_aperture_devices.sh",
        "slurm/controller_startup/install_platform_scripts.sh",
        "slurm/a3mega/rxdm.prolog_slurmd",
        "slurm/a3mega/rxdm.epilog_slurmd",
        "slurm/jobs/nccl-test.sbatch",
        "slurm/jobs/train.sbatch",
    } <= names
    for script in scripts:
        assert script.host in HOSTS, script.label
        assert "\\$(" not in script.text, "the host receives gcluster's literal, unescaped"
    prolog = next(s for s in scripts if s.name == "slurm/a3mega/rxdm.prolog_slurmd")
    assert HOSTS[prolog.host].path[-1] == ".", "slurmd gives a prolog no PATH: bash's default"
    assert dict(prolog.runtime_env)["SLURM_SCRIPT_CONTEXT"] == "prolog_slurmd" and "PATH" not in dict(
        prolog.runtime_env
    )


def test_every_host_record_is_dated_and_sourced() -> None:
    for host in HOSTS.values():
        assert host.checked >= "2026-01-01" and host.sources, host.name
        for command, directory in host.locations:
            assert host.directory(command) == directory
