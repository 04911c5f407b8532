"""The real providers' plan of a change, read into the offline review: where OpenTofu's plan of the same change
(`platform tofu plan --base ...`, or `make plan BASE_REF=` with the engine built) is at hand, its actions are the
review's, and the review lists every resource whose offline action differed (the offline one reads the providers'
ForceNew fields from a table, infra/catalogue/terraform_google.py; the real plan is the providers' own decision).

The plan is read only for the change it was made for: beside `<stack>.plan.json` its subject, the sha256 of the
synthesized stack and of the baseline's, must be those of the review's own two stacks.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from infra.review.model import Change, Disagreement

NO_CHANGE = "no change"


def _digest(stack: Mapping[str, Any] | None) -> str:
    return hashlib.sha256(json.dumps(stack or {}, sort_keys=True).encode()).hexdigest()


def subject(after: Mapping[str, Any], before: Mapping[str, Any] | None) -> dict[str, str]:
    """What a plan of the change from `before` to `after` is of (written beside the plan, `subject_file`)."""
    return {"stack_sha256": _digest(after), "baseline_sha256": _digest(before)}


def plan_file(folder: Path, stack: str) -> Path:
    return folder / f"{stack}.plan.json"


def subject_file(folder: Path, stack: str) -> Path:
    return folder / f"{stack}.plan.subject.json"


def write(
    folder: Path, stack: str, planned: Mapping[str, Any], after: Mapping[str, Any], before: Mapping[str, Any] | None
) -> Path:
    """Write a plan (`tofu show -json`) and its subject; the plan's path."""
    folder.mkdir(parents=True, exist_ok=True)
    target = plan_file(folder, stack)
    target.write_text(json.dumps(planned, indent=1))
    subject_file(folder, stack).write_text(json.dumps(subject(after, before), indent=1) + "\n")
    return target


def read(folder: Path, stack: str, after: Mapping[str, Any], before: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The real plan of exactly this change, if one was written; None if none was, or if it is of another change."""
    plan, about = plan_file(folder, stack), subject_file(folder, stack)
    if not (plan.is_file() and about.is_file()):
        return None
    try:
        if json.loads(about.read_text()) != subject(after, before):
            return None
        found: dict[str, Any] = json.loads(plan.read_text())
    except json.JSONDecodeError:
        return None
    return found


def disagreements(offline: Iterable[Change], real: Iterable[Change]) -> list[Disagreement]:
    """Each resource the two act on differently, by address."""
    mine = {c.address: c.action for c in offline}
    theirs = {c.address: c.action for c in real}
    return [
        Disagreement(address, mine.get(address, NO_CHANGE), theirs.get(address, NO_CHANGE))
        for address in sorted(mine.keys() | theirs.keys())
        if mine.get(address) != theirs.get(address)
    ]
