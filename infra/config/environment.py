"""The environment: every section together, and the checks that cross sections."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import Field, StringConstraints, field_validator, model_validator

from infra.catalogue import prices
from infra.catalogue.gcp_names import SERVICE_ACCOUNT_ID
from infra.catalogue.prices import NodePrice
from infra.config.base import (
    LabelKey,
    Model,
    Name,
    Problem,
    ProjectId,
    ProjectNumber,
    _CrossReferenceError,
)
from infra.config.compute import Cluster, CpuPool, SliceSpec
from infra.config.delivery import (
    SEED_SOURCE,
    SEEDED_ENV_NAME_MAX,
    Confirmation,
    Delivery,
    DeliveryIdentities,
    delivery_identities,
)
from infra.config.findings import Finding
from infra.config.identity import Identity, gsa_account_id
from infra.config.monitoring import Monitoring
from infra.config.network import Network
from infra.config.orchestrator_checks import (
    holder_problems,
    other_holders,
    slurm_problems,
    vertex_problems,
)
from infra.config.release import PLACEHOLDER_DIGEST, Release
from infra.config.serving import JetStreamServing, Serving, VllmServing
from infra.config.slurm import SlurmCluster
from infra.config.storage import BucketSpec, Registry, StateBackend
from infra.config.training import Batch, Team, Training
from infra.config.vertex import Vertex
from infra.config.vms import VmGroup
from infra.config.workload_checks import gpu_problems, serving_problems, team_problems, training_problems


def stack_name_clash(name: str) -> str | None:
    """Why an environment may not be called `name`, or None. The stacks are `platform-<env>` and `bootstrap-<env>`,
    and every output of an environment is named `<env>` or `platform-<env>` (cdktf.out): an environment called
    `platform-dev` is dev's stack's name, and `make plan ENV=platform-dev` replaced dev's outputs with its own."""
    for prefix in ("platform-", "bootstrap-"):
        if name.startswith(prefix):
            return (
                f"starts with {prefix!r}, which the platform's stacks are named with ({prefix}<env>): "
                f"name the environment {name.removeprefix(prefix)!r} or another name"
            )
    return None


BLUE_GREEN_SUFFIXES = ("-green", "-blue")


def blue_green_base(key: str) -> str | None:
    """The slice a blue/green copy `<slice>-green` or `<slice>-blue` replaces (make blue-green), or None."""
    for suffix in BLUE_GREEN_SUFFIXES:
        if key.endswith(suffix) and len(key) > len(suffix):
            return key.removesuffix(suffix)
    return None


