"""Loading environment files, and turning validation errors into one readable line per problem."""

from __future__ import annotations

import copy
import re
import stat
import types
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, Tag, ValidationError

from infra import settings
from infra.catalogue import labels as label_limits
from infra.catalogue.errors import ShapeError
from infra.catalogue.gcp_names import BUCKET_NAMING, PROJECT_ID
from infra.config.base import _CrossReferenceError, did_you_mean, lookalike, non_ascii
from infra.config.environment import Environment
from infra.config.findings import FieldPath, field_path

ENVIRONMENTS_DIR = Path(__file__).parent.parent / "environments"
# An environment file is a few hundred lines (dev.yaml: about 13 kB); anything much larger is a mistake (a pasted
# log, a generated file) or an attack on the loader, refused before it is read.
MAX_ENVIRONMENT_BYTES = 256 * 1024
# Nodes of the composed YAML, aliases expanded: a few thousand in dev.yaml; an alias bomb (billion laughs) expands
# to more than memory holds, refused before it is built.
MAX_YAML_NODES = 100_000
# YAML 1.1 (PyYAML) reads plain scalars by pattern: these forms mean a number or a boolean other than what a
# person reading the file sees (https://yaml.org/type/int.html, https://yaml.org/type/float.html,
# https://yaml.org/type/bool.html). Canonical forms pass: decimal integers, decimal floats, true/false.
_CANONICAL = {
    "tag:yaml.org,2002:int": re.compile(r"^[-+]?(0|[1-9][0-9]*)$"),
    "tag:yaml.org,2002:float": re.compile(
        r"^[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?$|^[-+]?\.(inf|Inf|INF)$|^\.(nan|NaN|NAN)$"
    ),
    "tag:yaml.org,2002:bool": re.compile(r"^(true|false)$"),
}
# Where the patterns of the model come from, said with a refusal.
PATTERN_SOURCES = {
    r"^[a-z][a-z0-9_]{0,62}$": f"{label_limits.SOURCE} (keys of 1-63 characters; no hyphens: cdktf rewrites them)",
    r"^[a-z0-9_-]{0,63}$": f"{label_limits.SOURCE} (values of at most 63 characters)",
    r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$": PROJECT_ID,
    r"^[a-z0-9][a-z0-9_-]{1,61}[a-z0-9]$": BUCKET_NAMING,
    r"^[a-z0-9][a-z0-9_.-]{1,61}[a-z0-9]$": BUCKET_NAMING,
}
_TYPE_ERRORS = {"string_type", "int_type", "float_type", "bool_type", "literal_error", "string_pattern_mismatch"}


# What a document holds, in YAML's words (a refusal never names a Python type).
_YAML_KINDS = {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}


def environments_dir() -> Path:
    """The environments directory; `PLATFORM_ENVIRONMENTS_DIR` overrides it (read at call time)."""
    return settings.ENVIRONMENTS_DIR.path() or ENVIRONMENTS_DIR


def not_one_of(argument: str, value: str, known: Iterable[str], what: str, *, why: str = "not one") -> str:
    """A command argument's refusal: `<ARGUMENT>='<value>': <why>; <what>: <known, ...>; did you mean '<closest>'?`."""
    names = sorted(known)
    hint = did_you_mean(value, names)
    return f"{argument}={value!r}: {why}; {what}: {', '.join(names) or 'none'}" + (f"; {hint}" if hint else "")


# An environment's name: its file's name, its resources' prefix (infra/config/environment.py holds `name` to it).
ENVIRONMENT_NAME = re.compile(r"[a-z][a-z0-9-]*")


def _kind(mode: int) -> str:
    for test, what in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket")):  # fmt: skip
        if test(mode):
            return what
    return "not a regular file"


