"""What a generated script runs, read from its text: every simple command with its line, its words and the PATH and
HOME in effect there, for the host rules (`infra/rules/host_scripts.py`).

A reader for the shell the platform generates, not a full POSIX parser: it follows line continuations, skips comments
and here-document bodies, reads commands inside `$(...)` (also in double quotes), after `;`, `&&`, `||`, `|`, `(`,
`then`, `do`, `else`, `!`, `if`, `while`, through `sudo`, `exec`, `command`, `xargs` and `env`, and tracks
`PATH=`/`export PATH=`/`HOME=` assignments in order. Functions the script defines are not commands of the image.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

KEYWORDS = {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "for", "in", "case", "esac"}
KEYWORDS |= {"function", "select", "time", "{", "}", "!", "[[", "]]"}
_BUILTIN_NAMES = """
alias bg bind break builtin caller cd command compgen complete continue declare dirs disown echo enable eval exec exit
export false fc fg getopts hash help history jobs kill let local logout mapfile popd printf pushd pwd read readarray
readonly return set shift shopt source suspend test times trap true type typeset ulimit umask unalias unset wait . : [
"""
BUILTINS = set(_BUILTIN_NAMES.split())
WRAPPERS = {"sudo", "exec", "command", "xargs", "env", "nohup", "timeout"}
_HEREDOC = re.compile(r"<<(-?)\s*(['\"]?)(\w+)\2")
_ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")
_FUNCTION = re.compile(r"^\s*(?:function\s+)?([A-Za-z_][\w-]*)\s*\(\)\s*\{?", re.M)
_OPERATORS = {";", ";;", "&&", "||", "|", "&", "(", ")", "|&"}
_REDIRECT = re.compile(r"^\d*(>>|>|<|>&|&>|<<<)$")


@dataclass(frozen=True)
class Command:
    line: int  # 1-based line of the script where the command starts
    words: tuple[str, ...]  # the command and its arguments, as written (quotes removed)
    path: tuple[str, ...]  # the PATH in effect there
    home: str  # the HOME in effect there
    redirects: tuple[str, ...] = ()  # files it writes through > or >>

    @property
    def name(self) -> str:
        return self.words[0]


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each logical line: continuations joined, comments and here-doc bodies out."""
    out: list[tuple[int, str]] = []
    lines = text.split("\n")
    i, pending, start = 0, "", 0
    heredoc: tuple[str, bool] | None = None
    while i < len(lines):
        line = lines[i]
        i += 1
        if heredoc is not None:
            delimiter, strip = heredoc
            if (line.strip() if strip else line) == delimiter:
                heredoc = None
            continue
        if not pending:
            start = i
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = pending + line
        pending = ""
        match = _HEREDOC.search(full)
        if match:
            heredoc = (match.group(3), match.group(1) == "-")
            full = full[: match.start()] + full[match.end() :]
        out.append((start, full))
    return out


def _substitutions(line: str) -> tuple[str, list[str]]:
    """`line` with each `$(...)` outside single quotes replaced by a word, and the inner texts."""
    out, inner = [], []
    i, quote = 0, ""
    while i < len(line):
        c = line[i]
        if quote == "'":
            quote = "" if c == "'" else quote
            out.append(c)
        elif c == "'" and quote != '"':
            quote = "'"
            out.append(c)
        elif c == '"':
            quote = "" if quote == '"' else '"'
            out.append(c)
        elif line.startswith("$((", i):
            out.append("0")
            depth, i = 2, i + 3
            while i < len(line) and depth:
                depth += {"(": 1, ")": -1}.get(line[i], 0)
                i += 1
            continue
        elif line.startswith("$(", i):
            depth, j = 1, i + 2
            while j < len(line) and depth:
                depth += {"(": 1, ")": -1}.get(line[j], 0)
                j += 1
            inner.append(line[i + 2 : j - 1])
            out.append("SUBST")
            i = j
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out), inner


