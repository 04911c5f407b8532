"""GPUDirect networking: the transports of GPU machines (TCPX, TCPXO) with their NCCL plugin and
receive-data-path daemon pins, and how each host a GPU workload runs on names its NICs and finds the
plugin (GKE, Vertex AI, Ubuntu images, Container-Optimized OS VMs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from infra.catalogue.errors import ShapeError


@dataclass(frozen=True)
class GpuDirect:
    """GPUDirect networking of a GPU machine: its extra NICs and the pieces GKE needs for them.

    Each extra NIC sits in its own VPC network; the NCCL plugin installer puts
    the transport's NCCL plugin on the node, and a receive-data-path daemon
    runs beside every pod that uses it. Versions are pairs upstream releases
    together (GoogleCloudPlatform/container-engine-accelerators, gpudirect-*).

    `nic_pci` is where the machine's NICs sit on its PCI bus, (bus, slot) in NIC order: the primary NIC,
    then the GPU NICs. An operating system that names NICs by position (systemd's predictable names on
    Ubuntu) derives their names from it; None where the platform has not established the layout.
    """

    transport: Literal["tcpx", "tcpxo"]
    extra_nics: int
    installer_image: str
    daemon_image: str
    # The NCCL variables that name the control NIC and the GPU NICs, and the transport's fixed settings.
    ctrl_dev_env: str
    gpu_nics_env: str
    settings: tuple[tuple[str, str], ...]
    nic_pci: tuple[tuple[int, int], ...] | None = None


TCPX = GpuDirect(
    transport="tcpx",
    extra_nics=4,
    installer_image="us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpx/nccl-plugin-gpudirecttcpx-dev:v3.1.12",
    daemon_image="us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpx/tcpgpudmarxd-dev:v2.0.15",
    ctrl_dev_env="NCCL_GPUDIRECTTCPX_CTRL_DEV",
    gpu_nics_env="NCCL_GPUDIRECTTCPX_SOCKET_IFNAME",
    # GKE's GPUDirect-TCPX guide (https://cloud.google.com/kubernetes-engine/docs/how-to/gpu-bandwidth-gpudirect-tcpx,
    # the NCCL test's environment): TCPX has no environment profile to source.
    settings=(
        ("NCCL_CROSS_NIC", "0"),
        ("NCCL_ALGO", "Ring"),
        ("NCCL_PROTO", "Simple"),
        ("NCCL_NSOCKS_PERTHREAD", "4"),
        ("NCCL_SOCKET_NTHREADS", "1"),
        ("NCCL_DYNAMIC_CHUNK_SIZE", "524288"),
        ("NCCL_P2P_NET_CHUNKSIZE", "524288"),
        ("NCCL_P2P_PCI_CHUNKSIZE", "524288"),
        ("NCCL_P2P_NVL_CHUNKSIZE", "1048576"),
        ("NCCL_BUFFSIZE", "4194304"),
        ("NCCL_NET_GDR_LEVEL", "PIX"),
        ("NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX", "/run/tcpx"),
        ("NCCL_GPUDIRECTTCPX_PROGRAM_FLOW_STEERING_WAIT_MICROS", "500000"),
    ),
)
TCPXO = GpuDirect(
    transport="tcpxo",
    extra_nics=8,
    # Pinned by digest: the digests NVIDIA's AI Cluster Runtime records for these tags in its
    # image inventory (NVIDIA/aicr docs/user/container-images.md, the AICR-BOM lists: gke-nccl-tcpxo's installer,
    # and the receive-data-path manager v1.0.21).
    installer_image=(
        "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/nccl-plugin-gpudirecttcpx-dev:v1.0.15"
        "@sha256:4c9f0de3f39455a2ea35e844e0fc92564ca5629f6b03250fde40e8160719dae4"
    ),
    daemon_image=(
        "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/tcpgpudmarxd-dev:v1.0.21"
        "@sha256:8d9e10fd589a34ab8a0aa64f7e70ad075c8f1c69bea176350f8d211367697e3d"
    ),
    ctrl_dev_env="NCCL_FASTRAK_CTRL_DEV",
    gpu_nics_env="NCCL_FASTRAK_IFNAME",
    # What the plugin's own nccl-env-profile.sh exports besides the NICs, LD_LIBRARY_PATH and its config files'
    # paths (google/nccl-plugin-gpudirect-tcpxo tcpxo_scripts/nccl-env-profile.sh @ v1.0.15, commit 8c073c57, the
    # file the installer image copies into the plugin's directory; its record: infra/shell/pinned-files.yaml), set
    # where no profile is installed (Vertex AI mounts the plugin without one). Since v1.0.12 the default profile
    # sets NCCL_NVLSTREE_MAX_CHUNKSIZE and no longer NCCL_ALGO or NCCL_NVLS_ENABLE; "The guest config checker will
    # enforce that NCCL_NVLSTREE_MAX_CHUNKSIZE is set to this value and will abort any workload where it is not
    # set. The presence of NCCL_NVLS_ENABLE or NCCL_ALGO will only be flagged as unexpected environment
    # variables" (GoogleCloudPlatform/container-engine-accelerators gpudirect-tcpxo/README.md @ 685dca25, "Aug 21,
    # 2025"), and its default guest and tuner configs expect NCCL_PROTO=Simple,LL128 (same README, the LL128
    # release). tests/test_vertex.py holds every Vertex AI container's environment equal to the profile's exports.
    settings=(
        ("NCCL_CROSS_NIC", "0"),
        ("NCCL_PROTO", "Simple,LL128"),
        ("NCCL_MIN_NCHANNELS", "4"),
        ("NCCL_NVLSTREE_MAX_CHUNKSIZE", "131072"),
        ("NCCL_P2P_NET_CHUNKSIZE", "524288"),
        ("NCCL_P2P_PCI_CHUNKSIZE", "524288"),
        ("NCCL_P2P_NVL_CHUNKSIZE", "1048576"),
        ("NCCL_FASTRAK_NUM_FLOWS", "2"),
        ("NCCL_FASTRAK_ENABLE_CONTROL_CHANNEL", "0"),
        ("NCCL_BUFFSIZE", "8388608"),
        ("NCCL_FASTRAK_USE_SNAP", "1"),
        ("NCCL_FASTRAK_USE_LLCM", "1"),
        ("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7"),
        ("NCCL_NET_GDR_LEVEL", "PIX"),
        ("NCCL_FASTRAK_ENABLE_HOTPATH_LOGGING", "0"),
        ("NCCL_TUNER_PLUGIN", "libnccl-tuner.so"),
        ("NCCL_FASTRAK_PLUGIN_ACCEPT_TIMEOUT_MS", "600000"),
        ("NCCL_DEBUG", "WARN"),
        ("NCCL_DEBUG_SUBSYS", "INIT,NET,ENV,COLL,GRAPH"),
    ),
    # a3-megagpu-8g: the primary NIC at 00:0c, the eight GPU NICs at 06, 07, 0d, 0e, 86, 87, 8d, 8e (slot 0).
    # Ubuntu names them enp0s12 and enp6s0 ... enp142s0, as Cluster Toolkit's A3 Mega NCCL test sets them
    # (examples/machine-learning/a3-megagpu-8g/nccl-tests/run-nccl-tests.sh @ v1.95.0: NCCL_FASTRAK_IFNAME,
    # NCCL_FASTRAK_CTRL_DEV). Not checked on a VM here.
    nic_pci=((0, 12), (6, 0), (7, 0), (13, 0), (14, 0), (134, 0), (135, 0), (141, 0), (142, 0)),
)


@dataclass(frozen=True)
class GpuHost:
    """The system a GPU machine's workload sees under one orchestrator: how its NICs are named, and where
    the GPUDirect NCCL plugin (and, where the installer wrote one, its `nccl-env-profile.sh`) is."""

    name: str
    # `eth`: eth0, eth1, ... in NIC order; `pci`: systemd's predictable names from the PCI position (enp<bus>s<slot>).
    nic_names: Literal["eth", "pci"]
    plugin_dir: str
    has_profile: bool
    description: str


GPU_HOSTS: dict[str, GpuHost] = {
    # The pod's interfaces as GKE's multi-network annotation names them; the installer DaemonSet writes the
    # plugin to the node's /home/kubernetes/bin/nvidia/lib64, mounted at /usr/local/nvidia/lib64.
    "gke": GpuHost("gke", "eth", "/usr/local/nvidia/lib64", True, "a GKE pod on Container-Optimized OS"),
    # Vertex AI attaches the NICs as eth0..eth8 and mounts the plugin at /usr/local/nvidia/lib64 without a
    # profile (hosseinsarshar/dist-training-vertex nemo/job.sh, whose NCCL values predate plugin v1.0.12; not in a
    # Vertex AI document, and which plugin version Vertex AI mounts is not published: docs/gpu.md).
    "vertex": GpuHost("vertex", "eth", "/usr/local/nvidia/lib64", False, "a Vertex AI custom job's container"),
    # Ubuntu accelerator images (the Slurm node image, the VMs): the plugin installer run on the host
    # (`docker run -v /var/lib:/var/lib <installer> install --install-nccl`, Slurm-GCP's
    # tools/prologs-epilogs/receive-data-path-manager-mega) writes /var/lib/tcpxo/lib64 with its profile.
    "ubuntu": GpuHost("ubuntu", "pci", "/var/lib/tcpxo/lib64", True, "an Ubuntu accelerator image"),
    # A Compute Engine VM on Container-Optimized OS (the platform's VM groups, infra/vms): COS names the NICs
    # eth0..eth8 as GKE's nodes do, and the same installer writes /var/lib/tcpxo/lib64 with its profile, which
    # the workload container mounts at the same path (the TCPXO test image's own script takes
    # NCCL_LIB_DIR=/var/lib/tcpxo/lib64 for a VM). Not checked on a VM here.
    "cos": GpuHost("cos", "eth", "/var/lib/tcpxo/lib64", True, "a Compute Engine VM on Container-Optimized OS"),
}


def nic_names(direct: GpuDirect, host: GpuHost) -> tuple[str, list[str]]:
    """(control NIC, GPU NICs) as `host` names a machine's interfaces."""
    if host.nic_names == "eth":
        return "eth0", [f"eth{n}" for n in range(1, direct.extra_nics + 1)]
    if direct.nic_pci is None:
        raise ShapeError(
            "accelerator",
            direct.transport,
            f"the NIC layout of {direct.transport.upper()} machines on {host.description} is not known here",
            ["tcpxo"],
        )
    names = [f"enp{bus}s{slot}" for bus, slot in direct.nic_pci]
    return names[0], names[1 : 1 + direct.extra_nics]


def nccl_env(direct: GpuDirect, host: GpuHost) -> dict[str, str]:
    """The NCCL environment of a GPUDirect workload on `host`: the plugin's directory, the NICs by the host's
    names, and the transport's settings where no installed profile supplies them (a job sources the profile
    first, then sets these)."""
    ctrl, gpu = nic_names(direct, host)
    env = {"NCCL_LIB_DIR": host.plugin_dir}
    if direct.transport == "tcpx" or not host.has_profile:
        env.update(direct.settings)
    if direct.transport == "tcpxo":
        env["NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY"] = "/dev/aperture_devices"
        if not host.has_profile:
            env["NCCL_TUNER_CONFIG_PATH"] = f"{host.plugin_dir}/a3plus_tuner_config.textproto"
            env["NCCL_SHIMNET_GUEST_CONFIG_CHECKER_CONFIG_FILE"] = f"{host.plugin_dir}/a3plus_guest_config.textproto"
    env[direct.ctrl_dev_env] = ctrl
    env[direct.gpu_nics_env] = ",".join(gpu)
    env["NCCL_SOCKET_IFNAME"] = ctrl
    return env
