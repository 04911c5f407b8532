"""The serving engines' command lines, as the review shows them: what each serving release passes its engine
(`vllm serve`'s arguments, JetStream's MaxText arguments), read from the release's chart values in the stack, so a
reviewer sees a flag change beside the resources it changes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infra.review.model import EngineArgs
from infra.review.releases import release_values

# The chart values that hold an engine's arguments, by chart: (the engine, the values key).
ENGINE_VALUES = {
    "vllm-tpu": ("vLLM (`vllm serve`)", "args"),
    "jetstream-pathways": ("JetStream (MaxText)", "maxtextArgs"),
}


def engine_args(stack_json: Mapping[str, Any]) -> list[EngineArgs]:
    """Every release of the stack whose chart runs a serving engine, with the arguments it passes it."""
    out = []
    for release, chart, values in release_values(stack_json):
        engine = ENGINE_VALUES.get(chart)
        if engine is not None and isinstance(values.get(engine[1]), list):
            out.append(EngineArgs(str(release.get("name")), engine[0], [str(a) for a in values[engine[1]]]))
    return sorted(out, key=lambda e: e.release)
