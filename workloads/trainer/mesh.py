"""The named device mesh (data, fsdp, tensor) and how parameters are sharded on it."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

AXES = ("data", "fsdp", "tensor")


def mesh_shape(devices: int, data: int = 1, fsdp: int = -1, tensor: int = 1) -> tuple[int, int, int]:
    """Resolve one axis given as -1 to fill the devices; the product must equal `devices`."""
    sizes = [data, fsdp, tensor]
    if sizes.count(-1) > 1:
        raise ValueError(f"at most one mesh axis may be -1, got data={data} fsdp={fsdp} tensor={tensor}")
    if -1 in sizes:
        known = math.prod(s for s in sizes if s != -1)
        if known <= 0 or devices % known:
            raise ValueError(f"cannot fill a mesh axis: {devices} devices are not divisible by {known}")
        sizes[sizes.index(-1)] = devices // known
    if math.prod(sizes) != devices:
        raise ValueError(
            f"mesh data={sizes[0]} x fsdp={sizes[1]} x tensor={sizes[2]} = {math.prod(sizes)} "
            f"does not equal the {devices} devices available"
        )
    return sizes[0], sizes[1], sizes[2]


# (regex over the parameter path, partition spec) - first match wins.
PARAM_RULES: Sequence[tuple[str, tuple[Any, ...]]] = (
    (r"embed/embedding$", ("tensor", "fsdp")),
    (r"attention/(q|k|v)/kernel$", ("fsdp", "tensor")),
    (r"attention/o/kernel$", ("tensor", "fsdp")),
    (r"mlp/(gate|up)/kernel$", ("fsdp", "tensor")),
    (r"mlp/down/kernel$", ("tensor", "fsdp")),
    (r"lm_head/kernel$", ("fsdp", "tensor")),
    (r"scale$", ()),
)


def param_spec(path: str) -> tuple[Any, ...]:
    for pattern, spec in PARAM_RULES:
        if re.search(pattern, path):
            return spec
    raise KeyError(f"no sharding rule for parameter {path!r}")


BATCH_SPEC = (("data", "fsdp"), None)
