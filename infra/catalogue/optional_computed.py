"""The attributes of the stacks' resource types that the providers keep when the configuration leaves them out: their
schemas mark them optional and computed, so Terraform plans one that is no longer configured at the value the state
holds, not as a change (a node pool's `node_count` once its pool autoscales, for one).

Read from the real providers' schemas (`tofu providers schema -json`: google 7.45.0, kubernetes and helm as
pinned, built from source) by `python -m scripts.tofu computed --write` into optional_computed.json, by resource
type, as dotted paths of nested blocks (list indices dropped); tests/test_engine.py holds the file to the schemas.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

CATALOGUE_FILE = Path(__file__).with_name("optional_computed.json")


@cache
def optional_computed(rtype: str) -> frozenset[str]:
    """The optional and computed paths of resource type `rtype` (none for a type the file does not name)."""
    table: dict[str, list[str]] = json.loads(CATALOGUE_FILE.read_text())
    return frozenset(table.get(rtype, ()))
