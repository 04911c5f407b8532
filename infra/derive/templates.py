"""Scripts and configuration kept as files (so editors, ShellCheck and diffs see them as they run), with the few
values an environment decides written `@NAME@` in them; `fill` puts the values in."""

from __future__ import annotations

import re
from pathlib import Path

_PLACEHOLDER = re.compile(r"@([A-Z][A-Z0-9_]*)@")


def fill(path: Path, **values: str) -> str:
    """The file at `path` with each `@KEY@` replaced by `values[KEY]`; a placeholder left without a value, or a
    value the file has no placeholder for, is an error of the caller."""
    text = path.read_text()
    wanted = set(_PLACEHOLDER.findall(text))
    if wanted != set(values):
        raise KeyError(f"{path}: placeholders {sorted(wanted)}, values given for {sorted(values)}")
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)
