"""The environment model: one YAML file per environment, loaded into frozen models.

Every difference between environments is a field here; no construct looks at
an environment's name. Loading either returns a complete `Environment` or
raises `ConfigError` listing each problem with the file, the field path, the
bad value and what is allowed.
"""

from __future__ import annotations

import ipaddress
import os
import re
import types
import typing
from collections.abc import Iterable
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from infra.accelerators import ShapeError, Slice, gpu_slice, lookup, tpu_slice
from infra.controllers import CONTROLLERS, ENGINE_CONTROLLER

# One fault found across fields: (field path, the value at fault, what is wrong and what is allowed).
Problem = tuple[tuple[str | int, ...], object, str]


def gsa_account_id(identity: str) -> str:
    """Account id of the Google service account an `impersonation` identity uses."""
    return f"wi-{identity}"


ENVIRONMENTS_DIR = Path(__file__).parent / "environments"


def environments_dir() -> Path:
    """The environments directory; `PLATFORM_ENVIRONMENTS_DIR` overrides it (read at call time)."""
    return Path(os.environ.get("PLATFORM_ENVIRONMENTS_DIR") or ENVIRONMENTS_DIR)


# GKE versions below which a generation's node pools are refused (GKE docs).
MIN_GKE_VERSION = {"v6e": "1.31.2-gke.1115000"}


