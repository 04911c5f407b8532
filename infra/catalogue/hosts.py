"""The hosts the platform's generated shell scripts run on: what each operating system and runtime gives a script.

One record per place a script runs (a Slurm prolog on the Ubuntu 24.04 node image, a batch job there, a boot-time
runner, a VM's startup script on Container-Optimized OS, a Vertex AI container): the PATH it runs with, the commands
its image has (and where those that are not in the usual directories live), the directories it cannot write or
execute from, and whether unprivileged user namespaces (enroot, Pyxis) are blocked. Each record is dated and names
its sources; `infra/shell` runs every generated script against its record and `infra/rules/host_scripts.py` refuses a
script that breaks one.

Facts marked "not checked on a VM here" were read in the cited source, not observed on a running machine.
"""

from __future__ import annotations

from dataclasses import dataclass

CHECKED = "2026-11-26"

# Where a command lives when a record does not say otherwise: the directories every PATH below holds.
STANDARD_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")

# bash's compiled-in PATH, used when a bash script starts without PATH in its environment (checked here:
# `env -i /bin/bash -c 'echo $PATH'` on bash 5.2; bash config-top.h DEFAULT_PATH_VALUE). It is a shell variable, not
# exported. Ubuntu 24.04's bash is the same upstream default (not checked on a VM here).
BASH_DEFAULT_PATH = ("/usr/local/bin", "/usr/local/sbin", "/usr/bin", "/usr/sbin", "/bin", "/sbin", ".")

# systemd's PATH for the services it starts (systemd.exec(5), "Environment variables in spawned processes": $PATH),
# which is what google-startup-scripts.service, and so Cluster Toolkit's startup-script runners, run with.
SYSTEMD_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")

# A login shell on Ubuntu 24.04 (pam_env reads /etc/environment: PATH="...:/snap/bin"), which `sbatch` hands to the
# batch script (sbatch --export defaults to ALL: https://slurm.schedmd.com/sbatch.html#OPT_export).
UBUNTU_LOGIN_PATH = (*STANDARD_DIRS, "/usr/games", "/usr/local/games", "/snap/bin")

SLURM_PROLOG_EPILOG = "https://slurm.schedmd.com/prolog_epilog.html"
# The words of the Prolog and Epilog Guide this module and the rules quote.
SLURM_PROLOG_PATH_QUOTE = (
    "Note that for security reasons, these programs do not have a search path set. Either specify fully qualified "
    "path names in the program or set the PATH environment variable."
)
# slurmd builds a prolog's and an epilog's environment from scratch: SLURM_JOB_ID, SLURM_JOB_NUM_NODES,
# SLURM_JOB_PARTITION, SLURM_SCRIPT_CONTEXT (prolog_slurmd / epilog_slurmd), SLURMD_NODENAME, ... and no PATH or HOME
# (SchedMD/slurm src/plugins/prep/script/prep_script_slurmd.c, _build_env()).
SLURMD_PROLOG_ENV = (
    "SchedMD/slurm src/plugins/prep/script/prep_script_slurmd.c (_build_env: env_array_create(), no PATH)"
)
UBUNTU_USERNS = (
    "https://discourse.ubuntu.com/t/ubuntu-24-04-lts-noble-numbat-release-notes/39890 (unprivileged user namespace "
    "restrictions: kernel.apparmor_restrict_unprivileged_userns=1 by default)"
)
CTK_A3MEGA = (
    "GoogleCloudPlatform/cluster-toolkit @ v1.95.0 examples/machine-learning/a3-megagpu-8g/a3mega-slurm-blueprint.yaml"
)
# The runner of Cluster Toolkit's A3 Mega example that lifts the restriction on the image, quoted by the rules.
CTK_USERNS_QUOTE = (
    "# 1. Disable Ubuntu 24.04 restriction on unprivileged user namespaces / # Required for enroot/pyxis to work / "
    "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"
)
USERNS_SYSCTL = "kernel.apparmor_restrict_unprivileged_userns"
SNAP_GCLOUD = (
    "https://cloud.google.com/sdk/docs/downloads-snap; Cluster Toolkit v1.95.0 examples/machine-learning/"
    "a4x-highgpu-4g/a4xhigh-slurm-blueprint.yaml (ExecStartPre=/snap/bin/gcloud on the same Ubuntu 24.04 accelerator "
    "image series)"
)
SLURM_GCP = "GoogleCloudPlatform/slurm-gcp @ 6.12.1 (ansible/roles: slurm, enroot, pyxis, gcsfuse, openmpi)"
# Who runs a batch script: the person who submitted it, an OS Login user with no root (docs/orchestrators.md sends
# them to the login node with `gcloud compute ssh`), and Pyxis runs its containers as that user unless
# --container-remap-root is given, which the jobs never give.
SLURM_JOB_USER = (
    "https://slurm.schedmd.com/sbatch.html (the batch script runs as the submitting user; --uid is root's only); "
    "NVIDIA/pyxis README (--container-remap-root: otherwise the container runs as the user); "
    "https://cloud.google.com/compute/docs/oslogin (OS Login users: no root unless roles/compute.osAdminLogin)"
)
DOCKER_GPUS = (
    'moby/moby daemon/nvidia_linux.go (const nvidiaHook = "nvidia-container-runtime-hook": the GPU device driver is '
    "registered only when the hook is on PATH); https://docs.docker.com/engine/containers/resource_constraints/#gpu "
    "(--gpus needs the NVIDIA Container Toolkit)"
)