def environment_files(directory: Path) -> list[Path]:
    """The environment files of `directory`, `<name>.yaml` each: hidden entries (an editor's lock file `.#dev.yaml`,
    a swap file) are not environments and are passed over; any other entry that looks like one but is not (a name
    that is no environment's, `.YAML` or `.yml`, a pipe, a device, a folder, a broken link) is refused, naming it,
    before anything is read."""
    problems: list[str] = []
    files: list[Path] = []
    try:
        entries = sorted(directory.iterdir())
    except OSError as err:
        raise ConfigError(directory, [f"cannot list the folder: {err.strerror}"]) from None
    for path in entries:
        name = path.name
        suffix = path.suffix
        if name.startswith((".", "#", "~")) or suffix.lower() not in (".yaml", ".yml"):
            continue
        if suffix != ".yaml":
            problems.append(f"{name}: environment files end in .yaml; rename it to {path.stem}.yaml (or move it out)")
            continue
        if not ENVIRONMENT_NAME.fullmatch(path.stem):
            problems.append(
                f"{name!r}: {path.stem!r} is no environment's name (lowercase letters, digits and '-', starting with "
                "a letter: it names the stack and its resources); rename the file or move it out"
            )
            continue
        try:
            mode = path.stat().st_mode
        except OSError as err:
            problems.append(f"{name}: cannot read it: {err.strerror} (a broken link?)")
            continue
        if not stat.S_ISREG(mode):
            problems.append(f"{name}: {_kind(mode)}, not a regular file: an environment is a file")
            continue
        files.append(path)
    if problems:
        raise ConfigError(directory, problems)
    return files


def environment_file(name: str, directory: Path | None = None, *, argument: str = "ENV") -> Path:
    """The file of the environment called `name` in `directory` (default: environments_dir()): a name of the
    folder's environments, never a path (ENV=../../images/images would read another YAML file as an
    environment, and a miss said only that a file could not be read). A miss names the argument, lists the
    environments and suggests the closest."""
    directory = directory or environments_dir()
    known = [p.stem for p in environment_files(directory)]
    if name in known:
        return directory / f"{name}.yaml"
    why = "an environment's name, not a path" if "/" in name or name.endswith((".yaml", ".yml")) else "not one"
    raise ConfigError(directory, [not_one_of(argument, name, known, "the environments here", why=why)])


class ConfigError(Exception):
    """An environment file that cannot be loaded; `problems` holds one line per fault."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        lines = "\n".join(f"  {path}: {p}" for p in problems)
        super().__init__(f"{path}: invalid environment ({len(problems)} problem(s)):\n{lines}")


def _format_loc(loc: FieldPath) -> str:
    return field_path(loc)


def _strip(annotation: Any) -> Any:
    """Strip Annotated and Optional wrappers; a union of several models stays a union."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(args) > 1:
                return annotation
            annotation = args[0]
        else:
            return annotation


def _union_member(union: Any, tag: str | int) -> Any:
    """The member of a discriminated union whose discriminator value is `tag` (a model's Literal field, or a
    member annotated with pydantic's `Tag`), or None."""
    for member in typing.get_args(union):
        if typing.get_origin(member) is Annotated:
            inner, *meta = typing.get_args(member)
            if any(isinstance(m, Tag) and m.tag == tag for m in meta):
                return inner
            member = inner
        if isinstance(member, type) and issubclass(member, BaseModel):
            for info in member.model_fields.values():
                if typing.get_origin(info.annotation) is typing.Literal and tag in typing.get_args(info.annotation):
                    return member
    return None


