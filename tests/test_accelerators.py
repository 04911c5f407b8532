"""The catalogue derives every number of a slice from generation + topology."""

from __future__ import annotations

import pytest

from infra.catalogue.accelerators import gpu_slice, tpu_slice
from infra.catalogue.errors import ShapeError


def test_v6e_4x4_is_the_tutorial_slice_of_four_4_chip_hosts() -> None:
    s = tpu_slice("v6e", "4x4")
    assert (s.machine_type, s.chips_per_host, s.hosts, s.chips) == ("ct6e-standard-4t", 4, 4, 16)
    assert s.name == "v6e-16"
    assert s.node_selector == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": "4x4",
    }
    assert s.pod_resources == {"google.com/tpu": "4"}
    assert s.ray_scaling_config == {
        "num_workers": 4,
        "use_tpu": True,
        "topology": "4x4",
        "accelerator_type": "TPU-V6E",
        "resources_per_worker": {"TPU": 4},
        "placement_strategy": "SPREAD",
    }
    assert s.mesh_size == 16
    assert s.hbm_gb == 16 * 32
    assert s.peak_bf16_flops == pytest.approx(16 * 918e12)


@pytest.mark.parametrize(
    ("accelerator", "topology", "machine_type", "hosts", "chips_per_host"),
    [
        ("v5e", "4x8", None, 8, 4),  # Saxml's serving slice
        ("v5e", "2x4", "ct5lp-hightpu-8t", 1, 8),  # one 8-chip host
        ("v6e", "2x4", None, 2, 4),  # disaggregated serving: 4-chip hosts x2
        ("v6e", "2x4", "ct6e-standard-8t", 1, 8),
        ("v6e", "2x2", None, 1, 4),
        ("v6e", "16x16", None, 64, 4),
        ("v6e", "1x1", None, 1, 1),
        ("v5p", "2x2x2", None, 2, 4),
        ("v5p", "4x4x8", None, 32, 4),
    ],
)
def test_hosts_are_chips_in_topology_over_chips_per_vm(
    accelerator: str, topology: str, machine_type: str | None, hosts: int, chips_per_host: int
) -> None:
    s = tpu_slice(accelerator, topology, machine_type)
    assert (s.hosts, s.chips_per_host) == (hosts, chips_per_host)
    assert s.multi_host == (hosts > 1)


def test_v5e_names_follow_the_v5litepod_convention() -> None:
    assert tpu_slice("v5e", "4x8").name == "v5litepod-32"
    assert tpu_slice("v5e", "4x8").ray_scaling_config["accelerator_type"] == "TPU-V5LITEPOD"


@pytest.mark.parametrize(
    ("accelerator", "topology", "machine_type", "field", "allowed_has"),
    [
        ("v6e", "3x3", None, "topology", "4x4"),
        ("v6e", "4x4", "ct6e-standard-8t", "topology", "2x4"),
        ("v5p", "4x4", None, "topology", "2x2x2"),
        ("v6e", "4x4x4", None, "topology", "16x16"),
        ("v6e", "4x4", "ct5lp-hightpu-4t", "machine_type", "ct6e-standard-4t"),
        ("v7x", "4x4", None, "accelerator", "v6e"),
        ("a3-mega", "4x4", None, "accelerator", "v6e"),
    ],
)
def test_invalid_shapes_are_refused_with_the_valid_choices(
    accelerator: str, topology: str, machine_type: str | None, field: str, allowed_has: str
) -> None:
    with pytest.raises(ShapeError) as err:
        tpu_slice(accelerator, topology, machine_type)
    assert err.value.field == field
    assert allowed_has in err.value.allowed
    assert allowed_has in str(err.value)


def test_gpu_slice_counts_eight_h100_per_a3_mega_node() -> None:
    s = gpu_slice("a3-mega", 2)
    assert (s.machine_type, s.hosts, s.chips) == ("a3-megagpu-8g", 2, 16)
    assert s.pod_resources == {"nvidia.com/gpu": "8"}
    assert s.node_selector == {"cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb"}
    assert s.ray_scaling_config["resources_per_worker"] == {"GPU": 8}
    assert gpu_slice("a3-high", 1).node_selector == {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}


def test_gpu_slice_needs_a_node_and_a_gpu_family() -> None:
    with pytest.raises(ShapeError, match="at least one node"):
        gpu_slice("a3-mega", 0)
    with pytest.raises(ShapeError, match="TPU generation"):
        gpu_slice("v6e", 2)


def test_ironwood_slices_are_named_by_tensorcores_and_show_two_devices_per_chip() -> None:
    """MaxText's accelerator_to_spec_map: tpu7x-16 is 2x2x2 (8 chips, 16 devices); GKE: 4 chips per VM."""
    from infra.catalogue.accelerators import tpu_slice

    s = tpu_slice("tpu7x", "2x2x2")
    assert (s.machine_type, s.hosts, s.chips, s.devices, s.name) == ("tpu7x-standard-4t", 2, 8, 16, "tpu7x-16")
    assert s.node_selector == {
        "cloud.google.com/gke-tpu-accelerator": "tpu7x",
        "cloud.google.com/gke-tpu-topology": "2x2x2",
    }
    assert tpu_slice("v5p", "2x2x1").name == "v5p-8"  # Cloud TPU counts v5p TensorCores too
