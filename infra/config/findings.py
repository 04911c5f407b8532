"""One shape for every fault the platform reports: where (a field path), the value at fault, what is wrong.

The config model, the rules of the real systems and their violations all speak it, so a message reads the
same wherever it comes from: `<field path>: <value>: <what is wrong and what is allowed>`.
"""

from __future__ import annotations

from typing import NamedTuple

# A field path: its parts as the file or the object nests them (`("serving", "llama405b", "slice")`,
# `("zones", 2)`), or already written out (`"google_container_node_pool.train.node_count"`).
FieldPath = tuple[str | int, ...] | str


def field_path(path: FieldPath) -> str:
    """`serving.llama405b.slice`, `zones[2]`; a written-out path as it is."""
    if isinstance(path, str):
        return path
    out = ""
    for part in path:
        if part == "[key]":
            out += " (the key)"
        else:
            out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


class Finding(NamedTuple):
    """One fault: where, the value at fault, and what is wrong (with what is allowed)."""

    path: FieldPath
    value: object
    message: str
