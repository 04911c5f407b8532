"""Terraform's own language, as OpenTofu and Terraform read a synthesized stack (JSON syntax).

In a JSON configuration every string is a template: `${ ... }` is an interpolation and `%{ ... }` a directive, and
only `$${` and `%%{` stand for the characters themselves. Text the platform writes into a stack as it is (a VM's
startup script, with bash's `${name:-default}` and `${#array[@]}`) must escape them, or `tofu validate` and every
plan refuse the whole stack ("Invalid character", "Invalid expression"), or worse, a `${name}` that happens to parse
reads a resource. `make test` runs the real `tofu validate` on every stack (tests/test_engine.py); this rule says the
same at `make plan`, without the engine.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from infra.rules import Finding, rule

# What an interpolation of a synthesized stack may start with: a resource type of the stack, or one of the
# language's own roots (https://opentofu.org/docs/language/expressions/references/).
ROOTS = {"var", "local", "module", "data", "path", "terraform", "each", "count", "self"}
_INTERPOLATION = re.compile(r"(?<!\$)((?:\$\$)*)\$\{\s*([^}]{0,40})")
_DIRECTIVE = re.compile(r"(?<!%)((?:%%)*)%\{")
_ROOT = re.compile(r"^([a-z][a-z0-9_]*)\.")


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            if k != "//":
                yield from _strings(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, f"{path}[{i}]")


@rule(
    id="tf.literal-text-escaped",
    system="OpenTofu / Terraform",
    layer="apply",
    summary=(
        "A string of the stack holds `${` only to interpolate a reference (a resource of the stack, var., local., "
        "data. ...) and no `%{` directive; literal text escapes them as `$${` and `%%{`."
    ),
    source=(
        "https://opentofu.org/docs/language/syntax/json/ (Expression Mapping: strings are string templates); "
        "https://opentofu.org/docs/language/expressions/strings/ (Escape sequences: $${ and %%{)"
    ),
    subject="terraform",
)
def _escaped(stack: dict[str, Any]) -> Iterator[Finding]:
    types = set(stack.get("resource") or {}) | ROOTS
    for rtype, items in (stack.get("resource") or {}).items():
        for name, body in items.items():
            for path, text in _strings(body, f"{rtype}.{name}"):
                bad = [
                    f"${{{m.group(2)}"
                    for m in _INTERPOLATION.finditer(text)
                    if (root := _ROOT.match(m.group(2))) is None or root.group(1) not in types
                ]
                bad += ["%{" for _ in _DIRECTIVE.finditer(text)]
                if bad:
                    shown = ", ".join(dict.fromkeys(bad[:3]))
                    yield Finding(
                        path,
                        f"{len(text)} characters",
                        f"holds {len(bad)} unescaped template sequence(s) that are not references ({shown}): "
                        "every plan of the stack would refuse it; write literal text through infra.cdk.literal",
                    )
