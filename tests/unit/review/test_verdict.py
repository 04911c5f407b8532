"""The review's first lines are the decision (issue 59, a new user's grade 4: no verdict at the top): whether the
apply may go, what it stops or restarts, and what it does to the cost."""

from __future__ import annotations

import copy
from typing import Any

from infra.review import render, review_stack

STACK: dict[str, Any] = {
    "resource": {
        "helm_release": {
            "ray-training_release_1": {"name": "ray-training", "chart": "c", "timeout": 600},
            "serve-canary_release_2": {"name": "serve-canary", "chart": "c", "timeout": 600},
        },
        "kubernetes_namespace_v1": {"namespaces_ml_3": {"metadata": {"name": "ml"}}},
    }
}


def _first_screen(after: dict[str, Any]) -> str:
    text = render(review_stack("platform-dev", after, STACK))
    return text.split("\n\n", 2)[1]


def test_the_verdict_says_nothing_blocks_and_what_restarts() -> None:
    after = copy.deepcopy(STACK)
    after["resource"]["helm_release"]["ray-training_release_1"]["values"] = ['{"worker": {"cpu": "32"}}']
    after["resource"]["helm_release"]["serve-canary_release_2"]["values"] = ['{"image": {"digest": "sha256:1"}}']
    first = _first_screen(after)
    assert first.startswith("- Verdict: **Nothing blocks the apply** (2 changes).")
    assert "`ray-training` upgraded: training (where its RayCluster or Job changes" in first
    assert "`serve-canary` upgraded: a server (where its pod template changes, its pods roll)" in first


def test_the_verdict_counts_what_blocks_and_a_removal_stops_work() -> None:
    after = copy.deepcopy(STACK)
    del after["resource"]["helm_release"]["serve-canary_release_2"]
    after["resource"]["kubernetes_namespace_v1"]["namespaces_ml_3"]["metadata"]["name"] = "ml-2"
    first = _first_screen(after)
    assert first.startswith("- Verdict: **2 of 2 changes block the apply** until confirmed")
    assert "`helm_release.serve-canary_release_2` (delete): a Helm release would be uninstalled" in first


def test_a_release_whose_helm_settings_alone_change_restarts_nothing() -> None:
    after = copy.deepcopy(STACK)
    after["resource"]["helm_release"]["serve-canary_release_2"]["timeout"] = 900
    first = _first_screen(after)
    assert "- Stops or restarts: nothing (no release or node changes)." in first


def test_no_change_says_so_in_one_line() -> None:
    assert _first_screen(copy.deepcopy(STACK)) == "Verdict: **No change**."


def test_a_created_resource_shows_what_it_is_created_with_and_a_cut_value_says_where_the_whole_is() -> None:
    after = copy.deepcopy(STACK)
    after["resource"]["kubernetes_namespace_v1"]["namespaces_new_4"] = {
        "metadata": {"name": "new", "labels": {"team": "research", "note": "x" * 120}}
    }
    text = render(review_stack("platform-dev", after, STACK))
    assert "- Verdict: **Nothing blocks the apply** (1 change)." in text
    assert "- create `kubernetes_namespace_v1.namespaces_new_4`: metadata" in text
    assert '  - `metadata.name`: (none) \u2192 "new"' in text
    assert '  - `metadata.labels.team`: (none) \u2192 "research"' in text
    assert "the whole of every value is in the JSON review beside this file" in text
    (change,) = review_stack("platform-dev", after, STACK).changes
    assert change.action == "create" and change.replaced_by == () and not change.blocked