class Model(BaseModel):
    """Base of every config model: immutable, unknown keys rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _cidr(value: str) -> str:
    try:
        net = ipaddress.ip_network(value, strict=True)
    except ValueError as err:
        raise ValueError(f"not a CIDR range with its host bits zero ({err})") from None
    return str(net)


Cidr = Annotated[str, AfterValidator(_cidr)]
Name = Annotated[str, StringConstraints(pattern=r"^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$")]
ProjectId = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")]
ProjectNumber = Annotated[str, StringConstraints(pattern=r"^[0-9]{6,20}$")]
KubernetesName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")]
BucketRole = Literal[
    "roles/storage.objectViewer",
    "roles/storage.objectCreator",
    "roles/storage.objectUser",
    "roles/storage.objectAdmin",
]
# No hyphens in label keys: cdktf rewrites provider-level map keys to snake
# case, so `managed-by` in the provider's default_labels would silently
# become `managed_by`.
LabelKey = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,62}$")]
IMAGE_DIGEST = re.compile(r"^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+@sha256:[0-9a-f]{64}$")
VERSION = re.compile(r"^v?[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?$")


def _image_digest(value: str) -> str:
    if not IMAGE_DIGEST.match(value):
        raise ValueError("an image must be pinned by digest: <registry>/<path>@sha256:<64 hex digits>")
    return value


def _exact_version(value: str) -> str:
    if not VERSION.match(value):
        raise ValueError("a version must be exact, like 1.2.3 (no ranges, no 'latest')")
    return value


ImageDigest = Annotated[str, AfterValidator(_image_digest)]
ExactVersion = Annotated[str, AfterValidator(_exact_version)]


class AuthorizedNetwork(Model):
    name: Name
    cidr: Cidr


class Network(Model):
    """The VPC, its one subnet with secondary ranges for pods and services, and the control plane range."""

    name: Name
    subnet_cidr: Cidr
    pods_cidr: Cidr
    services_cidr: Cidr
    master_cidr: Cidr
    authorized_networks: list[AuthorizedNetwork] = Field(min_length=1)
    # GPUDirect (A3 High / A3 Mega): each extra NIC gets its own VPC network,
    # with subnet n taking the n-th /24 of this range. Needed once a GPU slice
    # whose machine has extra NICs exists.
    gpudirect_cidr: Cidr | None = None

    def gpudirect_subnets(self, count: int) -> list[str]:
        """The /24 ranges of the first `count` GPUDirect networks (1-based: the n-th /24 is network n)."""
        assert self.gpudirect_cidr is not None
        subnets = list(ipaddress.ip_network(self.gpudirect_cidr).subnets(new_prefix=24))
        return [str(net) for net in subnets[1 : count + 1]]

    @field_validator("master_cidr")
    @classmethod
    def _master_is_slash_28(cls, value: str) -> str:
        if ipaddress.ip_network(value).prefixlen != 28:
            raise ValueError("the control plane range of a private cluster must be a /28")
        return value

    @model_validator(mode="after")
    def _ranges_do_not_overlap(self) -> Network:
        ranges = {
            "subnet_cidr": self.subnet_cidr,
            "pods_cidr": self.pods_cidr,
            "services_cidr": self.services_cidr,
            "master_cidr": self.master_cidr,
        }
        if self.gpudirect_cidr is not None:
            ranges["gpudirect_cidr"] = self.gpudirect_cidr
            if ipaddress.ip_network(self.gpudirect_cidr).prefixlen > 20:
                raise ValueError(
                    f"gpudirect_cidr {self.gpudirect_cidr} is too small: it holds one /24 per GPUDirect "
                    "network (up to 8, numbered from 1), so it must be a /20 or larger"
                )
        names = list(ranges)
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                if ipaddress.ip_network(ranges[a]).overlaps(ipaddress.ip_network(ranges[b])):
                    raise ValueError(f"{a} {ranges[a]} overlaps {b} {ranges[b]}; the ranges must be disjoint")
        return self


class SystemPool(Model):
    """The CPU node pool for system pods, controllers and Ray heads."""

    machine_type: str = "e2-standard-8"
    min_nodes: int = Field(ge=0, default=1)
    max_nodes: int = Field(ge=1, default=3)
    disk_size_gb: int = Field(ge=20, default=100)

    @model_validator(mode="after")
    def _min_not_above_max(self) -> SystemPool:
        if self.min_nodes > self.max_nodes:
            raise ValueError(f"min_nodes {self.min_nodes} is above max_nodes {self.max_nodes}")
        return self


class Cluster(Model):
    # At most 24 characters: the node service account is `<name>-nodes` (30 at most).
    name: Annotated[str, StringConstraints(pattern=r"^[a-z]([a-z0-9-]{0,22}[a-z0-9])?$")]
    release_channel: Literal["RAPID", "REGULAR", "STABLE"]
    min_master_version: Annotated[str, StringConstraints(pattern=r"^1\.[0-9]+(\.[0-9]+(-gke\.[0-9]+)?)?$")]
    deletion_protection: bool
    system_pool: SystemPool = SystemPool()


class Capacity(Model):
    """How a slice's nodes are obtained.

    `flex-start` and `queued` are the Dynamic Workload Scheduler's two modes:
    nodes come (all at once) when capacity is found, for at most
    `max_run_hours` (flex-start), or when a queued ProvisioningRequest is
    admitted (queued provisioning, through Kueue).
    """

    type: Literal["on-demand", "spot", "reservation", "flex-start", "queued"]
    reservation: Name | None = None
    max_run_hours: int | None = Field(default=None, ge=1, le=168)

    @model_validator(mode="after")
    def _fields_fit_the_type(self) -> Capacity:
        if self.type == "reservation" and not self.reservation:
            raise ValueError("capacity type 'reservation' needs `reservation: <reservation name>`")
        if self.type == "queued" and self.reservation:
            raise ValueError(
                "queued provisioning cannot consume a reservation: the Dynamic Workload Scheduler finds the "
                "capacity (remove `reservation`, or use type 'reservation')"
            )
        if self.type == "flex-start" and self.reservation:
            raise ValueError(
                "flex-start cannot consume a reservation: its nodes come from the Dynamic Workload Scheduler "
                "(remove `reservation`, or use type 'reservation')"
            )
        if self.type in ("on-demand", "spot") and self.reservation:
            raise ValueError(f"`reservation` is only allowed with capacity type 'reservation', not {self.type!r}")
        if self.type == "flex-start" and self.max_run_hours is None:
            raise ValueError("capacity type 'flex-start' needs `max_run_hours` (1 to 168)")
        if self.type != "flex-start" and self.max_run_hours is not None:
            raise ValueError(f"`max_run_hours` is only allowed with capacity type 'flex-start', not {self.type!r}")
        return self

    @property
    def dynamic(self) -> bool:
        """Nodes come and go with demand (Dynamic Workload Scheduler): no fixed node count."""
        return self.type in ("flex-start", "queued")


class SliceSpec(Model):
    """One accelerator slice as written in the environment file."""

    accelerator: str
    topology: str | None = None
    nodes: int | None = None
    machine_type: str | None = None
    zone: str | None = None
    capacity: Capacity
    # GPU slices only: autoscale between min_nodes and `nodes` (default: a fixed `nodes`).
    min_nodes: int | None = Field(default=None, ge=0)
    auto_upgrade: bool = True
    # Default: on, except for flex-start, whose nodes GKE must not repair.
    auto_repair: bool | None = None

    @model_validator(mode="after")
    def _shape_is_in_catalogue(self) -> SliceSpec:
        slice_ = self.slice  # derive once so a bad shape fails at load
        kind = self.capacity.type
        if kind == "flex-start" and self.auto_repair:
            raise ValueError("capacity type 'flex-start' needs auto_repair off (remove `auto_repair: true`)")
        if self.min_nodes is not None:
            if slice_.kind == "tpu":
                raise ValueError(
                    "a TPU slice is provisioned as one unit of all its hosts: remove `min_nodes` "
                    "(use capacity 'flex-start' or 'queued' for a slice that exists only while it is used)"
                )
            if kind == "queued" and self.min_nodes != 0:
                raise ValueError(
                    f"queued provisioning needs min_nodes 0, not {self.min_nodes}: its nodes exist only "
                    "while an admitted ProvisioningRequest holds them"
                )
            if kind == "flex-start" and self.min_nodes != 0:
                raise ValueError(
                    f"flex-start takes no static node count (min_nodes {self.min_nodes}): its nodes come "
                    "and go with the workload"
                )
            if self.min_nodes > slice_.hosts:
                raise ValueError(f"min_nodes {self.min_nodes} is above nodes {slice_.hosts}")
        return self

    @property
    def node_range(self) -> tuple[int, int] | None:
        """(min, max) nodes of an autoscaled pool, or None for a fixed node count."""
        if self.capacity.dynamic:
            return (0, self.slice.hosts)
        if self.min_nodes is not None:
            return (self.min_nodes, self.slice.hosts)
        return None

    @property
    def repairs(self) -> bool:
        return self.auto_repair if self.auto_repair is not None else self.capacity.type != "flex-start"

    @cached_property
    def slice(self) -> Slice:
        acc = lookup(self.accelerator)
        if acc.kind == "gpu":
            if self.topology is not None:
                raise ShapeError("topology", self.topology, "GPU slices take `nodes`, not a topology: remove it", [])
            return gpu_slice(self.accelerator, self.nodes or 0, self.machine_type)
        if self.nodes is not None:
            raise ShapeError(
                "nodes", self.nodes, "TPU slices take a `topology`; the node count is derived from it: remove it", []
            )
        if self.topology is None:
            raise ShapeError("topology", None, f"a {self.accelerator} slice needs a topology", acc.all_topologies())
        return tpu_slice(self.accelerator, self.topology, self.machine_type)


class Lifecycle(Model):
    """Object lifecycle of a bucket."""

    delete_noncurrent_after_days: int = Field(ge=1)
    nearline_after_days: int | None = Field(default=None, ge=1)


class BucketSpec(Model):
    """A Cloud Storage bucket. Its name is `<project>-<key>` unless given."""

    name: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]{1,61}[a-z0-9]$")] | None = None
    location: str | None = None
    protect: bool
    versioning: bool = True
    soft_delete_days: int = Field(ge=7, le=90)
    lifecycle: Lifecycle


class RegistryCleanup(Model):
    delete_untagged_after_days: int = Field(ge=1)
    keep_recent_versions: int = Field(ge=1)


class Registry(Model):
    """The Artifact Registry Docker repository images are pushed to."""

    repository: Name
    cleanup: RegistryCleanup
    # Terraform refuses to destroy or replace a protected repository (and the images in it).
    protect: bool = False

    def host(self, region: str) -> str:
        return f"{region}-docker.pkg.dev"


class Identity(Model):
    """A workload identity: a Kubernetes service account and what it may read or write.

    `direct` grants the bucket roles to the Kubernetes service account's
    `principal://` identifier; `impersonation` creates a Google service account
    holding the roles, lets the Kubernetes service account impersonate it and
    annotates it with `iam.gke.io/gcp-service-account`.
    """

    namespace: KubernetesName
    service_account: KubernetesName
    mode: Literal["direct", "impersonation"]
    bucket_roles: dict[str, BucketRole]


class StateBackend(Model):
    """Where Terraform keeps this environment's state (prefix `platform/<env>`)."""

    bucket: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_.-]{1,61}[a-z0-9]$")]