@dataclass(frozen=True)
class Host:
    """Where a generated script runs, as that host's operating system and runtime give it to the script."""

    name: str  # key, e.g. "ubuntu-2404-slurm-prolog"
    description: str
    path: tuple[str, ...]  # the PATH a script runs with there
    commands: frozenset[str]  # commands the image has (by name)
    read_only: tuple[str, ...]  # directories not writable
    noexec: tuple[str, ...]  # directories mounted noexec
    userns_restricted: bool  # unprivileged user namespaces blocked (enroot/pyxis cannot start containers)
    checked: str  # date checked, ISO
    sources: tuple[str, ...]  # public URLs or upstream paths at a version
    # Commands the image has outside STANDARD_DIRS: (command, directory), e.g. ("gcloud", "/snap/bin").
    locations: tuple[tuple[str, str], ...] = ()
    # Variables the host gives every script there (besides PATH), e.g. HOME.
    env: tuple[tuple[str, str], ...] = ()
    # Directories the image has that scripts write into without creating them (/etc/apt/sources.list.d, ...).
    dirs: tuple[str, ...] = ()
    # Directories under a `noexec` one that are mounts of their own, executable (COS: /var/lib/docker under /var).
    exec_dirs: tuple[str, ...] = ()
    # Who runs scripts there: (name, uid, gid). Everything the host's image and boot put there is root's (755/644),
    # but the user's HOME (and /tmp, 1777); a script run by anyone else can write nothing more.
    user: tuple[str, int, int] = ("root", 0, 0)

    def directory(self, command: str) -> str | None:
        """The directory `command` lives in on this host's image (None: the image lacks it)."""
        where = dict(self.locations)
        if command in where:
            return where[command]
        return "/usr/bin" if command in self.commands else None


