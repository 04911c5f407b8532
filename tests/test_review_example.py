"""docs/review-example.md is the generator's output: the review of dev against a variant of it that changes a Helm
value, a node count and a price, each before -> after, and the cost change."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.review_example import DOC, EditError, edited, example_review


def test_the_worked_example_in_the_docs_is_what_the_generator_writes(synth_dir: Path, tmp_path: Path) -> None:
    """The base is the session's synthesis of the repository's dev.yaml, as the generator's is."""
    text = example_review(synth_dir, tmp_path)
    assert DOC.read_text() == text, (
        "docs/review-example.md is not what the generator writes (the review, dev.yaml or the prices changed): "
        "run `python -m scripts.review_example` and commit the file"
    )


def test_the_worked_example_shows_each_change_before_and_after_and_the_cost_change() -> None:
    text = DOC.read_text()
    # A Helm value, a node count and a price.
    assert '`values.worker.resources.cpu`: "24" \u2192 "32"' in text
    assert "`autoscaling.total_max_node_count`: 5 \u2192 6" in text
    assert "| serve | ct6e-standard-4t | spot \u2192 on-demand | 4 | 4.86 \u2192 10.80 |" in text
    assert "Cost change of this plan:" in text and "- at the most nodes: " in text
    # The price change replaces a slice pool: the gate says so.
    assert "### Blocking" in text and "CONFIRM_CHANGE=google_container_node_pool.slice-serve_pool_" in text


def test_an_edit_that_no_longer_applies_is_refused_naming_the_text() -> None:
    with pytest.raises(EditError, match=r"training\.worker\.cpu.*found 0"):
        edited("name: dev\n")
