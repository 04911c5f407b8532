"""A stand-in state: every resource of a stack as if it had been applied, so the real providers plan a *change*
offline (`tofu plan -refresh=false` reads no cloud), and the gate judges the providers' plan, not our own diff.

How it is made (`settle`): OpenTofu plans the stack from an empty state; each planned resource is written into the
state as an apply would leave it (its planned values; each value known only after apply is the prior one, else a
stand-in of its type: a string `standin-<resource>-<attribute>`, and for the Plugin SDK's providers, google and
kubernetes, every unset attribute its zero value, as their Read leaves it); then the stack is planned against that
state again, and again, until the plan is empty. What it cannot know stays a stand-in: identifiers the API assigns,
a service account's email (made from its account_id and project, as Google makes it), a firewall rule's logging flag
(on where it has a log_config). A change planned against it is the providers' own: their RequiresReplace and
CustomizeDiff decide what replaces, their schemas what updates in place.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.cdk.layout import STACK_FILE
from infra.engine.tofu import OFFLINE_TOKEN, STATE_FILE, EngineError, Workspace

# Plans until the stack's plan against the state is empty: the prod stack needs 4 (its references to what only an
# apply knows resolve one layer of resources per round).
ROUNDS = 8
# The stand-in state is made with prevent_destroy off: its first rounds replace what referenced a stand-in.
_SETTLING = "platform_settling_override.tf.json"
SETTLED = ".settled"  # what the workspace's stand-in state was made from (_settled_for)
_ZERO: dict[str, Any] = {"string": "", "number": 0, "bool": False}
_SDK_PROVIDERS = ("hashicorp/google", "hashicorp/kubernetes")


def _run_plan(workspace: Workspace) -> dict[str, Any]:
    extra = {"GOOGLE_OAUTH_ACCESS_TOKEN": OFFLINE_TOKEN}
    workspace.run("plan", "-refresh=false", "-lock=false", "-no-color", "-out=plan.bin", extra_env=extra)
    shown: dict[str, Any] = json.loads(workspace.run("show", "-json", "plan.bin", extra_env=extra).stdout)
    return shown


def _zero(kind: Any) -> Any:
    if isinstance(kind, str):
        return _ZERO.get(kind)
    if isinstance(kind, list) and kind:
        return {"list": [], "set": [], "map": {}}.get(kind[0])
    return None


def _resolved(after: Any, unknown: Any, prior: Any, block: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The values an apply leaves: the planned ones; each one known only after apply the prior value, else a
    stand-in of its type."""
    out: dict[str, Any] = copy.deepcopy(after) if isinstance(after, dict) else {}
    attributes, nested = block.get("attributes", {}), block.get("block_types", {})
    for key, mark in (unknown or {}).items():
        if mark is True:
            old = (prior or {}).get(key)
            if old is not None:
                out[key] = old
            elif key in attributes:
                kind = attributes[key].get("type")
                out[key] = f"standin-{where}-{key}" if kind == "string" else _zero(kind)
            elif key in nested:
                out[key] = []
        elif isinstance(mark, list) and key in nested:
            items = out.get(key) or [{} for _ in mark]
            olds = (prior or {}).get(key) or []
            out[key] = [
                _resolved(item, m, olds[i] if i < len(olds) else None, nested[key]["block"], where)
                if isinstance(m, dict) and isinstance(item, dict)
                else item
                for i, (item, m) in enumerate(zip(items, mark, strict=False))
            ] + items[len(mark) :]
    return out


def _zero_filled(value: dict[str, Any], block: Mapping[str, Any]) -> None:
    """What a Plugin SDK provider's Read leaves: every attribute set, its zero value where the API has none."""
    for key, attribute in block.get("attributes", {}).items():
        if value.get(key) is None:
            value[key] = _zero(attribute.get("type"))
    for key, nested in block.get("block_types", {}).items():
        items = value.get(key)
        if items is None:
            value[key] = [] if nested.get("nesting_mode") in ("list", "set") else None
        elif isinstance(items, list):
            for item in items:
                if isinstance(item, dict):
                    _zero_filled(item, nested["block"])


def _sensitive_paths(marks: Any, path: tuple[dict[str, Any], ...] = ()) -> list[list[dict[str, Any]]]:
    """A plan's after_sensitive as a state's sensitive_attributes (format 4: each a path of steps)."""
    if marks is True:
        return [list(path)]
    found: list[list[dict[str, Any]]] = []
    if isinstance(marks, dict):
        for key, inner in marks.items():
            found += _sensitive_paths(inner, (*path, {"type": "get_attr", "value": key}))
    elif isinstance(marks, list):
        for i, inner in enumerate(marks):
            found += _sensitive_paths(inner, (*path, {"type": "index", "value": {"value": i, "type": "number"}}))
    return found


