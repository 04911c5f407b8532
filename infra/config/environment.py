"""The environment: every section together, and the checks that cross sections."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import Field, StringConstraints, field_validator, model_validator

from infra.config.base import (
    LabelKey,
    Model,
    Name,
    Problem,
    ProjectId,
    ProjectNumber,
    _CrossReferenceError,
    _not_in,
)
from infra.config.compute import Cluster, CpuPool, SliceSpec
from infra.config.identity import Identity, gsa_account_id
from infra.config.network import Network
from infra.config.release import PLACEHOLDER_DIGEST, Release
from infra.config.serving import CanaryServing, JetStreamServing, SaxmlServing, Serving, VllmServing
from infra.config.slurm import SlurmCluster
from infra.config.storage import BucketSpec, Registry, StateBackend
from infra.config.training import Batch, Training
from infra.config.vertex import Vertex
from infra.config.vms import VmGroup
from infra.controllers import ENGINE_CONTROLLER
from infra.findings import Finding
from infra.findings import field_path as path_text


class Environment(Model):
    """One environment, as `infra/environments/<name>.yaml` describes it."""

    # RUF012: pydantic copies `{}` defaults; ruff cannot see that Model (imported) is a pydantic model.
    name: Name
    project: ProjectId
    project_number: ProjectNumber
    region: Annotated[str, StringConstraints(pattern=r"^[a-z]+-[a-z]+[0-9]+$")]
    zones: list[str] = Field(min_length=1)
    labels: dict[LabelKey, Annotated[str, StringConstraints(pattern=r"^[a-z0-9_-]{0,63}$")]] = {}  # noqa: RUF012
    state: StateBackend
    network: Network
    cluster: Cluster
    slices: dict[Name, SliceSpec] = {}  # noqa: RUF012
    cpu_pools: dict[Name, CpuPool] = {}  # noqa: RUF012
    buckets: dict[Name, BucketSpec]
    registry: Registry
    identities: dict[Name, Identity] = {}  # noqa: RUF012
    release: Release = Release()
    training: Training | None = None
    batch: Batch | None = None
    serving: dict[Name, Serving] = {}  # noqa: RUF012
    slurm: SlurmCluster | None = None
    vertex: Vertex | None = None
    vm_groups: dict[Name, VmGroup] = {}  # noqa: RUF012

    @field_validator("zones")
    @classmethod
    def _zones_well_formed(cls, zones: list[str]) -> list[str]:
        for zone in zones:
            if not re.match(r"^[a-z]+-[a-z]+[0-9]+-[a-z]$", zone):
                raise ValueError(f"zone {zone!r} is not a zone name like us-east5-b")
        return zones

    @model_validator(mode="after")
    def _cross_references(self) -> Environment:
        problems: list[Problem] = []
        for i, zone in enumerate(self.zones):
            if not zone.startswith(self.region + "-"):
                problems.append(Finding(("zones", i), zone, f"zone is not in region {self.region}"))
        for key, spec in self.slices.items():
            if spec.zone is not None and spec.zone not in self.zones:
                problems.append(
                    Finding(
                        ("slices", key, "zone"),
                        spec.zone,
                        f"not one of the environment's zones: {', '.join(self.zones)}",
                    )
                )
        for key in self.cpu_pools:
            if key in self.slices or key == "system":
                problems.append(
                    Finding(("cpu_pools", key), key, "a node pool of that name exists already (a slice, or system)")
                )
        for key, ident in self.identities.items():
            for bucket in ident.bucket_roles:
                if bucket not in self.buckets:
                    problems.append(
                        Finding(
                            ("identities", key, "bucket_roles", bucket),
                            bucket,
                            f"no such bucket; buckets: {', '.join(self.buckets)}",
                        )
                    )
            if ident.mode == "impersonation" and len(gsa_account_id(key)) > 30:
                problems.append(
                    Finding(
                        ("identities", key),
                        key,
                        f"too long: its Google service account id {gsa_account_id(key)!r} would exceed 30 characters",
                    )
                )
        seen: dict[tuple[str, str], str] = {}
        for key, ident in self.identities.items():
            ksa = (ident.namespace, ident.service_account)
            if ksa in seen:
                problems.append(
                    Finding(
                        ("identities", key), f"{ksa[0]}/{ksa[1]}", f"the same service account as identity {seen[ksa]!r}"
                    )
                )
            seen[ksa] = key
        problems += self._training_problems()
        problems += self._gpu_problems()
        problems += self._serving_problems()
        problems += self._holder_problems()
        problems += self._slurm_problems()
        problems += self._vertex_problems()
        problems += self._vm_problems()
        if problems:
            raise _CrossReferenceError(problems)
        return self

    def _training_problems(self) -> list[Problem]:
        t = self.training
        if t is None:
            return []
        problems: list[Problem] = []
        problems += _not_in(("training", "slice"), t.slice, self.slices, "slices")
        problems += _not_in(("training", "identity"), t.identity, self.identities, "identities")
        problems += _not_in(("training", "bucket"), t.bucket, self.buckets, "buckets")
        problems += _not_in(("training", "image"), t.image, self.release.images, "release.images")
        problems += self._writer_problems(("training", "identity"), t.identity, t.bucket)
        return problems

    def _writer_problems(
        self, where: tuple[str | int, ...], identity_key: str, bucket: str, what: str = "checkpoints"
    ) -> list[Problem]:
        """A job's identity must be able to write `what` (its checkpoints, a cache) to its bucket."""
        identity = self.identities.get(identity_key)
        if identity is None or bucket not in self.buckets:
            return []
        role = identity.bucket_roles.get(bucket)
        if role in ("roles/storage.objectUser", "roles/storage.objectAdmin"):
            return []
        return [
            Finding(
                where,
                identity_key,
                f"must be able to write {what} to bucket {bucket!r}: give it "
                f"roles/storage.objectUser there (it has {role or 'no role'})",
            )
        ]

    def _gpu_problems(self) -> list[Problem]:
        problems: list[Problem] = []
        needs = self.gpudirect_networks
        if needs and self.network.gpudirect_cidr is None:
            users = ", ".join(
                k for k, s in self.slices.items() if s.slice.gpudirect and self.slice_holder(k) != "vertex"
            )
            problems.append(
                Finding(
                    ("network", "gpudirect_cidr"),
                    None,
                    f"slices {users} need {needs} GPUDirect networks: give a /20 or larger range, "
                    "for example 192.168.0.0/16",
                )
            )
        batch = self.batch
        # GKE's queued provisioning; another orchestrator's queued slice is refused by its own rule.
        queued = [k for k, s in self.gke_slices.items() if s.capacity.type == "queued"]
        for key in queued:
            if batch is None or key not in batch.slices:
                problems.append(
                    Finding(
                        ("slices", key, "capacity", "type"),
                        "queued",
                        "queued provisioning is requested through Kueue: list this slice in `batch.slices`",
                    )
                )
        if batch is None:
            return problems
        missing = [c for c in ("jobset", "kueue") if c not in self.release.controllers]
        if missing:
            problems.append(
                Finding(
                    ("release", "controllers"),
                    dict(self.release.controllers),
                    f"batch jobs need the JobSet and Kueue controllers: pin {', '.join(missing)} "
                    "(an exact chart version)",
                )
            )
        problems += _not_in(("batch", "identity"), batch.identity, self.identities, "identities")
        for i, key in enumerate(batch.slices):
            if key not in self.slices:
                problems += _not_in(("batch", "slices", i), key, self.slices, "slices")
            elif self.slices[key].slice.kind != "gpu":
                problems.append(
                    Finding(("batch", "slices", i), key, "Kueue queues GPU slices here; this is a TPU slice")
                )
        if len(set(batch.slices)) != len(batch.slices):
            problems.append(Finding(("batch", "slices"), batch.slices, "a slice is listed twice"))
        for section, job in (("nccl_test", batch.nccl_test), ("training", batch.training)):
            if job is not None and job.slice not in batch.slices:
                problems.append(
                    Finding(
                        ("batch", section, "slice"), job.slice, f"not one of batch.slices: {', '.join(batch.slices)}"
                    )
                )
        test = batch.nccl_test
        if test is not None and test.nodes is not None and test.slice in self.slices:
            hosts = self.slices[test.slice].slice.hosts
            if test.nodes > hosts:
                problems.append(
                    Finding(("batch", "nccl_test", "nodes"), test.nodes, f"slice {test.slice!r} has only {hosts} nodes")
                )
        training = batch.training
        if training is not None:
            problems += _not_in(("batch", "training", "image"), training.image, self.release.images, "release.images")
            problems += _not_in(("batch", "training", "bucket"), training.bucket, self.buckets, "buckets")
            problems += self._writer_problems(("batch", "identity"), batch.identity, training.bucket)
        return problems

    def _serving_problems(self) -> list[Problem]:
        problems: list[Problem] = []
        engines = {d.engine for d in self.serving.values()}
        for engine, controller in ENGINE_CONTROLLER.items():
            if engine in engines and controller not in self.release.controllers:
                problems.append(
                    Finding(
                        ("release", "controllers"),
                        dict(self.release.controllers),
                        f"{engine} serving needs the {controller} controller: pin its chart version",
                    )
                )
        for key, d in self.serving.items():
            where: tuple[str | int, ...] = ("serving", key)
            problems += self._known(where, d)
            slices = {}
            for field_path, slice_key in d.slice_fields():
                spec = self.slices.get(slice_key)
                if spec is None:
                    problems += _not_in((*where, *field_path), slice_key, self.slices, "slices")
                elif spec.slice.kind != "tpu":
                    problems.append(
                        Finding((*where, *field_path), slice_key, "serving here runs on TPU slices; this is GPU")
                    )
                else:
                    slices[slice_key] = spec.slice
            # The fit check: every slice holds a whole replica of the model.
            for slice_key, slice_ in slices.items():
                assert not isinstance(d, CanaryServing)
                reason = d.model.fit_problem(slice_key, slice_)
                if reason:
                    problems.append(
                        Finding((*where, "model"), f"{d.model.parameters_b:g}B {d.model.precision}", reason)
                    )
            if isinstance(d, JetStreamServing) and len(slices) == 2:
                prefill, decode = slices.get(d.prefill_slice or ""), slices.get(d.decode_slice or "")
                if (
                    prefill
                    and decode
                    and (prefill.topology, prefill.machine_type) != (decode.topology, decode.machine_type)
                ):
                    problems.append(
                        Finding(
                            (*where, "decode_slice"),
                            d.decode_slice,
                            f"prefill and decode slices must have one shape: {prefill.topology} on "
                            f"{prefill.machine_type} vs {decode.topology} on {decode.machine_type}",
                        )
                    )
            if isinstance(d, VllmServing) and d.slice in slices:
                problems += self._vllm_problems(where, d, slices[d.slice])
            if isinstance(d, SaxmlServing):
                problems += self._saxml_identity_problems(where, d)
        return problems

    def _vllm_problems(self, where: tuple[str | int, ...], d: VllmServing, slice_: Any) -> list[Problem]:
        """The parallelism covers the slice's chips; replicas fit the slice; the gateway has its subnet."""
        problems: list[Problem] = []
        tp = d.tensor_parallel_size or slice_.chips_per_host
        pp = d.pipeline_parallel_size or slice_.hosts
        if tp * pp != slice_.chips:
            problems.append(
                Finding(
                    (*where, "tensor_parallel_size"),
                    tp,
                    f"tensor x pipeline parallelism ({tp} x {pp}) must be the slice's {slice_.chips} chips "
                    f"({slice_.name}: {slice_.hosts} hosts x {slice_.chips_per_host})",
                )
            )
        if d.replicas > 1 and slice_.multi_host:
            problems.append(
                Finding(
                    (*where, "replicas"),
                    d.replicas,
                    f"a multi-host slice ({slice_.name}) is one node pool of one slice: one replica; serve more "
                    "from more slices",
                )
            )
        if d.gateway and self.network.proxy_only_cidr is None:
            problems.append(
                Finding(
                    (*where, "gateway"),
                    True,
                    "the Inference Gateway's regional load balancer needs a proxy-only subnet: set "
                    "network.proxy_only_cidr (a /23, for example 10.129.0.0/23)",
                )
            )
        return problems

    def slice_copies(self, key: str) -> int:
        """How many copies of slice `key` its node pool holds: the replicas of the vLLM deployment on a single-host
        slice, else 1."""
        for d in self.serving.values():
            if isinstance(d, VllmServing) and d.slice == key and not self.slices[key].slice.multi_host:
                return d.replicas
        return 1

    def _known(self, where: tuple[str | int, ...], d: Any) -> list[Problem]:
        """The identity, buckets and image a serving deployment names exist, and it can read its bucket."""
        problems: list[Problem] = []
        problems += _not_in((*where, "identity"), d.identity, self.identities, "identities")
        buckets = [("bucket", d.bucket)]
        if isinstance(d, JetStreamServing):
            buckets.append(("scratch_bucket", d.scratch_bucket))
        if isinstance(d, VllmServing):
            buckets.append(("cache_bucket", d.cache_bucket))
        conversion = getattr(d, "conversion", None)
        if conversion is not None:
            buckets.append(("conversion.source_bucket", conversion.source_bucket))
        for field_name, bucket in buckets:
            if bucket not in self.buckets:
                problems += _not_in((*where, *field_name.split(".")), bucket, self.buckets, "buckets")
            elif d.identity in self.identities and bucket not in self.identities[d.identity].bucket_roles:
                problems.append(
                    Finding(
                        (*where, "identity"),
                        d.identity,
                        f"has no role on bucket {bucket!r} ({field_name}); "
                        f"add one to identities.{d.identity}.bucket_roles",
                    )
                )
        if isinstance(d, VllmServing):
            problems += self._writer_problems((*where, "identity"), d.identity, d.cache_bucket, "its compilation cache")
        images = [("image", getattr(d, "image", None))]
        if conversion is not None:
            images.append(("conversion.image", conversion.image))
            problems += _not_in((*where, "conversion", "pool"), conversion.pool, self.cpu_pools, "cpu_pools")
        for field_name, image in images:
            if image is not None:
                problems += _not_in((*where, *field_name.split(".")), image, self.release.images, "release.images")
        return problems

    def _saxml_identity_problems(self, where: tuple[str | int, ...], d: SaxmlServing) -> list[Problem]:
        """Saxml's identity: its own Google service account, admin of the Saxml bucket and of nothing else."""
        identity = self.identities.get(d.identity)
        if identity is None:
            return []
        problems: list[Problem] = []
        if identity.mode != "impersonation":
            problems.append(
                Finding(
                    (*where, "identity"), d.identity, "Saxml runs as a Google service account: use mode impersonation"
                )
            )
        others = sorted(set(identity.bucket_roles) - {d.bucket})
        if others or identity.bucket_roles.get(d.bucket) != "roles/storage.objectAdmin":
            problems.append(
                Finding(
                    ("identities", d.identity, "bucket_roles"),
                    dict(identity.bucket_roles),
                    f"Saxml's identity gets roles/storage.objectAdmin on bucket {d.bucket!r} and no other role"
                    + (f" (remove {', '.join(others)})" if others else ""),
                )
            )
        return problems

    def _gke_users(self) -> dict[str, tuple[str | int, ...]]:
        """Slice key -> the first field of a GKE workload (training, batch, serving) that names it."""
        users: dict[str, tuple[str | int, ...]] = {}
        if self.training is not None:
            users.setdefault(self.training.slice, ("training", "slice"))
        if self.batch is not None:
            for i, key in enumerate(self.batch.slices):
                users.setdefault(key, ("batch", "slices", i))
        for name, d in self.serving.items():
            for path, key in d.slice_fields():
                users.setdefault(key, ("serving", name, *path))
        return users

    def _other_holders(self) -> list[tuple[str, str, tuple[str | int, ...]]]:
        """(slice key, orchestrator, field) of every slice an orchestrator other than GKE names."""
        held: list[tuple[str, str, tuple[str | int, ...]]] = []
        if self.slurm is not None:
            for name, partition in self.slurm.partitions.items():
                held.append((partition.slice, "slurm", ("slurm", "partitions", name, "slice")))
        if self.vertex is not None:
            for section, job in (("nccl_test", self.vertex.nccl_test), ("training", self.vertex.training)):
                if job is not None:
                    held.append((job.slice, "vertex", ("vertex", section, "slice")))
        for name, group in self.vm_groups.items():
            held.append((group.slice, "vms", ("vm_groups", name, "slice")))
        return held

    def _holder_problems(self) -> list[Problem]:
        """A slice's machines are held by one orchestrator: GKE (a node pool), Slurm (a partition), a VM group,
        or Vertex AI (whose jobs hold machines only while they run, so its jobs may share a slice)."""
        problems: list[Problem] = []
        gke = self._gke_users()
        first: dict[str, tuple[str, tuple[str | int, ...]]] = {}
        for key, holder, where in self._other_holders():
            if key not in self.slices:
                problems += _not_in(where, key, self.slices, "slices")
                continue
            if self.slices[key].slice.kind != "gpu":
                problems.append(Finding(where, key, f"{holder} runs on GPU slices here; this is a TPU slice"))
            if key in gke:
                problems.append(
                    Finding(
                        where,
                        key,
                        f"also used on GKE by {path_text(gke[key])}: a slice's machines are held by one "
                        "orchestrator (GKE makes a node pool of it); give each its own slice",
                    )
                )
            elif key in first and not (holder == first[key][0] == "vertex"):
                problems.append(
                    Finding(where, key, f"also named by {path_text(first[key][1])}: a slice is held by one owner")
                )
            first.setdefault(key, (holder, where))
        return problems

    def _slurm_problems(self) -> list[Problem]:
        slurm = self.slurm
        if slurm is None:
            return []
        problems: list[Problem] = []
        problems += _not_in(("slurm", "bucket"), slurm.bucket, self.buckets, "buckets")
        for name, partition in slurm.partitions.items():
            spec = self.slices.get(partition.slice)
            if spec is None:
                continue  # named by _holder_problems
            where = ("slurm", "partitions", name)
            if partition.static_nodes > spec.slice.hosts:
                problems.append(
                    Finding(
                        (*where, "static_nodes"),
                        partition.static_nodes,
                        f"slice {partition.slice!r} has {spec.slice.hosts} nodes",
                    )
                )
            if spec.capacity.dynamic and partition.static_nodes:
                problems.append(
                    Finding(
                        (*where, "static_nodes"),
                        partition.static_nodes,
                        f"the slice's {spec.capacity.type} nodes come and go with the jobs: static_nodes must be 0",
                    )
                )
        jobs: list[tuple[str, str, int | None]] = []
        if slurm.nccl_test is not None:
            jobs.append(("nccl_test", slurm.nccl_test.partition, slurm.nccl_test.nodes))
        if slurm.training is not None:
            jobs.append(("training", slurm.training.partition, None))
            problems += _not_in(
                ("slurm", "training", "image"), slurm.training.image, self.release.images, "release.images"
            )
            problems += _not_in(("slurm", "training", "bucket"), slurm.training.bucket, self.buckets, "buckets")
            if slurm.training.bucket != slurm.bucket:
                problems.append(
                    Finding(
                        ("slurm", "training", "bucket"),
                        slurm.training.bucket,
                        f"the cluster mounts and may write one bucket, slurm.bucket ({slurm.bucket!r})",
                    )
                )
        for section, partition_name, nodes in jobs:
            where = ("slurm", section, "partition")
            if partition_name not in slurm.partitions:
                problems += _not_in(where, partition_name, slurm.partitions, "slurm.partitions")
                continue
            spec = self.slices.get(slurm.partitions[partition_name].slice)
            if spec is not None and nodes is not None and nodes > spec.slice.hosts:
                problems.append(
                    Finding(("slurm", section, "nodes"), nodes, f"partition {partition_name!r} has {spec.slice.hosts}")
                )
        return problems

    def _vertex_problems(self) -> list[Problem]:
        vertex = self.vertex
        problems: list[Problem] = []
        if vertex is None:
            if self.network.network_attachment_cidr is not None:
                problems.append(
                    Finding(
                        ("network", "network_attachment_cidr"),
                        self.network.network_attachment_cidr,
                        "only Vertex AI jobs use a network attachment: remove it, or declare `vertex` jobs",
                    )
                )
            return problems
        test = vertex.nccl_test
        if test is not None and test.nodes is not None and test.slice in self.slices:
            hosts = self.slices[test.slice].slice.hosts
            if test.nodes > hosts:
                problems.append(
                    Finding(
                        ("vertex", "nccl_test", "nodes"), test.nodes, f"slice {test.slice!r} has only {hosts} nodes"
                    )
                )
        training = vertex.training
        if training is not None:
            where = ("vertex", "training")
            problems += _not_in((*where, "image"), training.image, self.release.images, "release.images")
            problems += _not_in((*where, "bucket"), training.bucket, self.buckets, "buckets")
        return problems

    def _vm_problems(self) -> list[Problem]:
        problems: list[Problem] = []
        for name, group in self.vm_groups.items():
            spec = self.slices.get(group.slice)
            if spec is None:
                continue  # named by _holder_problems
            where = ("vm_groups", name)
            direct = spec.slice.gpudirect
            if spec.slice.kind == "gpu" and (direct is None or direct.transport != "tcpxo"):
                problems.append(
                    Finding(
                        (*where, "slice"),
                        group.slice,
                        f"a VM group's start-up sets up GPUDirect-TCPXO machines (A3 Mega) only; {spec.slice.name} "
                        f"is {spec.slice.machine_type}",
                    )
                )
            # Instance names `<env>-<group>-<n>` are RFC 1035 labels of at most 63 characters; the group's
            # service account id `vm-<group>` has at most 30 (https://cloud.google.com/compute/docs/naming-resources,
            # https://cloud.google.com/iam/docs/service-accounts-create).
            longest = f"{self.name}-{name}-{spec.slice.hosts - 1}"
            if len(longest) > 63:
                problems.append(Finding(where, name, f"too long: its VM name {longest!r} would exceed 63 characters"))
            if len(f"vm-{name}") > 30:
                problems.append(
                    Finding(where, name, f"too long: its service account id 'vm-{name}' would exceed 30 characters")
                )
            test = group.nccl_test
            if test is not None and test.nodes is not None and test.nodes > spec.slice.hosts:
                problems.append(
                    Finding(
                        (*where, "nccl_test", "nodes"),
                        test.nodes,
                        f"slice {group.slice!r} has only {spec.slice.hosts} nodes",
                    )
                )
        return problems

    def slice_holder(self, key: str) -> str:
        """Which orchestrator holds slice `key`'s machines: `gke` (a node pool of the stack), `slurm`, `vertex`
        or `vms`."""
        return next((holder for k, holder, _ in self._other_holders() if k == key), "gke")

    def held_by(self, holder: str) -> dict[str, SliceSpec]:
        """The slices one orchestrator holds."""
        return {k: s for k, s in self.slices.items() if self.slice_holder(k) == holder}

    @property
    def gke_slices(self) -> dict[str, SliceSpec]:
        """The slices GKE holds: one node pool each."""
        return self.held_by("gke")

    @property
    def pathways_slices(self) -> list[str]:
        """Slices of the JetStream + Pathways deployments.

        Their pools run with the GCE metadata server (`--workload-metadata=GCE_METADATA`,
        as the GKE JetStream + Pathways tutorial creates them), so their pods act as
        the pools' own node service account, which the stack gives exactly the bucket
        roles of those deployments' identities.
        """
        return sorted({k for d in self.serving.values() if isinstance(d, JetStreamServing) for k in d.slice_keys})

    @property
    def gpudirect_networks(self) -> int:
        """How many GPUDirect VPC networks the slices need: the most extra NICs of any machine the platform's
        own networks carry. The stack creates them once; GKE, Slurm and the VMs attach to the same networks.
        Vertex AI brings its machines' GPU networks itself."""
        return _networks_for(s for k, s in self.slices.items() if self.slice_holder(k) != "vertex")

    @property
    def gke_gpudirect_networks(self) -> int:
        """How many of those networks GKE's own node pools use (GKE's multi-networking objects)."""
        return _networks_for(self.gke_slices.values())

    @property
    def inference_gateway(self) -> bool:
        """Whether a serving deployment asks for the GKE Inference Gateway (the cluster's Gateway API, the
        proxy-only subnet)."""
        return any(isinstance(d, VllmServing) and d.gateway for d in self.serving.values())

    def placeholder_images(self) -> list[str]:
        """Release images still at the all-zero digest (not built yet)."""
        return sorted(name for name, ref in self.release.images.items() if ref.endswith(PLACEHOLDER_DIGEST))

    def zone_of(self, slice_key: str) -> str:
        return self.slices[slice_key].zone or self.zones[0]

    def bucket_name(self, key: str) -> str:
        return self.buckets[key].name or f"{self.project}-{key}"

    @property
    def state_prefix(self) -> str:
        return f"platform/{self.name}"

    @property
    def workload_pool(self) -> str:
        return f"{self.project}.svc.id.goog"

    @property
    def registry_url(self) -> str:
        return f"{self.registry.host(self.region)}/{self.project}/{self.registry.repository}"


def _networks_for(specs: Iterable[SliceSpec]) -> int:
    return max((s.slice.gpudirect.extra_nics for s in specs if s.slice.gpudirect), default=0)
