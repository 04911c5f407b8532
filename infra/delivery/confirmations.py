"""Confirmations that travel with the change: an environment file's `confirm:` entries (infra/config/delivery.py).

The gate stops some changes until they are confirmed (a slice pool replaced, a release or namespace removed;
infra/review/gate.py). `CONFIRM_CHANGE=<address>` confirms one for a person's own `make plan`; the workflows read no
person's environment, so a change that must go through the pipeline is confirmed in the environment file, where the
pull request shows it beside the change. Each entry holds the sha256 of the resource's synthesized configuration it
was written for: it confirms that configuration only, so it cannot let a later change of the same resource through,
and an entry left behind after its apply is reported stale.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from infra.config import Environment

ABSENT = "absent"


def config_sha256(stack: dict[str, Any], address: str) -> str:
    """The sha256 of the resource's body in the synthesized stack (`absent` when the stack has no such resource)."""
    rtype, _, name = address.partition(".")
    body = (stack.get("resource") or {}).get(rtype, {}).get(name)
    if body is None:
        return ABSENT
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def from_file(env: Environment, stack: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(addresses the environment file confirms for this stack, a line for each entry that no longer applies)."""
    matched, stale = [], []
    for entry in env.confirm:
        now = config_sha256(stack, entry.address)
        if now == entry.config_sha256:
            matched.append(entry.address)
        else:
            stale.append(
                f"{env.name}.yaml: confirm: {entry.address}: written for configuration {entry.config_sha256[:12]}, "
                f"the stack now has {now[:12]}: it confirms nothing; remove it (it was applied) or confirm the new "
                "change"
            )
    return matched, stale


def unused(env: Environment, matched: list[str], gated: list[str]) -> list[str]:
    """A line for each matching entry that confirms no gated change of this plan (already applied: remove it)."""
    return [
        f"{env.name}.yaml: confirm: {address}: the plan has no gated change of it (applied already?): remove it"
        for address in matched
        if address not in gated
    ]


def entry(env_name: str, stack: dict[str, Any], address: str) -> str:
    """The `confirm:` entry that lets this change of `address` through, as YAML to add to `<env>.yaml`."""
    return (
        f'confirm:\n  - address: {address}\n    config_sha256: "{config_sha256(stack, address)}"\n'
        "    reason: <why this change is meant>"
    )


def how_to_confirm(address: str, confirmable: bool, env: Environment | None, stack: dict[str, Any]) -> str:
    """What a refusal of a gated change says to do: nothing for a protected resource; CONFIRM_CHANGE for this run,
    and where the stack's environment file is known, the `confirm:` entry the pipeline reads."""
    if not confirmable:
        return "cannot be confirmed"
    flag = f"confirm with CONFIRM_CHANGE={address}"
    if env is None:
        return flag
    pipeline = entry(env.name, stack, address)
    return f"{flag} for this run only, or confirm it in {env.name}.yaml, reviewed with the change:\n{pipeline}"
