"""Validate a Cluster Toolkit blueprint offline, the way `gcluster create` does before it writes anything.

Held against the module interfaces of the pinned release (`infra.slurm.interfaces`) and against what
gcluster v1.95.0 checks, read in its source (GoogleCloudPlatform/cluster-toolkit @ v1.95.0):

- pkg/config/config.go, validate.go: the blueprint's keys and name, group names, unique module ids, one module
  per Packer group, every deployment variable set, every `$(vars.x)` defined;
- pkg/config/validate.go `validateSettings`: every setting is a variable of its module ("a setting was added
  that is not found in the module");
- pkg/config/expand.go: `use` wires an output to the input of the same name, deployment variables to inputs of
  their name, `ghpc.inject_module_id`; then every required input must be set ("a required setting ... is
  missing") and every value must convert to its variable's type (go-cty, `infra.slurm.types`);
- pkg/validators/semantic.go `test_module_not_used`; expand.go `validateModulesAreUsed` (`has_to_be_used`);
- pkg/validators/metadata_validators.go: each module's `ghpc.validators` (exclusive, allowed_enum, regex,
  range, required, conditional, conditional_regex);
- and what `terraform init` / `packer init` would refuse: every `versions.tf` of the modules (and the modules
  they call) must admit the Terraform, Packer and provider versions the platform pins.

Not run here: gcluster itself (a Go binary, not installable from the package registries this project uses),
the validators that call Google Cloud (project, APIs, zones, machine types, quota, reservations), and each
module's `validation` blocks and preconditions, which Terraform evaluates at plan (the ones the blueprint relies
on are the platform's own rules: `infra/rules/cluster_toolkit.py`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.config.findings import Finding
from infra.slurm.constraints import admits
from infra.slurm.interfaces import ModuleInterface, read_module
from infra.slurm.types import conform

BLUEPRINT_KEYS = {
    "blueprint_name", "ghpc_version", "validators", "validation_level", "vars", "deployment_groups",
    "terraform_backend_defaults", "terraform_providers", "toolkit_modules_url", "toolkit_modules_version",
}  # fmt: skip
GROUP_KEYS = {"group", "terraform_backend", "terraform_providers", "modules"}
MODULE_KEYS = {"source", "kind", "id", "use", "outputs", "settings", "required_apis", "wrapsettingswith"}
DEPLOYMENT_KEYS = {"vars", "terraform_backend_defaults"}
LABEL = re.compile(r"^[\w-]{0,63}$")
GROUP = re.compile(r"^\w(-*\w)*$")
SETTING = re.compile(r"^[a-zA-Z-_][a-zA-Z0-9-_]*$")
SLURM_CLUSTER_NAME = re.compile(r"^[a-z][-a-z0-9]{0,19}$")
# `$(vars.x)` or `$(module.output)`; `\$(` is a literal `$(` (pkg/config/expression.go).
_REF = re.compile(r"(?<!\\)\$\(([^()]*)\)")


class _Unknown:
    """A value gcluster cannot evaluate by itself (a module output, literal HCL): its type is not checked."""


UNKNOWN = _Unknown()


@dataclass
class Report:
    """What was checked and what was found."""

    modules: int = 0
    settings: int = 0
    typed: int = 0
    validators: int = 0
    constraints: int = 0
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

    def summary(self) -> str:
        verdict = "valid" if self.ok else f"{len(self.findings)} problem(s)"
        return (
            f"{self.modules} modules, {self.settings} settings ({self.typed} type-checked), {self.validators} module "
            f"validators and {self.constraints} version constraints checked: {verdict}"
        )


@dataclass(frozen=True)
class Versions:
    """The tool and provider versions the deployment runs with (infra/catalogue/cluster_toolkit.py)."""

    terraform: str
    packer: str
    providers: dict[str, str]


def _refs(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield from (m.strip() for m in _REF.findall(value))
    elif isinstance(value, list):
        for item in value:
            yield from _refs(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _refs(item)


def _lookup(value: Any, parts: list[str]) -> Any:
    for part in parts:
        if not isinstance(value, dict) or part not in value:
            return UNKNOWN
        value = value[part]
    return value


def resolve(value: Any, variables: dict[str, Any], depth: int = 0) -> Any:
    """`value` with `$(vars.x)` replaced by the variable's value; UNKNOWN if any part needs a module's output."""
    if depth > 20:
        return UNKNOWN
    if isinstance(value, str):
        if value.startswith("((") and value.endswith("))"):
            return UNKNOWN
        whole = _REF.fullmatch(value.strip())
        if whole:
            parts = whole.group(1).strip().split(".")
            if parts[0] != "vars" or len(parts) < 2:
                return UNKNOWN
            return resolve(_lookup(variables, parts[1:]), variables, depth + 1)
        for ref in _REF.findall(value):
            if not ref.strip().startswith("vars."):
                return UNKNOWN
        return value  # text with variables in it: a string template
    if isinstance(value, list):
        items = [resolve(v, variables, depth + 1) for v in value]
        return UNKNOWN if any(i is UNKNOWN for i in items) else items
    if isinstance(value, dict):
        resolved = {k: resolve(v, variables, depth + 1) for k, v in value.items()}
        return UNKNOWN if any(v is UNKNOWN for v in resolved.values()) else resolved
    return value


def _close(name: str, names: list[str]) -> str:
    match = difflib.get_close_matches(name, names, n=1, cutoff=0.75)
    return f' (did you mean "{match[0]}"?)' if match else ""


def _is_set(value: Any) -> bool:
    """gcluster's isVarSet (pkg/validators/metadata_validator_helpers.go): not null, not empty, not 0, not false."""
    if value is None or value is UNKNOWN:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value > 0
    if isinstance(value, (str, list, dict)):
        return len(value) > 0
    return True


