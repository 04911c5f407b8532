"""What the rules of API requests share: which API a request is for, and the environment it came from."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from infra.config import Environment

Api = Literal["aiplatform.v1.CustomJob", "compute.v1.BulkInsertInstanceResource"]


@dataclass(frozen=True)
class RequestContext:
    api: Api
    env: Environment
    # The environment field the request derives from (`vertex.nccl_test`, `vm_groups.a3mega`).
    origin: str


def write_checked(path: Path, request: dict[str, Any], ctx: RequestContext) -> list[str]:
    """Write `request` to `path` (JSON) and hold the file as written to every request rule: the violations as
    `<file>: <field>: <value>: <message> [rule ...; source ...]` lines (none: the request may be sent)."""
    from infra.rules import check_request

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(request, indent=2) + "\n")
    written = json.loads(path.read_text())
    return [v.line(str(path)) for v in check_request(written, ctx)]
