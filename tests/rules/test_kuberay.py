"""The rules of `infra/rules/kuberay.py`, each failing on its example: a change to one of dev's rendered releases
(the dev stack as it ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.helpers import one_of_kind
from tests.rules.examples import (
    ManifestExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
    ray_worker_template,
)


def _old_ray_env(objs: list[dict[str, Any]]) -> None:
    ray_worker_template(objs)["spec"]["containers"][0].pop("env")


def _duplicate_group(objs: list[dict[str, Any]]) -> None:
    groups = one_of_kind(objs, "RayCluster")["spec"]["workerGroupSpecs"]
    groups.append(copy.deepcopy(groups[0]))


MANIFEST: dict[str, ManifestExample] = {
    # Before the fix: the RayCluster answered its Jobs API without authentication.
    "kuberay.token-authentication": (
        "ray-training",
        lambda o: one_of_kind(o, "RayCluster")["spec"].pop("authOptions"),
        "set it to token",
    ),
    "kuberay.tpu.num-of-hosts-matches-topology": (
        "ray-training",
        lambda o: one_of_kind(o, "RayCluster")["spec"]["workerGroupSpecs"][0].update(numOfHosts=2),
        "topology 4x4 with 4 chips per host is 4 hosts",
    ),
    # Before the fix the TPU workers lacked the tutorial's environment.
    "kuberay.tpu.worker-env": ("ray-training", _old_ray_env, "must be '"),
    "kuberay.worker-group-names-unique": ("ray-training", _duplicate_group, "used by more than one worker group"),
}


@pytest.mark.parametrize("rule_id", sorted(MANIFEST))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, MANIFEST[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("kuberay", MANIFEST)