class Environment(Model):
    """One environment, as `infra/environments/<name>.yaml` describes it."""

    # RUF012 on the dict defaults: pydantic copies `{}` defaults; ruff cannot see that Model (imported) is a
    # pydantic model.
    name: Name
    """The environment's name: its file's stem, and its stack `platform-<name>`."""
    project: ProjectId
    """The Google Cloud project everything of this environment lives in."""
    project_number: ProjectNumber
    """The project's number (Workload Identity's principals and the service agents are named with it)."""
    region: Annotated[str, StringConstraints(pattern=r"^[a-z]+-[a-z]+[0-9]+$")]
    """The region of the cluster, its network and its buckets (us-east5)."""
    zones: list[str] = Field(min_length=1)
    """The zones the node pools may use, in `region` (a slice names one with `zone`, else the first)."""
    labels: dict[LabelKey, Annotated[str, StringConstraints(pattern=r"^[a-z0-9_-]{0,63}$")]] = {}  # noqa: RUF012
    """Labels every resource of the stack carries (cost reports group by them)."""
    state: StateBackend
    """Where Terraform keeps this environment's state (a versioned bucket the bootstrap stack makes)."""
    network: Network
    """The VPC, its subnet and the cluster's secondary ranges."""
    cluster: Cluster
    """The GKE cluster: its release channel, minimum version and system node pool."""
    slices: dict[Name, SliceSpec] = {}  # noqa: RUF012
    """TPU slices and GPU machine groups by key: each becomes node pools (or a Slurm partition, a Vertex AI job, a
    VM group: whoever names it holds it)."""
    cpu_pools: dict[Name, CpuPool] = {}  # noqa: RUF012
    """CPU node pools by name, for the Jobs and servers that need no accelerator."""
    buckets: dict[Name, BucketSpec]
    """Cloud Storage buckets by key (the bucket is `<project>-<key>` unless it has a `name`)."""
    registry: Registry
    """The Artifact Registry repository the images are built into and pulled from."""
    identities: dict[Name, Identity] = {}  # noqa: RUF012
    """Kubernetes service accounts and what they may do in Google Cloud (Workload Identity), by key."""
    release: Release = Release()
    """The pinned images, chart versions and controller versions: what is promoted from dev to prod."""
    training: Training | None = None
    """Ray Train on a TPU slice: the RayCluster, the trainer image and its checkpoints."""
    batch: Batch | None = None
    """GPU batch jobs (JobSet) admitted by Kueue on the listed slices: the NCCL test and GPU training."""
    teams: dict[Name, Team] = {}  # noqa: RUF012
    """Teams sharing the batch slices through Kueue (infra/config/training.py Team)."""
    serving: dict[Name, Serving] = {}  # noqa: RUF012
    """Model servers by key, each on one engine: vLLM, JetStream, Saxml or the canary server."""
    slurm: SlurmCluster | None = None
    """A Slurm cluster through Cluster Toolkit, on GPU slices named by its partitions."""
    vertex: Vertex | None = None
    """Vertex AI custom jobs (the NCCL test, GPU training) on a GPU slice."""
    vm_groups: dict[Name, VmGroup] = {}  # noqa: RUF012
    """Plain Compute Engine VMs by key, one group per GPU slice."""
    monitoring: Monitoring = Monitoring()
    """The dashboards, alert policies and budget of this environment."""
    delivery: Delivery | None = None
    """The repository whose workflows plan and deploy it (the bootstrap stack binds its identities to it)."""
    confirm: list[Confirmation] = []  # noqa: RUF012
    """Gated changes of this environment's stack the author confirms (infra/delivery/confirmations.py)."""

    @field_validator("name")
    @classmethod
    def _name_not_a_stacks(cls, name: str) -> str:
        clash = stack_name_clash(name)
        if clash:
            raise ValueError(clash)
        return name

    @field_validator("zones")
    @classmethod
    def _zones_well_formed(cls, zones: list[str]) -> list[str]:
        for zone in zones:
            # A zone, or an AI zone (us-central1-ai1a: https://cloud.google.com/compute/docs/regions-zones/ai-zones).
            if not re.match(r"^[a-z]+-[a-z]+[0-9]+-([a-z]|ai[0-9]+[a-z])$", zone):
                raise ValueError(
                    f"zone {zone!r} is not a zone name like us-east5-b (or an AI zone like us-central1-ai1a)"
                )
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
        # The system pool is named `system` (infra/constructs/node_pools.py SYSTEM_POOL): no slice or CPU pool may
        # take its name.
        if "system" in self.slices:
            problems.append(Finding(("slices", "system"), "system", "the name of the cluster's system pool: rename it"))
        problems += self._pool_name_problems()
        for key in self.buckets:
            if self.bucket_name(key) == self.build_staging_bucket:
                where = ("buckets", key, "name") if self.buckets[key].name else ("buckets", key)
                problems.append(
                    Finding(
                        where,
                        self.bucket_name(key),
                        "the name of the bucket the stack makes for `make image`'s sources (<project>-build-staging): "
                        "name it otherwise",
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
        problems += self._seed_problems()
        problems += self._queued_start_problems()
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
        problems += training_problems(self)
        problems += gpu_problems(self)
        problems += team_problems(self)
        problems += serving_problems(self)
        problems += holder_problems(self)
        problems += slurm_problems(self)
        problems += vertex_problems(self)
        if problems:
            raise _CrossReferenceError(problems)
        return self

    @property
    def autoscales(self) -> bool:
        """Whether a serving deployment has an autoscaler (then the stack adds the metrics adapter it reads)."""
        return any(getattr(d, "autoscaling", None) is not None for d in self.serving.values())

    def _vllm_on(self, key: str, *, multi_host: bool) -> VllmServing | None:
        """The vLLM deployment on slice `key` where the slice is (or is not) multi-host; None if none. On a
        single-host slice its servers are the pool's hosts; on a multi-host slice each server is a whole slice, one
        of the slice's `count` node pools."""
        if self.slices[key].slice.multi_host != multi_host:
            return None
        return next((d for d in self.serving.values() if isinstance(d, VllmServing) and d.slice == key), None)

    def _replacing(self, key: str, training: str | None) -> bool:
        """Whether slice `key` is a blue/green replacement (`<slice>-green`, `<slice>-blue`: make blue-green) of a
        counted slice the training cluster or a multi-host vLLM deployment runs on: it is counted like it until the
        workloads move."""
        base = blue_green_base(key)
        if base is None or base not in self.slices:
            return False
        return base == training or self._vllm_on(base, multi_host=True) is not None

    def _seed_problems(self) -> list[Problem]:
        """A seed project is another project than the environment's, and names this environment's accounts within
        Google's limits (DeliveryIdentities)."""
        seed = self.delivery.seed if self.delivery is not None else None
        if seed is None:
            return []
        problems: list[Problem] = []
        if seed.project == self.project:
            problems.append(
                Finding(
                    ("delivery", "seed", "project"),
                    seed.project,
                    "the environment's own project: a seed project is another one, out of its deployer's reach "
                    f"(or leave seed out) [source: {SEED_SOURCE}]",
                )
            )
        elif seed.project_number == self.project_number:
            problems.append(
                Finding(
                    ("delivery", "seed", "project_number"),
                    seed.project_number,
                    f"the number of the environment's own project {self.project}: give {seed.project}'s (its "
                    "federation's principals are named with it) [source: https://cloud.google.com/iam/docs/"
                    "principal-identifiers]",
                )
            )
        if len(self.name) > SEEDED_ENV_NAME_MAX:
            problems.append(
                Finding(
                    ("delivery", "seed"),
                    self.name,
                    f"in a seed project the deployer's account is deployer-{self.name}, over a service account id's "
                    f"30 characters: an environment with a seed project has a name of at most {SEEDED_ENV_NAME_MAX} "
                    f"[source: {SERVICE_ACCOUNT_ID}]",
                )
            )
        return problems

    @property
    def queued_slices(self) -> list[str]:
        """The slices Kueue admits runs onto: the training queue's slice, and the batch slices (teams borrow these
        only); of those the file declares (a name it does not is refused on its own)."""
        t = self.training
        keys = [t.slice] if t is not None and t.queue is not None else []
        keys += [k for k in (self.batch.slices if self.batch is not None else []) if k not in keys]
        return [k for k in keys if k in self.slices]

    def _queued_start_problems(self) -> list[Problem]:
        """A measured start is of a run Kueue admits: on a slice of the training queue or the batch slices."""
        queued = self.queued_slices
        return [
            Finding(
                ("slices", key, "queued_start"),
                spec.queued_start.seconds,
                "no Kueue queue admits runs onto this slice, so no run's start on it sets Kueue's wait; queued "
                f"slices: {', '.join(queued) or 'none (training.queue, batch.slices)'}",
            )
            for key, spec in self.slices.items()
            if spec.queued_start is not None and key not in queued
        ]

    @property
    def delivery_identities(self) -> DeliveryIdentities:
        """Where this environment's planner, deployer and GitHub federation live, and their ids."""
        return delivery_identities(
            self.name, self.project, self.project_number, self.delivery.seed if self.delivery is not None else None
        )

    @property
    def names_its_quota_project(self) -> bool:
        """Whether a google provider of the platform stack names this project as its calls' quota project
        (user_project_override, infra/constructs/providers.py): every one where the accounts are a seed's
        (delivery.seed), the billing alias where there is a budget. The caller needs serviceusage.services.use here,
        which the planner gets from serviceUsageConsumer (the deployer holds it in serviceUsageAdmin)."""
        return self.delivery_identities.seeded or self.monitoring.budget is not None

    def _pool_name_problems(self) -> list[Problem]:
        """A counted slice's pools (`<key>-<i>`) and a slice's capacity tiers' (`<key>-<type>`) must be node pool
        names no other slice or CPU pool takes, and only the Ray training slice is counted (a multislice job is a
        training job here)."""
        problems: list[Problem] = []
        training = self.training.slice if self.training else None
        taken = {pool: key for key, spec in self.slices.items() for pool in spec.pools(key)[1:]}
        for key, spec in self.slices.items():
            if spec.count == 1 and not spec.falls_back:
                continue
            where: tuple[str | int, ...] = ("slices", key, "count")
            value: object = spec.count
            if spec.falls_back:
                where, value = ("slices", key, "capacity"), [t.label for t in spec.tiers]
            elif key == training and not spec.slice.multi_host:
                problems.append(
                    Finding(
                        where,
                        spec.count,
                        f"the training slice is a single-host slice ({spec.slice.name}): GKE's Multislice runs on "
                        "multi-host TPU slice node pools only (https://cloud.google.com/kubernetes-engine/docs/how-to/"
                        "tpu-multislice); give it a topology of several hosts, or count 1",
                    )
                )
            elif key != training and self._vllm_on(key, multi_host=True) is None and not self._replacing(key, training):
                problems.append(
                    Finding(
                        where,
                        spec.count,
                        f"only the Ray training slice (training.slice: {training or 'none'}) and a vLLM "
                        "deployment's multi-host slice (one slice per server) are counted; another serving slice is "
                        "one slice per key (Saxml's two slices are two keys)",
                    )
                )
            for pool in spec.pools(key)[1:]:
                if pool in self.slices or pool in self.cpu_pools or taken[pool] != key:
                    problems.append(Finding(where, value, f"its pool {pool!r} is the name of another pool"))
                elif len(pool) > 40:
                    problems.append(Finding(where, value, f"its pool {pool!r} is longer than GKE's 40 characters"))
        return problems

    def slice_copies(self, key: str) -> int:
        """How many copies of slice `key` its node pool holds: the replicas of the vLLM deployment on a single-host
        slice (its autoscaler's max where it autoscales), else 1."""
        d = self._vllm_on(key, multi_host=False)
        if d is None:
            return 1
        return d.autoscaling.max if d.autoscaling is not None else d.replicas

    def slice_node_range(self, key: str) -> tuple[int, int] | None:
        """(min, max) nodes of slice `key`'s pool (of each of its tiers' pools) where it autoscales: its own
        capacity's range, or the hosts of its vLLM autoscaler's fewest and most servers; None for a fixed node
        count."""
        spec = self.slices[key]
        d = self._vllm_on(key, multi_host=False)
        if spec.falls_back:
            # Each tier's pool from zero to every server: the ComputeClass decides which pools grow.
            return (0, spec.slice.hosts * self.slice_copies(key))
        if d is None or d.autoscaling is None:
            return spec.node_range
        low = 0 if spec.primary.dynamic else d.autoscaling.min * spec.slice.hosts
        return (low, d.autoscaling.max * spec.slice.hosts)

    def pool_node_ranges(self, key: str) -> list[tuple[int, int] | None]:
        """(min, max) nodes of each of slice `key`'s pools (in `tier_pools` order), None for a fixed count. A vLLM
        deployment that autoscales across multi-host slices has every pool grow from zero to a slice (GKE adds or
        removes a multi-host slice's hosts all at once), and its autoscaler's minimum holds its fewest servers'
        slices. No pool is fixed: a group recreated after a preemption may land on any pool, and a fixed one left
        empty would be paid for beside it (review 10, L4)."""
        spec = self.slices[key]
        d = self._vllm_on(key, multi_host=True)
        if d is None or d.autoscaling is None or spec.primary.dynamic:
            return [self.slice_node_range(key)] * len(spec.tier_pools(key))
        return [(0, spec.slice.hosts)] * spec.count

    def pool_sizes(self, key: str) -> list[tuple[str, int, int]]:
        """(pool, fewest nodes, most nodes) of each of slice `key`'s pools, in `tier_pools` order: its range where it
        autoscales, else its fixed count (a host per copy of the slice)."""
        fixed = self.slices[key].slice.hosts * self.slice_copies(key)
        return [
            (pool, *(node_range or (fixed, fixed)))
            for (pool, _), node_range in zip(self.slices[key].tier_pools(key), self.pool_node_ranges(key), strict=True)
        ]

    def slice_holder(self, key: str) -> str:
        """Which orchestrator holds slice `key`'s machines: `gke` (a node pool of the stack), `slurm`, `vertex`
        or `vms`."""
        return next((holder for k, holder, _ in other_holders(self) if k == key), "gke")

    def held_by(self, holder: str) -> dict[str, SliceSpec]:
        """The slices one orchestrator holds."""
        return {k: s for k, s in self.slices.items() if self.slice_holder(k) == holder}

    @property
    def gke_slices(self) -> dict[str, SliceSpec]:
        """The slices GKE holds: one node pool each."""
        return self.held_by("gke")

    @property
    def namespaces(self) -> list[str]:
        """The workload namespaces the stack makes: every identity's."""
        return sorted({ident.namespace for ident in self.identities.values()})

    @property
    def pathways_slices(self) -> list[str]:
        """Slices of the JetStream + Pathways deployments.

        Their pools run with the GCE metadata server (`--workload-metadata=GCE_METADATA`,
        as the GKE JetStream + Pathways tutorial creates them), so their pods act as
        the pools' own node service account, which the stack gives exactly the bucket
        roles of those deployments' identities.
        """
        return sorted({k for d in self.serving.values() if isinstance(d, JetStreamServing) for k in d.slice_keys})

    def conversion_paths(self) -> dict[str, dict[str, dict[str, list[str]]]]:
        """What the checkpoint conversions touch, by their identity: {identity: {bucket key: {"read": [paths],
        "write": [paths]}}}. Each conversion reads `source_path` of its source bucket and writes the deployment's
        `checkpoint_path` of the deployment's bucket; the stack holds the identity's grants to those paths."""
        out: dict[str, dict[str, dict[str, list[str]]]] = {}
        for d in self.serving.values():
            if isinstance(d, JetStreamServing) and d.conversion is not None:
                c = d.conversion
                buckets = out.setdefault(c.identity, {})
                buckets.setdefault(c.source_bucket, {"read": [], "write": []})["read"].append(c.source_path)
                buckets.setdefault(d.bucket, {"read": [], "write": []})["write"].append(d.checkpoint_path)
        return out

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

    def team_of(self, namespace: str | None) -> str | None:
        """The team a namespace's spend is counted to: the team whose namespace it is (teams.<team>.namespace), else
        the platform's (labels.team); None where neither says."""
        owners = {team.namespace: name for name, team in self.teams.items()}
        return owners.get(namespace or "", self.labels.get("team"))

    def zone_of(self, slice_key: str) -> str:
        return self.slices[slice_key].zone or self.zones[0]

    def node_price(self, slice_key: str) -> NodePrice:
        """One node of slice `slice_key` at the list price of its primary capacity tier, in its zone
        (infra/catalogue/prices.py)."""
        spec = self.slices[slice_key]
        return prices.node_price(spec.slice.machine_type, self.zone_of(slice_key), spec.primary.type)

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

    @property
    def build_service_account(self) -> str:
        """The account Cloud Build runs `make image`'s builds as (the stack's `image-builder`: it writes this
        environment's registry and its logs, and reads the staged sources)."""
        return f"{BUILD_ACCOUNT_ID}@{self.project}.iam.gserviceaccount.com"

    @property
    def build_staging_bucket(self) -> str:
        """Where `gcloud builds submit` stages a build's sources for the builder to read (the stack's bucket)."""
        return f"{self.project}-build-staging"


# The Cloud Build service account's id (6-30 characters, unique in the project).
BUILD_ACCOUNT_ID = "image-builder"


def _networks_for(specs: Iterable[SliceSpec]) -> int:
    return max((s.slice.gpudirect.extra_nics for s in specs if s.slice.gpudirect), default=0)


# Where docs/environment.schema.json says editors find the rest (the checks across fields, the real systems' rules).
SCHEMA_ID = "docs/environment.schema.json"


def json_schema() -> dict[str, Any]:
    """The environment file's JSON Schema, for editors (a YAML language server completes and checks fields as they
    are typed): the model's fields, types, bounds and the unknown keys it refuses. What it cannot say (the checks
    across sections, the real systems' rules) `make plan` says at load."""
    schema = Environment.model_json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "ML platform environment file (infra/environments/<name>.yaml)",
        **{k: v for k, v in schema.items() if k != "title"},
        "description": (
            "One environment of the platform (docs/environments.md). This schema holds each field's type, bounds and "
            "names; the checks across sections and the rules of the real systems run at load (`make plan`)."
        ),
    }