# Ubuntu 24.04 (the accelerator images: ubuntu-accelerator-2404-amd64-with-nvidia-580-*): what a script finds there.
# The base system's commands (coreutils, util-linux, procps, kmod, systemd, apt/dpkg, curl, pciutils, python3), the
# NVIDIA 580 driver's nvidia-smi, and the Google Cloud CLI as a snap in /snap/bin. Docker is not on the base image
# (Cluster Toolkit's startup-script module installs it where `docker.enabled` is set). Not checked on a VM here.
_UBUNTU_2404_BASE = """
bash sh dash cat cp mv rm ln mkdir rmdir chmod chown ls grep sed awk mawk tee touch mktemp seq sleep echo printf test
true false head tail cut tr xargs find sort uniq wc env id hostname readlink dirname basename date kill ps stat realpath
tar gzip install sync timeout nproc uname whoami getent flock mount umount findmnt lsblk blkid mkfs.ext4 sysctl modprobe
lsmod insmod systemctl systemd-mount journalctl udevadm apt apt-get apt-mark apt-cache dpkg dpkg-deb dpkg-query curl
wget lspci ip lsb_release python3 snap gcloud gsutil nvidia-smi sudo runuser su logger
"""
UBUNTU_2404_BASE = frozenset(_UBUNTU_2404_BASE.split())
# The directories of an Ubuntu 24.04 system that scripts write into without creating them (Filesystem Hierarchy
# Standard, apt, systemd, udev, sysctl.d); each exists on every Ubuntu server image.
UBUNTU_DIRS = (
    "/etc/apt/sources.list.d",
    "/etc/apt/preferences.d",
    "/etc/sysctl.d",
    "/etc/systemd/system",
    "/etc/udev/rules.d",
    "/etc/security/limits.d",
    "/usr/local/bin",
    "/usr/local/sbin",
    "/usr/local/lib",
    "/usr/src",
    "/usr/share/keyrings",
    "/var/lib",
    "/var/tmp",
    "/var/log",
    "/home",
    "/root",
    "/tmp",
    "/opt",
    "/mnt",
    "/run",
    "/dev",
)
UBUNTU_2404_LOCATIONS = (("gcloud", "/snap/bin"), ("gsutil", "/snap/bin"), ("snap", "/usr/bin"))

# What Slurm-GCP's ansible playbook adds to the image at the pinned tag (the Slurm node image of every partition,
# the controller and the login node): Slurm's commands, enroot with Pyxis, gcsfuse, Open MPI.
_SLURM_GCP_IMAGE = """
sbatch srun salloc scontrol sinfo squeue scancel sacct slurmd slurmctld enroot gcsfuse mpirun mpicc mpicxx
nvidia-container-cli
"""
SLURM_GCP_IMAGE = frozenset(_SLURM_GCP_IMAGE.split())

# Commands that Debian/Ubuntu packages (and Cluster Toolkit's startup-script settings) install, for what an image
# build adds: `apt-get install -y <package>` in a runner gives the later runners and the image these commands.
# From each package's file list (packages.ubuntu.com, noble; NVIDIA's repository for nvidia-container-toolkit).
PACKAGE_COMMANDS: dict[str, frozenset[str]] = {
    "git": frozenset({"git"}),
    "dkms": frozenset({"dkms"}),
    "apt-transport-artifact-registry": frozenset(),
    "google-cloud-cli": frozenset({"gcloud", "gsutil"}),
    "nvidia-container-toolkit": frozenset(
        {"nvidia-ctk", "nvidia-container-runtime-hook", "nvidia-container-runtime", "nvidia-container-cli"}
    ),
    "cuda-keyring": frozenset(),
    # modules/scripts/startup-script (Cluster Toolkit v1.95.0): install_ansible, docker.enabled.
    "ansible": frozenset({"ansible", "ansible-pull", "ansible-playbook", "ansible-galaxy"}),
    "docker-ce": frozenset({"docker", "dockerd"}),
}

# What a command needs on the image for one of its uses: (command, argument, needed command, source).
NEEDS: tuple[tuple[str, str, str, str], ...] = (("docker", "--gpus", "nvidia-container-runtime-hook", DOCKER_GPUS),)


def _ubuntu(name: str, description: str, path: tuple[str, ...], *sources: str, **extra: object) -> Host:
    return Host(
        name=name,
        description=description,
        path=path,
        commands=UBUNTU_2404_BASE | SLURM_GCP_IMAGE,
        read_only=(),
        noexec=(),
        userns_restricted=True,
        checked=CHECKED,
        sources=(UBUNTU_USERNS, SNAP_GCLOUD, SLURM_GCP, *sources),
        locations=UBUNTU_2404_LOCATIONS,
        dirs=UBUNTU_DIRS,
        **extra,  # type: ignore[arg-type]
    )


