"""Training recipes, and the check that a recipe fits the slice it is launched on."""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from infra.catalogue.accelerators import Slice

RECIPES_FILE = Path(__file__).with_name("recipes.yaml")

# Training with Adam in mixed precision: weights, gradients and optimizer state.
# Only a fast first filter: the per-chip memory the compiler reports for a
# recipe (compiled.yaml) decides whether it fits.
TRAINING_BYTES_PER_PARAM = 18


class RecipeError(ValueError):
    """A recipe that is malformed or does not fit its slice."""


class Ici(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    data: int = Field(default=1, ge=-1)
    fsdp: int = Field(default=-1, ge=-1)
    tensor: int = Field(default=1, ge=-1)


class Recipe(BaseModel):
    """One training recipe, as `recipes.yaml` describes it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str
    description: str
    engine: Literal["maxtext", "canary"]
    accelerator: str | None = None
    topology: str | None = None
    model_name: str | None = None
    params_billion: float = Field(gt=0)
    per_device_batch_size: int = Field(ge=1)
    max_target_length: int = Field(ge=16)
    steps: int = Field(ge=1)
    ici: Ici = Ici()
    # Slices of the shape above the recipe runs on: data parallel across them over the data-center network
    # (MaxText's dcn_data_parallelism), each slice's devices split by `ici` as on one slice.
    slices: int = Field(default=1, ge=1, le=64)
    # Elastic: the fewest of those slices the recipe also runs on when slices are lost (dcn_data_parallelism the
    # slices left, the same per-device batch), each count compiled (compiled.yaml `<name>@<n>`); None: only `slices`.
    min_slices: int | None = Field(default=None, ge=1, le=64)
    remat_policy: str | None = None
    attention: str | None = None
    dataset_type: Literal["synthetic", "hf", "tfds", "grain"] = "synthetic"
    dataset_path: str | None = None
    checkpoint_period: int = Field(default=100, ge=1)
    # The throughput the recipe's source publishes for it on one slice (tokens per second per chip): the step time
    # the review's lost-work figures use; none where nothing is published.
    tokens_per_second_per_chip: float | None = Field(default=None, gt=0)
    flags: dict[str, str | int | float | bool] = {}

    @model_validator(mode="after")
    def _elastic_range(self) -> Recipe:
        if self.min_slices is not None and self.min_slices > self.slices:
            raise ValueError(f"min_slices {self.min_slices}: from 1 to the recipe's slices ({self.slices})")
        return self

    @property
    def slice_counts(self) -> range:
        """The slice counts the recipe runs on: `slices`, and down to `min_slices` where it is elastic."""
        return range(self.min_slices or self.slices, self.slices + 1)

    @property
    def cross_slice_gb_per_step(self) -> float:
        """Bytes (GB) each slice sends over the data-center network per step: the gradients' ring all-reduce
        across the slices, 2 (N-1)/N of the gradients (in the weights' dtype); 0 on one slice. An estimate from
        the parameter count, not the compiler's."""
        return 2 * (self.slices - 1) / self.slices * self.params_billion * self.weight_bytes

    @property
    def weight_bytes(self) -> int:
        """Bytes per weight: MaxText's weight_dtype (configs/base.yml: float32 unless the recipe says bfloat16)."""
        return 2 if self.flags.get("weight_dtype") == "bfloat16" else 4

    @property
    def checkpoint_gb(self) -> float:
        """The training state one checkpoint holds, in GB: the weights and AdamW's two moments, each in the
        weights' dtype (MaxText's mu_dtype defaults to weight_dtype, configs/types.py; optax's second moment is
        made like the parameters, optax/_src/transform.py scale_by_adam). An estimate from the parameter count."""
        return self.params_billion * 3 * self.weight_bytes

    def checkpoint_gb_per_host(self, slice_: Slice) -> float:
        """What one host of `slice_` saves of a checkpoint: the state is sharded over the chips of a slice's fsdp and
        tensor axes (a data-parallel replica holds it all), and a host saves its chips' shards."""
        mesh = self.mesh_for_devices(slice_.devices)
        return self.checkpoint_gb / (mesh["fsdp"] * mesh["tensor"]) * slice_.chips_per_host

    @property
    def step_seconds(self) -> float | None:
        """One step's time at the published throughput (a slice's chips each take a batch of tokens)."""
        if self.tokens_per_second_per_chip is None:
            return None
        return self.per_device_batch_size * self.max_target_length / self.tokens_per_second_per_chip

    def mesh_for(self, slice_: Slice, count: int = 1) -> dict[str, int]:
        """The resolved (data, fsdp, tensor) sizes on each of `count` slices of `slice_`'s shape, or RecipeError
        saying why not."""
        self.check_fits(slice_, count)
        return self.mesh_for_devices(slice_.devices)

    def mesh_for_devices(self, devices: int) -> dict[str, int]:
        """The resolved (data, fsdp, tensor) sizes on `devices` devices (local CPU devices: no fit check)."""
        sizes = self.ici.model_dump()
        fills = [k for k, v in sizes.items() if v == -1]
        known = math.prod(v for v in sizes.values() if v != -1)
        if len(fills) > 1 or (fills and devices % known) or (not fills and known != devices):
            raise RecipeError(f"recipe {self.name!r}: ici parallelism {sizes} does not divide {devices} devices")
        if fills:
            sizes[fills[0]] = devices // known
        return sizes

    def check_fits(self, slice_: Slice, count: int = 1) -> None:
        """RecipeError unless the recipe runs on `count` slices of `slice_`'s shape."""
        shape = f"{slice_.name} ({slice_.topology or slice_.hosts})"
        where = f"recipe {self.name!r} on {'slice ' + shape if count == 1 else f'{count} slices {shape}'}"
        if self.accelerator and (self.accelerator, self.topology) != (slice_.accelerator.name, slice_.topology):
            raise RecipeError(
                f"{where}: the recipe is tuned for {self.accelerator} {self.topology}; "
                f"use a slice of that shape or a recipe for {slice_.accelerator.name} {slice_.topology}"
            )
        if self.accelerator and self.slices != count:
            raise RecipeError(
                f"{where}: the recipe is tuned (and compiled) for {self.slices} slice{'s' * (self.slices > 1)}; "
                f"use a recipe with `slices: {count}`"
            )
        sizes = self.ici.model_dump()
        fills = [k for k, v in sizes.items() if v == -1]
        known = math.prod(v for v in sizes.values() if v != -1)
        if len(fills) > 1:
            raise RecipeError(f"{where}: at most one ici axis may be -1, got {sizes}")
        if (fills and slice_.devices % known) or (not fills and known != slice_.devices):
            product = " x ".join(f"{k} {v}" for k, v in sizes.items())
            unit = "chips" if slice_.devices == slice_.chips else f"devices ({slice_.chips} chips)"
            raise RecipeError(
                f"{where}: ici parallelism {product} = {known} must equal the slice's {slice_.devices} {unit}"
            )
        need_gb = self.params_billion * TRAINING_BYTES_PER_PARAM
        if need_gb > slice_.hbm_gb:
            raise RecipeError(
                f"{where}: {self.params_billion}B parameters need about {need_gb:.0f} GB for weights, gradients "
                f"and Adam state ({TRAINING_BYTES_PER_PARAM} bytes each), more than the slice's {slice_.hbm_gb} GB "
                "of HBM; use a larger slice"
            )


@cache
def load_recipes(path: Path = RECIPES_FILE) -> dict[str, Recipe]:
    raw = yaml.safe_load(path.read_text()) or {}
    recipes = {}
    for name, body in raw.items():
        try:
            recipes[name] = Recipe.model_validate({"name": name, **body})
        except ValidationError as err:
            problems = "; ".join(
                ": ".join(filter(None, [".".join(map(str, e["loc"])), e["msg"].removeprefix("Value error, ")]))
                for e in err.errors()
            )
            raise RecipeError(f"{path}: recipe {name!r}: {problems}") from None
    return recipes


def get_recipe(name: str) -> Recipe:
    recipes = load_recipes()
    if name not in recipes:
        raise RecipeError(f"unknown recipe {name!r}; recipes: {', '.join(sorted(recipes))}")
    return recipes[name]


def named_recipe(name: str | None) -> Recipe | None:
    """The recipe `name` names; None where none is named or the name is unknown (the rule
    maxtext.recipe-runs-on-training-slice refuses an unknown one, so the others need not)."""
    try:
        return get_recipe(name) if name else None
    except RecipeError:
        return None
