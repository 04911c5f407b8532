"""Rules checked on a loaded environment, at load time: what a real system will refuse, known from the file alone.

Each check gets the `Environment` and yields (field path, value, message);
`load_environment` turns them into load errors naming the file, the field,
the value, the rule and its source.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from infra.gke_nodes import allocatable_memory_gib, machine_allocatable
from infra.models import MODELS, conversion_memory_gib
from infra.rules import Finding, rule

if TYPE_CHECKING:
    from infra.config import Environment

TPU_DOC = "https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus"
MAXTEXT = "AI-Hypercomputer/maxtext"
JETSTREAM_TUTORIAL = (
    "GKE tutorial 'Serve LLMs using multi-host TPUs on GKE with JetStream and Pathways' "
    "(https://cloud.google.com/kubernetes-engine/docs/tutorials/serve-multihost-tpu-jetstream)"
)


def _workloads(env: Environment) -> Iterator[tuple[str, str]]:
    """(field path, slice key) of every workload's claim on a slice (training, batch, serving)."""
    if env.training is not None:
        yield "training.slice", env.training.slice
    if env.batch is not None:
        for i, key in enumerate(env.batch.slices):
            yield f"batch.slices[{i}]", key
    for name, d in env.serving.items():
        for path, key in d.slice_fields():
            yield "serving." + name + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path), key


@rule(
    id="platform.tpu.one-workload-per-slice",
    system="GKE TPU slices",
    layer="pod-start",
    summary=(
        "A multi-host TPU slice's chips belong to one workload at a time: two workloads on one slice leave one "
        "pending forever (every host is taken whole)."
    ),
    source=f"{TPU_DOC} (a multi-host slice is provisioned and used as one unit; pods request all chips of a host)",
    subject="environment",
)
def _one_workload(env: Environment) -> Iterator[Finding]:
    claims: dict[str, list[str]] = {}
    for path, key in _workloads(env):
        if key in env.slices and env.slices[key].slice.kind == "tpu":
            claims.setdefault(key, []).append(path)
    for key, paths in claims.items():
        if len(paths) > 1:
            yield paths[1], key, f"slice {key!r} is already used by {paths[0]}; give each workload its own slice"


def _jetstream(env: Environment) -> Iterator[tuple[str, Any, dict[str, str]]]:
    """(field path, deployment, MaxText args as a dict) of every JetStream deployment."""
    from workloads.serving.jetstream import maxtext_serving_args

    for name, d in env.serving.items():
        if d.engine == "jetstream":
            args = maxtext_serving_args(env, d)
            yield f"serving.{name}", d, dict(a.split("=", 1) for a in args if "=" in a)


ICI_AXES = ("ici_data_parallelism", "ici_fsdp_parallelism", "ici_autoregressive_parallelism", "ici_tensor_parallelism")


@rule(
    id="maxtext.ici-product-equals-chips",
    system="MaxText",
    layer="engine-start",
    summary="The product of the ici_* parallelism equals the devices of one slice (one axis may be -1 to fill).",
    source=f"{MAXTEXT} src/maxtext/utils/max_utils.py create_device_mesh (fill_unspecified_parallelism)",
    subject="environment",
)
def _ici_product(env: Environment) -> Iterator[Finding]:
    for path, d, args in _jetstream(env):
        chips = env.slices[d.slice_keys[0]].slice.chips
        sizes = {axis: int(args.get(axis, "1")) for axis in ICI_AXES}
        known = math.prod(v for v in sizes.values() if v != -1)
        fills = [k for k, v in sizes.items() if v == -1]
        if len(fills) > 1 or (fills and chips % known) or (not fills and known != chips):
            yield f"{path}.maxtext args", sizes, f"product {known} is not the slice's {chips} chips"


@rule(
    id="maxtext.tensor-parallelism-divides-kv-heads",
    system="MaxText",
    layer="engine-start",
    summary=(
        "ici_tensor_parallelism divides the model's KV heads (Llama 3.1 405B and Llama 2 70B have 8): the KV "
        "cache is sharded over the tensor axis."
    ),
    source=(
        f"{MAXTEXT} configs/models/<model>.yml base_num_kv_heads; {JETSTREAM_TUTORIAL}: ici_tensor_parallelism=8. "
        "Not found as an explicit check in MaxText: JAX refuses to place an array whose dimension is not "
        "divisible by its mesh axis (not run here for the 405B config)"
    ),
    subject="environment",
)
def _tensor_heads(env: Environment) -> Iterator[Finding]:
    for path, d, args in _jetstream(env):
        arch = MODELS.get(d.model.name)
        tensor = int(args.get("ici_tensor_parallelism", "1"))
        if tensor == -1:
            tensor = env.slices[d.slice_keys[0]].slice.chips
        if arch is not None and arch.kv_heads % tensor:
            yield (
                f"{path}.maxtext args.ici_tensor_parallelism",
                tensor,
                f"{d.model.name} has {arch.kv_heads} KV heads; use a divisor and put the rest on "
                "ici_autoregressive_parallelism",
            )


