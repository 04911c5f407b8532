"""Confirmations that travel with the change: an environment file's `confirm:` entries (infra/config/delivery.py).

The gate stops some changes until they are confirmed (a slice pool replaced, a release or namespace removed;
infra/review/gate.py). `CONFIRM_CHANGE=<address>` confirms one for a person's own `make plan`; the workflows read no
person's environment, so a change that must go through the pipeline is confirmed in the environment file, where the
pull request shows it beside the change. Each entry holds the sha256 of the resource's synthesized configuration it
was written for: it confirms that configuration only, so it cannot let a later change of the same resource through,
and an entry left behind after its apply is reported stale.

A change that loses data or weakens security (infra/catalogue/consequences.py PERSON_ONLY) cannot be confirmed by the
pull request that causes it alone: an entry confirms it only where it was merged before the change (it is in the
environment file at PLATFORM_CONFIRMED_AT: the pull request's base, the commit before the merge at the apply), so a
second pull request, reviewed on its own, settles it first; or a person confirms it at the apply (CONFIRM_CHANGE).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from typing import Any

import yaml

from infra import settings
from infra.catalogue.consequences import PERSON_ONLY
from infra.config import Environment
from infra.config.delivery import APPLIED_CONFIRMATIONS, config_sha256
from infra.config.loading import environment_file


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


def settled(env: Environment, matched: list[str], stack: dict[str, Any], ref: str | None = None) -> list[str]:
    """The addresses of `matched` whose entry, with the same configuration, is in the environment file as the commit
    `ref` (default PLATFORM_CONFIRMED_AT) has it: merged before the change. None without a ref, or where the file is
    not at that ref."""
    ref = ref or settings.CONFIRMED_AT.raw()
    if not ref or not matched:
        return []
    path = environment_file(env.name).resolve()

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "-C", str(path.parent), *args], capture_output=True, text=True, check=False)

    root, commit = git("rev-parse", "--show-toplevel"), git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if root.returncode or commit.returncode:
        raise settings.SettingError(
            f"{settings.CONFIRMED_AT.name}={ref}: not a commit of the repository holding {path} (git rev-parse "
            "found none); set it to the pull request's base or the commit before the merge, or unset it"
        )
    shown = git("show", f"{commit.stdout.strip()}:{path.relative_to(root.stdout.strip())}")
    if shown.returncode:  # the environment file is new since then: nothing of it was merged before
        return []
    try:
        earlier = yaml.safe_load(shown.stdout) or {}
    except yaml.YAMLError:
        return []
    entries = earlier.get("confirm") if isinstance(earlier, dict) else None
    before = {(str(e.get("address")), str(e.get("config_sha256"))) for e in entries or [] if isinstance(e, dict)}
    return [a for a in matched if (a, config_sha256(stack, a)) in before]


def spent(env: Environment, matched: list[str], plan: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(the addresses of `matched` not yet carried out, a line for each that was): an entry is spent once an apply
    has carried it out, which the state records in the stack's APPLIED_CONFIRMATIONS output (the plan's
    prior_state). A spent entry confirms nothing: the same configuration replaced again (drift, a resource changed
    outside Terraform) is not the change it was written for."""
    applied = _applied(plan)
    keys = {e.address: e.key for e in env.confirm}
    done = [a for a in matched if keys.get(a) in applied]
    return [a for a in matched if a not in done], [
        f"{env.name}.yaml: confirm: {address}: carried out by an earlier apply (the state records it): it confirms "
        "nothing now, a change the plan shows of it is another one; remove it"
        for address in done
    ]


def _applied(plan: dict[str, Any]) -> list[str]:
    """The keys of the entries the state records as carried out (the stack's APPLIED_CONFIRMATIONS output in the
    plan's prior_state)."""
    outputs = ((plan.get("prior_state") or {}).get("values") or {}).get("outputs") or {}
    applied = (outputs.get(APPLIED_CONFIRMATIONS) or {}).get("value") or []
    return [str(key) for key in applied] if isinstance(applied, list) else []


