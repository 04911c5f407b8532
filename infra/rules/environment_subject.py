"""What environment rules share: a loaded `Environment` as the rules read it.

An environment rule gets the `Environment` and yields (field path, value, message); `infra.synth.load` turns them
into load errors naming the file, the field, the value, the rule and its source."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infra.config import Environment


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


def _jetstream(env: Environment) -> Iterator[tuple[str, Any, dict[str, str]]]:
    """(field path, deployment, MaxText args as a dict) of every JetStream deployment."""
    from infra.catalogue.models import maxtext_names
    from infra.serving.jetstream_args import maxtext_serving_args

    for name, d in env.serving.items():
        # A model MaxText does not know has no arguments: rule maxtext.tokenizer-matches-model names it.
        if d.engine == "jetstream" and d.model.catalogue_name in maxtext_names():
            args = maxtext_serving_args(env, d)
            yield f"serving.{name}", d, dict(a.split("=", 1) for a in args if "=" in a)


ICI_AXES = ("ici_data_parallelism", "ici_fsdp_parallelism", "ici_autoregressive_parallelism", "ici_tensor_parallelism")
