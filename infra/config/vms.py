"""Groups of plain Compute Engine VMs on the environment's GPU slices (`infra/vms` derives them)."""

from __future__ import annotations

from infra.config.base import Model, Name
from infra.config.training import NcclCheck


class VmGroup(Model):
    """A group of GPU VMs for a team that brings its own orchestration: one VM per node of its slice.

    The stack declares the group empty (a managed instance group of size 0 and its instance template); `make
    vm-up` creates the VMs and `make vm-down` deletes them, so an idle environment holds no GPU. Every VM boots
    with the GPU driver, the GPUDirect NCCL plugin and its receive-data-path daemon, and the group's hosts in
    rank order (`python -m workloads.trainer gce` reads its rank from them); with `nccl_test`, the VMs run the
    NCCL all-gather gate once at boot.
    """

    slice: Name
    nccl_test: NcclCheck | None = None
