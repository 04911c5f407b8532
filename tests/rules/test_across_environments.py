"""The rules of `infra/rules/across_environments.py`, each failing on its example: an edit of prod.yaml that dev and
prod refuse together (dev and prod as they ship pass them all: tests/rules/test_framework.py)."""

from __future__ import annotations

import pytest

from tests.rules.examples import (
    TogetherExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
)


def _moved(images: dict[str, str], project: str) -> dict[str, str]:
    """prod's images as they would be named in `project`'s registry."""
    return {k: v.replace("/acme-ml-platform-prod/", f"/{project}/") for k, v in images.items()}


TOGETHER: dict[str, TogetherExample] = {
    "gcs.bucket-names-are-global": (
        lambda d: d["buckets"]["models"].update(name="acme-ml-platform-dev-models"),
        "buckets.models.name",
        "also the name of dev.yaml's buckets.models: bucket names are global",
    ),
    "gcp.names-unique-in-a-project": (
        lambda d: d.update(
            project="acme-ml-platform-dev",
            release={**d["release"], "images": _moved(d["release"]["images"], "acme-ml-platform-dev")},
        ),
        "network.name",
        "dev.yaml names its VPC network the same in project acme-ml-platform-dev",
    ),
    "gce.reservation-not-another-environments": (
        lambda d: d["slices"]["train"]["capacity"].update(
            reservation="projects/acme-ml-platform-dev/reservations/ml-platform-v6e-train"
        ),
        "slices.train.capacity",
        "a reservation of dev.yaml's project acme-ml-platform-dev: prod would take dev's reserved machines",
    ),
    "gcp.project-number-is-the-projects": (
        lambda d: d.update(project_number="100000000001"),
        "project_number",
        "the number of dev.yaml's project acme-ml-platform-dev, not of acme-ml-platform-prod",
    ),
    "iam.seed-project-out-of-every-deployers-reach": (
        lambda d: d["delivery"]["seed"].update(project="acme-ml-platform-dev", project_number="100000000001"),
        "delivery.seed.project",
        "the project of dev.yaml, whose deployer administers its service accounts",
    ),
}


@pytest.mark.parametrize("rule_id", sorted(TOGETHER))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, TOGETHER[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("across_environments", TOGETHER)


def test_two_environments_that_give_one_seed_project_two_numbers_are_refused() -> None:
    """Their federations' principals are named with the number: one of the two matches no token."""
    from infra.config import environments_dir
    from infra.rules.across_environments import _project_numbers
    from infra.synth.load import load_all

    envs = load_all(environments_dir())
    prod = envs["prod"]
    assert prod.delivery is not None and prod.delivery.seed is not None
    seed = prod.delivery.seed
    dev = envs["dev"]
    assert dev.delivery is not None
    other = seed.model_copy(update={"project_number": "100000000008"})
    envs["dev"] = dev.model_copy(update={"delivery": dev.delivery.model_copy(update={"seed": other})})
    assert [(f.path, f.value, f.message) for f in _project_numbers(envs)] == [
        (
            ("prod", "delivery", "seed", "project_number"),
            "100000000009",
            "dev.yaml gives seed project acme-ml-platform-seed the number 100000000008: a project has one number",
        )
    ]


def test_a_seed_project_given_another_projects_number_is_refused() -> None:
    """The federation's principals are named with the seed's number: another project's matches no token, and the
    GitHub jobs fail only when they first authenticate."""
    from infra.config import Environment, environments_dir
    from infra.config.delivery import Seed
    from infra.rules.across_environments import _project_numbers
    from infra.synth.load import load_all

    envs = load_all(environments_dir())

    def seeded(name: str, project: str, number: str) -> dict[str, Environment]:
        env = envs[name]
        assert env.delivery is not None
        delivery = env.delivery.model_copy(update={"seed": Seed(project=project, project_number=number)})
        return {**envs, name: env.model_copy(update={"delivery": delivery})}

    # prod's seed given dev's project's number.
    assert [(f.path, f.message) for f in _project_numbers(seeded("prod", "acme-ml-platform-seed", "100000000001"))] == [
        (
            ("prod", "delivery", "seed", "project_number"),
            "the number of dev.yaml's project acme-ml-platform-dev, not of acme-ml-platform-seed: give "
            "acme-ml-platform-seed's own (gcloud projects describe acme-ml-platform-seed "
            "--format='value(projectNumber)')",
        )
    ]
    # dev's seed, another project, given prod's seed's number (dev is read first).
    found = _project_numbers(seeded("dev", "acme-ml-platform-dev-seed", "100000000009"))
    assert [(f.path, f.message.split(":")[0]) for f in found] == [
        (
            ("prod", "delivery", "seed", "project_number"),
            "the number of dev.yaml's seed project acme-ml-platform-dev-seed, not of acme-ml-platform-seed",
        )
    ]