class Release(Model):
    """What runs: pinned by digest and exact version, promoted as a whole from dev to prod."""

    images: dict[str, ImageDigest] = {}
    charts: dict[str, ExactVersion] = {}
    controllers: dict[str, ExactVersion] = {}

    @field_validator("controllers")
    @classmethod
    def _known_controllers(cls, controllers: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(controllers) - set(CONTROLLERS))
        if unknown:
            raise ValueError(f"unknown controller(s) {', '.join(unknown)}; known: {', '.join(CONTROLLERS)}")
        return controllers


class PodSize(Model):
    cpu: Annotated[str, StringConstraints(pattern=r"^[0-9]+m?$")]
    memory: Annotated[str, StringConstraints(pattern=r"^[0-9]+(Mi|Gi)$")]


class Training(Model):
    """The Ray training cluster: which slice, identity, bucket and image it uses."""

    slice: Name
    identity: Name
    bucket: Name
    image: Name
    head: PodSize = PodSize(cpu="4", memory="16Gi")
    worker: PodSize
    shared_memory: Annotated[str, StringConstraints(pattern=r"^[0-9]+(Mi|Gi)$")] = "16Gi"
    # Ray Train restarts the worker group this many times; each restart resumes from the last checkpoint.
    max_failures: int = Field(default=3, ge=0)


