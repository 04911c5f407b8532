"""The Helm releases of a stack as the review's readers take them: each release, its chart's name and its values
(a synthesized stack holds them as JSON strings; a plan's values as objects)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any


def release_values(stack_json: Mapping[str, Any]) -> Iterator[tuple[Mapping[str, Any], str, dict[str, Any]]]:
    """(release, chart name, values) of every values document of every helm_release."""
    for release in ((stack_json.get("resource") or {}).get("helm_release") or {}).values():
        chart = str(release.get("chart", "")).rsplit("/", 1)[-1]
        for document in release.get("values") or []:
            yield release, chart, json.loads(document) if isinstance(document, str) else document