def _split(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return list(lexer)
    except ValueError:
        return line.split()


def _expand(value: str, current: tuple[str, ...], home: str) -> tuple[str, ...]:
    joined = ":".join(current)
    value = re.sub(r"\$\{PATH\}|\$PATH", joined, value).replace("${HOME}", home).replace("$HOME", home)
    return tuple(p for p in value.split(":") if p)


@dataclass
class _State:
    path: tuple[str, ...]
    home: str


def commands(text: str, path: tuple[str, ...], home: str) -> list[Command]:
    """Every simple command of `text` in order, with the PATH and HOME in effect where it runs."""
    functions = set(_FUNCTION.findall(text))
    found: list[Command] = []
    state = _State(path, home)

    def read(line_no: int, line: str, top: bool) -> None:
        line, inner = _substitutions(line)
        for sub in inner:
            read(line_no, sub, False)
        tokens = _split(line)
        at_start, skip_for = True, False
        words: list[str] = []
        redirects: list[str] = []

        def flush() -> None:
            nonlocal words, redirects
            if words:
                _emit(line_no, words, redirects, top)
            words, redirects = [], []

        i = 0
        while i < len(tokens):
            token = tokens[i]
            if token.isdigit() and i + 1 < len(tokens) and tokens[i + 1][:1] in "<>":
                pass  # a file descriptor: 2>&1
            elif token in _OPERATORS or token == ";;":
                flush()
                at_start, skip_for = True, False
            elif _REDIRECT.match(token) or token in (">", ">>", "<", "<<<", ">&", "&>"):
                if token.endswith(">") and i + 1 < len(tokens) and not tokens[i + 1].startswith("&"):
                    redirects.append(tokens[i + 1])
                i += 1
            elif skip_for:
                if token == "do":
                    skip_for, at_start = False, True
            elif at_start and token == "for":
                skip_for = True
            elif at_start and token in KEYWORDS:
                pass
            elif at_start and _ASSIGNMENT.match(token) and token.endswith("=") and tokens[i + 1 : i + 2] == ["("]:
                # An array assignment, name=(word ...): its words are values, not commands.
                while i + 1 < len(tokens) and tokens[i + 1] != ")":
                    i += 1
                i += 1
            elif at_start and _ASSIGNMENT.match(token):
                name, _, value = token.partition("=")
                if name == "PATH" and top:
                    state.path = _expand(value, state.path, state.home)
                elif name == "HOME" and top:
                    state.home = value
            elif at_start and token == "export":
                for word in tokens[i + 1 :]:
                    if word in _OPERATORS:
                        break
                    name, _, value = word.partition("=")
                    if name == "PATH" and top:
                        state.path = _expand(value, state.path, state.home)
                    elif name == "HOME" and top:
                        state.home = value
                while i + 1 < len(tokens) and tokens[i + 1] not in _OPERATORS:
                    i += 1
            else:
                words.append(token)
                at_start = False
            i += 1
        flush()

    def _emit(line_no: int, words: list[str], redirects: list[str], top: bool) -> None:
        while words and words[0] in WRAPPERS and len(words) > 1:
            rest = words[1:]
            while rest and (rest[0].startswith("-") or _ASSIGNMENT.match(rest[0]) or rest[0].isdigit()):
                rest = rest[1:]
            if words[0] not in BUILTINS:
                found.append(Command(line_no, (words[0],), state.path, state.home))
            words = rest
        if not words:
            return
        name = words[0]
        if name in BUILTINS or name in KEYWORDS or name in functions or "$" in name or name == "SUBST":
            if redirects:
                found.append(Command(line_no, (":",), state.path, state.home, tuple(redirects)))
            return
        found.append(Command(line_no, tuple(words), state.path, state.home, tuple(redirects)))

    for line_no, line in _logical_lines(text):
        read(line_no, line, True)
    return found
