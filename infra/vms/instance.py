"""A VM group's instance properties, derived once: the stack's instance template and the bulkInsert request
both take them (`InstanceProperties` of the Compute Engine API, in its JSON field names).

What an A3 Mega VM needs that a GKE node pool sets up for its nodes:

- one primary gVNIC on the platform's subnet plus one gVNIC per GPU network, the same networks as GKE's pools
  and the Slurm nodes (https://cloud.google.com/compute/docs/gpus/gpudirect);
- host maintenance TERMINATE without automatic restart (GPU VMs cannot live-migrate), as Google's own
  A3 resize-request example sets it (hashicorp/terraform-provider-google
  website/docs/r/compute_resize_request.html.markdown);
- the capacity type as a provisioning model: STANDARD (on-demand, and a reservation consumed by a
  SPECIFIC_RESERVATION affinity), SPOT, or FLEX_START (deleted at the end of its run,
  https://cloud.google.com/compute/docs/instances/about-flex-start-vms); every other slice consumes no
  reservation (NO_RESERVATION), so a group never takes capacity reserved for another orchestrator;
- a compact placement policy (COLLOCATED) where the capacity allows it: not for flex-start, whose VMs the
  Dynamic Workload Scheduler places;
- a pinned Container-Optimized OS image, the image Google's A3 resize-request example boots, which builds the
  GPU driver for itself (`cos-extensions`) and runs Docker: the start-up (`startup_script`) installs the
  catalogue's TCPXO plugin and receive-data-path manager, as Slurm-GCP's A3 Mega prolog does on Ubuntu, on
  COS's terms: the driver's and the plugin's directories remounted executable (COS mounts /var noexec), and
  docker's configuration in a writable HOME (/root is on the read-only root file system).

tests/test_vms.py runs the start-up under bash against stand-ins that hold COS's mounts and read-only root.
Not checked on a VM here: the COS image's GPU driver with TCPXO, the exact image name below (from a public
configuration, not from `gcloud compute images list`), and the start-up as a whole.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

from infra.catalogue.gpudirect import GPU_HOSTS, GpuDirect, nccl_env
from infra.config import Environment
from infra.derive.gpu_group import REPO, WORKDIR, all_gather_files, bundle, nccl_test_env
from infra.derive.templates import fill

# Container-Optimized OS, milestone 121 (LTS): an exact image, never the family (cos-121-lts), whose newest
# member changes under a redeploy. https://cloud.google.com/container-optimized-os/docs/release-notes/m121
COS_IMAGE = "projects/cos-cloud/global/images/cos-121-18867-381-183"
# The boot disk of an A3 Mega VM: what Cluster Toolkit's A3 Mega example gives its nodes (pd-ssd, 200 GB).
BOOT_DISK = ("pd-ssd", 200)
HOST = GPU_HOSTS["cos"]
FILES = Path(__file__).resolve().parent / "files"
HOST_SETUP = REPO / "workloads" / "charts" / "gpu-networking" / "files" / "tcpxo-host-setup.sh"
SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
# Where COS's driver installer writes the GPU driver, and the mount the TCPXO installer writes the plugin under
# (HOST.plugin_dir): both under /var, which COS mounts noexec ("/home, /var: writable, non-executable"; only
# /var/lib/docker, /var/lib/google, /var/lib/toolbox, /var/lib/cloud and /mnt/disks are executable:
# https://cloud.google.com/container-optimized-os/docs/concepts/disks-and-filesystem, checked 2026-11-26), so
# the start-up remounts each executable before anything loads from it: a bind mount of its own, remounted exec,
# COS's way for the GPU driver (https://cloud.google.com/container-optimized-os/docs/how-to/run-gpus: "sudo mount
# --bind /var/lib/nvidia /var/lib/nvidia; sudo mount -o remount,exec /var/lib/nvidia"); containers that mount the
# directory later get its flags.
DRIVER_DIR = "/var/lib/nvidia"
PLUGIN_MOUNT = str(PurePosixPath(HOST.plugin_dir).parent)
# The start-up's HOME. COS mounts its root file system, /root with it, read-only; /var is writable (and
# noexec, which a configuration file does not mind): `docker-credential-gcr configure-docker` writes
# $HOME/.docker/config.json (docker/cli's cli/config: $DOCKER_CONFIG, else $HOME/.docker), and docker reads it
# there. https://cloud.google.com/container-optimized-os/docs/concepts/disks-and-filesystem (checked 2026-11-26).
STARTUP_HOME = "/var/lib/platform/home"
# Seconds the start-up waits for the receive-data-path manager (Slurm-GCP's prolog waits 120; a fresh
# VM pulls the image first).
RXDM_WAIT_S = 300
# The line the receive-data-path manager logs when it is up (Slurm-GCP's prolog waits for the same), shell-quoted.
RXDM_READY = '"Buffer manager initialization complete"'


def group_name(env: Environment, key: str) -> str:
    """The managed instance group's name, and the prefix of its VMs' names."""
    return f"{env.name}-{key}"


def vm_names(env: Environment, key: str) -> list[str]:
    """The group's VMs in rank order: `<env>-<group>-<n>`. `make vm-up` creates them by these names, so every
    VM knows the whole group from its template (the `platform-hosts` metadata) before any exists."""
    hosts = env.slices[env.vm_groups[key].slice].slice.hosts
    return [f"{group_name(env, key)}-{n}" for n in range(hosts)]


def service_account_id(key: str) -> str:
    return f"vm-{key}"


def service_account(env: Environment, key: str) -> str:
    return f"{service_account_id(key)}@{env.project}.iam.gserviceaccount.com"


def network_tag(env: Environment, key: str) -> str:
    """The tag of the group's VMs: the firewall lets them reach each other (MPI, NCCL, the JAX coordinator)."""
    return f"{group_name(env, key)}-vm"


