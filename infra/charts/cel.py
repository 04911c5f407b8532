"""The CRDs' own validation rules (`x-kubernetes-validations`), evaluated on a rendered object as the
Kubernetes API server evaluates them on create.

The API server runs every CEL rule of the schema node it applies to, with `self` bound to the value
at that node (once per list item or map value), after applying the schema's defaults; a rule that is
false, or that fails to evaluate, refuses the object with the rule's message. We do the same with the
CEL team's Python runtime (`cel-expr-python`, cel-cpp) and its strings extension, the library set the
API server also offers (https://kubernetes.io/docs/reference/using-api/cel/).

What cannot be evaluated here is listed, never passed silently:
- transition rules (those naming `oldSelf`) apply to updates only: `evaluate_update` runs them on an object and
  the one it replaces, on the nodes the API server correlates (object properties and map values by key, the
  items of a `map` list by their keys; never the items of an atomic or set list);
- a rule that does not compile (a Kubernetes-only function such as `isURL` or `quantity` that the
  runtime lacks) is "not evaluated" with the compiler's reason.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

# CEL keywords an object property must be escaped as (`__namespace__`); other characters are escaped
# too (k8s.io/apiserver/pkg/cel/common escaping). Since Kubernetes 1.32 a keyword also works plainly.
_RESERVED = {
    "true", "false", "null", "in", "as", "break", "const", "continue", "else", "for", "function", "if",
    "import", "let", "loop", "package", "namespace", "return", "var", "void", "while",
}  # fmt: skip


@dataclass(frozen=True)
class CelFailure:
    """One rule the object breaks: where, the rule, and the message the API server would return."""

    path: str
    rule: str
    message: str

    def line(self) -> str:
        return f"{self.path}: {self.message} (x-kubernetes-validations rule: {self.rule})"


@dataclass(frozen=True)
class NotEvaluated:
    """A rule we cannot evaluate here, and why."""

    kind: str
    path: str
    rule: str
    reason: str


def _escape(name: str) -> str:
    if name in _RESERVED:
        return f"__{name}__"
    for plain, escaped in (("__", "__underscores__"), (".", "__dot__"), ("-", "__dash__"), ("/", "__slash__")):
        name = name.replace(plain, escaped)
    return name


@cache
def _env() -> Any:
    from cel_expr_python import cel
    from cel_expr_python.ext import ext_strings

    return cel.NewEnv(variables={"self": cel.Type.DYN, "oldSelf": cel.Type.DYN}, extensions=[ext_strings.ExtStrings()])


@cache
def _compiled(rule: str) -> Any:
    """The compiled rule; raises RuntimeError with the compiler's reason when it does not compile."""
    return _env().compile(rule)


def _transition(rule: str) -> bool:
    return "oldSelf" in rule


def apply_defaults(value: Any, schema: dict[str, Any]) -> None:
    """Fill in the schema's defaults, as the API server does before validating."""
    if isinstance(value, dict) and "properties" in schema:
        for key, sub in schema["properties"].items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                apply_defaults(value[key], sub)
    elif isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        for item in value.values():
            apply_defaults(item, schema["additionalProperties"])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            apply_defaults(item, schema["items"])


def _cel_view(value: Any, schema: dict[str, Any]) -> Any:
    """The value as CEL sees it: object property names escaped, map keys as they are."""
    if isinstance(value, dict):
        if "properties" in schema:
            out = {}
            for key, item in value.items():
                view = _cel_view(item, schema["properties"].get(key) or {})
                out[_escape(key)] = view
                if key in _RESERVED:
                    out[key] = view
            return out
        extra = schema.get("additionalProperties")
        return {k: _cel_view(v, extra if isinstance(extra, dict) else {}) for k, v in value.items()}
    if isinstance(value, list):
        return [_cel_view(v, schema.get("items") or {}) for v in value]
    return value


def _nodes(value: Any, schema: dict[str, Any], path: str) -> Iterator[tuple[str, Any, dict[str, Any]]]:
    """(path, value, schema) of every node of `value` that its schema describes."""
    yield path, value, schema
    if isinstance(value, dict) and "properties" in schema:
        for key, sub in schema["properties"].items():
            if key in value:
                yield from _nodes(value[key], sub, f"{path}.{key}" if path else key)
    elif isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        for key, item in value.items():
            yield from _nodes(item, schema["additionalProperties"], f"{path}[{key}]")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            yield from _nodes(item, schema["items"], f"{path}[{i}]")