class NcclTest(Model):
    """The NCCL all-gather test JobSet: proves a GPU slice's nodes talk at full bandwidth."""

    slice: Name
    # Bus bandwidth (GB/s per GPU) of the largest message below which the test fails.
    # About 185-190 is healthy on A3 Mega over two nodes.
    min_bus_bandwidth_gbps: float = Field(gt=0)
    # Nodes to span; default: all of the slice's nodes.
    nodes: int | None = Field(default=None, ge=2)
    # Bump to run the test again with unchanged settings.
    run: int = Field(default=1, ge=1)


class GpuTraining(Model):
    """A JobSet that trains the canary with JAX on a GPU slice, one process per node."""

    slice: Name
    image: Name
    bucket: Name
    steps: int = Field(ge=1)
    run: int = Field(default=1, ge=1)


class Batch(Model):
    """Batch jobs through Kueue and JobSet.

    Kueue gets one ResourceFlavor per listed slice, one ClusterQueue whose
    quota is the sum of those slices, and a LocalQueue named `queue` in the
    namespace of `identity`, whose service account the jobs run as. Slices
    with `queued` capacity are reached through a ProvisioningRequest admission
    check (Dynamic Workload Scheduler).
    """

    identity: Name
    queue: KubernetesName
    slices: list[Name] = Field(min_length=1)
    nccl_test: NcclTest | None = None
    training: GpuTraining | None = None


BYTES_PER_PARAMETER = {"bf16": 2, "int8": 1}


class ServedModel(Model):
    """What a serving deployment holds in HBM: its weights at a precision, plus a KV cache budget."""

    name: Annotated[str, StringConstraints(min_length=1)]
    parameters_b: float = Field(gt=0, description="parameters, in billions")
    precision: Literal["bf16", "int8"]
    kv_cache_gb: float = Field(ge=0)

    @property
    def weights_gb(self) -> float:
        return self.parameters_b * BYTES_PER_PARAMETER[self.precision]

    @property
    def need_gb(self) -> float:
        return self.weights_gb + self.kv_cache_gb

    def fit_problem(self, slice_key: str, slice_: Slice) -> str | None:
        """Why the model does not fit one replica on `slice_`, or None when it fits."""
        if self.need_gb <= slice_.hbm_gb:
            return None
        return (
            f"{self.name}: {self.parameters_b:g}B parameters in {self.precision} need {self.weights_gb:g} GB of "
            f"weights + {self.kv_cache_gb:g} GB of KV cache = {self.need_gb:g} GB, more than the "
            f"{slice_.hbm_gb} GB of HBM of slice {slice_key!r} ({slice_.name}: {slice_.chips} chips x "
            f"{slice_.accelerator.hbm_gb} GB)"
        )


