"""Vertex AI custom jobs on the environment's GPU slices (`infra/vertex` writes and submits them)."""

from __future__ import annotations

from pydantic import Field, model_validator

from infra.config.base import Model, Name
from infra.config.training import NcclCheck, TrainerRun


class VertexNcclTest(NcclCheck):
    """The NCCL all-gather test as a custom job on a slice's machines (all of them, or `nodes`)."""

    slice: Name


class VertexTraining(TrainerRun):
    """The trainer as a custom job: one replica per node of its slice, checkpoints in `bucket`."""

    slice: Name


class Vertex(Model):
    """Vertex AI custom jobs: no cluster to run; Vertex AI creates the machines for a job and deletes them after.

    The jobs run as the stack's `vertex-jobs` service account (it may write the training bucket); Vertex AI's
    Custom Code service agent pulls their images from the registry. With `network.network_attachment_cidr`
    set, the jobs reach the VPC privately through a network attachment (Private Service Connect interface).
    `make plan` writes each job's request (cdktf.out/vertex/<env>/); `make vertex-submit` submits one.
    """

    max_wait_hours: int = Field(default=24, ge=0, le=168)
    """Flex-start: how long a job may wait for its machines before it fails (0: as long as it takes)."""
    nccl_test: VertexNcclTest | None = None
    training: VertexTraining | None = None

    @model_validator(mode="after")
    def _some_job(self) -> Vertex:
        if self.nccl_test is None and self.training is None:
            raise ValueError("declare at least one job: nccl_test or training")
        return self

    def jobs(self) -> dict[str, VertexNcclTest | VertexTraining]:
        """Job name -> its section: `nccl-test`, `train`."""
        named: dict[str, VertexNcclTest | VertexTraining | None] = {"nccl-test": self.nccl_test, "train": self.training}
        return {name: job for name, job in named.items() if job is not None}