HOSTS: dict[str, Host] = {
    # The Packer VM that builds the Slurm node image: the base image itself, running the image's startup-script
    # runners in order (google-startup-scripts.service, systemd's PATH). Slurm-GCP is not there until its runner ran.
    "ubuntu-2404-image-build": Host(
        name="ubuntu-2404-image-build",
        description="the Slurm image's Packer build VM (Ubuntu 24.04 accelerator base image, startup-script runners)",
        path=SYSTEMD_PATH,
        commands=UBUNTU_2404_BASE,
        read_only=(),
        noexec=(),
        userns_restricted=True,
        checked=CHECKED,
        sources=(UBUNTU_USERNS, SNAP_GCLOUD, "https://www.freedesktop.org/software/systemd/man/systemd.exec.html"),
        locations=UBUNTU_2404_LOCATIONS,
        env=(("HOME", "/root"),),
        dirs=UBUNTU_DIRS,
    ),
    # A Slurm node (compute, controller, login) at boot: the startup-script module's runners, as root.
    "ubuntu-2404-slurm-startup": _ubuntu(
        "ubuntu-2404-slurm-startup",
        "a Slurm node of the platform's image at boot (startup-script runners, as root)",
        SYSTEMD_PATH,
        "https://www.freedesktop.org/software/systemd/man/systemd.exec.html",
        env=(("HOME", "/root"),),
    ),
    # A prolog or epilog that slurmd runs (through Slurm-GCP's slurm_mux): no PATH at all, so bash's default.
    "ubuntu-2404-slurm-prolog": _ubuntu(
        "ubuntu-2404-slurm-prolog",
        "a Slurm prolog/epilog on a compute node (run by slurmd as root with no PATH: bash's default)",
        BASH_DEFAULT_PATH,
        f"{SLURM_PROLOG_EPILOG}: {SLURM_PROLOG_PATH_QUOTE!r}",
        SLURMD_PROLOG_ENV,
    ),
    # A batch script: sbatch hands it the submitting user's login environment (PATH with /snap/bin, no
    # LD_LIBRARY_PATH on Ubuntu), plus Slurm's SLURM_* variables.
    "ubuntu-2404-slurm-job": _ubuntu(
        "ubuntu-2404-slurm-job",
        "a Slurm batch script on the first node of its allocation (the submitter's login environment)",
        UBUNTU_LOGIN_PATH,
        "https://slurm.schedmd.com/sbatch.html#SECTION_OUTPUT-ENVIRONMENT-VARIABLES",
        SLURM_JOB_USER,
        env=(("HOME", "/home/user"),),
        user=("user", 1000, 1000),
    ),
}


# --- Container-Optimized OS (the VM groups' boot disk, infra/vms) and Vertex AI's containers (infra/vertex) ---------

COS_DISKS = (
    'https://cloud.google.com/container-optimized-os/docs/concepts/disks-and-filesystem ("/: read-only, executable"; '
    '"/home, /var: writable, non-executable, stateful"; "/var/lib/google, /var/lib/docker, /var/lib/toolbox: '
    'writable, executable"; "/var/lib/cloud: writable, executable, tmpfs"; "/tmp: writable, non-executable, '
    'tmpfs"; "/mnt/disks: writable, executable, tmpfs")'
)
COS_SECURITY = (
    'https://cloud.google.com/container-optimized-os/docs/concepts/security ("The root filesystem (/) is mounted as '
    'read-only"; "Among the writable locations, only /var/lib/docker and /var/lib/cloud are mounted as executable")'
)
COS_GPUS = (
    'https://cloud.google.com/container-optimized-os/docs/how-to/run-gpus (cos-extensions install gpu; "sudo mount '
    '--bind /var/lib/nvidia /var/lib/nvidia", "sudo mount -o remount,exec /var/lib/nvidia")'
)
COS_CONTAINERS = (
    'https://cloud.google.com/container-optimized-os/docs/how-to/run-container-instance ("docker-credential-gcr is '
    'pre-installed in Container-Optimized OS images"; configure-docker writes $HOME/.docker/config.json)'
)
COS_TOOLBOX = (
    'https://cloud.google.com/container-optimized-os/docs/how-to/toolbox ("Container-Optimized OS does not include a '
    'package manager"; /usr/bin/toolbox)'
)
# GKE's TCPXO installer runs the host set-up in the COS node's namespaces (nsenter -at 1): what it calls is on COS.
GKE_TCPXO_HOST = (
    "GoogleCloudPlatform/container-engine-accelerators @ 685dca25 gpudirect-tcpxo/nccl-tcpxo-installer.yaml "
    "(pre-installation: /sbin/iptables, modprobe, lspci, mount, umount, readlink on the COS host)"
)
# The metadata script runner (google-startup-scripts.service) runs a VM's startup-script as root under systemd.
GCE_STARTUP = "https://cloud.google.com/compute/docs/instances/startup-scripts/linux (scripts run as root)"