def _walk(loc: tuple[str | int, ...]) -> tuple[tuple[str | int, ...], type[BaseModel] | None]:
    """`loc` as the file writes it (pydantic's union tags dropped), and the model whose fields live there."""
    current: Any = Environment
    clean: list[str | int] = []
    for part in loc:
        current = _strip(current)
        if typing.get_origin(current) in (typing.Union, types.UnionType):
            member = _union_member(current, part)
            if member is not None:
                current = member  # pydantic's tag for the member it tried: not a key of the file
                continue
            current = None
        clean.append(part)
        if isinstance(current, type) and issubclass(current, BaseModel):
            info = current.model_fields.get(str(part))
            current = info.annotation if info is not None else None
        elif typing.get_origin(current) in (dict, tuple, list):
            current = typing.get_args(current)[-1]
        else:
            current = None
    current = _strip(current)
    if typing.get_origin(current) in (typing.Union, types.UnionType):
        current = None
    return tuple(clean), current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _show(value: object, limit: int = 200) -> str:
    """`repr(value)`, cut to `limit` characters with the full length said."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


# What pydantic adds to an error's location for the member of a union it tried (`constrained-int`,
# `function-after[...]`, `list[int]`): the validator's, not the file's; left out of the path a person reads.
_VALIDATOR_STEP = re.compile(
    r"^(function-|constrained-|(list|dict|set|tuple|nullable|union|tagged-union|chain|lax-or-strict|json-or-python|default)\[)"
)


def _describe(err: Any) -> tuple[tuple[str | int, ...], object, str]:
    raw = tuple(p for p in err["loc"] if not (isinstance(p, str) and _VALIDATOR_STEP.match(p)))
    loc, _ = _walk(raw)
    kind = err["type"]
    value = err.get("input")
    ctx = err.get("ctx") or {}
    cause = ctx.get("error")
    if isinstance(cause, ShapeError):
        return (*loc, cause.field), cause.value, str(cause)
    if kind == "extra_forbidden":
        _, parent = _walk(raw[:-1])
        allowed = list(parent.model_fields) if parent else []
        like = lookalike(str(loc[-1]), allowed) or did_you_mean(str(loc[-1]), allowed)
        what = f"unknown key {loc[-1]!r}" + (f": {like}" if like else "")
        return loc, value, f"{what}; allowed keys here: {', '.join(allowed) or '(none)'}"
    if kind == "missing":
        return loc, None, "required field is missing"
    if kind == "union_tag_invalid":
        field = str(ctx.get("discriminator", "")).strip("'")
        return (*loc, field), ctx.get("tag"), f"allowed: {ctx.get('expected_tags')}"
    message = err["msg"]
    if kind == "value_error":
        message = message.removeprefix("Value error, ")
    if kind == "string_pattern_mismatch":
        message = f"must match the pattern {ctx.get('pattern')}"
        if ctx.get("pattern") in PATTERN_SOURCES:
            message += f" [source: {PATTERN_SOURCES[ctx['pattern']]}]"
    if kind == "literal_error" and isinstance(value, str):
        like = lookalike(value, re.findall(r"'([^']*)'", str(ctx.get("expected", ""))))
        if like:
            message += f": {like}"
    return loc, value, message


def _odd_characters(value: object, message: str) -> str:
    """A note on a refused text value that holds characters outside ASCII (a pasted Cyrillic e, U+0435, looks like
    an e), unless the message already names them."""
    if not isinstance(value, str) or value.isascii() or "look-alike" in message:
        return ""
    like = lookalike(value, re.findall(r"[A-Za-z0-9._/-]+", message))  # the allowed values the message lists
    return f" ({like})" if like else f" (the value holds characters outside ASCII: {non_ascii(value)})"


Typed = dict[tuple[str | int, ...], tuple[str, str]]


# Given a field path and the text typed there, why the model refuses that text as a string (None: it takes it).
AsText = Callable[[tuple[str | int, ...], str], str | None]


def _typed_note(
    typed: Typed, loc: tuple[str | int, ...], kind: str, message: str, as_text: AsText | None = None
) -> str:
    """What the file says at `loc` when YAML read an unquoted scalar as a number, a boolean or null there: quote it
    where the field takes the quoted text, else what the quoted text would be refused for (nothing when that is
    `message` again: quoting is beside the point)."""
    if loc not in typed or kind not in _TYPE_ERRORS:
        return ""
    text, tag = typed[loc]
    what = tag.rsplit(":", 1)[-1]
    read = f"typed {text} unquoted, which YAML reads as a{'n' if what == 'int' else ''} {what}"
    refused = as_text(loc, text) if as_text is not None else None
    if refused == message:
        return ""
    if refused is not None:
        return f" ({read}; quoted, '{text}' is refused too: {refused}) [YAML 1.1 types: https://yaml.org/type/]"
    return f" ({read}: quote it, '{text}') [YAML 1.1 types: https://yaml.org/type/]"


def _as_text(data: dict[str, Any]) -> AsText:
    """An `AsText` for the file's data: validates a copy with the text, quoted, at the path."""

    def refused(loc: tuple[str | int, ...], text: str) -> str | None:
        changed = copy.deepcopy(data)
        parent: Any = changed
        for part in loc[:-1]:
            parent = parent[part]
        parent[loc[-1]] = text
        try:
            Environment.model_validate(changed)
        except ValidationError as err:
            for e in err.errors():
                at, _, message = _describe(e)
                if at == loc:
                    return message
        return None

    return refused


