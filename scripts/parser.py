"""What the commands share: their argument parser (argparse's, with "did you mean" on a flag it does not know and a
choice it does not take: `--dry-rn` -> `--dry-run`; `deplyo` -> `deploy`, as git and the Python 3.14 parser do),
and their answer to input they refuse (`refuse`)."""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from typing import NoReturn

_UNRECOGNIZED = re.compile(r"unrecognized arguments: (.*)$")
_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)$")


class ArgumentParser(argparse.ArgumentParser):
    """argparse.ArgumentParser whose usage errors suggest the closest flag or choice."""

    def error(self, message: str) -> NoReturn:
        super().error(message + self._did_you_mean(message))

    def _did_you_mean(self, message: str) -> str:
        if m := _UNRECOGNIZED.search(message):
            flags = [f for action in self._actions for f in action.option_strings if f.startswith("--")]
            hints = [
                f"{close[0]} for {word}"
                for word in m.group(1).split()
                if word.startswith("-") and (close := difflib.get_close_matches(word.split("=", 1)[0], flags, n=1))
            ]
            return f"; did you mean {', '.join(hints)}?" if hints else ""
        if m := _INVALID_CHOICE.search(message):
            choices = re.findall(r"'([^']*)'", m.group(2))
            close = difflib.get_close_matches(m.group(1), choices, n=1)
            return f"; did you mean {close[0]!r}?" if close else ""
        return ""


def refuse(err: Exception | str, code: int = 2, *, then: str = "") -> int:
    """A command's answer to input it refuses (a bad environment file, a value out of range): one `error: ` line on
    stderr, naming what and why as the error does, `then` on a line of its own (what was left as it was), and the
    exit code (2: bad input; some commands say 1)."""
    print(f"error: {err}", file=sys.stderr)
    if then:
        print(then, file=sys.stderr)
    return code
