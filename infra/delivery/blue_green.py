"""A blue/green replacement of a GKE slice, in two changes of the environment file (`make blue-green`).

1. `start`: a copy of the slice under a new key, beside it, with the new shape or capacity (`--topology`,
   `--capacity`, `--reservation`); nothing else moves. The plan creates a pool and replaces none: the old
   slice's capacity is held until the new one runs.
2. `finish` (once the new pool is deployed): every workload that names the old slice (training, batch, serving)
   names the new one, and the old slice is removed. The plan moves the workloads and deletes the old pool, which
   the gate stops like any accelerator pool that goes (docs/operations.md, "Blue/green").

Each step is one validated write of the file (comments kept), with a dry run that prints the diff.
"""

from __future__ import annotations

import copy
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml.comments import CommentedMap

from infra.config.base import did_you_mean
from infra.config.environment import blue_green_base
from infra.delivery.release_file import _yaml, diff, validate
from infra.synth.load import load_environment


class BlueGreenError(ValueError):
    """A replacement that cannot be made as asked; nothing was written."""


@dataclass(frozen=True)
class Step:
    path: Path
    old_text: str
    new_text: str
    said: list[str]

    @property
    def diff(self) -> str:
        return diff(self.path, self.old_text, self.new_text)


def green_key(key: str) -> str:
    """The new slice's key: `<key>-green`, or `<base>-blue` when the slice is a green one already."""
    base = blue_green_base(key) or key
    return f"{base}-blue" if key.endswith("-green") else f"{base}-green"


def _references(path: Path, key: str) -> list[tuple[str | int, ...]]:
    """The field paths of every workload that names slice `key`."""
    env = load_environment(path)
    if key not in env.slices:
        hint = did_you_mean(key, env.slices)
        raise BlueGreenError(
            f"SLICE={key!r}: not a slice of {path.name}: {', '.join(env.slices)}" + (f"; {hint}" if hint else "")
        )
    if env.slice_holder(key) != "gke":
        raise BlueGreenError(
            f"SLICE={key!r}: held by {env.slice_holder(key)}, not GKE: a blue/green replacement is of a GKE pool"
        )
    found: list[tuple[str | int, ...]] = []
    if env.training is not None and env.training.slice == key:
        found.append(("training", "slice"))
    if env.batch is not None:
        found += [("batch", "slices", i) for i, k in enumerate(env.batch.slices) if k == key]
        for job in ("nccl_test", "training"):
            if getattr(env.batch, job) is not None and getattr(env.batch, job).slice == key:
                found.append(("batch", job, "slice"))
    for name, d in env.serving.items():
        found += [("serving", name, *where) for where, k in d.slice_fields() if k == key]
    return found


def _keyed(path: Path, key: str) -> list[tuple[str | int, ...]]:
    """The mappings that hold slice `key` as a key: each team's quota and borrowing limit of it."""
    env = load_environment(path)
    return [
        ("teams", name, field)
        for name, team in env.teams.items()
        for field in ("quota", "borrowing_limit")
        if key in getattr(team, field)
    ]


def _last(node: Any) -> tuple[Any, Any] | None:
    """(mapping, key) of the last scalar of a nested mapping: where YAML keeps the comment lines that follow it."""
    while hasattr(node, "ca") and isinstance(node, dict) and node:
        key = list(node)[-1]
        if not (hasattr(node[key], "ca") and isinstance(node[key], dict) and node[key]):
            return node, key
        node = node[key]
    return None


def _move_trailing_comment(old: Any, new: Any) -> None:
    """The comment lines after the old slice (they introduce the next slice) go after the copy placed there."""
    src, dst = _last(old), _last(new)
    if src is None or dst is None or src[1] not in src[0].ca.items:
        return
    dst[0].ca.items[dst[1]] = src[0].ca.items.pop(src[1])


def _text(data: Any) -> str:
    out = io.StringIO()
    _yaml().dump(data, out)
    return out.getvalue()


def start(path: Path, key: str, *, changes: dict[str, str]) -> Step:
    """Step 1: the slice copied under its green key with `changes` (topology, capacity type, reservation)."""
    _references(path, key)
    green = green_key(key)
    old_text = path.read_text()
    data = _yaml().load(old_text)
    slices = data["slices"]
    if green in slices:
        raise BlueGreenError(f"SLICE={key!r}: {green!r} exists already: finish that replacement first (--finish)")
    if not changes:
        raise BlueGreenError("give what changes: TOPOLOGY=, CAPACITY= or RESERVATION= (else the copy is the same)")
    spec = copy.deepcopy(slices[key])
    if "topology" in changes:
        spec["topology"] = changes["topology"]
    tiers = [t.strip() for t in changes.get("capacity", "").split(",") if t.strip()]
    if isinstance(spec.get("capacity"), list) and "reservation" in changes and len(tiers) != 1:
        raise BlueGreenError(
            f"SLICE={key!r}: its capacity is a list of tiers; RESERVATION= names the reservation of one capacity: "
            "give CAPACITY=reservation with it (or CAPACITY= the tiers, comma-separated)"
        )
    if len(tiers) > 1:
        # The new list of tiers, in GKE's order of preference (a ComputeClass falls back through them).
        spec["capacity"] = [CommentedMap(type=t) for t in tiers]
    elif "capacity" in changes or "reservation" in changes:
        capacity = spec.get("capacity")
        if not isinstance(capacity, dict):  # absent, or a list of tiers replaced by one capacity
            capacity = spec["capacity"] = CommentedMap()
        kind = tiers[0] if tiers else "reservation" if "reservation" in changes else capacity.get("type")
        capacity["type"] = kind  # changed in place: its comments stay with it
        if "reservation" in changes:
            capacity["reservation"] = changes["reservation"]
        elif capacity["type"] != "reservation":
            capacity.pop("reservation", None)
    slices.insert(list(slices).index(key) + 1, green, spec)
    _move_trailing_comment(slices[key], slices[green])
    new_text = _text(data)
    validate(path, new_text)
    said = [f"slices.{green}: a copy of slices.{key} with {', '.join(f'{k} {v}' for k, v in changes.items())}"]
    return Step(path, old_text, new_text, said)


def finish(path: Path, key: str) -> Step:
    """Step 2: every workload on slice `key` moved to its green slice, and `key` removed."""
    references = _references(path, key)
    green = green_key(key)
    old_text = path.read_text()
    data = _yaml().load(old_text)
    if green not in data["slices"]:
        raise BlueGreenError(f"SLICE={key!r}: no {green!r} beside it: start the replacement first")
    for where in references:
        node = data
        for part in where[:-1]:
            node = node[part]
        node[where[-1]] = green
    keyed = _keyed(path, key)
    for where in keyed:  # the slice as a key: renamed in place, its value and position kept
        node = data
        for part in where:
            node = node[part]
        node.insert(list(node).index(key), green, node.pop(key))
    del data["slices"][key]
    new_text = _text(data)
    validate(path, new_text)
    moved = [".".join(str(p) for p in where) for where in [*references, *keyed]]
    said = [f"{m}: {key} -> {green}" for m in moved] + [f"slices.{key}: removed"]
    return Step(path, old_text, new_text, said)