def _problems_from(
    err: ValidationError,
    typed: Typed | None = None,
    said: set[tuple[str | int, ...]] | None = None,
    as_text: AsText | None = None,
) -> list[str]:
    """One line per problem; a type error at a path `said` already (a YAML 1.1 form) is not said twice."""
    lines: list[str] = []
    for e in err.errors():
        cause = (e.get("ctx") or {}).get("error")
        if isinstance(cause, _CrossReferenceError):
            for loc, value, message in cause.problems:
                lines.append(f"{_format_loc(loc)}: {_show(value)}: {message}{_odd_characters(value, message)}")
            continue
        loc, value, message = _describe(e)
        if loc in (said or set()) and e["type"] in _TYPE_ERRORS:
            continue
        message += _typed_note(typed or {}, loc, e["type"], message, as_text) + _odd_characters(value, message)
        # A whole mapping is noise: model-level messages name the values at fault.
        shown = "" if isinstance(value, dict) or (value is None and e["type"] == "missing") else f"{_show(value)}: "
        head = f"{_format_loc(loc)}: {shown}"
        # The members of a union each refuse the value at one place: one line, each way it may be written.
        same = next((i for i, line in enumerate(lines) if line.startswith(head)), None)
        if same is not None:
            lines[same] += f"; or {message}"
        else:
            lines.append(f"{head}{message}")
    return lines


def _yaml11_scalars(
    node: yaml.Node, budget: list[int], path: tuple[str | int, ...] = ()
) -> tuple[Typed, dict[tuple[str | int, ...], str]]:
    """Every unquoted scalar YAML read as a number, boolean or null, by field path (what was typed, its tag), and a
    problem for each typed in a YAML 1.1 form that means something else than it shows (010 is the octal 8, 1_000
    is 1000, 1:30 is 90, yes/on/no/off are booleans). `budget` counts nodes down: an alias bomb stops it."""
    typed: Typed = {}
    problems: dict[tuple[str | int, ...], str] = {}
    stack: list[tuple[yaml.Node, tuple[str | int, ...]]] = [(node, path)]
    while stack:
        current, at = stack.pop()
        budget[0] -= 1
        if budget[0] < 0:
            raise _TooLarge
        if isinstance(current, yaml.MappingNode):
            stack += [(v, (*at, str(k.value))) for k, v in current.value]
        elif isinstance(current, yaml.SequenceNode):
            stack += [(v, (*at, i)) for i, v in enumerate(current.value)]
        elif isinstance(current, yaml.ScalarNode) and current.style is None and current.tag != "tag:yaml.org,2002:str":
            text = str(current.value)
            typed[at] = (text, current.tag)
            canonical = _CANONICAL.get(current.tag)
            if canonical is not None and not canonical.match(text):
                what = current.tag.rsplit(":", 1)[-1]
                problems[at] = (
                    f"{_format_loc(at) or '(top level)'}: {text}: typed unquoted, YAML 1.1 reads it as the {what} "
                    f"{_yaml11_value(current)!r}, not what it shows; write it plainly "
                    f"({'true or false' if what == 'bool' else 'a decimal number'}), or quote it ('{text}') for a "
                    "string [YAML 1.1 types: https://yaml.org/type/]"
                )
    return typed, problems


def _yaml11_value(node: yaml.ScalarNode) -> object:
    try:
        return yaml.SafeLoader("").construct_object(node)
    except Exception:  # a value YAML cannot build (a date out of range): show the text
        return node.value


class _TooLarge(Exception):
    pass


def _duplicate_keys(node: yaml.Node, path: tuple[str | int, ...] = ()) -> list[str]:
    """Every key written twice in one mapping, at any depth, with its field path and both lines.

    YAML allows a key once per mapping; PyYAML would keep the last one silently (a second
    `deletion_protection: false` under `cluster:` would turn the guard off without a word).
    """
    found: list[str] = []
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value)
            line = key_node.start_mark.line + 1
            if key in seen:
                found.append(
                    f"{_format_loc((*path, key))}: written twice, at lines {seen[key]} and {line}; a key may "
                    "appear once (YAML), and the second would silently replace the first"
                )
            seen.setdefault(key, line)
            found += _duplicate_keys(value_node, (*path, key))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found += _duplicate_keys(item, (*path, i))
    return found