@dataclass
class StandInState:
    """The state of one workspace, resource by (type, name)."""

    schemas: dict[str, Any]
    resources: dict[tuple[str, str], dict[str, Any]]

    def applied(self, planned: Mapping[str, Any]) -> None:
        """Take in a plan as if it had been applied."""
        for entry in planned.get("resource_changes") or []:
            actions = (entry.get("change") or {}).get("actions")
            if entry.get("mode") != "managed" or actions in (["no-op"], ["read"]):
                continue
            key = (entry["type"], entry["name"])
            if actions == ["delete"]:
                self.resources.pop(key, None)
                continue
            provider = entry["provider_name"]
            schema = self.schemas[provider]["resource_schemas"][entry["type"]]
            prior = self.resources.get(key, {}).get("attributes") if actions == ["update"] else None
            change = entry["change"]
            values = _resolved(change["after"], change.get("after_unknown"), prior, schema["block"], entry["name"])
            if provider.endswith(_SDK_PROVIDERS):
                _zero_filled(values, schema["block"])
            if values.get("log_config") and "enable_logging" in schema["block"].get("attributes", {}):
                values["enable_logging"] = True
            if entry["type"] == "google_service_account":
                email = f"{values['account_id']}@{values['project']}.iam.gserviceaccount.com"
                values.update(email=email, member=f"serviceAccount:{email}")
                values["id"] = values["name"] = f"projects/{values['project']}/serviceAccounts/{email}"
            self.resources[key] = {
                "provider": provider,
                "schema_version": schema.get("version", 0),
                "attributes": values,
                "sensitive_attributes": _sensitive_paths(change.get("after_sensitive") or {}),
            }

    def write(self, folder: Path, serial: int) -> None:
        state = {
            "version": 4,
            "terraform_version": "1.12.6",
            "serial": serial,
            "lineage": "00000000-0000-4000-8000-000000000000",
            "outputs": {},
            "resources": [
                {
                    "mode": "managed",
                    "type": rtype,
                    "name": name,
                    "provider": f'provider["{body["provider"]}"]',
                    "instances": [
                        {k: body[k] for k in ("schema_version", "attributes", "sensitive_attributes")},
                    ],
                }
                for (rtype, name), body in sorted(self.resources.items())
            ],
        }
        (folder / STATE_FILE).write_text(json.dumps(state, indent=1))


@contextmanager
def _settling(workspace: Workspace) -> Iterator[None]:
    """prevent_destroy off while the state is made (its first rounds replace what referenced a stand-in)."""
    guarded = {
        rtype: {name: {"lifecycle": {"prevent_destroy": False}} for name, body in items.items()
                if (body.get("lifecycle") or {}).get("prevent_destroy")}
        for rtype, items in (workspace.stack.get("resource") or {}).items()
    }  # fmt: skip
    guarded = {t: v for t, v in guarded.items() if v}
    path = workspace.folder / _SETTLING
    if guarded:
        path.write_text(json.dumps({"resource": guarded}))
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


def _settled_for(workspace: Workspace) -> str:
    """What a stand-in state is made from: the stack, the override and the providers' lock."""
    h = hashlib.sha256()
    for name in (STACK_FILE, Workspace.OVERRIDE, ".terraform.lock.hcl"):
        path = workspace.folder / name
        h.update(name.encode() + b"\0" + (path.read_bytes() if path.is_file() else b""))
    return h.hexdigest()


def settle(workspace: Workspace) -> int:
    """Write the stand-in state of the workspace's stack (above); the number of plans it took, 0 where the state
    made before for this same stack is still there (`make plan BASE_REF=` plans each change from one baseline).
    Refused naming what still changes when the plan is not empty after ROUNDS."""
    workspace.init()
    marker = workspace.folder / SETTLED
    if marker.is_file() and (workspace.folder / STATE_FILE).is_file() and marker.read_text() == _settled_for(workspace):
        return 0
    marker.unlink(missing_ok=True)
    (workspace.folder / STATE_FILE).unlink(missing_ok=True)
    schemas = workspace.provider_schemas()
    state = StandInState(schemas, {})
    with _settling(workspace):
        for rounds in range(1, ROUNDS + 1):
            planned = _run_plan(workspace)
            changing = [
                e["address"]
                for e in planned.get("resource_changes") or []
                if (e.get("change") or {}).get("actions") not in (["no-op"], ["read"])
            ]
            if not changing:
                marker.write_text(_settled_for(workspace))
                return rounds
            state.applied(planned)
            state.write(workspace.folder, rounds)
    raise EngineError(
        f"{workspace.folder}: the stand-in state does not settle in {ROUNDS} plans; still changing: "
        f"{', '.join(changing[:8])}"
    )


def plan_change(
    workspace: Workspace, stack: Mapping[str, Any], overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The providers' plan of `stack` against the workspace's settled state (settle first), as `tofu show -json`
    writes it; `overrides` replace the workspace's for this plan (the changed stack's chart copies); the workspace's
    own files are put back after. prevent_destroy holds: a change that would destroy a guarded resource is refused by
    OpenTofu (EngineError naming it)."""
    files = {name: (workspace.folder / name).read_text() for name in (STACK_FILE, Workspace.OVERRIDE)}
    (workspace.folder / STACK_FILE).write_text(json.dumps(stack, indent=2))
    if overrides is not None:
        workspace.write_overrides(overrides)
    try:
        return _run_plan(workspace)
    finally:
        for name, text in files.items():
            (workspace.folder / name).write_text(text)
