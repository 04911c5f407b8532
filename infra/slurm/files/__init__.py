"""The files a Slurm cluster's hosts get, kept as files (shell, udev, enroot and apt configuration) so editors,
ShellCheck and diffs see them as they run; `fill` puts in the few values an environment decides, written
`@NAME@` in the file."""

from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
_PLACEHOLDER = re.compile(r"@([A-Z][A-Z0-9_]*)@")


def fill(name: str, **values: str) -> str:
    """The file `name` (relative to this folder) with each `@KEY@` replaced by `values[KEY]`; a placeholder left
    without a value, or a value the file has no placeholder for, is an error of the caller."""
    text = (HERE / name).read_text()
    wanted = set(_PLACEHOLDER.findall(text))
    if wanted != set(values):
        raise KeyError(f"{HERE / name}: placeholders {sorted(wanted)}, values given for {sorted(values)}")
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)
