"""The rules of `infra/rules/vllm.py`, each failing on its example: an edit of dev.yaml or a change to one of dev's
rendered releases (the dev stack as it ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

from typing import Any

import pytest

from infra.catalogue.models import MODELS, ModelArch
from tests.helpers import one_of_kind
from tests.rules.examples import (
    EnvironmentExample,
    ManifestExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
    vllm_container,
)


def _vllm_cache_shared(objs: list[dict[str, Any]]) -> None:
    """Every host of every group writes the same cache path (before it was per host)."""
    env = next(e for e in vllm_container(objs)["env"] if e["name"] == "VLLM_XLA_CACHE_PATH")
    env["value"] = "/data/xla-cache"


def _mh_worker(objs: list[dict[str, Any]]) -> dict[str, Any]:
    return one_of_kind(objs, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][
        0
    ]


ENVIRONMENT: dict[str, EnvironmentExample] = {
    "vllm.parallelism-covers-the-slice": (
        lambda d, mp: d["serving"]["llama70b-vllm"].update(tensor_parallel_size=4),
        "serving.llama70b-vllm.tensor_parallel_size",
        "tensor x pipeline parallelism (4 x 1) must be the slice's 8 chips",
    ),
    "gke.tpu.multi-host-server-per-slice": (
        lambda d, mp: d["slices"]["vllm-multihost"].update(count=3),
        "serving.llama70b-vllm-mh.autoscaling.max",
        "slices.vllm-multihost has count 3 (one pool per slice): set slices.vllm-multihost.count to 2",
    ),
    "vllm.tensor-parallel-divides-heads": (
        lambda d, mp: mp.setitem(MODELS, "meta-llama/Llama-3.3-70B-Instruct", ModelArch(60, 4, "t")),
        "serving.llama70b-vllm.slice",
        "60 heads are not divisible by tensor parallelism 8",
    ),
    "vllm.support-matrix": (
        lambda d, mp: d["serving"]["llama70b-vllm-mh"].update(tensor_parallel_size=16, pipeline_parallel_size=1),
        "serving.llama70b-vllm-mh.pipeline_parallel_size",
        "only pipeline parallelism over the hosts is tested",
    ),
    "vllm.context-fits-model": (
        lambda d, mp: d["serving"]["llama70b-vllm"].update(max_model_len=200000),
        "serving.llama70b-vllm.max_model_len",
        "takes at most 131072 positions",
    ),
    # 40 adapters at rank 512 on the 70B model: 40 slots of 13.25 GB (a rank-16 slot is 0.41 GB) beside its 200 GB.
    "vllm.adapters-fit-the-slice": (
        lambda d, mp: d["serving"]["llama70b-vllm"].update(
            adapters=[{"name": f"a{i}", "path": f"adapters/a{i}", "rank": 512} for i in range(40)]
        ),
        "serving.llama70b-vllm.adapters",
        "40 adapter slot(s) at rank 512 take 530.2 GB beside 140 GB of weights and 60 GB of KV cache: 730.2 GB, "
        "more than the 256 GB of HBM of slice 'vllm'",
    ),
}


MANIFEST: dict[str, ManifestExample] = {
    # Before the fix: 120 x 10 s, and the cache in the container's /tmp.
    "vllm.startup-probe-covers-cold-compile": (
        "serve-llama70b-vllm",
        lambda o: vllm_container(o)["startupProbe"].update(periodSeconds=10, failureThreshold=120),
        "allows 1200 s; at least 3600 s",
    ),
    "vllm.xla-cache-persistent-single-writer": (
        "serve-llama70b-vllm",
        _vllm_cache_shared,
        "write one path: make it per pod",
    ),
    "vllm.multihost-executor-env": (
        "serve-llama70b-vllm-mh",
        lambda o: _mh_worker(o)["env"].remove({"name": "TPU_MULTIHOST_BACKEND", "value": "ray"}),
        "must be ray on every pod of a multi-host group",
    ),
    "vllm.probes-open-paths": (
        "serve-llama70b-vllm",
        lambda o: vllm_container(o)["readinessProbe"]["httpGet"].update(path="/v1/models"),
        "behind the API key",
    ),
}


EXAMPLES = {**ENVIRONMENT, **MANIFEST}


@pytest.mark.parametrize("rule_id", sorted(EXAMPLES))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, EXAMPLES[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("vllm", EXAMPLES)
