"""The rules of `infra/rules/docker_builds.py`, each failing on its example: an edit of dev.yaml (the dev stack as it
ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

import pytest

from tests.rules.examples import (
    EnvironmentExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
)

ENVIRONMENT: dict[str, EnvironmentExample] = {
    # a Dockerfile of a released image building from a base by tag that nothing names.
    "docker.base-images-pinned-by-digest": (
        lambda d, mp: mp.setattr(
            "infra.rules.docker_builds.base_images",
            lambda: {"debian:12.12-slim": ["server (workloads/server/Dockerfile)"]},
        ),
        "release.images.server",
        "workloads/server/Dockerfile builds from debian:12.12-slim by tag",
    ),
    # the GPU trainer's image given to the Ray trainer on TPU.
    "docker.image-runs-the-job": (
        lambda d, mp: d["training"].update(image="trainer-gpu"),
        "training.image",
        "release.images.trainer-gpu is built from workloads/trainer/Dockerfile.gpu",
    ),
}


@pytest.mark.parametrize("rule_id", sorted(ENVIRONMENT))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, ENVIRONMENT[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("docker_builds", ENVIRONMENT)