def placement_policy_name(env: Environment, key: str) -> str:
    return f"{group_name(env, key)}-compact"


def compact(env: Environment, key: str) -> bool:
    """Whether the group's VMs are placed by a compact placement policy (not with flex-start)."""
    return env.slices[env.vm_groups[key].slice].primary.type != "flex-start"


def _nics(env: Environment, direct: GpuDirect | None) -> list[dict[str, Any]]:
    def nic(network: str, subnet: str) -> dict[str, Any]:
        return {
            "network": f"projects/{env.project}/global/networks/{network}",
            "subnetwork": f"projects/{env.project}/regions/{env.region}/subnetworks/{subnet}",
            "nicType": "GVNIC",
            "stackType": "IPV4_ONLY",
        }

    nics = [nic(env.network.name, env.network.subnet_name(env.region))]
    if direct is not None:
        nics += [nic(n, s) for n, s in env.network.gpudirect_names(env.region, direct.extra_nics)]
    return nics


def scheduling(env: Environment, key: str, *, standalone: bool) -> dict[str, Any]:
    """The VMs' scheduling. `standalone`: VMs created on their own (bulkInsert), which carry their flex-start run
    limit themselves; in the managed group the resize request gives it (its requestedRunDuration)."""
    capacity = env.slices[env.vm_groups[key].slice].primary
    out: dict[str, Any] = {"onHostMaintenance": "TERMINATE", "automaticRestart": False}
    if capacity.type == "spot":
        out.update(provisioningModel="SPOT", instanceTerminationAction="DELETE")
    elif capacity.type == "flex-start":
        out.update(provisioningModel="FLEX_START", instanceTerminationAction="DELETE")
        if standalone and capacity.max_run_hours is not None:
            out["maxRunDuration"] = {"seconds": str(capacity.max_run_hours * 3600)}
    else:
        # On-demand, a reservation, and anything else the types and rules then refuse by name.
        out["provisioningModel"] = "STANDARD" if capacity.type in ("on-demand", "reservation") else capacity.type
    return out


def reservation_affinity(env: Environment, key: str) -> dict[str, Any]:
    capacity = env.slices[env.vm_groups[key].slice].primary
    if capacity.type == "reservation":
        return {
            "consumeReservationType": "SPECIFIC_RESERVATION",
            "key": "compute.googleapis.com/reservation-name",
            "values": [str(capacity.reservation)],
        }
    return {"consumeReservationType": "NO_RESERVATION"}


