"""The rules of `infra/rules/compute_classes.py`, each failing on its example: a change to one of dev's rendered
releases (the dev stack as it ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

import pytest

from tests.helpers import one_of_kind
from tests.rules.examples import (
    ManifestExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
)

MANIFEST: dict[str, ManifestExample] = {
    # A nodepools priority that also says `spot`: GKE's CRD refuses the class at apply.
    "gke.compute-class-tiers": (
        "compute-classes",
        lambda o: one_of_kind(o, "ComputeClass")["spec"]["priorities"][0].update(spot=True),
        "Nodepool field cannot be set along with other fields",
    ),
    # A server that selects its slice's class and the spot label (as xpk's selectors do): GKE refuses the Pod.
    "gke.compute-class-pod-selector": (
        "serve-llama70b-vllm",
        lambda o: one_of_kind(o, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"][
            "nodeSelector"
        ].update({"cloud.google.com/gke-spot": "true"}),
        "GKE refuses a Pod that selects a ComputeClass and these labels",
    ),
}


@pytest.mark.parametrize("rule_id", sorted(MANIFEST))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, MANIFEST[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("compute_classes", MANIFEST)
