"""The named device mesh (data, fsdp, tensor) and how parameters are sharded on it.

Across slices (multislice), each slice keeps the mesh it has alone and the slices split the data axis: the data
axis is slice-major, so the only collective that crosses the data-center network is the gradients' all-reduce
over it (MaxText's dcn_data_parallelism).
"""

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


def multislice_devices(devices: Sequence[Any], slices: int, data: int, fsdp: int, tensor: int) -> Any:
    """The devices as a (data, fsdp, tensor) array over `slices` slices: each slice's own mesh resolved on its
    devices (one axis may be -1), the slices stacked on the data axis; ValueError when the devices do not split
    into `slices` equal slices."""
    import numpy as np

    processes = len({d.process_index for d in devices})
    # A TPU device of a multislice job knows its slice (`slice_index`); elsewhere (CPU devices say 0) a slice is
    # `processes // slices` consecutive processes, as Ray ranks the workers of each slice.
    indices = {getattr(d, "slice_index", None) for d in devices}
    own = len(indices) == slices and None not in indices
    if not own and (slices < 1 or processes % slices):
        raise ValueError(f"{processes} processes do not split into {slices} slices of equal size")
    by_slice: dict[int, list[Any]] = {}
    for device in devices:  # in JAX's order (jax.devices()), which a one-slice mesh keeps
        index = int(device.slice_index) if own else device.process_index // (processes // slices)
        by_slice.setdefault(index, []).append(device)
    sizes = {len(group) for group in by_slice.values()}
    if len(by_slice) != slices or len(sizes) != 1:
        found = {k: len(v) for k, v in sorted(by_slice.items())}
        raise ValueError(f"expected {slices} slices of equal size, found devices per slice {found}")
    shape = mesh_shape(sizes.pop(), data, fsdp, tensor)
    ordered = [d for k in sorted(by_slice) for d in by_slice[k]]
    return np.array(ordered, dtype=object).reshape(slices * shape[0], shape[1], shape[2])


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