def instance_properties(env: Environment, key: str, *, standalone: bool = False) -> dict[str, Any]:
    """The group's VMs as `InstanceProperties` (JSON field names)."""
    group = env.vm_groups[key]
    slice_ = env.slices[group.slice].slice
    disk_type, disk_gb = BOOT_DISK
    metadata = {
        "startup-script": startup_script(env, key),
        "platform-hosts": ",".join(vm_names(env, key)),
        # Container logs and the start-up's to Cloud Logging; the start-up's verdicts as guest attributes.
        "google-logging-enabled": "true",
        "enable-guest-attributes": "TRUE",
        # SSH through OS Login (IAM) only, never a project-wide key.
        "enable-oslogin": "TRUE",
        "block-project-ssh-keys": "true",
    }
    props: dict[str, Any] = {
        "machineType": slice_.machine_type,
        "description": f"VM group {key} of environment {env.name}: {slice_.name} on {slice_.machine_type}",
        "labels": {**env.labels, "platform_vm_group": key},
        "tags": {"items": [network_tag(env, key)]},
        "metadata": {"items": [{"key": k, "value": v} for k, v in metadata.items()]},
        "disks": [
            {
                "boot": True,
                "autoDelete": True,
                "type": "PERSISTENT",
                "mode": "READ_WRITE",
                "initializeParams": {"sourceImage": COS_IMAGE, "diskType": disk_type, "diskSizeGb": str(disk_gb)},
            }
        ],
        "networkInterfaces": _nics(env, slice_.gpudirect),
        "scheduling": scheduling(env, key, standalone=standalone),
        "reservationAffinity": reservation_affinity(env, key),
        "serviceAccounts": [{"email": service_account(env, key), "scopes": SCOPES}],
        "shieldedInstanceConfig": {"enableSecureBoot": True, "enableVtpm": True, "enableIntegrityMonitoring": True},
    }
    if compact(env, key):
        props["resourcePolicies"] = [placement_policy_name(env, key)]
    return props


def _devices(gpus: int) -> list[str]:
    paths = [f"/dev/nvidia{n}" for n in range(gpus)] + [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/dmabuf_import_helper",
    ]
    return [f"--device={p}" for p in paths]


def startup_script(env: Environment, key: str) -> str:
    """What every VM of the group runs at boot (its `startup-script`), as the environment derives it: files/startup.sh
    and, when the group has an NCCL test, files/nccl-gate.sh after it."""
    group = env.vm_groups[key]
    slice_ = env.slices[group.slice].slice
    direct = slice_.gpudirect
    assert direct is not None and direct.transport == "tcpxo", "the config allows TCPXO VM groups only"
    gpus = slice_.chips_per_host
    shared = {
        "DEVICES": " ".join(_devices(gpus)),
        "DRIVER_DIR": DRIVER_DIR,
        "PLUGIN_DIR": HOST.plugin_dir,
        "INSTALLER_IMAGE": direct.installer_image,
    }
    group_env = {"PLATFORM_HOSTS": "$hosts", "PLATFORM_RANK": "$rank", **nccl_env(direct, HOST)}
    script = fill(
        FILES / "startup.sh",
        **shared,
        ENV=env.name,
        GROUP=key,
        HOST_SETUP=HOST_SETUP.read_text().rstrip("\n"),
        STARTUP_HOME=STARTUP_HOME,
        REGISTRY_HOST=env.registry.host(env.region),
        PLUGIN_MOUNT=PLUGIN_MOUNT,
        DAEMON_IMAGE=direct.daemon_image,
        EXTRA_NICS=str(direct.extra_nics),
        TRIES=str(RXDM_WAIT_S // 5),
        RXDM_READY=RXDM_READY,
        WAIT_S=str(RXDM_WAIT_S),
        GROUP_ENV=_env_lines(group_env),
    )
    if group.nccl_test is None:
        return script
    test = group.nccl_test
    hosts = test.nodes or slice_.hosts
    return script + fill(
        FILES / "nccl-gate.sh",
        **shared,
        HOSTS=str(hosts),
        LAST_RANK=str(hosts - 1),
        RUN=str(test.run),
        FILES=bundle(all_gather_files(), []).rstrip("\n"),
        TEST_ENV=_env_lines(nccl_test_env(direct, HOST, gpus, test.min_bus_bandwidth_gbps)),
        WORKDIR=WORKDIR,
    )


def _env_lines(values: dict[str, str]) -> str:
    return "\n".join(f"{k}={v}" for k, v in values.items())
