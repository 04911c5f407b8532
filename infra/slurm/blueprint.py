"""The environment's Slurm cluster as a Cluster Toolkit blueprint and deployment file (`gcluster deploy`).

Derived from the same environment and catalogue as the platform stack, and reusing what that stack creates:
its VPC and subnet (`modules/network/pre-existing-vpc`), the GPUDirect networks (each partition's nodes get one
gVNIC per network, as GKE's node pools do), the cluster's bucket (mounted with gcsfuse at /gcs/<key>), the
registry (read by the nodes' service account), the service accounts and the firewall rules
(`infra.constructs.identity.SlurmServiceAccounts`, `infra.constructs.network.HostGroupFirewall`). Terraform state goes
to the environment's state bucket.

Modelled on Cluster Toolkit's A3 Mega Slurm example at the pinned release
(examples/machine-learning/a3-megagpu-8g/a3mega-slurm-blueprint.yaml @ v1.95.0). Where it differs, on purpose:
- the network, GPU networks and bucket are the platform's, not created again (pre-existing-vpc,
  pre-existing-network-storage, explicit `additional_networks`), and no Managed Lustre home (36 TiB): /home is the
  controller's NFS export, as in Slurm-GCP's default;
- nodes are dynamic where the capacity allows (an idle partition holds no GPU), with DWS flex-start, spot or a
  reservation from the slice's capacity; DWS flex turns compact placement off, as the nodeset's own validator
  requires for A3 Mega (the example leaves it on, which gcluster refuses once flex-start is switched on);
- the receive-data-path manager prolog is rendered from the catalogue's pinned TCPXO pair, not downloaded from
  Slurm-GCP's branch head at boot; nccl-tests is built at a pinned release;
- Slurm's own authentication (MUNGE support ends), no public IPs (Cloud NAT of the platform's VPC), every host
  on the platform's least-privilege service accounts;
- the Packer build VM is a C3 (not N-series, as the example requires), with no external IP: its startup script
  needs no SSH, and it reaches the internet through the platform's Cloud NAT.
"""

from __future__ import annotations

from typing import Any

from infra.catalogue.accelerators import Slice
from infra.catalogue.cluster_toolkit import GOOGLE_PROVIDER_VERSION, SLURM_BASE_IMAGE, SLURM_GCP_REF
from infra.config import Environment
from infra.config.slurm import SlurmPartition
from infra.slurm import jobs as slurm_jobs
from infra.slurm.files import fill

CLOUD_PLATFORM = ["https://www.googleapis.com/auth/cloud-platform"]
IMAGE_BUILD_MACHINE = "c3-standard-8"
LOCAL_SSD = "/mnt/localssd"
SLURM_ADM = "/opt/apps/adm/slurm"
# Slurm-GCP's controller template that gives prologs and epilogs 600 s (PrologEpilogTimeout) instead of the
# default: the receive-data-path manager's prolog pulls two images and waits for the daemon
# (community/modules/scheduler/schedmd-slurm-gcp-v6-controller/etc/long-prolog-slurm.conf.tpl @ v1.95.0).
LONG_PROLOG_TEMPLATE = (
    "../_modules/embedded/community/modules/scheduler/schedmd-slurm-gcp-v6-controller/etc/long-prolog-slurm.conf.tpl"
)
# How long the prolog waits for the receive-data-path manager: below the template's PrologEpilogTimeout=600
# (read in the toolkit's repository at v1.95.0; the template is not among the pinned interface files).
RXDM_WAIT_S = 300


def node_tag(env: Environment) -> str:
    """The network tag of every host of the Slurm cluster (the platform's firewall rules name it)."""
    assert env.slurm is not None
    return f"slurm-{env.slurm.name}"


def node_service_account(env: Environment) -> str:
    assert env.slurm is not None
    return f"slurm-{env.slurm.name}@{env.project}.iam.gserviceaccount.com"


def controller_service_account(env: Environment) -> str:
    assert env.slurm is not None
    return f"slurm-{env.slurm.name}-ctl@{env.project}.iam.gserviceaccount.com"


def image_family(env: Environment) -> str:
    assert env.slurm is not None
    return f"{env.slurm.name}-node"


def nodeset_id(partition: str) -> str:
    """The nodeset module's id: Slurm-GCP names the nodeset after it, keeping a-z and 0-9, at most 14
    (schedmd-slurm-gcp-v6-nodeset main.tf: substr(replace(var.name, "/[^a-z0-9]/", ""), 0, 14))."""
    return partition.replace("-", "_")