class SaxmlServing(Model):
    """Saxml: an admin server, one model-server JobSet job per slice, an HTTP server behind a load balancer."""

    engine: Literal["saxml"]
    slices: list[Name] = Field(min_length=1)
    identity: Name
    bucket: Name  # the admin server's state (SAX_ROOT)
    model: ServedModel
    # The Saxml model class and checkpoint `make saxml ... publish` uses by default.
    model_class: Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][\w.]*$")]
    checkpoint: str = "None"
    load_balancer: Literal["internal", "external"] = "internal"

    def slice_fields(self) -> list[tuple[tuple[str | int, ...], str]]:
        """(field path, slice key) of every slice the deployment holds a model replica on."""
        return [(("slices", i), key) for i, key in enumerate(self.slices)]


class CheckpointConversion(Model):
    """Convert a Meta Llama checkpoint in a bucket to a MaxText checkpoint for JetStream."""

    source_bucket: Name
    source_path: Annotated[str, StringConstraints(pattern=r"^[^/].*[^/]$")]
    # The sizes MaxText's inference conversion script knows at the pinned commit.
    model_size: Literal[
        "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b",
        "llama3.1-8b", "llama3.1-70b", "llama3.1-405b", "llama3.3-70b",
    ]  # fmt: skip
    image: Name  # release.images key of the converter (the trainer image's `converter` stage)


class JetStreamServing(Model):
    """JetStream with MaxText on Pathways, on one slice or disaggregated on a prefill and a decode slice."""

    engine: Literal["jetstream"]
    slice: Name | None = None
    prefill_slice: Name | None = None
    decode_slice: Name | None = None
    identity: Name
    bucket: Name  # the converted checkpoint
    scratch_bucket: Name  # Pathways scratch (compilation cache, temporaries)
    model: ServedModel
    checkpoint_path: Annotated[str, StringConstraints(pattern=r"^[^/].*[^/]$")]
    conversion: CheckpointConversion | None = None
    max_prefill_length: int = Field(default=1024, ge=1)
    max_target_length: int = Field(default=2048, ge=2)
    per_device_batch_size: int = Field(default=4, ge=1)

    @model_validator(mode="after")
    def _one_or_two_slices(self) -> JetStreamServing:
        split = (self.prefill_slice, self.decode_slice)
        if self.slice is not None and any(split):
            raise ValueError("give either `slice`, or `prefill_slice` and `decode_slice` (disaggregated), not both")
        if self.slice is None and not all(split):
            raise ValueError("give `slice`, or both `prefill_slice` and `decode_slice` (disaggregated serving)")
        if self.max_prefill_length >= self.max_target_length:
            raise ValueError(
                f"max_prefill_length {self.max_prefill_length} must be below max_target_length {self.max_target_length}"
            )
        return self

    def slice_fields(self) -> list[tuple[tuple[str | int, ...], str]]:
        fields = ("slice",) if self.slice else ("prefill_slice", "decode_slice")
        return [((f,), getattr(self, f)) for f in fields]

    @property
    def slice_keys(self) -> list[str]:
        """The slice, or the prefill then the decode slice."""
        return [key for _, key in self.slice_fields()]


class VllmServing(Model):
    """vLLM on TPU: an OpenAI-compatible server on one TPU host, tensor parallel over all its chips."""

    engine: Literal["vllm"]
    slice: Name
    identity: Name
    bucket: Name
    model_path: Annotated[str, StringConstraints(pattern=r"^[^/].*[^/]$")]  # the weights' folder in the bucket
    model: ServedModel
    max_model_len: int = Field(default=4096, ge=16)
    replicas: int = Field(default=1, ge=1)
    # A Kubernetes Secret (key `token`) whose value clients must send as a bearer token.
    api_key_secret: KubernetesName | None = None

    def slice_fields(self) -> list[tuple[tuple[str | int, ...], str]]:
        return [(("slice",), self.slice)]


class CanaryServing(Model):
    """The canary server (workloads/server) on the checkpoints the canary trainer wrote."""

    engine: Literal["canary"]
    identity: Name
    bucket: Name
    path: Annotated[str, StringConstraints(pattern=r"^[^/].*[^/]$")] = "canary"
    image: Name
    replicas: int = Field(default=1, ge=1)
    max_batch: int = Field(default=8, ge=1)
    queue_size: int = Field(default=64, ge=1)

    def slice_fields(self) -> list[tuple[tuple[str | int, ...], str]]:
        return []  # on CPU nodes


