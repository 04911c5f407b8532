"""The rules of `infra/rules/vllm.py`, each failing on its example: an edit of dev.yaml or a change to one of dev's
rendered releases (the dev stack as it ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from infra.catalogue.cold_starts import MEASURED, ColdStart
from infra.catalogue.models import MODELS, ModelArch
from infra.constructs.serving import vllm_values
from infra.rules import RULES
from tests.helpers import one_of_kind
from tests.rules.examples import (
    DEV,
    EnvironmentExample,
    ManifestExample,
    assert_every_rule_has_an_example,
    environment,
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
    # Scale to zero with a budget, for a model no cold start was measured for on its slice.
    "vllm.scale-to-zero": (
        lambda d, mp: d["serving"]["llama70b-vllm"]["autoscaling"].update(min=0, cold_start_budget_s=900),
        "serving.llama70b-vllm.autoscaling.min",
        "meta-llama/Llama-3.3-70B-Instruct has no measured cold start on v6e-8",
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


def _scale_to_zero(budget: int, **deployment: Any) -> list[tuple[str, str]]:
    """(field, message) of every refusal of rule vllm.scale-to-zero for dev's 70B vLLM deployment at 0 servers."""
    data = copy.deepcopy(DEV)
    d = data["serving"]["llama70b-vllm"]
    d["autoscaling"].update(min=0, cold_start_budget_s=budget)
    d.update(deployment)
    return [(f.field, f.message) for f in RULES["vllm.scale-to-zero"].run(environment(data))]


MEASURED_70B = ColdStart(node_s=240, image_s=95, serve_s=410, measured="2026-12-04", source="a test's figure")


def test_scale_to_zero_is_held_to_the_measured_cold_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """A measured cold start (and the autoscaler's lag) within the budget lets the deployment scale to zero; one
    over it is refused naming both, the budget's field and the phases; without the gateway nothing holds the first
    request."""
    monkeypatch.setitem(MEASURED, ("meta-llama/Llama-3.3-70B-Instruct", "v6e-8"), MEASURED_70B)
    # The wait: 30 s for the autoscaler to see the first request (a 15 s scrape, a 15 s sync), then the 745 s start.
    assert _scale_to_zero(775) == []
    ((field, message),) = _scale_to_zero(774)
    assert field == "serving.llama70b-vllm.autoscaling.cold_start_budget_s"
    assert message.startswith("the first request waits 775 s: 30 s for the autoscaler to see it, then ")
    assert (
        "takes 745 s from node to ready (measured 2026-12-04 (node 240 s, image 95 s, serve 410 s); 140 GB" in message
    )
    ((field, message),) = _scale_to_zero(900, gateway=False)
    assert field == "serving.llama70b-vllm.autoscaling.min"
    assert "set serving.llama70b-vllm.gateway: true" in message


def test_scale_to_zero_is_for_vllm_only() -> None:
    data = copy.deepcopy(DEV)
    data["serving"]["canary"]["autoscaling"] = {"min": 0, "max": 2, "cold_start_budget_s": 60}
    found = RULES["vllm.scale-to-zero"].run(environment(data))
    assert [(f.field, f.message) for f in found] == [
        (
            "serving.canary.autoscaling.min",
            "scale to zero is offered for vLLM behind the gateway; engine 'canary' is not",
        )
    ]


def test_a_measured_cold_start_sets_the_hold_and_the_review_shows_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The autoscaler holds a warm server for the measured cold start (not the probe's 90 minutes), and the values
    carry where the figure comes from; unmeasured, it holds for the probe's allowance."""
    env = environment(copy.deepcopy(DEV))
    unmeasured = vllm_values(env, "llama70b-vllm")["autoscaling"]
    assert unmeasured["warmUp"] == {
        "seconds": 5400,
        "basis": "not measured: the startup probe's allowance; 140 GB of weights streamed from gs:// (runai_streamer)",
    }
    monkeypatch.setitem(MEASURED, ("meta-llama/Llama-3.3-70B-Instruct", "v6e-8"), MEASURED_70B)
    scaling = vllm_values(env, "llama70b-vllm")["autoscaling"]
    assert scaling["warmUp"]["seconds"] == 745
    assert scaling["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 745
    assert "fromZero" not in scaling, "min 1: nothing scales from zero"
