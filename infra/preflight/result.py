"""One check's verdict."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class Result:
    """One check's verdict and what it says (each line a finding, or what was found). `warn`: something a command
    after the deploy needs is missing (it does not stop the deploy)."""

    check: str
    status: Literal["ok", "fail", "warn", "skip"]
    lines: list[str] = field(default_factory=list)