Serving = Annotated[SaxmlServing | JetStreamServing | VllmServing | CanaryServing, Field(discriminator="engine")]


PLACEHOLDER_DIGEST = "sha256:" + "0" * 64


class Environment(Model):
    """One environment, as `infra/environments/<name>.yaml` describes it."""

    name: Name
    project: ProjectId
    project_number: ProjectNumber
    region: Annotated[str, StringConstraints(pattern=r"^[a-z]+-[a-z]+[0-9]+$")]
    zones: list[str] = Field(min_length=1)
    labels: dict[LabelKey, Annotated[str, StringConstraints(pattern=r"^[a-z0-9_-]{0,63}$")]] = {}
    state: StateBackend
    network: Network
    cluster: Cluster
    slices: dict[Name, SliceSpec] = {}
    buckets: dict[Name, BucketSpec]
    registry: Registry
    identities: dict[Name, Identity] = {}
    release: Release = Release()
    training: Training | None = None
    batch: Batch | None = None
    serving: dict[Name, Serving] = {}

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
                problems.append((("zones", i), zone, f"zone is not in region {self.region}"))
        for key, spec in self.slices.items():
            if spec.zone is not None and spec.zone not in self.zones:
                problems.append(
                    (("slices", key, "zone"), spec.zone, f"not one of the environment's zones: {', '.join(self.zones)}")
                )
            minimum = MIN_GKE_VERSION.get(spec.accelerator)
            if minimum and _version_tuple(self.cluster.min_master_version) < _version_tuple(minimum):
                problems.append(
                    (
                        ("cluster", "min_master_version"),
                        self.cluster.min_master_version,
                        f"slice {key!r} ({spec.accelerator}) needs GKE {minimum} or newer",
                    )
                )
        for key, ident in self.identities.items():
            for bucket in ident.bucket_roles:
                if bucket not in self.buckets:
                    problems.append(
                        (
                            ("identities", key, "bucket_roles", bucket),
                            bucket,
                            f"no such bucket; buckets: {', '.join(self.buckets)}",
                        )
                    )
            if ident.mode == "impersonation" and len(gsa_account_id(key)) > 30:
                problems.append(
                    (
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
                    (("identities", key), f"{ksa[0]}/{ksa[1]}", f"the same service account as identity {seen[ksa]!r}")
                )
            seen[ksa] = key
        problems += self._training_problems()
        problems += self._gpu_problems()
        problems += self._serving_problems()
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

    def _writer_problems(self, where: tuple[str, ...], identity_key: str, bucket: str) -> list[Problem]:
        """A job's identity must be able to write its checkpoints to its bucket."""
        identity = self.identities.get(identity_key)
        if identity is None or bucket not in self.buckets:
            return []
        role = identity.bucket_roles.get(bucket)
        if role in ("roles/storage.objectUser", "roles/storage.objectAdmin"):
            return []
        return [
            (
                where,
                identity_key,
                f"must be able to write checkpoints to bucket {bucket!r}: give it "
                f"roles/storage.objectUser there (it has {role or 'no role'})",
            )
        ]

    def _gpu_problems(self) -> list[Problem]:
        problems: list[Problem] = []
        needs = self.gpudirect_networks
        if needs and self.network.gpudirect_cidr is None:
            users = ", ".join(k for k, s in self.slices.items() if s.slice.gpudirect)
            problems.append(
                (
                    ("network", "gpudirect_cidr"),
                    None,
                    f"slices {users} need {needs} GPUDirect networks: give a /20 or larger range, "
                    "for example 192.168.0.0/16",
                )
            )
        batch = self.batch
        queued = [k for k, s in self.slices.items() if s.capacity.type == "queued"]
        for key in queued:
            if batch is None or key not in batch.slices:
                problems.append(
                    (
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
                (
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
                problems.append((("batch", "slices", i), key, "Kueue queues GPU slices here; this is a TPU slice"))
        if len(set(batch.slices)) != len(batch.slices):
            problems.append((("batch", "slices"), batch.slices, "a slice is listed twice"))
        for section, job in (("nccl_test", batch.nccl_test), ("training", batch.training)):
            if job is not None and job.slice not in batch.slices:
                problems.append(
                    (("batch", section, "slice"), job.slice, f"not one of batch.slices: {', '.join(batch.slices)}")
                )
        test = batch.nccl_test
        if test is not None and test.nodes is not None and test.slice in self.slices:
            hosts = self.slices[test.slice].slice.hosts
            if test.nodes > hosts:
                problems.append(
                    (("batch", "nccl_test", "nodes"), test.nodes, f"slice {test.slice!r} has only {hosts} nodes")
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
                    (
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
                    problems.append(((*where, *field_path), slice_key, "serving here runs on TPU slices; this is GPU"))
                else:
                    slices[slice_key] = spec.slice
            # The fit check: every slice holds a whole replica of the model.
            for slice_key, slice_ in slices.items():
                assert not isinstance(d, CanaryServing)
                reason = d.model.fit_problem(slice_key, slice_)
                if reason:
                    problems.append(((*where, "model"), f"{d.model.parameters_b:g}B {d.model.precision}", reason))
            if isinstance(d, JetStreamServing) and len(slices) == 2:
                prefill, decode = slices.get(d.prefill_slice or ""), slices.get(d.decode_slice or "")
                if (
                    prefill
                    and decode
                    and (prefill.topology, prefill.machine_type) != (decode.topology, decode.machine_type)
                ):
                    problems.append(
                        (
                            (*where, "decode_slice"),
                            d.decode_slice,
                            f"prefill and decode slices must have one shape: {prefill.topology} on "
                            f"{prefill.machine_type} vs {decode.topology} on {decode.machine_type}",
                        )
                    )
            if isinstance(d, VllmServing) and d.slice in slices and slices[d.slice].multi_host:
                s_ = slices[d.slice]
                problems.append(
                    (
                        (*where, "slice"),
                        d.slice,
                        f"vLLM here serves from one TPU host (tensor parallelism = its chips); {s_.name} has "
                        f"{s_.hosts} hosts: use a single-host shape such as v6e 2x4 on ct6e-standard-8t",
                    )
                )
            if isinstance(d, SaxmlServing):
                problems += self._saxml_identity_problems(where, d)
        return problems

    def _known(self, where: tuple[str | int, ...], d: Any) -> list[Problem]:
        """The identity, buckets and image a serving deployment names exist, and it can read its bucket."""
        problems: list[Problem] = []
        problems += _not_in((*where, "identity"), d.identity, self.identities, "identities")
        buckets = [("bucket", d.bucket)]
        if isinstance(d, JetStreamServing):
            buckets.append(("scratch_bucket", d.scratch_bucket))
        conversion = getattr(d, "conversion", None)
        if conversion is not None:
            buckets.append(("conversion.source_bucket", conversion.source_bucket))
        for field_name, bucket in buckets:
            if bucket not in self.buckets:
                problems += _not_in((*where, *field_name.split(".")), bucket, self.buckets, "buckets")
            elif d.identity in self.identities and bucket not in self.identities[d.identity].bucket_roles:
                problems.append(
                    (
                        (*where, "identity"),
                        d.identity,
                        f"has no role on bucket {bucket!r} ({field_name}); "
                        f"add one to identities.{d.identity}.bucket_roles",
                    )
                )
        images = [("image", getattr(d, "image", None))]
        if conversion is not None:
            images.append(("conversion.image", conversion.image))
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
                ((*where, "identity"), d.identity, "Saxml runs as a Google service account: use mode impersonation")
            )
        others = sorted(set(identity.bucket_roles) - {d.bucket})
        if others or identity.bucket_roles.get(d.bucket) != "roles/storage.objectAdmin":
            problems.append(
                (
                    ("identities", d.identity, "bucket_roles"),
                    dict(identity.bucket_roles),
                    f"Saxml's identity gets roles/storage.objectAdmin on bucket {d.bucket!r} and no other role"
                    + (f" (remove {', '.join(others)})" if others else ""),
                )
            )
        return problems

    @property
    def gpudirect_networks(self) -> int:
        """How many GPUDirect VPC networks the slices need: the most extra NICs of any machine."""
        return max((s.slice.gpudirect.extra_nics for s in self.slices.values() if s.slice.gpudirect), default=0)

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


def _not_in(loc: tuple[str | int, ...], value: str, known: Iterable[str], label: str) -> list[Problem]:
    """No problem when `value` is one of `known`; otherwise one naming what is allowed."""
    names = list(known)
    return [] if value in names else [(loc, value, f"not in {label}: {', '.join(names) or '(none)'}")]


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"[0-9]+", version))


class _CrossReferenceError(ValueError):
    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(msg for _, _, msg in problems))


class ConfigError(Exception):
    """An environment file that cannot be loaded; `problems` holds one line per fault."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        lines = "\n".join(f"  {path}: {p}" for p in problems)
        super().__init__(f"{path}: invalid environment ({len(problems)} problem(s)):\n{lines}")


def _format_loc(loc: Iterable[str | int]) -> str:
    out = ""
    for part in loc:
        if part == "[key]":
            out += " (the key)"
        else:
            out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _unwrap(annotation: Any) -> Any:
    """Strip Annotated / Optional wrappers to the type that carries fields."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            annotation = args[0]
        else:
            return annotation


def _model_at(loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The model class whose fields live at `loc` inside an Environment."""
    current: Any = Environment
    i = 0
    while i < len(loc):
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            info = current.model_fields.get(str(loc[i]))
            if info is None:
                return None
            current = info.annotation
            i += 1
            continue
        origin = typing.get_origin(current)
        if origin in (dict, tuple, list):
            current = typing.get_args(current)[-1]
            i += 1
            continue
        return None
    current = _unwrap(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _describe(err: Any) -> tuple[tuple[str | int, ...], object, str]:
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    kind = err["type"]
    value = err.get("input")
    ctx = err.get("ctx") or {}
    cause = ctx.get("error")
    if isinstance(cause, ShapeError):
        return (*loc, cause.field), cause.value, str(cause)
    if kind == "extra_forbidden":
        parent = _model_at(loc[:-1])
        allowed = ", ".join(parent.model_fields) if parent else "see the model"
        return loc, value, f"unknown key {loc[-1]!r}; allowed keys here: {allowed}"
    if kind == "missing":
        return loc, None, "required field is missing"
    message = err["msg"]
    if kind == "value_error":
        message = message.removeprefix("Value error, ")
    if kind == "string_pattern_mismatch":
        message = f"must match the pattern {ctx.get('pattern')}"
    return loc, value, message


def _problems_from(err: ValidationError) -> list[str]:
    lines: list[str] = []
    for e in err.errors():
        cause = (e.get("ctx") or {}).get("error")
        if isinstance(cause, _CrossReferenceError):
            for loc, value, message in cause.problems:
                lines.append(f"{_format_loc(loc)}: {value!r}: {message}")
            continue
        loc, value, message = _describe(e)
        # A whole mapping is noise: model-level messages name the values at fault.
        shown = "" if isinstance(value, dict) or (value is None and e["type"] == "missing") else f"{value!r}: "
        lines.append(f"{_format_loc(loc)}: {shown}{message}")
    return lines


def load_environment(path: Path) -> Environment:
    """Load and validate one environment file; raise `ConfigError` on any fault."""
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(path, [f"cannot read the file: {err.strerror}"]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(path, [f"not valid YAML: {err}"]) from None
    if not isinstance(data, dict):
        raise ConfigError(path, [f"(top level): {type(data).__name__}: the file must hold a mapping of fields"])
    try:
        env = Environment.model_validate(data)
    except ValidationError as err:
        raise ConfigError(path, _problems_from(err)) from None
    if env.name != path.stem:
        raise ConfigError(path, [f"name: {env.name!r}: must equal the file's name {path.stem!r}"])
    return env


def load_all(directory: Path = ENVIRONMENTS_DIR) -> dict[str, Environment]:
    """Load every environment file; all faults of all files are reported together."""
    envs: dict[str, Environment] = {}
    errors: list[ConfigError] = []
    files = sorted(directory.glob("*.yaml"))
    if not files:
        raise ConfigError(directory, ["no environment files (*.yaml) found"])
    for path in files:
        try:
            envs[path.stem] = load_environment(path)
        except ConfigError as err:
            errors.append(err)
    if errors:
        if len(errors) == 1:
            raise errors[0]
        raise ConfigError(directory, [p for e in errors for p in (f"{e.path.name}: {q}" for q in e.problems)])
    return envs
