"""The accelerator catalogue and the `Slice` every layer derives from it.

A slice is written in an environment file as an accelerator generation and a
topology (TPU) or a node count (GPU). Everything else the platform needs (node
pool machine type and size, Kubernetes node selectors and resource requests,
Ray Train's scaling config, the mesh size and the chip's peak FLOP/s) is
derived here, once. Facts come from the Cloud TPU and GKE documentation, see
https://cloud.google.com/tpu/docs/system-architecture-tpu-vm and
https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from infra.catalogue.errors import ShapeError
from infra.catalogue.gpudirect import TCPX, TCPXO, GpuDirect

TPU_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
TPU_ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
GPU_ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
TPU_RESOURCE = "google.com/tpu"
GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class MachineShape:
    """One VM shape of an accelerator generation; vCPUs and memory (GiB) as `gcloud compute machine-types
    list` reports them (the TPU docs' VM tables agree: ct5lp-hightpu-4t 112 vCPU / 192 GB)."""

    chips: int
    topologies: tuple[str, ...]
    vcpus: int = 0
    memory_gb: int = 0
    gpudirect: GpuDirect | None = None
    # The node pool's boot disk, where the machine requires one (None: GKE's default).
    disk_type: str | None = None
    # CPU sockets, where a scheduler needs the layout (Slurm's node line: CoresPerSocket = vCPUs / sockets / 2).
    sockets: int = 0
    # What Vertex AI calls the machine's GPUs (MachineSpec.acceleratorType, an AcceleratorType enum name of
    # google-cloud-aiplatform's aiplatform_v1); None where Vertex AI does not train on the machine.
    vertex_accelerator: str | None = None


@dataclass(frozen=True)
class Accelerator:
    """One accelerator generation: what GKE calls it and what one chip can do."""

    name: str
    kind: Literal["tpu", "gpu"]
    description: str
    node_label: str
    ray_accelerator_type: str
    slice_prefix: str
    peak_bf16_tflops: float
    hbm_gb: int
    machine_types: dict[str, MachineShape] = field(default_factory=dict)
    topology_dims: int = 0
    # The chip's name in Saxml's --platform_chip and Pathways' --instance_type (`tpuv6e:4x4`).
    platform_chip: str = ""
    # TensorCores per chip as Cloud TPU and MaxText count them in slice names (v5p-8 is 4 chips), and the
    # JAX devices each chip shows (a v5p megacore is one device; each TPU7x TensorCore is one).
    cores_per_chip: int = 1
    devices_per_chip: int = 1
    # Multi-host slices are placed by a workload policy (a resource policy) instead of a bare COMPACT
    # topology (GKE: "This policy replaces the --tpu-topology flag used by other TPU versions").
    workload_policy: bool = False

    def machine_for(self, topology: str) -> str:
        """The default machine type for a topology: the first one that offers it."""
        for machine_type, shape in self.machine_types.items():
            if topology in shape.topologies:
                return machine_type
        raise ShapeError(
            "topology",
            topology,
            f"topology {topology!r} is not valid for {self.name}",
            self.all_topologies(),
        )

    def all_topologies(self) -> list[str]:
        seen: dict[str, None] = {}
        for shape in self.machine_types.values():
            seen.update(dict.fromkeys(shape.topologies))
        return sorted(seen, key=_topology_chips)


def _topology_chips(topology: str) -> int:
    return math.prod(int(d) for d in topology.split("x"))


_V5E_V6E_MULTI = ("2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16")
_V5P = (
    "2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8",
    "8x8x8", "8x8x16", "8x16x16", "16x16x16",
)  # fmt: skip

CATALOGUE: dict[str, Accelerator] = {
    "v5e": Accelerator(
        name="v5e",
        kind="tpu",
        description="TPU v5e (v5 lite pod)",
        node_label="tpu-v5-lite-podslice",
        ray_accelerator_type="TPU-V5LITEPOD",
        slice_prefix="v5litepod",
        peak_bf16_tflops=197.0,
        hbm_gb=16,
        topology_dims=2,
        platform_chip="tpuv5e",
        machine_types={
            "ct5lp-hightpu-4t": MachineShape(4, _V5E_V6E_MULTI, vcpus=112, memory_gb=192),
            "ct5lp-hightpu-8t": MachineShape(8, ("2x4",), vcpus=224, memory_gb=384),
            "ct5lp-hightpu-1t": MachineShape(1, ("1x1",), vcpus=24, memory_gb=48),
        },
    ),
    "v6e": Accelerator(
        name="v6e",
        kind="tpu",
        description="TPU v6e (Trillium)",
        node_label="tpu-v6e-slice",
        ray_accelerator_type="TPU-V6E",
        slice_prefix="v6e",
        peak_bf16_tflops=918.0,
        hbm_gb=32,
        topology_dims=2,
        platform_chip="tpuv6e",
        machine_types={
            "ct6e-standard-4t": MachineShape(4, _V5E_V6E_MULTI, vcpus=180, memory_gb=720),
            "ct6e-standard-8t": MachineShape(8, ("2x4",), vcpus=360, memory_gb=1440),
            "ct6e-standard-1t": MachineShape(1, ("1x1",), vcpus=44, memory_gb=176),
        },
    ),
    "v5p": Accelerator(
        name="v5p",
        kind="tpu",
        description="TPU v5p",
        node_label="tpu-v5p-slice",
        ray_accelerator_type="TPU-V5P",
        slice_prefix="v5p",
        peak_bf16_tflops=459.0,
        hbm_gb=95,
        topology_dims=3,
        platform_chip="tpuv5",
        cores_per_chip=2,
        # Only the 4-chip VM is listed: it is the one GKE documents for
        # multi-host v5p slices.
        machine_types={"ct5p-hightpu-4t": MachineShape(4, _V5P, vcpus=208, memory_gb=448)},
    ),
    # Ironwood. https://cloud.google.com/tpu/docs/tpu7x (2,307 TFLOP/s bf16 and 192 GiB HBM per chip; 4 chips,
    # 224 vCPUs and 960 GB per VM); https://cloud.google.com/kubernetes-engine/docs/concepts/tpu-ironwood
    # (node label tpu7x, workload policy placement, GKE 1.34.0-gke.2201000+). Topologies: 2x2x1 is one host,
    # larger ones multiples of 4 per side as xpk's generator and MaxText's accelerator_to_spec_map list
    # them (AI-Hypercomputer/maxtext src/maxtext/utils/accelerator_to_spec_map.py: tpu7x-16 = 2x2x2).
    # Boot disk: Hyperdisk, as Cluster Toolkit's gke-tpu-7x example (v1.95.0) creates the pool.
    "tpu7x": Accelerator(
        name="tpu7x",
        kind="tpu",
        description="TPU7x (Ironwood)",
        node_label="tpu7x",
        ray_accelerator_type="TPU-V7X",
        slice_prefix="tpu7x",
        peak_bf16_tflops=2307.0,
        hbm_gb=192,
        topology_dims=3,
        platform_chip="tpu7x",
        cores_per_chip=2,
        devices_per_chip=2,
        workload_policy=True,
        machine_types={
            "tpu7x-standard-4t": MachineShape(4, _V5P, vcpus=224, memory_gb=960, disk_type="hyperdisk-balanced")
        },
    ),
    "a3-high": Accelerator(
        name="a3-high",
        kind="gpu",
        description="A3 High, 8 x NVIDIA H100 80GB, GPUDirect-TCPX",
        node_label="nvidia-h100-80gb",
        ray_accelerator_type="H100",
        slice_prefix="a3-high",
        peak_bf16_tflops=989.0,
        hbm_gb=80,
        machine_types={
            "a3-highgpu-8g": MachineShape(
                8, (), vcpus=208, memory_gb=1872, gpudirect=TCPX, sockets=2, vertex_accelerator="NVIDIA_H100_80GB"
            )
        },
    ),
    "a3-mega": Accelerator(
        name="a3-mega",
        kind="gpu",
        description="A3 Mega, 8 x NVIDIA H100 80GB, GPUDirect-TCPXO",
        node_label="nvidia-h100-mega-80gb",
        ray_accelerator_type="H100",
        slice_prefix="a3-mega",
        peak_bf16_tflops=989.0,
        hbm_gb=80,
        # Vertex AI: GoogleCloudPlatform/vertex-ai-samples notebooks/official/training/vertex-distributed-training/
        # a3mega/llama-3-8b-nemo-pretraining (machine a3-megagpu-8g, gpu_type NVIDIA_H100_MEGA_80GB, 8 per node).
        machine_types={
            "a3-megagpu-8g": MachineShape(
                8, (), vcpus=208, memory_gb=1872, gpudirect=TCPXO, sockets=2, vertex_accelerator="NVIDIA_H100_MEGA_80GB"
            )
        },
    ),
}


@dataclass(frozen=True)
class Slice:
    """One accelerator slice: every number the platform derives from its shape."""

    accelerator: Accelerator
    machine_type: str
    chips_per_host: int
    hosts: int
    topology: str | None = None

    @property
    def shape(self) -> MachineShape:
        return self.accelerator.machine_types[self.machine_type]

    @property
    def gpudirect(self) -> GpuDirect | None:
        """The GPUDirect networking this slice's machines need, if any."""
        return self.shape.gpudirect

    @property
    def kind(self) -> Literal["tpu", "gpu"]:
        return self.accelerator.kind

    @property
    def chips(self) -> int:
        return self.chips_per_host * self.hosts

    @property
    def name(self) -> str:
        """The name the field uses: ``v6e-16``, ``v5litepod-32``, ``a3-mega-16``; TensorCores where the
        generation counts them (``v5p-8`` and ``tpu7x-8`` are 4 chips)."""
        return f"{self.accelerator.slice_prefix}-{self.chips * self.accelerator.cores_per_chip}"

    @property
    def devices(self) -> int:
        """JAX devices in the slice: one per chip, or per TensorCore on TPU7x."""
        return self.chips * self.accelerator.devices_per_chip

    @property
    def multi_host(self) -> bool:
        return self.hosts > 1

    @property
    def resource_name(self) -> str:
        return TPU_RESOURCE if self.kind == "tpu" else GPU_RESOURCE

    @property
    def pod_resources(self) -> dict[str, str]:
        """Requests (equal to limits) of one pod per host, as Kubernetes strings."""
        return {self.resource_name: str(self.chips_per_host)}

    @property
    def node_selector(self) -> dict[str, str]:
        if self.kind == "gpu":
            return {GPU_ACCELERATOR_LABEL: self.accelerator.node_label}
        assert self.topology is not None
        return {
            TPU_ACCELERATOR_LABEL: self.accelerator.node_label,
            TPU_TOPOLOGY_LABEL: self.topology,
        }

    @property
    def ray_scaling_config(self) -> dict[str, object]:
        """Keyword arguments for `ray.train.ScalingConfig`: one worker per host."""
        if self.kind == "tpu":
            return {
                "num_workers": self.hosts,
                "use_tpu": True,
                "topology": self.topology,
                "accelerator_type": self.accelerator.ray_accelerator_type,
                "resources_per_worker": {"TPU": self.chips_per_host},
                "placement_strategy": "SPREAD",
            }
        return {
            "num_workers": self.hosts,
            "use_gpu": True,
            "accelerator_type": self.accelerator.ray_accelerator_type,
            "resources_per_worker": {"GPU": self.chips_per_host},
            "placement_strategy": "SPREAD",
        }

    @property
    def mesh_size(self) -> int:
        """Devices in the slice's global JAX mesh."""
        return self.devices

    @property
    def hbm_gb(self) -> int:
        return self.chips * self.accelerator.hbm_gb

    @property
    def peak_bf16_flops(self) -> float:
        """Peak dense bf16 FLOP/s of the whole slice."""
        return self.chips * self.accelerator.peak_bf16_tflops * 1e12


def lookup(accelerator: str) -> Accelerator:
    try:
        return CATALOGUE[accelerator]
    except KeyError:
        raise ShapeError(
            "accelerator", accelerator, f"unknown accelerator {accelerator!r}", sorted(CATALOGUE)
        ) from None


def tpu_slice(accelerator: str, topology: str, machine_type: str | None = None) -> Slice:
    """Derive a TPU slice from its generation and topology.

    Raises `ShapeError` naming the offending field and the valid choices.
    """
    acc = lookup(accelerator)
    if acc.kind != "tpu":
        raise ShapeError(
            "accelerator",
            accelerator,
            f"{accelerator!r} is a GPU machine family and takes `nodes`, not a topology",
            [name for name, a in CATALOGUE.items() if a.kind == "tpu"],
        )
    dims = topology.split("x")
    if len(dims) != acc.topology_dims or not all(d.isdigit() and int(d) > 0 for d in dims):
        raise ShapeError(
            "topology",
            topology,
            f"topology {topology!r} is not a {acc.topology_dims}-D topology of {acc.name}",
            acc.all_topologies(),
        )
    if machine_type is None:
        machine_type = acc.machine_for(topology)
    shape = acc.machine_types.get(machine_type)
    if shape is None:
        raise ShapeError(
            "machine_type",
            machine_type,
            f"machine type {machine_type!r} is not a {acc.name} machine type",
            list(acc.machine_types),
        )
    if topology not in shape.topologies:
        raise ShapeError(
            "topology",
            topology,
            f"topology {topology!r} is not valid for {acc.name} on {machine_type} ({shape.chips} chips per host)",
            list(shape.topologies),
        )
    return Slice(
        accelerator=acc,
        machine_type=machine_type,
        chips_per_host=shape.chips,
        hosts=_topology_chips(topology) // shape.chips,
        topology=topology,
    )


def gpu_slice(accelerator: str, nodes: int, machine_type: str | None = None) -> Slice:
    """Derive a GPU slice (a group of identical GPU nodes)."""
    acc = lookup(accelerator)
    if acc.kind != "gpu":
        raise ShapeError(
            "accelerator",
            accelerator,
            f"{accelerator!r} is a TPU generation and takes a `topology`, not `nodes`",
            [name for name, a in CATALOGUE.items() if a.kind == "gpu"],
        )
    machine_type = machine_type or next(iter(acc.machine_types))
    shape = acc.machine_types.get(machine_type)
    if shape is None:
        raise ShapeError(
            "machine_type",
            machine_type,
            f"machine type {machine_type!r} is not a {acc.name} machine type",
            list(acc.machine_types),
        )
    if nodes < 1:
        raise ShapeError("nodes", nodes, "a GPU slice needs at least one node", ["1 or more"])
    return Slice(accelerator=acc, machine_type=machine_type, chips_per_host=shape.chips, hosts=nodes)


def accelerator_for_machine(machine_type: str) -> tuple[Accelerator, MachineShape] | None:
    """Reverse look-up used by the plan review: which accelerator a machine type carries."""
    for acc in CATALOGUE.values():
        if machine_type in acc.machine_types:
            return acc, acc.machine_types[machine_type]
    return None


def tpu_slice_for_machine(machine_type: str, topology: str) -> Slice:
    """The TPU slice a node pool of `machine_type` with `tpu_topology` forms (ShapeError when none)."""
    found = accelerator_for_machine(machine_type)
    if found is None or found[0].kind != "tpu":
        raise ShapeError("machine_type", machine_type, f"{machine_type!r} is not a TPU machine type", [])
    return tpu_slice(found[0].name, topology, machine_type)


def tpu_accelerator_for_machine(machine_type: str) -> Accelerator | None:
    """The TPU generation of a machine type, or None for any other machine."""
    found = accelerator_for_machine(machine_type)
    return found[0] if found is not None and found[0].kind == "tpu" else None


def tpu_accelerator_for_label(node_label: str) -> Accelerator | None:
    """The TPU generation GKE labels `cloud.google.com/gke-tpu-accelerator: <node_label>`."""
    return next((a for a in CATALOGUE.values() if a.kind == "tpu" and a.node_label == node_label), None)
