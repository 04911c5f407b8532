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
UBUNTU_2404_BASE = frozenset(
    [
        "bash",
        "sh",
        "dash",
        "cat",
        "cp",
        "mv",
        "rm",
        "ln",
        "mkdir",
        "rmdir",
        "chmod",
        "chown",
        "ls",
        "grep",
        "sed",
        "awk",
        "mawk",
        "tee",
        "touch",
        "mktemp",
        "seq",
        "sleep",
        "echo",
        "printf",
        "test",
        "true",
        "false",
        "head",
        "tail",
        "cut",
        "tr",
        "xargs",
        "find",
        "sort",
        "uniq",
        "wc",
        "env",
        "id",
        "hostname",
        "readlink",
        "dirname",
        "basename",
        "date",
        "kill",
        "ps",
        "stat",
        "realpath",
        "tar",
        "gzip",
        "install",
        "sync",
        "timeout",
        "nproc",
        "uname",
        "whoami",
        "getent",
        "flock",
        "mount",
        "umount",
        "findmnt",
        "lsblk",
        "blkid",
        "mkfs.ext4",
        "sysctl",
        "modprobe",
        "lsmod",
        "insmod",
        "systemctl",
        "systemd-mount",
        "journalctl",
        "udevadm",
        "apt",
        "apt-get",
        "apt-mark",
        "apt-cache",
        "dpkg",
        "dpkg-deb",
        "dpkg-query",
        "curl",
        "wget",
        "lspci",
        "ip",
        "lsb_release",
        "python3",
        "snap",
        "gcloud",
        "gsutil",
        "nvidia-smi",
        "sudo",
        "runuser",
        "su",
        "logger",
    ]
)
UBUNTU_2404_LOCATIONS = (("gcloud", "/snap/bin"), ("gsutil", "/snap/bin"), ("snap", "/usr/bin"))

# What Slurm-GCP's ansible playbook adds to the image at the pinned tag (the Slurm node image of every partition,
# the controller and the login node): Slurm's commands, enroot with Pyxis, gcsfuse, Open MPI.
SLURM_GCP_IMAGE = frozenset(
    [
        "sbatch",
        "srun",
        "salloc",
        "scontrol",
        "sinfo",
        "squeue",
        "scancel",
        "sacct",
        "slurmd",
        "slurmctld",
        "enroot",
        "gcsfuse",
        "mpirun",
        "mpicc",
        "mpicxx",
        "nvidia-container-cli",
    ]
)

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
        env=(("HOME", "/home/user"),),
    ),
}