def _failures(nodes: Iterable[tuple[str, Any, Any, dict[str, Any]]], *, transition: bool) -> list[CelFailure]:
    """The rules each node's schema carries that its value breaks: the transition rules (with `oldSelf`, the value it
    replaces) or the others. `nodes`: (path, old value or None, value, schema)."""
    from cel_expr_python import cel

    failures = []
    for path, was, node, sub in nodes:
        for validation in sub.get("x-kubernetes-validations") or []:
            rule = validation["rule"]
            if _transition(rule) != transition:
                continue
            try:
                expr = _compiled(rule)
            except RuntimeError:
                continue  # listed by rule_counts()
            data = {"self": _cel_view(node, sub)}
            if transition:
                data["oldSelf"] = _cel_view(was, sub)
            result = expr.eval(data=data)
            where = path or "(root)"
            message = validation.get("message") or f"failed rule: {rule}"
            if result.type() == cel.Type.ERROR:  # the API server refuses on an evaluation error too
                failures.append(CelFailure(where, rule, f"{message} (evaluation error: {result.value()})"))
            elif result.type() != cel.Type.BOOL or result.value() is not True:
                failures.append(CelFailure(where, rule, message))
    return failures


def evaluate(obj: dict[str, Any], schema: dict[str, Any]) -> list[CelFailure]:
    """Every CEL rule of `schema` that `obj` breaks on create (defaults applied first)."""
    value = copy.deepcopy(obj)
    apply_defaults(value, schema)
    return _failures(((path, None, node, sub) for path, node, sub in _nodes(value, schema, "")), transition=False)


def _item_keys(item: Any, schema: dict[str, Any]) -> tuple[Any, ...] | None:
    keys = schema.get("x-kubernetes-list-map-keys") or []
    return tuple(item.get(k) for k in keys) if isinstance(item, dict) and keys else None


def _correlated(
    old: Any, new: Any, schema: dict[str, Any], path: str
) -> Iterator[tuple[str, Any, Any, dict[str, Any]]]:
    """(path, old value, new value, schema) of every node the API server correlates between an object and the one
    it replaces: where a transition rule runs (k8s.io/apiextensions-apiserver pkg/apiserver/schema/cel: ratcheting
    and correlation)."""
    yield path, old, new, schema
    if isinstance(old, dict) and isinstance(new, dict) and "properties" in schema:
        for key, sub in schema["properties"].items():
            if key in old and key in new:
                yield from _correlated(old[key], new[key], sub, f"{path}.{key}" if path else key)
    elif isinstance(old, dict) and isinstance(new, dict) and isinstance(schema.get("additionalProperties"), dict):
        for key in old.keys() & new.keys():
            yield from _correlated(old[key], new[key], schema["additionalProperties"], f"{path}[{key}]")
    elif isinstance(old, list) and isinstance(new, list) and schema.get("x-kubernetes-list-type") == "map":
        items = schema.get("items") or {}
        before = {_item_keys(item, schema): item for item in old}
        for i, item in enumerate(new):
            key = _item_keys(item, schema)
            if key is not None and key in before:
                yield from _correlated(before[key], item, items, f"{path}[{i}]")


def evaluate_update(old: dict[str, Any], new: dict[str, Any], schema: dict[str, Any]) -> list[CelFailure]:
    """Every transition rule (naming `oldSelf`) of `schema` that replacing `old` with `new` breaks, both with the
    schema's defaults applied."""
    before, after = copy.deepcopy(old), copy.deepcopy(new)
    apply_defaults(before, schema)
    apply_defaults(after, schema)
    return _failures(_correlated(before, after, schema, ""), transition=True)


def _rules(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, str]]:
    """(schema path, rule) of every rule in a schema."""
    for validation in schema.get("x-kubernetes-validations") or []:
        yield path or "(root)", validation["rule"]
    for key, sub in (schema.get("properties") or {}).items():
        yield from _rules(sub, f"{path}.{key}" if path else key)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            yield from _rules(schema[key], f"{path}[]")


def rule_counts(schemas: dict[tuple[str, str], dict[str, Any]]) -> tuple[int, list[NotEvaluated]]:
    """(rules evaluated on create, the rules that are not, with why) over every pinned CRD."""
    evaluated, skipped = 0, []
    for (api_version, kind), schema in sorted(schemas.items()):
        for path, rule in _rules(schema):
            where = f"{api_version} {kind}"
            if _transition(rule):
                skipped.append(NotEvaluated(where, path, rule, "transition rule (oldSelf): on updates, in the review"))
                continue
            try:
                _compiled(rule)
            except RuntimeError as err:
                skipped.append(NotEvaluated(where, path, rule, f"does not compile here: {str(err).splitlines()[0]}"))
                continue
            evaluated += 1
    return evaluated, skipped
