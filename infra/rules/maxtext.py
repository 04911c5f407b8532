"""MaxText: parallelism that matches the slice and the model, the model's own tokenizer."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from infra.catalogue.models import MODELS
from infra.config.training import mebibytes
from infra.rules import Finding, rule
from infra.rules.sources import JETSTREAM_TUTORIAL, MAXTEXT

if TYPE_CHECKING:
    from infra.config import Environment
from infra.rules.environment_subject import ICI_AXES, _jetstream


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
            yield Finding(f"{path}.maxtext args", sizes, f"product {known} is not the slice's {chips} chips")


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
        arch = MODELS.get(d.model.catalogue_name)
        tensor = int(args.get("ici_tensor_parallelism", "1"))
        if tensor == -1:
            tensor = env.slices[d.slice_keys[0]].slice.chips
        if arch is not None and arch.kv_heads % tensor:
            yield Finding(
                f"{path}.maxtext args.ici_tensor_parallelism",
                tensor,
                f"{d.model.catalogue_name} has {arch.kv_heads} KV heads; use a divisor and put the rest on "
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
    from infra.catalogue.models import MAXTEXT_DEFAULT_TOKENIZER, maxtext_names

    for key, d in env.serving.items():
        # A Hugging Face name is vLLM's, not a model MaxText loads (JetStream's conversion reads MaxText's names).
        if d.engine == "jetstream" and d.model.catalogue_name not in maxtext_names():
            own = (
                ""
                if d.model.architecture
                else (
                    "; a model under a name of its own (fine-tuned): keep model.name and say which of these it is in "
                    "model.architecture"
                )
            )
            known = ", ".join(maxtext_names())
            yield Finding(
                f"serving.{key}.{d.model.catalogue_field}",
                d.model.catalogue_name,
                f"not a model MaxText knows (infra/catalogue/models.py); known: {known}{own}",
            )
    for path, d, args in _jetstream(env):
        arch = MODELS[d.model.catalogue_name]
        tokenizer = args.get("tokenizer_path", MAXTEXT_DEFAULT_TOKENIZER)
        if tokenizer != arch.tokenizer:
            yield Finding(
                f"{path}.maxtext args.tokenizer_path", tokenizer, f"{d.model.catalogue_name} needs {arch.tokenizer}"
            )


@rule(
    id="models.parameters-match-architecture",
    system="MaxText / vLLM",
    layer="engine-start",
    summary=(
        "A served model's declared size (model.parameters_b) is the size of the model it is (model.architecture, "
        "else model.name) within 10%: the HBM fit (models.weights-fit-the-slice and the serving rules) and the "
        "price of the slices it needs are computed from it, so a 70B model declared as 7B passes a fit it cannot "
        "make."
    ),
    source=(
        "Hugging Face model pages (size from the safetensors index): meta-llama/Llama-2-7b-hf 6.74B, "
        "Llama-2-70b-hf 68.98B, Meta-Llama-3-8B and Llama-3.1-8B-Instruct 8.03B, Llama-3.1-70B-Instruct and "
        "Llama-3.3-70B-Instruct 70.55B, Llama-3.1-405B-Instruct 405.85B (infra/catalogue/models.py)"
    ),
    subject="environment",
)
def _parameters_match(env: Environment) -> Iterator[Finding]:
    from infra.catalogue.models import PARAMETERS_TOLERANCE

    for key, d in env.serving.items():
        model = getattr(d, "model", None)
        if model is None:
            continue
        arch = MODELS.get(model.catalogue_name)
        if arch is None or not arch.parameters_b:
            continue
        if abs(model.parameters_b - arch.parameters_b) > PARAMETERS_TOLERANCE * arch.parameters_b:
            yield Finding(
                f"serving.{key}.model.parameters_b",
                model.parameters_b,
                f"{model.catalogue_name} ({model.catalogue_field}) has {arch.parameters_b:g}B parameters; declare "
                f"its size (within {PARAMETERS_TOLERANCE:.0%}), or name the model it is in model.architecture",
            )


@rule(
    id="models.weights-fit-the-slice",
    system="MaxText / vLLM / Saxml (TPU HBM)",
    layer="engine-start",
    summary=(
        "Each slice a deployment serves on holds a whole replica of its model: the weights at their precision plus "
        "the KV cache (model.kv_cache_gb) fit the slice's HBM (chips x each chip's HBM), or the server runs out of "
        "memory loading it."
    ),
    source="infra/catalogue/accelerators.py (each accelerator's HBM per chip, with its source); docs/serving.md",
    subject="environment",
)
def _fits(env: Environment) -> Iterator[Finding]:
    for key, d in env.serving.items():
        model = getattr(d, "model", None)
        if model is None:
            continue
        for slice_key in dict.fromkeys(k for _, k in d.slice_fields()):
            reason = model.fit_problem(slice_key, env.slices[slice_key].slice)
            if reason:
                yield Finding(("serving", key, "model"), f"{model.parameters_b:g}B {model.precision}", reason)


@rule(
    id="maxtext.recipe-runs-on-training-slice",
    system="MaxText",
    layer="engine-start",
    summary=(
        "The recipe an environment trains (training.recipe) runs on its training slice: tuned for its shape and "
        "slice count (slices.<key>.count), ici parallelism equal to its devices, and the compiler's per-chip memory "
        "of the step within the HBM (workloads/trainer/compiled.yaml, current for the recipe's arguments; a "
        "multislice recipe compiled with compile_topology_num_slices)."
    ),
    source=(
        f"{MAXTEXT} src/maxtext/trainers/pre_train/train_compile.py (compile_topology, compile_topology_num_slices: "
        "the step's per-chip memory, CompileTimeHbmOom); max_utils.py create_device_mesh (dcn_*_parallelism); "
        "workloads/trainer/recipes.yaml and compiled.yaml"
    ),
    subject="environment",
)
def _recipe_runs(env: Environment) -> Iterator[Finding]:
    from workloads.trainer.compiled import how_to_add, recipes_on, slices_phrase
    from workloads.trainer.recipes import RECIPES_FILE, load_recipes

    training = env.training
    if training is None or training.recipe is None or training.slice not in env.slices:
        return
    slice_, count = env.slices[training.slice].slice, env.slices[training.slice].count
    if slice_.kind != "tpu":
        return  # a Ray training slice is a TPU slice: its own check says so
    fits = recipes_on(slice_, count=count)
    runnable = [f.recipe if f.compiled else f"{f.recipe} (any slice, a small model)" for f in fits if f.runs]
    where = f"training.slice {training.slice!r} ({slices_phrase(slice_, count)})"
    this = next((f for f in fits if f.recipe == training.recipe), None)
    if this is None:
        known = ", ".join(sorted(load_recipes()))
        yield Finding(
            "training.recipe",
            training.recipe,
            f"no such recipe in {RECIPES_FILE.relative_to(RECIPES_FILE.parents[2])}; recipes: {known}",
        )
    elif not this.runs:
        yield Finding(
            "training.recipe",
            training.recipe,
            f"does not run on {where}: {this.why}; recipes that run there: {', '.join(runnable) or 'none'}; "
            f"to make one, {how_to_add(slice_, count)}",
        )


_SIZE = re.compile(r"-([0-9.]+)b$")


@rule(
    id="maxtext.conversion-matches-model",
    system="MaxText checkpoint conversion",
    layer="engine-start",
    summary=(
        "A JetStream deployment's conversion converts the model it serves: model_size has its parameters, and is "
        "its MaxText name where the deployment serves a Llama MaxText knows (one checkpoint layout per model size)."
    ),
    source="MaxText's llama_or_mistral_ckpt.py MODEL_PARAMS_DICT (one layout per model size)",
    subject="environment",
)
def _conversion_size(env: Environment) -> Iterator[Finding]:
    for key, d in env.serving.items():
        conversion = getattr(d, "conversion", None)
        if d.engine != "jetstream" or conversion is None:
            continue
        size = conversion.model_size
        found = _SIZE.search(size)
        where = ("serving", key, "conversion", "model_size")
        if found and abs(float(found.group(1)) - d.model.parameters_b) > 0.5:
            yield Finding(
                where,
                size,
                f"converts a {found.group(1)}B model, but serving.{key}.model has {d.model.parameters_b:g}B "
                f"parameters ({d.model.name})",
            )
        elif (
            d.model.catalogue_name in MODELS
            and d.model.catalogue_name.startswith("llama")
            and d.model.catalogue_name != size
        ):  # a model MaxText does not know: rule maxtext.tokenizer-matches-model lists those it does
            yield Finding(
                where,
                size,
                f"converts {size}, but serving.{key} serves {d.model.catalogue_name} ({d.model.catalogue_field})",
            )


MAXTEXT_MTC_GUIDE = (
    "maxtext docs/guides/checkpointing_solutions/multi_tier_checkpointing.md (a RAM disk of two saves per host, 10-15 "
    "% spare); GoogleCloudPlatform/high-scale-checkpointing-controller pkg/localvolume/tmpfs.go (a tmpfs of "
    "inMemoryVolumeSize on every node)"
)


@rule(
    id="maxtext.local-tier-holds-two-saves",
    system="MaxText",
    layer="platform",
    summary=(
        "The local tier's RAM disk (training.resilience.local_tier.ram_disk) holds two of a host's saves of the "
        "recipe (its own and a peer's) with 15 % spare, and fits the node's memory beside the worker's."
    ),
    source=MAXTEXT_MTC_GUIDE,
    subject="environment",
)
def _local_tier_fits(env: Environment) -> Iterator[Finding]:
    from infra.catalogue.checkpointing import RAM_DISK_SPARE, SAVES_PER_RAM_DISK
    from workloads.trainer.recipes import named_recipe

    training = env.training
    tier = training.resilience.local_tier if training is not None else None
    if training is None or tier is None or training.slice not in env.slices:
        return
    slice_ = env.slices[training.slice].slice
    field, have = "training.resilience.local_tier.ram_disk", tier.ram_disk_gib * 2**30 / 1e9
    worker = mebibytes(training.worker.memory) * 2**20 / 1e9
    if have + worker > slice_.shape.memory_gb * 2**30 / 1e9:
        yield Finding(
            field,
            tier.ram_disk,
            f"the RAM disk ({have:.0f} GB) and the worker ({training.worker.memory}, {worker:.0f} GB) pass the "
            f"{slice_.machine_type} node's {slice_.shape.memory_gb} GiB",
        )
    recipe = named_recipe(training.recipe)
    if recipe is None or recipe.engine != "maxtext":
        return
    per_host = recipe.checkpoint_gb_per_host(slice_)
    need = SAVES_PER_RAM_DISK * per_host * (1 + RAM_DISK_SPARE)
    if have < need:
        yield Finding(
            field,
            tier.ram_disk,
            f"{have:.1f} GB holds less than {SAVES_PER_RAM_DISK} saves of {training.recipe!r} per host "
            f"({per_host:.1f} GB each on {slice_.name}) with {RAM_DISK_SPARE:.0%} spare: {need:.1f} GB; give "
            f"{math.ceil(need * 1e9 / 2**30)}Gi or more",
        )


@rule(
    id="maxtext.jobset-launcher-runs-maxtext",
    system="MaxText",
    layer="engine-start",
    summary=(
        "A training launched as a JobSet (training.launcher: jobset) names a maxtext recipe: each pod runs MaxText's "
        "own trainer, which starts JAX's distributed runtime itself; the canary runs under Ray's JaxTrainer."
    ),
    source=f"{MAXTEXT} src/maxtext/trainers/pre_train/train.py; src/maxtext/utils/max_utils.py "
    "(maybe_initialize_jax_distributed_system)",
    subject="environment",
)
def _jobset_runs_maxtext(env: Environment) -> Iterator[Finding]:
    from workloads.trainer.recipes import named_recipe

    training = env.training
    if training is None or training.launcher != "jobset" or training.recipe is None:
        return
    recipe = named_recipe(training.recipe)
    if recipe is not None and recipe.engine != "maxtext":
        yield Finding(
            "training.recipe",
            training.recipe,
            f"is for the {recipe.engine} engine; a JobSet run runs MaxText's own trainer: name a maxtext recipe, or "
            "launcher: ray",
        )
