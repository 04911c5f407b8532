"""The rules of `infra/rules/maxtext.py`, each failing on its example: an edit of dev.yaml (the dev stack as it ships
passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from infra.rules import RULES
from tests.rules.examples import (
    DEV,
    EnvironmentExample,
    assert_every_rule_has_an_example,
    environment,
    fails_on_its_example,
)


def _old_405b_args(args: list[str]) -> list[str]:
    """The 405B server's arguments as the platform generated them before following the tutorial."""
    out = [a for a in args if not a.startswith(("tokenizer_path=", "ici_tensor", "ici_autoregressive"))]
    return [*out, "ici_autoregressive_parallelism=1", "ici_tensor_parallelism=16"]


def _patch_args(monkeypatch: pytest.MonkeyPatch, change: Callable[[list[str]], list[str]]) -> None:
    from infra.serving import jetstream_args as jetstream

    real = jetstream.maxtext_serving_args
    monkeypatch.setattr(jetstream, "maxtext_serving_args", lambda env, d: change(real(env, d)))


def _jobset_run(d: dict[str, Any], *, recipe: str = "llama3-8b-2-slices", ram_disk: str = "32Gi") -> None:
    """dev's training launched as JobSets on two slices with a local tier (tests/test_training_jobset.py)."""
    d["slices"]["train"]["count"] = 2
    d["buckets"]["mtc-backups"] = {**d["buckets"]["checkpoints"], "versioning": False, "hierarchical_namespace": True}
    tier = {"bucket": "mtc-backups", "every_steps": 25, "bucket_every_steps": 100, "ram_disk": ram_disk}
    d["training"].update(recipe=recipe, runs="jobs", launcher="jobset", resilience={"local_tier": tier})


ENVIRONMENT: dict[str, EnvironmentExample] = {
    # 16 GiB holds one save of llama3-8b on a v6e-16 host (12.0 GB), not its own and a peer's.
    "maxtext.local-tier-holds-two-saves": (
        lambda d, mp: _jobset_run(d, ram_disk="16Gi"),
        "training.resilience.local_tier.ram_disk",
        "holds less than 2 saves of 'llama3-8b-2-slices' per host",
    ),
    "maxtext.jobset-launcher-runs-maxtext": (
        lambda d, mp: _jobset_run(d, recipe="canary"),
        "training.recipe",
        "a JobSet run runs MaxText's own trainer",
    ),
    "maxtext.conversion-matches-model": (
        lambda d, mp: d["serving"]["llama405b"]["conversion"].update(model_size="llama3.1-70b"),
        "serving.llama405b.conversion.model_size",
        "converts a 70B model, but serving.llama405b.model has 405B parameters",
    ),
    # a 70B model declared as 7B passed the HBM fit as 7B.
    "models.parameters-match-architecture": (
        lambda d, mp: d["serving"]["llama70b-vllm"]["model"].update(parameters_b=7),
        "serving.llama70b-vllm.model.parameters_b",
        "meta-llama/Llama-3.3-70B-Instruct (model.name) has 70.55B parameters",
    ),
    # a smaller training slice with dev's recipe was found only at `make train`.
    "maxtext.recipe-runs-on-training-slice": (
        lambda d, mp: d["slices"]["train"].update(topology="2x4"),
        "training.recipe",
        "does not run on training.slice 'train' (v6e-8, topology 2x4): tuned for v6e 4x4 only",
    ),
    "maxtext.ici-product-equals-chips": (
        lambda d, mp: _patch_args(mp, lambda a: [*a, "ici_fsdp_parallelism=2"]),
        "serving.llama405b.maxtext args",
        "product 32 is not the slice's 16 chips",
    ),
    "maxtext.tensor-parallelism-divides-kv-heads": (
        lambda d, mp: _patch_args(mp, _old_405b_args),
        "serving.llama405b.maxtext args.ici_tensor_parallelism",
        "llama3.1-405b has 8 KV heads",
    ),
    "maxtext.tokenizer-matches-model": (
        lambda d, mp: _patch_args(mp, _old_405b_args),
        "serving.llama405b.maxtext args.tokenizer_path",
        "llama3.1-405b needs assets/tokenizer_llama3.tiktoken",
    ),
    "models.weights-fit-the-slice": (
        lambda d, mp: d["serving"]["llama70b-vllm"]["model"].update(kv_cache_gb=200),
        "serving.llama70b-vllm.model",
        "more than the 256 GB of HBM of slice 'vllm'",
    ),
}


def test_jetstream_refuses_a_model_name_only_vllm_knows() -> None:
    """JetStream took vLLM's (Hugging Face) model names, which MaxText has no config for."""
    data = copy.deepcopy(DEV)
    data["serving"]["llama70b-disagg"]["model"].update(name="meta-llama/Llama-3.1-70B-Instruct")
    found = RULES["maxtext.tokenizer-matches-model"].run(environment(data))
    assert [(v.field, v.value) for v in found] == [
        ("serving.llama70b-disagg.model.name", "meta-llama/Llama-3.1-70B-Instruct")
    ]
    assert "not a model MaxText knows" in found[0].message and "llama3.1-405b" in found[0].message


@pytest.mark.parametrize("rule_id", sorted(ENVIRONMENT))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, ENVIRONMENT[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("maxtext", ENVIRONMENT)
