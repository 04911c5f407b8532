"""A JSON request held to a Google API's real types: the message classes of its Python client library.

The client libraries' own JSON parser (`Message.from_json`, protobuf's json_format) refuses unknown fields and
unknown enum names, but lets through what the service itself refuses or reads differently, as measured with
google-cloud-aiplatform 2.7.0 and google-cloud-compute 1.57.0:

- an enum written as a number (`"strategy": 99` parses, with a warning);
- a field written by its proto name (`machine_type`) instead of its JSON name (`machineType`);
- any string in Compute Engine's enum fields, which its protos declare as strings (`"nicType": "GVNICC"`):
  the allowed values are the nested enum classes the library ships (`NetworkInterface.NicType`).

`check` walks the request along the message descriptors and reports each of those, with the field's path;
`parse` then hands the request to the library's parser, whose refusal (if any) is the last word; `refusals`
is both, in that order.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from infra.config.findings import Finding

# Messages the walk does not enter: protobuf's well-known types, whose JSON forms (a Duration's "3600s", a
# Struct) the parser itself checks.
_WELL_KNOWN = "google.protobuf."


def _camel(name: str) -> str:
    return "".join(part.title() for part in name.split("_"))


def _string_enum(cls: Any, field_name: str) -> Any:
    """The nested enum class Compute Engine's library declares for a string field (`nic_type` -> `NicType`)."""
    import proto

    found = getattr(cls, _camel(field_name), None)
    return found if isinstance(found, type) and issubclass(found, proto.Enum) else None


def _names(enum: Any) -> list[str]:
    return [m for m in enum.__members__ if not m.startswith("UNDEFINED_")]


def check(data: Any, cls: Any, path: str = "") -> Iterator[Finding]:
    """Every field of `data` (a request as JSON) that the API's message `cls` (a proto-plus class) does not
    take as written: unknown or proto-named fields, enums by number, values outside an enum."""
    desc = cls.pb().DESCRIPTOR
    if not isinstance(data, dict):
        yield Finding(path or desc.name, data, f"a {desc.full_name} object is expected")
        return
    by_json = {f.json_name: f for f in desc.fields}
    by_name = {f.name: f for f in desc.fields}
    for key, value in data.items():
        where = f"{path}.{key}" if path else key
        fd = by_json.get(key)
        if fd is None:
            if key in by_name:
                yield Finding(where, key, f"write the field's JSON name {by_name[key].json_name!r}")
            else:
                yield Finding(where, key, f"{desc.full_name} has no such field; its fields: {', '.join(by_json)}")
            continue
        field = cls.meta.fields[fd.name]
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            if not isinstance(value, dict):
                yield Finding(where, value, "a map (JSON object) is expected")
                continue
            entry = field.message
            value_fd = fd.message_type.fields_by_name["value"]
            for k, v in value.items():
                yield from _value(v, value_fd, entry, "value", f"{where}.{k}")
        elif fd.is_repeated:
            if not isinstance(value, list):
                yield Finding(where, value, "a list (JSON array) is expected")
                continue
            for i, item in enumerate(value):
                yield from _value(item, fd, cls, fd.name, f"{where}[{i}]")
        else:
            yield from _value(value, fd, cls, fd.name, where)


def _value(value: Any, fd: Any, cls: Any, field_name: str, where: str) -> Iterator[Finding]:
    if fd.message_type is not None:
        if not fd.message_type.full_name.startswith(_WELL_KNOWN):
            yield from check(value, cls.meta.fields[field_name].message, where)
        return
    if fd.enum_type is not None:
        names = [v.name for v in fd.enum_type.values]
        if not isinstance(value, str):
            yield Finding(where, value, f"an enum is written by name: one of {', '.join(names)}")
        elif value not in names:
            yield Finding(where, value, f"not a {fd.enum_type.full_name}: one of {', '.join(names)}")
        return
    enum = _string_enum(cls, field_name)
    if enum is not None and fd.type == fd.TYPE_STRING and value not in _names(enum):
        yield Finding(where, value, f"not a {cls.__name__}.{enum.__name__}: one of {', '.join(_names(enum))}")


def parse(data: dict[str, Any], cls: Any) -> Finding | None:
    """The library parser's refusal of `data` as `cls` (unknown fields refused), at the field its message names,
    or None when it parses."""
    from google.protobuf.json_format import ParseError

    try:
        cls.from_json(json.dumps(data), ignore_unknown_fields=False)
    except (ParseError, ValueError, TypeError, KeyError) as err:
        message = str(err)
        # The parser names the field last: `... at CustomJob.jobSpec.scheduling.timeout`.
        tail = message.rsplit(" at ", 1)[1].strip().strip('".') if " at " in message else ""
        path = tail.split(".", 1)[1] if "." in tail else "(request)"
        return Finding(path, cls.__name__, f"the client library refuses it: {message}")
    return None


def refusals(data: dict[str, Any], cls: Any) -> list[Finding]:
    """What `check` finds in `data` as `cls`, or else the library parser's refusal: empty when it is a `cls`."""
    found = list(check(data, cls))
    if not found:
        refused = parse(data, cls)
        found = [refused] if refused is not None else []
    return found
