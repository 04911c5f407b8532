"""Which attributes of the stacks' resource types the providers keep when the configuration leaves them out: those
their schemas mark both optional and computed. Terraform plans such an attribute, once it is no longer configured,
at the value the state holds (the provider computes it, or kept what was set), so the offline review must not read
its removal from the configuration as a change (infra/review/diff.py).

`python -m scripts.tofu computed --write` reads the real providers' schemas (`tofu providers schema -json`, the
providers built from source, `make tofu`) for every resource type the environments' stacks declare, and writes
infra/catalogue/optional_computed.json; tests/test_engine.py checks the file against the schemas again.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any


def optional_computed(block: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The dotted paths (nested blocks' list indices dropped, as the offline review names paths) of `block`'s
    attributes that are optional and computed, its nested blocks' too."""
    paths = [
        f"{prefix}{name}"
        for name, attribute in (block.get("attributes") or {}).items()
        if attribute.get("optional") and attribute.get("computed")
    ]
    for name, nested in (block.get("block_types") or {}).items():
        paths += optional_computed(nested.get("block") or {}, f"{prefix}{name}.")
    return sorted(paths)


def catalogue(schemas: Mapping[str, Any], types: Iterable[str]) -> dict[str, list[str]]:
    """By resource type of `types`, its optional and computed paths (`tofu providers schema -json`'s
    provider_schemas); a type no provider has is left out."""
    by_type: dict[str, Any] = {}
    for provider in schemas.values():
        by_type.update(provider.get("resource_schemas") or {})
    return {t: optional_computed(by_type[t]["block"]) for t in sorted(set(types)) if t in by_type}


def stack_types(stacks: Iterable[Mapping[str, Any]]) -> set[str]:
    return {t for stack in stacks for t in (stack.get("resource") or {})}


def read_schemas(stack: Mapping[str, Any]) -> dict[str, Any]:
    """The providers' schemas for a stack's providers, from a workspace of its own."""
    from infra.engine.tofu import Workspace

    with tempfile.TemporaryDirectory() as folder:
        workspace = Workspace(Path(folder), dict(stack))
        workspace.init()
        return workspace.provider_schemas()
