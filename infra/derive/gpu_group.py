"""What a group of GPU hosts with no launcher of its own runs (a Vertex AI custom job, a VM group): the NCCL
all-gather test over MPI and its gate, as one self-contained bash script.

The scripts are files of the repository (workloads/nccl/, and the gate every orchestrator's NCCL test uses,
check-bandwidth.sh); `bundle` writes them into the host or container and runs a command, so a container's
arguments or a VM's start-up carry everything they need and tests run the very same files.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from infra.catalogue.gpudirect import GpuDirect, GpuHost, nccl_env, nic_names

REPO = Path(__file__).resolve().parents[2]
NCCL_DIR = REPO / "workloads" / "nccl"
CHECK_BANDWIDTH = REPO / "workloads" / "charts" / "gpu-jobset" / "files" / "check-bandwidth.sh"
# Where a bundle writes its files, in the container or on the host.
WORKDIR = "/tmp/platform"
_EOF = "PLATFORM_EOF"


def script(name: str) -> str:
    return (NCCL_DIR / name).read_text()


def bundle(files: dict[str, str], run: list[str]) -> str:
    """A bash script that writes `files` to WORKDIR and then runs the shell lines `run`."""
    lines = ["set -euo pipefail", f"mkdir -p {WORKDIR}"]
    for name, content in files.items():
        if _EOF in content:
            raise ValueError(f"{name} contains the here-document delimiter {_EOF}")
        lines += [f"cat > {WORKDIR}/{name} <<'{_EOF}'", content.rstrip("\n"), _EOF]
    lines += run
    return "\n".join(lines) + "\n"


def all_gather_files() -> dict[str, str]:
    return {"all-gather-mpi.sh": script("all-gather-mpi.sh"), "check-bandwidth.sh": CHECK_BANDWIDTH.read_text()}


def nccl_test_env(
    direct: GpuDirect, host: GpuHost, gpus_per_node: int, min_bus_bandwidth_gbps: float
) -> dict[str, str]:
    """all-gather-mpi.sh's environment on `host`: the catalogue's NCCL environment for its NIC names and plugin
    directory, the GPUs per host and the gate."""
    ctrl, _ = nic_names(direct, host)
    return {
        **nccl_env(direct, host),
        "NCCL_SOCKET_IFNAME": ctrl,
        "GPUS_PER_NODE": str(gpus_per_node),
        "MIN_BUS_BANDWIDTH_GBPS": f"{min_bus_bandwidth_gbps:g}",
        "CHECK_BANDWIDTH": f"{WORKDIR}/check-bandwidth.sh",
    }


def profile(env: dict[str, str], plugin_dir: str) -> str:
    """An nccl-env-profile.sh for a host whose plugin came without one (Vertex AI): the same variables the
    installer's profile exports, from the catalogue, so the image's MPI entry reads them on every rank."""
    lines = ["# Written by the platform from infra/catalogue/gpudirect.py: the plugin was mounted without a profile."]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in env.items() if k != "NCCL_LIB_DIR"]
    lines.append(f'export LD_LIBRARY_PATH="{plugin_dir}:${{LD_LIBRARY_PATH:-}}"')
    return "\n".join(lines) + "\n"
