"""One check's verdict."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class Result:
    """One check's verdict and what it says (each line a finding, or what was found)."""

    check: str
    status: Literal["ok", "fail", "skip"]
    lines: list[str] = field(default_factory=list)