@dataclass
class _Module:
    group: int
    index: int
    body: dict[str, Any]
    interface: ModuleInterface | None

    @property
    def id(self) -> str:
        return str(self.body.get("id", ""))

    @property
    def path(self) -> str:
        return f"deployment_groups[{self.group}].modules[{self.index}]"


class _Validation:
    def __init__(self, blueprint: dict[str, Any], deployment: dict[str, Any] | None, root: Path, versions: Versions):
        self.bp = blueprint
        self.root = root
        self.versions = versions
        self.report = Report()
        self.variables: dict[str, Any] = dict(blueprint.get("vars") or {})
        self.deployment = deployment or {}
        self.variables.update(self.deployment.get("vars") or {})
        self.modules: list[_Module] = []
        # gcluster always gives `labels` (its own ghpc_blueprint and ghpc_deployment, merged with the blueprint's):
        # pkg/config/expand.go expandGlobalLabels.
        self.always_set = {"labels"}

    def add(self, path: str, value: object, message: str) -> None:
        self.report.findings.append(Finding(path, value, message))

    def run(self, enabled_apis: set[str] | None) -> Report:
        self.blueprint_level()
        self.read_modules()
        by_id = {m.id: m for m in self.modules}
        for module in self.modules:
            if module.interface is not None:
                self.check_module(module, by_id)
        self.check_used(by_id)
        for module in self.modules:
            if module.interface is not None:
                self.check_validators(module)
                self.check_constraints(module)
                if enabled_apis is not None:
                    self.check_services(module, enabled_apis)
        return self.report

    # -- the blueprint and its groups ------------------------------------------------------------------
    def blueprint_level(self) -> None:
        for key in self.bp:
            if key not in BLUEPRINT_KEYS:
                self.add(key, self.bp[key], f"not a blueprint key; allowed: {', '.join(sorted(BLUEPRINT_KEYS))}")
        for key in self.deployment:
            if key not in DEPLOYMENT_KEYS:
                self.add(
                    f"(deployment) {key}",
                    self.deployment[key],
                    "a deployment file holds only vars and terraform_backend_defaults",
                )
        name = self.bp.get("blueprint_name")
        if not isinstance(name, str) or not name or not LABEL.match(name):
            self.add("blueprint_name", name, "must be a non-empty label: lowercase letters, digits, _ and -, up to 63")
        for key, value in self.variables.items():
            if value is None:
                self.add(f"vars.{key}", None, f'deployment variable "{key}" was not set')
        deployment_name = self.variables.get("deployment_name")
        if not isinstance(deployment_name, str) or not LABEL.match(deployment_name) or not deployment_name:
            self.add("vars.deployment_name", deployment_name, "must be set to a non-empty label value")
        cluster = self.variables.get("slurm_cluster_name")
        if cluster is not None and not (isinstance(cluster, str) and SLURM_CLUSTER_NAME.match(cluster)):
            self.add("vars.slurm_cluster_name", cluster, f"must match {SLURM_CLUSTER_NAME.pattern}")
        for key, value in self.variables.items():
            for ref in _refs(value):
                parts = ref.split(".")
                if parts[0] != "vars":
                    self.add(f"vars.{key}", value, "module outputs can only be referenced in module settings")
                elif len(parts) < 2 or parts[1] not in self.variables:
                    self.add(f"vars.{key}", value, f'variable "{parts[1] if len(parts) > 1 else ref}" not found')
        for name, provider in (self.bp.get("terraform_providers") or {}).items():
            for required in ("source", "version"):
                if not (provider or {}).get(required):
                    self.add(f"terraform_providers.{name}", provider, f'provider "{name}" is missing {required}')
        groups = self.bp.get("deployment_groups") or []
        if not groups:
            self.add("deployment_groups", groups, "a blueprint needs at least one deployment group")
        seen_groups: set[str] = set()
        seen_ids: set[str] = set()
        for g, group in enumerate(groups):
            at = f"deployment_groups[{g}]"
            for key in group:
                if key not in GROUP_KEYS:
                    self.add(f"{at}.{key}", group[key], f"not a group key; allowed: {', '.join(sorted(GROUP_KEYS))}")
            name = str(group.get("group", ""))
            if not GROUP.match(name) or name in (".ghpc", "_modules"):
                self.add(f"{at}.group", name, f"a group name must match {GROUP.pattern}")
            if name in seen_groups:
                self.add(f"{at}.group", name, "group names must be unique")
            seen_groups.add(name)
            modules = group.get("modules") or []
            if not modules:
                self.add(f"{at}.modules", modules, "a group needs at least one module")
            kinds = {m.get("kind") or "terraform" for m in modules}
            if len(kinds) > 1:
                self.add(f"{at}.modules", sorted(kinds), "the modules of a group are all of one kind")
            if "packer" in kinds and len(modules) > 1:
                self.add(f"{at}.modules", len(modules), f'packer group "{name}" has more than 1 module')
            for i, body in enumerate(modules):
                mid = str(body.get("id", ""))
                if not mid or mid == "vars":
                    self.add(f"{at}.modules[{i}].id", mid, "a module id cannot be empty or 'vars'")
                if mid in seen_ids:
                    self.add(f"{at}.modules[{i}].id", mid, f'module IDs must be unique, "{mid}" used more than once')
                seen_ids.add(mid)

    def read_modules(self) -> None:
        for g, group in enumerate(self.bp.get("deployment_groups") or []):
            for i, body in enumerate(group.get("modules") or []):
                module = _Module(g, i, body, None)
                self.modules.append(module)
                for key in body:
                    if key not in MODULE_KEYS:
                        self.add(
                            f"{module.path}.{key}",
                            body[key],
                            f"not a module key; allowed: {', '.join(sorted(MODULE_KEYS))}",
                        )
                kind = body.get("kind") or "terraform"
                if kind not in ("terraform", "packer"):
                    self.add(f"{module.path}.kind", kind, 'kind must be "packer" or "terraform" or removed')
                    continue
                source = str(body.get("source", ""))
                if not source.startswith(("modules/", "community/modules/")):
                    self.add(
                        f"{module.path}.source",
                        source,
                        "the platform's blueprints use the modules embedded in gcluster (modules/..., "
                        "community/modules/...)",
                    )
                    continue
                try:
                    module.interface = read_module(self.root, source, kind)
                except FileNotFoundError:
                    self.add(
                        f"{module.path}.source",
                        source,
                        f"no {kind} module at this path in the pinned Cluster Toolkit release",
                    )
                self.report.modules += 1

    # -- one module --------------------------------------------------------------------------------------
    def check_module(self, module: _Module, by_id: dict[str, _Module]) -> None:
        interface = module.interface
        assert interface is not None
        where = f"{module.path} ({module.id}: {interface.source})"
        settings = dict(module.body.get("settings") or {})
        names = sorted(interface.inputs)
        for key in settings:
            self.report.settings += 1
            if "." in key:
                self.add(
                    f"{where}.settings.{key}",
                    settings[key],
                    "a setting name contains a period; variable subfields cannot be set independently",
                )
            elif not SETTING.match(key):
                self.add(
                    f"{where}.settings.{key}", settings[key], "a setting name must begin with a non-numeric character"
                )
            elif key not in interface.inputs:
                files = sorted({i.file for i in interface.inputs.values()})
                self.add(
                    f"{where}.settings.{key}",
                    settings[key],
                    f"a setting was added that is not found in the module{_close(key, names)}: no variable {key!r} in "
                    f"{', '.join(files)}",
                )
        for output in module.body.get("outputs") or []:
            name = output if isinstance(output, str) else (output or {}).get("name")
            if name not in interface.outputs:
                self.add(f"{where}.outputs", name, f'requested output "{name}" was not found in the module')
        # What `use` wires, then deployment variables, then the injected id (pkg/config/expand.go).
        wired: set[str] = set(settings)
        uses = module.body.get("use") or []
        if not isinstance(uses, list):
            self.add(f"{where}.use", uses, "`use` must be a list of module ids")
            uses = []
        for used_id in uses:
            used = by_id.get(used_id)
            if used is None:
                self.add(f"{where}.use", used_id, f'unknown module id: "{used_id}"{_close(used_id, list(by_id))}')
                continue
            if used.group > module.group:
                self.add(
                    f"{where}.use",
                    used_id,
                    f"references to outputs from other groups must be to earlier groups: {used_id} is in a later group",
                )
            if used.interface is None:
                continue
            if used.interface.kind == "packer":
                self.add(f"{where}.use", used_id, f"packer modules cannot be used by other modules: {used_id}")
                continue
            matching = [o for o in used.interface.outputs if o in interface.inputs and o != "labels"]
            contributes = [o for o in matching if o not in settings]
            if not contributes:
                self.add(
                    f"{where}.use",
                    used_id,
                    f'module "{module.id}" uses module "{used_id}", but matching setting and outputs were not found '
                    "(set explicitly, or by a prior used module): gcluster's test_module_not_used refuses it",
                )
            wired |= set(contributes)
        for name in interface.inputs:
            if name not in wired and (name in self.variables or name in self.always_set):
                wired.add(name)
        if interface.inject_module_id:
            wired.add(interface.inject_module_id)
        for name, declared in sorted(interface.inputs.items()):
            if declared.required and name not in wired:
                self.add(
                    f"{where}.settings",
                    name,
                    f'a required setting "{name}" is missing: variable "{name}" ({declared.where}, type '
                    f"{declared.type}) has no default, and no setting, deployment variable or used module's output "
                    "sets it",
                )
        for key, value in settings.items():
            self.check_references(module, f"{where}.settings.{key}", value, by_id)
            variable = interface.inputs.get(key)
            if variable is None:
                continue
            resolved = resolve(value, self.variables)
            if resolved is UNKNOWN:
                continue
            self.report.typed += 1
            for problem in conform(resolved, variable.type):
                self.add(
                    f"{where}.settings.{key}",
                    value,
                    f'unsuitable value for variable "{key}" ({variable.where}, type {variable.type}): {problem}',
                )

    def check_references(self, module: _Module, at: str, value: Any, by_id: dict[str, _Module]) -> None:
        for ref in _refs(value):
            parts = ref.split(".")
            if len(parts) < 2:
                self.add(at, value, "Expected reference formats: $(vars.var_name) or $(module_id.output_name)")
            elif parts[0] == "vars":
                if parts[1] not in self.variables:
                    self.add(at, value, f'module "{module.id}" references unknown global variable "{parts[1]}"')
            else:
                target = by_id.get(parts[0])
                if target is None:
                    self.add(at, value, f'unknown module id: "{parts[0]}"')
                elif target.group > module.group:
                    self.add(
                        at, value, f"references to outputs from other groups must be to earlier groups: {parts[0]}"
                    )
                elif target.interface is not None and parts[1] not in target.interface.outputs:
                    self.add(at, value, f'module "{parts[0]}" does not have output "{parts[1]}"')

    def check_used(self, by_id: dict[str, _Module]) -> None:
        used = {u for m in self.modules for u in (m.body.get("use") or []) if isinstance(m.body.get("use"), list)}
        used |= {ref.split(".")[0] for m in self.modules for ref in _refs(m.body.get("settings") or {})}
        for module in self.modules:
            if module.interface is not None and module.interface.has_to_be_used and module.id not in used:
                self.add(
                    f"{module.path} ({module.id}: {module.interface.source})",
                    module.id,
                    f'module "{module.id}" was not used: add it to the `use` of a downstream module '
                    f"({module.interface.source}/metadata.yaml: has_to_be_used)",
                )

    # -- the module's own validators (metadata.yaml ghpc.validators) ----------------------------------------
    def _value(self, module: _Module, dotted: str, *, default_from_module: bool = False) -> Any:
        """A validator's input: the module's setting (dotted into objects), else the deployment variable of that
        name, else (for triggers of conditional_regex) the variable's default in the module."""
        settings = module.body.get("settings") or {}
        parts = dotted.split(".")
        if parts[0] in settings:
            return resolve(_lookup(settings, parts), self.variables)
        if parts[0] in self.variables:
            return resolve(_lookup(self.variables, parts), self.variables)
        if default_from_module and module.interface is not None and parts[0] in module.interface.inputs:
            return _lookup({parts[0]: module.interface.inputs[parts[0]].default}, parts)
        return None

    def check_validators(self, module: _Module) -> None:
        interface = module.interface
        assert interface is not None
        if interface.kind != "terraform":
            return  # gcluster runs metadata validators on Terraform modules only
        source = f"{interface.source}/metadata.yaml"
        where = f"{module.path} ({module.id}: {interface.source})"
        for spec in interface.validators:
            self.report.validators += 1
            kind = spec.get("validator")
            inputs = spec.get("inputs") or {}
            message = str(spec.get("error_message", "")).strip()
            if spec.get("level") == "warning":
                continue  # logged by gcluster, never refused
            names = list(inputs.get("vars") or [])
            values = {n: self._value(module, n) for n in names}
            failed: str | None = None
            if kind == "exclusive":
                chosen = [n for n in names if _is_set(values[n])]
                if len(chosen) > 1:
                    failed = f"{message}: the following are set: {', '.join(chosen)}"
            elif kind == "allowed_enum":
                allowed = list(inputs.get("allowed") or [])
                for n in names:
                    v = values[n]
                    if v is None and inputs.get("allow_null", False):
                        continue
                    if v is not None and v is not UNKNOWN and v not in allowed:
                        failed = f"{message} ({n} = {v!r})"
            elif kind == "regex":
                pattern = re.compile(str(inputs.get("pattern")))
                for n in names:
                    v = values[n]
                    if isinstance(v, str) and not pattern.match(v):
                        failed = f"{message} ({n} = {v!r})"
            elif kind == "range":
                low, high = inputs.get("min"), inputs.get("max")
                for n in names:
                    v = values[n]
                    measure = len(v) if inputs.get("length_check") and isinstance(v, (list, dict, str)) else v
                    if (
                        isinstance(measure, (int, float))
                        and not isinstance(measure, bool)
                        and ((low is not None and measure < low) or (high is not None and measure > high))
                    ):
                        failed = f"{message} ({n} = {v!r})"
            elif kind == "required":
                for n in names:
                    if inputs.get("deprecated") and _is_set(values[n]):
                        failed = f"{message} ({n} is set)"
                    elif not inputs.get("deprecated") and not _is_set(values[n]):
                        failed = f"{message} ({n} is not set)"
            elif kind == "conditional":
                trigger = self._value(module, str(inputs.get("trigger")))
                if trigger == inputs.get("trigger_value"):
                    dependent = self._value(module, str(inputs.get("dependent")))
                    if dependent != inputs.get("dependent_value"):
                        failed = message
            elif kind == "conditional_regex":
                triggers = inputs.get("triggers") or {}
                if all(self._value(module, k, default_from_module=True) == v for k, v in triggers.items()):
                    dependent = self._value(module, str(inputs.get("dependent")), default_from_module=True)
                    if isinstance(dependent, str) and not re.match(str(inputs.get("pattern")), dependent):
                        failed = f"{message} ({inputs.get('dependent')} = {dependent!r})"
            else:
                self.add(where, kind, f"{source}: a validator kind this check does not know: {kind!r}")
            if failed:
                self.add(where, {n: values[n] for n in names} or None, f"{failed} [{source}: validator {kind}]")

    def check_constraints(self, module: _Module) -> None:
        interface = module.interface
        assert interface is not None
        where = f"{module.path} ({module.id}: {interface.source})"
        pinned = {"terraform": self.versions.terraform, "packer": self.versions.packer, **self.versions.providers}
        for c in interface.constraints:
            version = pinned.get(c.subject)
            if version is None:
                continue
            self.report.constraints += 1
            try:
                ok = admits(c.constraint, version)
            except ValueError as err:
                self.add(where, c.constraint, f"{c.file}: {err}")
                continue
            if not ok:
                self.add(
                    where,
                    c.constraint,
                    f"{c.file}: {c.subject} {c.constraint!r} does not admit the pinned {c.subject} {version} "
                    "(infra/catalogue/cluster_toolkit.py)",
                )

    def check_services(self, module: _Module, enabled: set[str]) -> None:
        interface = module.interface
        assert interface is not None
        for service in interface.services:
            if service not in enabled:
                self.add(
                    f"{module.path} ({module.id}: {interface.source})",
                    service,
                    f"{interface.source}/metadata.yaml requires {service}, which the platform stack does not enable "
                    "(infra/catalogue/gcp_apis.py)",
                )


def validate(
    blueprint: dict[str, Any],
    deployment: dict[str, Any] | None,
    *,
    root: Path,
    versions: Versions,
    enabled_apis: set[str] | None = None,
) -> Report:
    """Every problem gcluster (and `terraform init` / `packer init`) would find in this blueprint, offline."""
    return _Validation(blueprint, deployment, root, versions).run(enabled_apis)