def nodeset_name(partition: str) -> str:
    return "".join(c for c in nodeset_id(partition) if c.isascii() and (c.islower() or c.isdigit()))[:14]


def slurm_zone(env: Environment) -> str:
    """The deployment's zone: the first partition's slice's."""
    assert env.slurm is not None
    first = next(iter(env.slurm.partitions.values()))
    return env.zone_of(first.slice)


def literal(text: str) -> str:
    """`text` as a blueprint string that gcluster takes literally: it reads every `$(` as an expression
    (`$(vars.x)`, `$(module.output)`), so a shell's `$(...)` is written `\\$(` (pkg/config/expression.go)."""
    return text.replace("$(", "\\$(")


def _runner(kind: str, destination: str, content: str) -> dict[str, str]:
    return {"type": kind, "destination": destination, "content": literal(content)}


def rxdm_prolog(slice_: Slice) -> str:
    """The partition's prolog and epilog (one script, by name): the TCPXO plugin installer and the
    receive-data-path manager of the catalogue's pinned pair, for jobs on more than one node; the epilog stops
    it. The steps are Slurm-GCP's (tools/prologs-epilogs/receive-data-path-manager-mega); the images are ours.
    Not run on a VM here."""
    direct = slice_.gpudirect
    assert direct is not None
    return fill(
        "controller/rxdm",
        TRANSPORT=direct.transport.upper(),
        INSTALLER_NAME=direct.installer_image.rsplit("/", 1)[-1],
        DAEMON_NAME=direct.daemon_image.rsplit("/", 1)[-1],
        REGISTRY=direct.installer_image.split("/", 1)[0],
        PLUGIN_DIR=slurm_jobs.HOST.plugin_dir,
        INSTALLER_IMAGE=direct.installer_image,
        DAEMON_IMAGE=direct.daemon_image,
        EXTRA_NICS=str(direct.extra_nics),
        TRIES=str(RXDM_WAIT_S // 5),
        WAIT_S=str(RXDM_WAIT_S),
    )


def _image_script(env: Environment) -> dict[str, Any]:
    """The node image's build: Slurm-GCP at the pinned tag (a tag, never a branch), the TCPXO host pieces, enroot on
    local SSD. The files are in infra/slurm/files/image/; why each is there:

    - install_tcpxo_host.sh: the dmabuf import helper (DKMS) from Google's gpudirect-tcpxo repository, with the
      one-line source fix the toolkit's example applies for kernel 6.17; 00-a3-megagpu.rules bind-mounts the
      aperture devices where TCPXO looks for them.
    - install_container_toolkit.sh, block-broken-nvidia-container: the receive-data-path manager's prolog runs
      `docker run --gpus all`, and dockerd registers its GPU device driver only where nvidia-container-runtime-hook
      is on PATH (moby daemon/nvidia_linux.go), which the NVIDIA Container Toolkit installs. Cluster Toolkit's A3
      Mega example installs it from NVIDIA's CUDA repository (cuda-keyring; runner install_cuda_and_dcgm.yml) and
      blocks 1.17.7-1 ("contains bugs that break enroot functionality on Slurm clusters": slurm-gcp 6.12.1
      ansible/roles/nvidia_repository/tasks/os/debian.yml); the same here.
    - fix_enroot_env.sh: Ubuntu 24.04 blocks unprivileged user namespaces
      (kernel.apparmor_restrict_unprivileged_userns=1), so enroot and Pyxis cannot create a container's namespace.
      Cluster Toolkit's A3 Mega example turns it off in its image, for good through sysctl.d ("# Required for
      enroot/pyxis to work": examples/machine-learning/a3-megagpu-8g/a3mega-slurm-blueprint.yaml @ v1.95.0, runner
      fix_enroot_env.sh); the same lines here.
    - enroot.credentials: enroot reads registry credentials from its config path; a command in it is run for every
      pull (the nodes' service account reads the platform's registry).
    """
    runners = [
        ("data", "/var/tmp/slurm_vars.json", "slurm_vars.json", {}),
        ("shell", "install_slurm.sh", "install_slurm.sh", {"SLURM_GCP_REF": SLURM_GCP_REF}),
        ("shell", "install_tcpxo_host.sh", "install_tcpxo_host.sh", {}),
        ("data", "/etc/apt/preferences.d/block-broken-nvidia-container", "block-broken-nvidia-container", {}),
        ("shell", "install_container_toolkit.sh", "install_container_toolkit.sh", {}),
        ("data", "/etc/udev/rules.d/00-a3-megagpu.rules", "00-a3-megagpu.rules", {}),
        ("data", "/etc/enroot/enroot.conf", "enroot.conf", {"LOCAL_SSD": LOCAL_SSD}),
        ("shell", "fix_enroot_env.sh", "fix_enroot_env.sh", {}),
        (
            "data",
            "/etc/enroot/platform/.credentials",
            "enroot.credentials",
            {"REGISTRY_HOST": env.registry.host(env.region)},
        ),
    ]
    return {
        "id": "image_script",
        "source": "modules/scripts/startup-script",
        "settings": {
            # The runners live in the module's bucket; a host on its own service account must be let read it
            # (modules/scripts/startup-script/variables.tf: bucket_viewers).
            "bucket_viewers": [f"serviceAccount:{node_service_account(env)}"],
            "install_ansible": True,
            "enable_gpu_network_wait_online": True,
            # Docker's socket is root's: world-writable it makes every Slurm user root on the node
            # (https://docs.docker.com/engine/security/#docker-daemon-attack-surface). Only the prolog and epilog,
            # which run as root, use docker; jobs run containers through enroot/Pyxis. Cluster Toolkit's default is
            # off (modules/scripts/startup-script/variables.tf @ v1.95.0: world_writable = optional(bool, false)).
            "docker": {"enabled": True, "world_writable": False},
            "runners": [
                _runner(kind, destination, fill(f"image/{name}", **values))
                for kind, destination, name, values in runners
            ],
        },
    }


def _capacity(env: Environment, partition: SlurmPartition) -> dict[str, Any]:
    """The nodeset's provisioning from the slice's capacity (queued provisioning is refused at load)."""
    capacity = env.slices[partition.slice].primary
    if capacity.type == "reservation":
        return {"reservation_name": capacity.reservation}
    if capacity.type == "spot":
        return {"enable_spot_vm": True, "spot_instance_config": {"termination_action": "DELETE"}}
    if capacity.type == "flex-start":
        # The nodeset's validator: compact placement with DWS flex only on A3 Ultra, A4, H4D.
        return {
            "dws_flex": {"enabled": True, "max_run_duration": (capacity.max_run_hours or 0) * 3600},
            "enable_placement": False,
        }
    return {}


def partition_modules(env: Environment, name: str, partition: SlurmPartition) -> list[dict[str, Any]]:
    assert env.slurm is not None
    slice_ = env.slices[partition.slice].slice
    shape = slice_.shape
    settings: dict[str, Any] = {
        "node_count_static": partition.static_nodes,
        "node_count_dynamic_max": slice_.hosts - partition.static_nodes,
        "machine_type": slice_.machine_type,
        "zone": env.zone_of(partition.slice),
        "on_host_maintenance": "TERMINATE",
        "bandwidth_tier": "gvnic_enabled",
        "enable_public_ips": False,
        "disk_type": "pd-ssd",
        "disk_size_gb": 200,
        "startup_script": "$(compute_startup.startup_script)",
        **_runs_as(env, node_service_account(env)),
        **_capacity(env, partition),
    }
    if shape.sockets:
        # Hyper-threads on (the platform default), and Slurm's node line to match the machine.
        settings["advanced_machine_features"] = {"threads_per_core": None}
        settings["node_conf"] = {"CoresPerSocket": shape.vcpus // shape.sockets // 2, "ThreadsPerCore": 2}
    if slice_.gpudirect is not None:
        networks = env.network.gpudirect_names(env.region, slice_.gpudirect.extra_nics)
        settings["additional_networks"] = [
            {"network": net, "subnetwork": sub, "subnetwork_project": env.project, "nic_type": "GVNIC"}
            for net, sub in networks
        ]
    nodeset = nodeset_id(name)
    return [
        {
            "id": nodeset,
            "source": "community/modules/compute/schedmd-slurm-gcp-v6-nodeset",
            "use": ["network"],
            "settings": settings,
        },
        {
            "id": f"{nodeset}_partition",
            "source": "community/modules/compute/schedmd-slurm-gcp-v6-partition",
            "use": [nodeset],
            "settings": {
                "partition_name": name,
                # Exclusive: each job gets its own nodes, deleted after it; static nodes need it off.
                "exclusive": partition.static_nodes == 0,
                "is_default": name == env.slurm.default_partition,
                "suspend_time": partition.suspend_after_minutes * 60,
                "partition_conf": {"ResumeTimeout": "900", "SuspendTimeout": "600", "OverSubscribe": "EXCLUSIVE"},
            },
        },
    ]


def _compute_startup(env: Environment) -> dict[str, Any]:
    """Every compute node at boot: local SSD for containers, and slurmd only once the aperture devices exist."""
    return {
        "id": "compute_startup",
        "source": "modules/scripts/startup-script",
        "settings": {
            "bucket_viewers": [f"serviceAccount:{node_service_account(env)}"],
            "local_ssd_filesystem": {"mountpoint": LOCAL_SSD, "permissions": "1777"},
            "docker": {
                "enabled": True,
                "world_writable": False,  # as above: root's socket stays root's
                "daemon_config": f'{{"data-root": "{LOCAL_SSD}/docker"}}',
            },
            "runners": [
                _runner(
                    "shell",
                    "wait_for_aperture_devices.sh",
                    fill("compute/wait_for_aperture_devices.sh", LOCAL_SSD=LOCAL_SSD),
                )
            ],
        },
    }


def _controller_startup(env: Environment) -> dict[str, Any]:
    """The controller at boot: each GPUDirect partition's prolog and epilog, and the cluster's batch jobs."""
    assert env.slurm is not None
    runners = []
    links = []
    for name, partition in env.slurm.partitions.items():
        slice_ = env.slices[partition.slice].slice
        if slice_.gpudirect is None:
            continue
        script = f"{SLURM_ADM}/scripts/rxdm-{name}"
        runners.append(_runner("data", script, rxdm_prolog(slice_)))
        for phase in ("prolog", "epilog"):
            folder = f"{SLURM_ADM}/partition-{name}-{phase}_slurmd.d"
            links.append(f"mkdir -p {folder} && ln -sf {script} {folder}/rxdm.{phase}_slurmd")
        links.append(f"chmod 0755 {script}")
    for file_name, content in slurm_jobs.jobs(env).items():
        runners.append(_runner("data", f"{slurm_jobs.JOBS_DIR}/{file_name}", content))
    install = "\n".join(["#!/bin/bash", "set -euo pipefail", *links, f"chmod -R a+rX {slurm_jobs.PLATFORM_DIR}"])
    runners.append(_runner("shell", "install_platform_scripts.sh", install + "\n"))
    # The image's /etc/enroot/enroot.conf puts enroot's paths on the compute nodes' local SSD, which the login and
    # controller machines do not have: there, as in Cluster Toolkit's A3 Mega example (controller_startup runner
    # reset_enroot.sh and the controller's login_startup_script @ v1.95.0), the file goes and enroot keeps its
    # defaults.
    runners.append(_runner("shell", "reset_enroot.sh", fill("controller/reset_enroot.sh")))
    return {
        "id": "controller_startup",
        "source": "modules/scripts/startup-script",
        "settings": {"bucket_viewers": [f"serviceAccount:{controller_service_account(env)}"], "runners": runners},
    }


def _runs_as(env: Environment, account: str) -> dict[str, Any]:
    """What every VM of the cluster is given: its service account (cloud-platform scope, IAM decides the rest) and
    the nodes' network tag, which the firewall rules select."""
    return {"service_account_email": account, "service_account_scopes": CLOUD_PLATFORM, "tags": [node_tag(env)]}


def blueprint(env: Environment) -> dict[str, Any]:
    """The Cluster Toolkit blueprint of the environment's Slurm cluster."""
    slurm = env.slurm
    assert slurm is not None, f"environment {env.name!r} has no `slurm` section"
    configuration: dict[str, Any] = {
        "project": "$(vars.project_id)",
        "region": "$(vars.region)",
        "zone": "$(vars.zone)",
    }
    if env.delivery_identities.seeded:
        # The deployer is a seed project's account: its calls name the environment's project as their quota project,
        # as the platform stack's do (infra/constructs/providers.py).
        configuration |= {"billing_project": "$(vars.project_id)", "user_project_override": True}
    provider = {"version": GOOGLE_PROVIDER_VERSION, "configuration": configuration}
    partitions = [m for name, p in slurm.partitions.items() for m in partition_modules(env, name, p)]
    return {
        "blueprint_name": f"platform-{env.name}-slurm",
        "vars": {
            "slurm_cluster_name": slurm.name,
            # Slurm's own authentication: Cluster Toolkit's controller marks MUNGE for removal on 2026-07-31.
            "enable_slurm_auth": True,
            "labels": dict(env.labels),
            "instance_image": {"family": image_family(env), "project": "$(vars.project_id)"},
        },
        "terraform_providers": {
            "google": {"source": "hashicorp/google", **provider},
            "google-beta": {"source": "hashicorp/google-beta", **provider},
        },
        "deployment_groups": [
            {
                "group": "network",
                "modules": [
                    {
                        "id": "network",
                        "source": "modules/network/pre-existing-vpc",
                        "settings": {
                            "network_name": env.network.name,
                            "subnetwork_name": env.network.subnet_name(env.region),
                        },
                    }
                ],
            },
            {"group": "image-script", "modules": [_image_script(env)]},
            _image_group(env),
            {
                "group": "cluster",
                "modules": [
                    _bucket(env),
                    _compute_startup(env),
                    *partitions,
                    _controller_startup(env),
                    _login(env),
                    _controller(env),
                ],
            },
        ],
    }


def _image_group(env: Environment) -> dict[str, Any]:
    """The node image, built by Packer from Slurm's base image with the image script."""
    return {
        "group": "image",
        "modules": [
            {
                "id": "node_image",
                "source": "modules/packer/custom-image",
                "kind": "packer",
                "use": ["image_script", "network"],
                "settings": {
                    "machine_type": IMAGE_BUILD_MACHINE,
                    "source_image": SLURM_BASE_IMAGE["image"],
                    "source_image_project_id": [SLURM_BASE_IMAGE["project"]],
                    "image_family": image_family(env),
                    "disk_size": 100,
                    "omit_external_ip": True,
                    **_runs_as(env, node_service_account(env)),
                },
            }
        ],
    }


def _bucket(env: Environment) -> dict[str, Any]:
    """The environment's bucket, mounted on every host with gcsfuse."""
    slurm = env.slurm
    assert slurm is not None
    return {
        "id": "bucket",
        "source": "modules/file-system/pre-existing-network-storage",
        "settings": {
            "remote_mount": env.bucket_name(slurm.bucket),
            "local_mount": f"{slurm_jobs.GCS_MOUNT}/{slurm.bucket}",
            "fs_type": "gcsfuse",
            # Mounted by root at boot, used by whoever submits a job (an OS Login user): gcsfuse
            # enforces these bits for everyone but the mounting uid, so 664/775 let no one else
            # write a checkpoint. Cluster Toolkit's A3 Mega example mounts with 777/777
            # (examples/machine-learning/a3-megagpu-8g/a3mega-slurm-blueprint.yaml @ v1.95.0); the
            # hosts' grant still limits writes to the bucket's slurm/ prefix (IAM condition).
            "mount_options": "defaults,_netdev,implicit_dirs,allow_other,file_mode=777,dir_mode=777",
        },
    }


def _login(env: Environment) -> dict[str, Any]:
    """The login node: no public IP, the nodes' service account."""
    slurm = env.slurm
    assert slurm is not None
    return {
        "id": "login",
        "source": "community/modules/scheduler/schedmd-slurm-gcp-v6-login",
        "use": ["network"],
        "settings": {
            "machine_type": slurm.login.machine_type,
            "disk_size_gb": slurm.login.disk_size_gb,
            "disk_type": slurm.login.disk_type,
            "enable_login_public_ips": False,
            **_runs_as(env, node_service_account(env)),
        },
    }


def _controller(env: Environment) -> dict[str, Any]:
    """The controller: no public IP, its own service account, the long prolog and the startup scripts."""
    slurm = env.slurm
    assert slurm is not None
    return {
        "id": "controller",
        "source": "community/modules/scheduler/schedmd-slurm-gcp-v6-controller",
        "use": [
            "network",
            *(f"{nodeset_id(name)}_partition" for name in slurm.partitions),
            "login",
            "bucket",
        ],
        "settings": {
            "machine_type": slurm.controller.machine_type,
            "disk_size_gb": slurm.controller.disk_size_gb,
            "disk_type": slurm.controller.disk_type,
            "enable_controller_public_ips": False,
            # Deletes the nodes Slurm created (not in Terraform's state) before the rest goes.
            "enable_cleanup_compute": True,
            "enable_external_prolog_epilog": True,
            "slurm_conf_tpl": LONG_PROLOG_TEMPLATE,
            "controller_startup_script": "$(controller_startup.startup_script)",
            "login_startup_script": literal(fill("controller/reset_enroot.sh")),
            **_runs_as(env, controller_service_account(env)),
        },
    }


def deployment(env: Environment) -> dict[str, Any]:
    """The deployment file: the environment's project, place and name, and Terraform state in its bucket
    (gcluster gives each group the prefix <blueprint_name>/<deployment_name>/<group>)."""
    slurm = env.slurm
    assert slurm is not None
    return {
        "terraform_backend_defaults": {"type": "gcs", "configuration": {"bucket": env.state.bucket}},
        "vars": {
            "deployment_name": slurm.name,
            "project_id": env.project,
            "region": env.region,
            "zone": slurm_zone(env),
        },
    }
