"""A pull request's plan comment: the review, never Terraform's raw output, under GitHub's limit on a comment's
body (65,536 characters: the API refuses a longer one, "body is too long (maximum is 65536 characters)"), with a
link to the run whose job summary and log hold everything.

A review too long for a comment is cut at a line, before the sections a reviewer reads last (the resource counts by
type and the changes' values), and says where it was cut and where the rest is. The marker lines let the workflow
find its own comment again and update it in place.
"""

from __future__ import annotations

from collections.abc import Mapping

GITHUB_COMMENT_LIMIT = 65_536
MARKER = "<!-- platform-plan-review -->"


def run_url(server: str, repository: str, run_id: str) -> str:
    """The Actions run's page (its job summaries and logs)."""
    return f"{server.rstrip('/')}/{repository}/actions/runs/{run_id}"


def this_run(environ: Mapping[str, str]) -> str:
    """The page of the run a step runs in, from GitHub Actions' GITHUB_SERVER_URL, GITHUB_REPOSITORY and
    GITHUB_RUN_ID (placeholders outside Actions)."""
    return run_url(
        environ.get("GITHUB_SERVER_URL", "https://github.com"),
        environ.get("GITHUB_REPOSITORY", "<repository>"),
        environ.get("GITHUB_RUN_ID", "<run>"),
    )


def plan_comment(env: str, review: str, link: str, limit: int = GITHUB_COMMENT_LIMIT) -> str:
    """The comment for environment `env`: the marker lines, the review (cut at a line where it would pass `limit`),
    and the link to the whole run."""
    head = f"{MARKER}\n<!-- env: {env} -->\n"
    tail = f"\n\nThe whole plan, Terraform's output included: the job summary and log of {link}\n"
    room = limit - len(head) - len(tail)
    body = review.rstrip("\n")
    if len(body) > room:
        note = (
            f"\n\n**The review is cut here** ({{shown:,}} of {len(body):,} characters): a pull request comment "
            f"holds {limit:,}. The rest is in the job summary of {link}"
        )
        fence = "\n```"  # closes a code block the cut falls inside
        keep = room - len(note.format(shown=len(body))) - len(fence)
        cut = body.rfind("\n", 0, max(keep, 0))
        shown = body[: cut if cut > 0 else max(keep, 0)]
        if shown.count("```") % 2:
            shown += fence
        body = shown + note.format(shown=len(shown))
    return head + body + tail