def parse_environment(path: Path) -> Environment:
    """Read, parse and validate one environment file against the model; raise `ConfigError` on any fault.

    Schema and cross-references only: the rules of the real systems run on top of this in `infra.synth.load`.
    """
    try:
        found = path.stat()
        if not stat.S_ISREG(found.st_mode):
            # A pipe would hang the read, a link to /dev/zero read until memory runs out.
            raise ConfigError(path, [f"(file): {_kind(found.st_mode)}, not a regular file: an environment is a file"])
        size = found.st_size
        if size > MAX_ENVIRONMENT_BYTES:
            raise ConfigError(
                path,
                [
                    f"(file): {size} bytes: an environment file is at most {MAX_ENVIRONMENT_BYTES} bytes "
                    "(infra/config/loading.py MAX_ENVIRONMENT_BYTES); is this the file you meant?"
                ],
            )
        raw = path.read_bytes()
    except OSError as err:
        raise ConfigError(path, [f"cannot read the file: {err.strerror}"]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise ConfigError(
            path, [f"not valid UTF-8 at byte offset {err.start} (line {line}): {raw[err.start : err.end]!r}"]
        ) from None
    try:
        # Composed once: the node tree is checked for keys written twice, then built into Python values.
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            try:
                typed, coerced = _yaml11_scalars(node, [MAX_YAML_NODES]) if node is not None else ({}, {})
            except _TooLarge:
                raise ConfigError(
                    path,
                    [
                        f"(file): more than {MAX_YAML_NODES} YAML nodes once its aliases are expanded (an environment "
                        "file has a few thousand): write the values out instead of nesting aliases "
                        "(infra/config/loading.py MAX_YAML_NODES)"
                    ],
                ) from None
            duplicates = _duplicate_keys(node) if node is not None else []
            if duplicates:
                raise ConfigError(path, duplicates)
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except RecursionError:
        raise ConfigError(
            path, ["(file): nested too deeply to read (an environment file is a few levels deep)"]
        ) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        what = getattr(err, "problem", None) or str(err)
        context = getattr(err, "context", None)
        raise ConfigError(path, [f"{where}not valid YAML: {what}" + (f" ({context})" if context else "")]) from None
    if not isinstance(data, dict):
        held = "nothing (the file is empty)" if data is None else f"a {_YAML_KINDS.get(type(data), 'scalar')}"
        raise ConfigError(path, [f"(top level): {held}: the file must hold a mapping of fields"])
    try:
        env = Environment.model_validate(data)
    except ValidationError as err:
        problems = _problems_from(err, typed, set(coerced), _as_text(data))
        raise ConfigError(path, [*coerced.values(), *problems]) from None
    except RecursionError:
        raise ConfigError(path, [*coerced.values(), "(file): nested too deeply to validate"]) from None
    if coerced:
        raise ConfigError(path, list(coerced.values()))
    if env.name != path.stem:
        raise ConfigError(path, [f"name: {env.name!r}: must equal the file's name {path.stem!r}"])
    return env


def load_each(
    directory: Path,
    load: Callable[[Path], Environment],
    together: Callable[[dict[str, Environment]], dict[str, list[str]]],
) -> dict[str, Environment]:
    """`load` every environment file of `directory`, then hold them `together` (problem lines by environment name:
    the rules of the environments together, given by `infra.synth.load`); all faults of all files are reported
    together."""
    envs: dict[str, Environment] = {}
    errors: list[ConfigError] = []
    # A file the loader would skip is refused, not ignored (prod.yml would be left out of everything).
    files = environment_files(directory)
    if not files:
        raise ConfigError(directory, ["no environment files (*.yaml) found"])
    for path in files:
        try:
            envs[path.stem] = load(path)
        except ConfigError as err:
            errors.append(err)
    if not errors:
        paths = {path.stem: path for path in files}
        errors = [ConfigError(paths[name], lines) for name, lines in together(envs).items() if lines]
    if errors:
        if len(errors) == 1:
            raise errors[0]
        raise ConfigError(directory, [p for e in errors for p in (f"{e.path.name}: {q}" for q in e.problems)])
    return envs