@rule(
    id="maxtext.tokenizer-matches-model",
    system="MaxText",
    layer="engine-start",
    summary=(
        "A Llama 3 model is served with the Llama 3 tokenizer; base.yml's default is Llama 2's (not a refusal: "
        "the server starts and answers in the wrong vocabulary)."
    ),
    source=f"{MAXTEXT} configs/base.yml (tokenizer_path default assets/tokenizer.llama2); {JETSTREAM_TUTORIAL}",
    subject="environment",
)
def _tokenizer(env: Environment) -> Iterator[Finding]:
    from infra.models import MAXTEXT_DEFAULT_TOKENIZER

    for path, d, args in _jetstream(env):
        arch = MODELS.get(d.model.name)
        if arch is None:
            yield f"{path}.model.name", d.model.name, f"unknown model; known: {', '.join(sorted(MODELS))}"
            continue
        tokenizer = args.get("tokenizer_path", MAXTEXT_DEFAULT_TOKENIZER)
        if tokenizer != arch.tokenizer:
            yield f"{path}.maxtext args.tokenizer_path", tokenizer, f"{d.model.name} needs {arch.tokenizer}"


@rule(
    id="vllm.tensor-parallel-divides-heads",
    system="vLLM",
    layer="engine-start",
    summary="--tensor-parallel-size divides the model's attention heads.",
    source=(
        "vllm-project/vllm vllm/config (verify_with_parallel_config): 'Total number of attention heads must be "
        "divisible by tensor parallel size'"
    ),
    subject="environment",
)
def _vllm_heads(env: Environment) -> Iterator[Finding]:
    for name, d in env.serving.items():
        if d.engine != "vllm":
            continue
        arch = MODELS.get(d.model.name)
        chips = env.slices[d.slice].slice.chips
        if arch is not None and arch.query_heads % chips:
            yield f"serving.{name}.slice", d.slice, f"{arch.query_heads} heads are not divisible by {chips} chips"


@rule(
    id="gke.pod-fits-a-node-of-its-pool",
    system="Kubernetes scheduler / GKE",
    layer="pod-start",
    summary="A checkpoint conversion Job's memory request fits the allocatable memory of one node of its CPU pool.",
    source=(
        "https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes#memory_reservations "
        "(allocatable = capacity - reserved); a bigger request stays Pending ('Insufficient memory')"
    ),
    subject="environment",
)
def _conversion_fits(env: Environment) -> Iterator[Finding]:
    from infra.config import JetStreamServing

    for name, d in env.serving.items():
        if not isinstance(d, JetStreamServing) or d.conversion is None:
            continue
        conversion = d.conversion
        pool = env.cpu_pools.get(conversion.pool)
        if pool is None:
            continue  # the model reports the unknown pool
        need = conversion_memory_gib(d.model.parameters_b)
        have = allocatable_memory_gib(pool.shape.memory_gib)
        if need > have:
            yield (
                f"serving.{name}.conversion.pool",
                conversion.pool,
                f"the conversion of {d.model.parameters_b:g}B parameters requests {need} GiB; a {pool.machine_type} "
                f"node has about {have:.0f} GiB allocatable of {pool.shape.memory_gib:g} GiB",
            )


@rule(
    id="gke.requests-fit-their-pool",
    system="Kubernetes scheduler / GKE",
    layer="pod-start",
    summary=(
        "The Ray head's and workers' CPU and memory requests (with the FUSE sidecar's) fit one node of the pool "
        "they run on, after GKE's reservations and its DaemonSets."
    ),
    source=(
        "https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes (allocatable); "
        "https://kubernetes.io/docs/concepts/scheduling-eviction/kube-scheduler/ (a pod no node fits stays "
        "Pending: 'Insufficient cpu' / 'Insufficient memory')"
    ),
    subject="environment",
)
def _requests_fit(env: Environment) -> Iterator[Finding]:
    from infra.rules.scheduler import FUSE_DEFAULTS, quantity

    if env.training is None:
        return
    pods = [("worker", env.training.worker, env.slices[env.training.slice].slice.machine_type, "slice")]
    pods.append(("head", env.training.head, env.cluster.system_pool.machine_type, "system pool"))
    for name, size, machine, pool in pods:
        free = machine_allocatable(machine)
        if free is None:
            continue  # gce.machine-type-offered-in-zone names an uncatalogued machine
        for resource in ("cpu", "memory"):
            need = quantity(getattr(size, resource), resource) + FUSE_DEFAULTS[resource]
            if need > free[resource]:
                unit = " cores" if resource == "cpu" else " GiB"
                yield (
                    f"training.{name}.{resource}",
                    getattr(size, resource),
                    f"requests {need:g}{unit} with the FUSE sidecar; a {machine} node of the {pool} has about "
                    f"{free[resource]:.1f}{unit} allocatable",
                )
