"""Terraform's type constraints, read from a variable's `type` text, and whether a blueprint value conforms.

`gcluster` reads each module input's type with terraform-config-inspect and converts a setting's value to it
with go-cty's `convert.Convert` before it writes anything (cluster-toolkit v1.95.0 pkg/config/expand.go
`checkInputValueMatchesType`). The conversion rules below are go-cty's (v1.17.0 cty/convert): a string that
reads as a number is a number, "true"/"false"/"1"/"0" are bools, numbers and bools are strings, a YAML list is
a list, set or tuple when its elements convert, an object lacks only `optional()` attributes.

One difference, on purpose: go-cty drops object attributes the type does not declare, so a misspelled key
inside an object setting (`dws_flex: {enabeld: true}`) vanishes without a word. Here it is an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

PRIMITIVES = ("string", "number", "bool", "any")
COLLECTIONS = ("list", "set", "map")


class TypeSyntaxError(ValueError):
    """A type constraint this parser cannot read."""


@dataclass(frozen=True)
class Attribute:
    name: str
    type: TfType
    optional: bool = False
    default: Any = None


@dataclass(frozen=True)
class TfType:
    """string | number | bool | any | list(T) | set(T) | map(T) | tuple([T, ...]) | object({k = T, ...})."""

    kind: str
    element: TfType | None = None
    elements: tuple[TfType, ...] = ()
    attributes: tuple[Attribute, ...] = field(default=())

    def __str__(self) -> str:
        if self.kind in PRIMITIVES:
            return self.kind
        if self.kind in COLLECTIONS:
            return f"{self.kind}({self.element})"
        if self.kind == "tuple":
            return f"tuple([{', '.join(map(str, self.elements))}])"
        inner = ", ".join(
            f"{a.name} = {'optional(' if a.optional else ''}{a.type}{')' if a.optional else ''}"
            for a in self.attributes
        )
        return f"object({{{inner}}})"


ANY = TfType("any")

_TOKEN = re.compile(
    r'\s*(?:(?P<string>"(?:[^"\\]|\\.)*")|(?P<number>-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)'
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_-]*)|(?P<punct>[()\[\]{},=:]))"
)


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            if text[pos:].strip() == "":
                break
            raise TypeSyntaxError(f"cannot read type constraint at {text[pos : pos + 20]!r}")
        kind = match.lastgroup or ""
        out.append((kind, match.group(kind)))
        pos = match.end()
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.pos = 0

    def peek(self) -> str:
        return self.tokens[self.pos][1] if self.pos < len(self.tokens) else ""

    def take(self, expected: str | None = None) -> tuple[str, str]:
        if self.pos >= len(self.tokens):
            raise TypeSyntaxError(f"unexpected end of type constraint, expected {expected or 'more'}")
        token = self.tokens[self.pos]
        if expected is not None and token[1] != expected:
            raise TypeSyntaxError(f"expected {expected!r}, found {token[1]!r}")
        self.pos += 1
        return token

    def type(self) -> TfType:
        kind, name = self.take()
        if kind != "name":
            raise TypeSyntaxError(f"expected a type, found {name!r}")
        if name in PRIMITIVES:
            return TfType(name)
        if name in COLLECTIONS:
            if self.peek() != "(":  # bare `list` / `map`: list(any), map(any) (terraform-config-inspect)
                return TfType(name, element=ANY)
            self.take("(")
            element = self.type()
            self.take(")")
            return TfType(name, element=element)
        if name == "tuple":
            self.take("(")
            self.take("[")
            elements = []
            while self.peek() != "]":
                elements.append(self.type())
                if self.peek() == ",":
                    self.take(",")
            self.take("]")
            self.take(")")
            return TfType("tuple", elements=tuple(elements))
        if name == "object":
            self.take("(")
            self.take("{")
            attributes = []
            while self.peek() != "}":
                _, attr = self.take()
                self.take("=")
                attributes.append(self.attribute(attr.strip('"')))
                if self.peek() == ",":
                    self.take(",")
            self.take("}")
            self.take(")")
            return TfType("object", attributes=tuple(attributes))
        raise TypeSyntaxError(f"unknown type {name!r}")

    def attribute(self, name: str) -> Attribute:
        if self.peek() != "optional":
            return Attribute(name, self.type())
        self.take("optional")
        self.take("(")
        type_ = self.type()
        default = None
        if self.peek() == ",":
            self.take(",")
            default = self.literal()
        self.take(")")
        return Attribute(name, type_, optional=True, default=default)

    def literal(self) -> Any:
        kind, text = self.take()
        if kind == "string":
            return bytes(text[1:-1], "utf-8").decode("unicode_escape")
        if kind == "number":
            return float(text) if any(c in text for c in ".eE") else int(text)
        if kind == "name" and text in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[text]
        if text == "[":
            items = []
            while self.peek() != "]":
                items.append(self.literal())
                if self.peek() == ",":
                    self.take(",")
            self.take("]")
            return items
        if text == "{":
            obj = {}
            while self.peek() != "}":
                _, key = self.take()
                self.take("=" if self.peek() == "=" else ":")
                obj[key.strip('"')] = self.literal()
                if self.peek() == ",":
                    self.take(",")
            self.take("}")
            return obj
        raise TypeSyntaxError(f"cannot read default value {text!r}")


def parse_type(text: str | None) -> TfType:
    """The constraint a variable's `type` declares (`${...}` as python-hcl2 writes it, or bare); `any` when none."""
    if text is None:
        return ANY
    text = text.strip()
    if text.startswith("${") and text.endswith("}"):
        text = text[2:-1]
    parser = _Parser(text)
    result = parser.type()
    if parser.pos != len(parser.tokens):
        raise TypeSyntaxError(f"unexpected {parser.peek()!r} after the type")
    return result


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _is_number_text(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def conform(value: Any, type_: TfType, path: str = "") -> list[str]:
    """Why `value` does not convert to `type_` (empty: it does), each reason at its path inside the value."""
    at = f"{path}: " if path else ""
    if value is None or type_.kind == "any":
        return []
    kind = type_.kind
    if kind == "string":
        return [] if isinstance(value, (str, int, float)) else [f"{at}a string is required, not {_describe(value)}"]
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            return [f"{at}a number is required, not {_describe(value)}"]
        if isinstance(value, str) and not _is_number_text(value):
            return [f"{at}a number is required, not the string {value!r}"]
        return []
    if kind == "bool":
        if isinstance(value, bool) or (isinstance(value, str) and value in ("true", "false", "1", "0")):
            return []
        return [f"{at}a bool is required, not {_describe(value)} {value!r}"]
    assert type_.element is not None or kind in ("tuple", "object")
    if kind in ("list", "set"):
        if not isinstance(value, list):
            return [f"{at}a {kind} of {type_.element} is required, not {_describe(value)}"]
        return [e for i, item in enumerate(value) for e in conform(item, type_.element or ANY, f"{path}[{i}]")]
    if kind == "map":
        if not isinstance(value, dict):
            return [f"{at}a map of {type_.element} is required, not {_describe(value)}"]
        return [
            e for k, item in value.items() for e in conform(item, type_.element or ANY, f"{path}.{k}" if path else k)
        ]
    if kind == "tuple":
        if not isinstance(value, list) or len(value) != len(type_.elements):
            return [f"{at}a tuple of {len(type_.elements)} elements is required, not {_describe(value)}"]
        return [
            e
            for i, (item, t) in enumerate(zip(value, type_.elements, strict=True))
            for e in conform(item, t, f"{path}[{i}]")
        ]
    if not isinstance(value, dict):
        return [f"{at}an object is required, not {_describe(value)}"]
    errors = []
    declared = {a.name: a for a in type_.attributes}
    for name in value:
        if name not in declared:
            errors.append(
                f"{path + '.' if path else ''}{name}: not an attribute of {type_} (Terraform would drop it without a "
                f"word); attributes: {', '.join(declared)}"
            )
    for attr in type_.attributes:
        child = f"{path}.{attr.name}" if path else attr.name
        if attr.name not in value:
            if not attr.optional:
                errors.append(f"{child}: attribute {attr.name!r} is required")
            continue
        errors += conform(value[attr.name], attr.type, child)
    return errors


def with_defaults(value: Any, type_: TfType) -> Any:
    """`value` as Terraform sees it inside the module: `optional()` attributes it lacks take their defaults."""
    if type_.kind == "object" and isinstance(value, dict):
        out = dict(value)
        for attr in type_.attributes:
            if attr.name not in out or out[attr.name] is None:
                if attr.optional:
                    out[attr.name] = attr.default
            else:
                out[attr.name] = with_defaults(out[attr.name], attr.type)
        return out
    if type_.kind in ("list", "set") and isinstance(value, list) and type_.element is not None:
        return [with_defaults(v, type_.element) for v in value]
    return value
