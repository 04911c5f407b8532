"""CPU machine types: the sizes Compute Engine lists for the machines the platform runs on CPU."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CpuMachine:
    """A CPU machine type's size, as Compute Engine's machine-type tables list it (memory in GiB), and the
    boot disk type it takes (C4 boots only from Hyperdisk:
    https://cloud.google.com/compute/docs/general-purpose-machines#c4_disks)."""

    vcpus: int
    memory_gib: float
    disk_type: str = "pd-balanced"


# The CPU machine types an environment's cpu_pools may use: general purpose and the
# memory-optimized shapes a checkpoint conversion of a large model needs.
# Source: https://cloud.google.com/compute/docs/general-purpose-machines and
# https://cloud.google.com/compute/docs/memory-optimized-machines
CPU_MACHINES: dict[str, CpuMachine] = {
    "e2-standard-8": CpuMachine(8, 32),
    # Small always-on hosts: a Slurm controller and its login nodes.
    "n2-standard-2": CpuMachine(2, 8),
    "n2-standard-4": CpuMachine(4, 16),
    "n2-standard-8": CpuMachine(8, 32),
    # Not N-series: what builds the Slurm node image (Cluster Toolkit's A3 Mega example: the open NVIDIA
    # drivers do not install on an N-series VM). C3 takes no pd-standard disk.
    "c3-standard-8": CpuMachine(8, 32),
    "n2-standard-32": CpuMachine(32, 128),
    "n2-highmem-32": CpuMachine(32, 256),
    "n2-highmem-64": CpuMachine(64, 512),
    "n2-highmem-128": CpuMachine(128, 864),
    "c3-highmem-88": CpuMachine(88, 704),
    "c3-highmem-176": CpuMachine(176, 1408),
    "c4-highmem-288": CpuMachine(288, 2232, disk_type="hyperdisk-balanced"),
    "m1-ultramem-40": CpuMachine(40, 961),
    "m1-ultramem-80": CpuMachine(80, 1922),
    "m1-megamem-96": CpuMachine(96, 1433.6),
    "m3-ultramem-64": CpuMachine(64, 1952),
}