def forgotten(env: Environment, stack: dict[str, Any], plan: dict[str, Any]) -> list[str]:
    """A line for each entry the state records as carried out whose configuration the stack no longer has. The
    record holds only the entries written for the configuration an apply applies, so this apply would drop it, and
    the entry, still in the file, would confirm the same change again when it comes back (a bucket deleted,
    re-created, then deleted again by a later pull request, confirmed by the first one's entry). The apply is
    refused until the entry is removed."""
    applied = set(_applied(plan))
    return [
        f"{env.name}.yaml: confirm: {e.address}: carried out by an earlier apply (the state records it), and the stack "
        f"no longer has the configuration it was written for ({e.config_sha256[:12]}): this apply would forget that "
        "it was spent, and it would confirm the same change again later; remove it from the file"
        for e in env.confirm
        if e.key in applied and config_sha256(stack, e.address) != e.config_sha256
    ]


def unused(env: Environment, matched: list[str], gated: list[str]) -> list[str]:
    """A line for each matching entry that confirms no gated change of this plan (already applied: remove it)."""
    return [
        f"{env.name}.yaml: confirm: {address}: the plan has no gated change of it (applied already?): remove it"
        for address in matched
        if address not in gated
    ]


def bound(
    env: Environment, matched: list[str], befores: Mapping[str, Mapping[str, Any]]
) -> tuple[list[str], list[str]]:
    """(the addresses of `matched` whose change is the one their entry was written for, a line for each that is
    not): an entry with `before` confirms the change from those values only. `befores`: by address, what the plan
    to apply changes, as it was before (infra/review/model.py Change.before_values)."""
    entries = {e.address: e for e in env.confirm}
    kept, lines = [], []
    for address in matched:
        written, now = entries[address].before, befores.get(address)
        if written is None or now is None or dict(now) == written:
            kept.append(address)
            continue
        lines.append(
            f"{env.name}.yaml: confirm: {address}: written for the change from {_values(written)}; the plan changes "
            f"it from {_values(now)} (changed outside Terraform since?): it confirms nothing; confirm the change the "
            "plan shows, or find who changed it (make drift)"
        )
    return kept, lines


def _values(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{path} {value!r}" for path, value in sorted(values.items())) or "nothing"


def entry(env_name: str, stack: dict[str, Any], address: str, before: Mapping[str, Any] | None = None) -> str:
    """The `confirm:` entry that lets this change of `address` through, as YAML to add to `<env>.yaml`, bound to
    the values it changes from where they are known."""
    bound_to = ""
    # A value read from another resource (`${...}` in a synthesized stack) is known only at the apply: not bound.
    known = {path: value for path, value in (before or {}).items() if "${" not in json.dumps(value)}
    if known:
        shown = yaml.safe_dump({"before": known}, default_flow_style=False, sort_keys=True, width=1000)
        bound_to = "".join(f"    {line}\n" for line in shown.splitlines())
    return (
        f'confirm:\n  - address: {address}\n    config_sha256: "{config_sha256(stack, address)}"\n{bound_to}'
        "    reason: <why this change is meant>"
    )


def how_to_confirm(
    address: str,
    confirmable: bool,
    env: Environment | None,
    stack: dict[str, Any],
    kinds: tuple[str, ...] = (),
    before: Mapping[str, Any] | None = None,
) -> str:
    """What a refusal of a gated change says to do: nothing for a protected resource; CONFIRM_CHANGE for this run,
    and where the stack's environment file is known, the `confirm:` entry the pipeline reads (merged in a pull
    request of its own first, for a change that loses data or weakens security)."""
    if not confirmable:
        return "cannot be confirmed"
    flag = f"confirm with CONFIRM_CHANGE={address}"
    if env is None:
        return flag
    pipeline = entry(env.name, stack, address, before)
    if any(kind in PERSON_ONLY for kind in kinds):
        return (
            f"{flag} (a person, at the apply), or merge this entry into {env.name}.yaml in a pull request of its own "
            f"before the change (the change's own pull request cannot confirm what {' and '.join(kinds)}):\n"
            f"{pipeline}"
        )
    return f"{flag} for this run only, or confirm it in {env.name}.yaml, reviewed with the change:\n{pipeline}"
