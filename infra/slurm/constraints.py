"""Version constraints as Terraform and Packer write them (hashicorp/go-version): `>= 1.12.2`, `~> 3.0`,
`>= 6.9.0, <= 7.36.0`. A module's `required_version` and `required_providers` must admit the versions the
platform pins, or `terraform init` refuses the configuration."""

from __future__ import annotations

import re

_CLAUSE = re.compile(r"^\s*(=|!=|>=|<=|>|<|~>)?\s*v?([0-9]+(?:\.[0-9]+){0,2})\s*$")


def _version(text: str) -> tuple[int, int, int]:
    parts = [int(p) for p in text.split(".")]
    major, minor, patch = [*parts, 0, 0][:3]
    return major, minor, patch


def admits(constraint: str, version: str) -> bool:
    """Whether `version` (x.y.z) satisfies every comma-separated clause of `constraint`; ValueError if unreadable."""
    have = _version(version)
    for clause in constraint.split(","):
        match = _CLAUSE.match(clause)
        if match is None:
            raise ValueError(f"not a version constraint: {clause.strip()!r} (in {constraint!r})")
        op, text = match.group(1) or "=", match.group(2)
        want = _version(text)
        if op == "~>":
            # Pessimistic: the last given segment may grow. `~> 1.2.5`: >= 1.2.5, < 1.3; `~> 3.0`: >= 3.0, < 4.
            segments = text.count(".") + 1
            bump = max(segments - 2, 0)
            upper = list(want)
            upper[bump] += 1
            for i in range(bump + 1, 3):
                upper[i] = 0
            ok = want <= have < tuple(upper)
        else:
            ok = {
                "=": have == want,
                "!=": have != want,
                ">": have > want,
                ">=": have >= want,
                "<": have < want,
                "<=": have <= want,
            }[op]
        if not ok:
            return False
    return True
