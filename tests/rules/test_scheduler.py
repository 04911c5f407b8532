"""The rules of `infra/rules/scheduler.py`, each failing on its example: an edit of dev.yaml or a change to one of
dev's rendered releases (the dev stack as it ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import one_of_kind
from tests.rules.examples import (
    EnvironmentExample,
    ManifestExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
    ray_worker_template,
)


def _old_ray_selector(objs: list[dict[str, Any]]) -> None:
    ray_worker_template(objs)["spec"]["nodeSelector"].pop("cloud.google.com/gke-nodepool")


ENVIRONMENT: dict[str, EnvironmentExample] = {
    "gke.requests-fit-their-pool": (
        lambda d, mp: d["training"]["worker"].update(memory="800Gi"),
        "training.worker.memory",
        "requests 800.25 GiB with the FUSE sidecar; a ct6e-standard-4t node of the slice has about 698.1 GiB",
    ),
    "platform.tpu.one-workload-per-slice": (
        lambda d, mp: d["serving"]["llama405b"].update(slice="train"),
        "serving.llama405b.slice",
        "slice 'train' is already used by training.slice",
    ),
    "gke.pod-fits-a-node-of-its-pool": (
        lambda d, mp: d["cpu_pools"]["convert"].update(machine_type="n2-highmem-64"),
        "serving.llama405b.conversion.pool",
        "requests 1636 GiB; a n2-highmem-64 node has about 495 GiB allocatable",
    ),
}


MANIFEST: dict[str, ManifestExample] = {
    # Before the fix: a conversion Job larger than any node of any pool.
    "k8s.scheduler-places-every-pod": (
        "serve-llama405b",
        lambda o: one_of_kind(o, "Job")["spec"]["template"]["spec"]["containers"][0]["resources"].update(
            requests={"cpu": "16", "memory": "2400Gi"}, limits={"memory": "2400Gi"}
        ),
        "no node pool can take this pod",
    ),
    # Before the fix the Ray workers selected any v6e 4x4 pool, the serving slice included.
    "platform.tpu.pod-pinned-to-its-pool": (
        "ray-training",
        _old_ray_selector,
        "pools serve, train, vllm-multihost, vllm-multihost-1 all match",
    ),
}


EXAMPLES = {**ENVIRONMENT, **MANIFEST}


@pytest.mark.parametrize("rule_id", sorted(EXAMPLES))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, EXAMPLES[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("scheduler", EXAMPLES)