# The root file system of COS outside its writable mounts: a script cannot write these (root's home among them).
COS_READ_ONLY = ("/root", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/opt", "/boot")
COS_NOEXEC = ("/var", "/home", "/tmp")
COS_EXEC_DIRS = ("/var/lib/docker", "/var/lib/google", "/var/lib/toolbox", "/var/lib/cloud", "/mnt/disks")
# What a COS script finds (not checked on a VM here: from the pages above and GKE's installer): a busybox-free GNU
# userland, the kernel and mount tools, Docker with Google's credential helper, the GPU driver installer and toolbox;
# no package manager (apt, dpkg) and no Google Cloud CLI on the host (toolbox holds one).
COS_COMMANDS = frozenset(
    [
        *("bash", "sh", "cat", "cp", "mv", "rm", "ln", "mkdir", "chmod", "chown", "ls", "grep", "sed", "awk"),
        *("tee", "touch", "mktemp", "seq", "sleep", "echo", "printf", "test", "true", "false", "head", "tail"),
        *("cut", "tr", "xargs", "find", "sort", "wc", "env", "id", "hostname", "readlink", "dirname", "basename"),
        *("date", "kill", "ps", "stat", "timeout", "uname", "mount", "umount", "modprobe", "iptables", "lspci"),
        *("nsenter", "curl", "systemctl", "journalctl", "sudo", "logger"),
        *("docker", "docker-credential-gcr", "cos-extensions", "toolbox"),
    ]
)

# The TCPXO plugin image (google/nccl-plugin-gpudirect-tcpxo tcpxo.dockerfile @ v1.0.15: FROM
# nvidia/cuda:12.8.0-devel-ubuntu22.04, apt install openssh-server libopenmpi-dev python3 iproute2 wget git rsync ...;
# COPY tcpxo_scripts /scripts), which the platform's NCCL test runs in on Vertex AI and on the VM groups.
TCPXO_IMAGE = "google/nccl-plugin-gpudirect-tcpxo @ v1.0.15 (8c073c57) tcpxo.dockerfile"
TCPXO_IMAGE_COMMANDS = frozenset(
    [
        *("bash", "sh", "cat", "cp", "mv", "rm", "ln", "mkdir", "chmod", "ls", "grep", "sed", "awk", "tee", "touch"),
        *("sleep", "echo", "printf", "test", "true", "false", "head", "tail", "cut", "tr", "paste", "xargs", "find"),
        *("sort", "wc", "env", "id", "hostname", "readlink", "dirname", "basename", "date", "seq"),
        *("service", "ssh", "sshd", "mpirun", "python3", "wget", "git", "rsync", "ip"),
    ]
)
# The platform's trainer-gpu image (workloads/trainer/Dockerfile.gpu: FROM python:3.12.12-slim-bookworm, uid 1000).
TRAINER_IMAGE_COMMANDS = frozenset(
    [
        *("bash", "sh", "cat", "cp", "mv", "rm", "ln", "mkdir", "ls", "grep", "sed", "tee", "touch", "sleep"),
        *("echo", "printf", "test", "true", "false", "head", "tail", "cut", "tr", "env", "id", "python", "python3"),
        "pip",
    ]
)
# Vertex AI's custom-job replica: CLUSTER_SPEC on every replica, the project's buckets under /gcs (Cloud Storage FUSE),
# and on A3 Mega the TCPXO plugin at /usr/local/nvidia/lib64 with NICs eth0..eth8 (a public job script, not a
# Vertex AI document: hosseinsarshar/dist-training-vertex nemo/job.sh).
VERTEX_SOURCES = (
    "https://cloud.google.com/vertex-ai/docs/training/distributed-training (CLUSTER_SPEC)",
    "https://cloud.google.com/vertex-ai/docs/training/cloud-storage-file-system (/gcs/<bucket>)",
    "hosseinsarshar/dist-training-vertex @ 019ab939 nemo/job.sh (NCCL_LIB_DIR=/usr/local/nvidia/lib64, eth0..eth8)",
)

HOSTS.update(
    {
        # A VM of a VM group at boot: its startup-script, run as root by the metadata script runner.
        "cos-vm-startup": Host(
            name="cos-vm-startup",
            description="a VM group's startup-script on Container-Optimized OS (the metadata script runner, as root)",
            path=SYSTEMD_PATH,
            commands=COS_COMMANDS,
            read_only=COS_READ_ONLY,
            noexec=COS_NOEXEC,
            userns_restricted=False,
            checked=CHECKED,
            sources=(COS_DISKS, COS_SECURITY, COS_GPUS, COS_CONTAINERS, COS_TOOLBOX, GKE_TCPXO_HOST, GCE_STARTUP),
            locations=(("iptables", "/sbin"),),
            env=(("HOME", "/root"),),
            dirs=("/etc", "/var/lib", "/dev", "/run", "/tmp", "/home", "/mnt/disks"),
            exec_dirs=COS_EXEC_DIRS,
        ),
        # The NCCL test's container on Vertex AI: the TCPXO plugin image, as root.
        "vertex-tcpxo-image": Host(
            name="vertex-tcpxo-image",
            description="a Vertex AI custom job's replica running the TCPXO plugin image (as root)",
            path=("/usr/local/nvidia/bin", "/usr/local/cuda/bin", *STANDARD_DIRS),
            commands=TCPXO_IMAGE_COMMANDS,
            read_only=(),
            noexec=(),
            userns_restricted=False,
            checked=CHECKED,
            sources=(TCPXO_IMAGE, *VERTEX_SOURCES),
            env=(("HOME", "/root"),),
            dirs=("/tmp", "/root", "/usr/local/nvidia/lib64", "/scripts"),
        ),
        # The training job's container on Vertex AI: the platform's trainer-gpu image, as uid 1000.
        "vertex-trainer-image": Host(
            name="vertex-trainer-image",
            description="a Vertex AI custom job's replica running the platform's trainer-gpu image (uid 1000)",
            path=STANDARD_DIRS,
            commands=TRAINER_IMAGE_COMMANDS,
            read_only=(),
            noexec=(),
            userns_restricted=False,
            checked=CHECKED,
            sources=("workloads/trainer/Dockerfile.gpu (python:3.12.12-slim-bookworm)", *VERTEX_SOURCES),
            locations=(("python", "/usr/local/bin"), ("python3", "/usr/local/bin"), ("pip", "/usr/local/bin")),
            env=(("HOME", "/opt/platform"),),
            dirs=("/tmp", "/opt/platform", "/usr/local/nvidia/lib64", "/gcs"),
            user=("trainer", 1000, 100),
        ),
    }
)


# Scripts in the charts' containers (`command: [bash, -c, ...]`, a ConfigMap's script). A GKE node is
# Container-Optimized OS as the VMs are (GKE's node images: https://cloud.google.com/kubernetes-engine/docs/concepts/
# node-images); the TCPXO host set-up enters the node's namespaces with `nsenter -at 1`, keeping its container's PATH.
GKE_NODE_IMAGES = "https://cloud.google.com/kubernetes-engine/docs/concepts/node-images"
# What a Debian- or Ubuntu-based image has whatever else it installs (the platform's images start from
# python:3.12-slim-bookworm and rayproject/ray, Ubuntu): bash, coreutils, grep, sed, findutils, mawk
# (https://packages.debian.org/bookworm/ essential and required packages). The TCPXO profile the GPU jobs source
# calls `ls`.
DEBIAN_BASE_TOOLS = frozenset(
    [
        "bash",
        "sh",
        "dash",
        "ls",
        "cat",
        "cp",
        "mv",
        "rm",
        "ln",
        "mkdir",
        "rmdir",
        "chmod",
        "chown",
        "touch",
        "head",
        "tail",
        "cut",
        "tr",
        "sort",
        "uniq",
        "wc",
        "env",
        "dirname",
        "basename",
        "date",
        "stat",
        "readlink",
        "realpath",
        "tee",
        "mktemp",
        "seq",
        "printf",
        "echo",
        "test",
        "true",
        "false",
        "sleep",
        "id",
        "nproc",
        "uname",
        "grep",
        "egrep",
        "sed",
        "awk",
        "mawk",
        "find",
        "xargs",
    ]
)
# An image the platform does not build and whose file list is not known offline: every command its script calls is
# taken to be there (a stand-in that logs the call); ShellCheck, bash -euo pipefail and the file and PATH facts still
# apply. What only the image itself shows: that each of those commands is really in it.
UNKNOWN_IMAGE = "the image's contents are not known offline: each command the script calls is taken as present"

HOSTS.update(
    {
        # The TCPXO host set-up of the gpu-networking chart: `nsenter -at 1 -- bash -c` from a privileged
        # container, so it runs in the node's (COS) mount namespace as root, with the container's PATH.
        "gke-cos-node": Host(
            name="gke-cos-node",
            description="a GKE node on Container-Optimized OS, entered with nsenter -at 1 from a privileged pod",
            path=STANDARD_DIRS,
            commands=COS_COMMANDS,
            read_only=COS_READ_ONLY,
            noexec=COS_NOEXEC,
            userns_restricted=False,
            checked=CHECKED,
            sources=(GKE_NODE_IMAGES, COS_DISKS, COS_SECURITY, GKE_TCPXO_HOST, "nsenter(1) (-a: all namespaces)"),
            locations=(("iptables", "/sbin"),),
            env=(("HOME", "/root"),),
            dirs=("/etc", "/var/lib", "/dev", "/run", "/tmp", "/home", "/mnt/disks", "/home/kubernetes/bin"),
            exec_dirs=(*COS_EXEC_DIRS, "/home/kubernetes/bin"),
        ),
        # A chart container of the TCPXO plugin image on GKE (the NCCL test's JobSet), as root.
        "gke-tcpxo-image": Host(
            name="gke-tcpxo-image",
            description="a GKE pod running the TCPXO plugin image (as root)",
            path=("/usr/local/nvidia/bin", "/usr/local/cuda/bin", *STANDARD_DIRS),
            commands=TCPXO_IMAGE_COMMANDS,
            read_only=(),
            noexec=(),
            userns_restricted=False,
            checked=CHECKED,
            sources=(TCPXO_IMAGE,),
            env=(("HOME", "/root"),),
            dirs=("/tmp", "/root", "/usr/local/nvidia/lib64", "/scripts", "/config"),
        ),
        # Any other chart container (the plugin installer, the platform's trainer-gpu and converter images).
        "gke-container": Host(
            name="gke-container",
            description=f"a GKE pod's container ({UNKNOWN_IMAGE})",
            path=STANDARD_DIRS,
            commands=DEBIAN_BASE_TOOLS,
            read_only=(),
            noexec=(),
            userns_restricted=False,
            checked=CHECKED,
            sources=("https://kubernetes.io/docs/tasks/inject-data-application/define-command-argument-container/",),
            env=(("HOME", "/root"),),
            dirs=("/tmp", "/root", "/config", "/scripts", "/var/lib", "/usr/local", "/data"),
        ),
    }
)
