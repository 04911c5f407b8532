"""The pull request's plan comment: the review, under GitHub's limit, with the link to the whole run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from infra.delivery.comment import GITHUB_COMMENT_LIMIT, MARKER, plan_comment
from infra.review import render, review_stack
from tests.helpers import REPO

LINK = "https://github.com/acme/platform/actions/runs/42"


def test_a_real_first_plans_review_is_cut_under_the_limit_keeping_what_blocks(
    stacks: dict[str, dict[str, Any]],
) -> None:
    """Prod's first plan reviewed (every resource created) is longer than a comment holds once its values are all
    shown; the comment keeps the top (counts, Blocking, inventory, cost) and says where the rest is."""
    review = render(review_stack("platform-prod", stacks["prod"], {}))
    long = review + "\n" + "\n".join(f"| `x.{i}` | {'v' * 100} |" for i in range(800))
    assert len(long) > GITHUB_COMMENT_LIMIT
    comment = plan_comment("prod", long, LINK)
    assert len(comment) <= GITHUB_COMMENT_LIMIT
    assert comment.startswith(f"{MARKER}\n<!-- env: prod -->\n# Plan review: platform-prod")
    assert "**The review is cut here**" in comment and comment.rstrip().endswith(LINK)
    assert "## Accelerator inventory" in comment


def test_a_short_review_is_whole_with_the_link() -> None:
    comment = plan_comment("dev", "# Plan review: platform-dev\n\n| action | resources |\n", LINK)
    assert "cut here" not in comment and "| action | resources |" in comment and LINK in comment


def test_a_cut_inside_a_code_block_closes_it() -> None:
    review = "# Plan review\n```json\n" + "\n".join("x" * 80 for _ in range(2000))
    comment = plan_comment("dev", review, LINK, limit=10_000)
    assert len(comment) <= 10_000 and comment.count("```") % 2 == 0


def test_a_cut_inside_a_code_block_at_the_last_character_still_fits() -> None:
    """One-character lines put the cut right at the room left: the fence that closes the block is counted too."""
    review = "# Plan review\n```json\n" + "\n".join("x" for _ in range(20_000))
    for limit in range(10_000, 10_008):
        comment = plan_comment("dev", review, LINK, limit=limit)
        assert len(comment) <= limit and comment.count("```") % 2 == 0, (limit, len(comment))


def test_the_command_writes_the_comment_and_refuses_a_missing_review(tmp_path: Path) -> None:
    review = tmp_path / "dev.md"
    review.write_text("# Plan review: platform-dev\n")
    env = {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "acme/platform", "GITHUB_RUN_ID": "42"}
    command = [sys.executable, "-m", "scripts.comment", "--env", "dev"]
    done = subprocess.run([*command, str(review)], cwd=REPO, capture_output=True, text=True, env=env)
    assert done.returncode == 0 and done.stdout.endswith(f"{LINK}\n"), done.stderr
    missing = subprocess.run([*command, str(tmp_path / "none.md")], cwd=REPO, capture_output=True, text=True)
    assert missing.returncode == 2 and f"error: {tmp_path / 'none.md'}:" in missing.stderr
