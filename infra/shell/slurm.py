"""The Slurm cluster's generated scripts, read from the blueprint `infra.slurm.blueprint` writes (what gcluster
deploys, not a second rendering): the image build's and the nodes' startup-script runners, each GPUDirect partition's
prolog and epilog, and the batch jobs, each with the host it runs on and what that host holds when it runs."""

from __future__ import annotations

import re
import shlex
from typing import Any

from infra.catalogue import upstream
from infra.catalogue.hosts import PACKAGE_COMMANDS, USERNS_SYSCTL
from infra.config import Environment
from infra.shell import GeneratedScript, Pinned
from infra.slurm import jobs as slurm_jobs
from infra.slurm.blueprint import SLURM_ADM, blueprint

# Which host runs the runners of each startup-script module of the blueprint.
RUNNER_HOSTS = {
    "image_script": "ubuntu-2404-image-build",
    "compute_startup": "ubuntu-2404-slurm-startup",
    "controller_startup": "ubuntu-2404-slurm-startup",
}
PROFILE_KEY = "tcpxo-nccl-env-profile"
_APT_INSTALL = re.compile(r"apt-get install\b([^\n;&|]*)")


def unescape(content: str) -> str:
    """A blueprint string as the host receives it: gcluster reads `\\$(` as a literal `$(`."""
    return content.replace("\\$(", "$(")


def _modules(bp: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["id"]: m for group in bp["deployment_groups"] for m in group["modules"]}


def installed_commands(texts: list[str], settings: dict[str, Any]) -> frozenset[str]:
    """The commands an image build adds: its startup-script module's settings (Ansible, Docker) and every package
    its runners `apt-get install`."""
    found: set[str] = set()
    if settings.get("install_ansible"):
        found |= PACKAGE_COMMANDS["ansible"]
    if (settings.get("docker") or {}).get("enabled"):
        found |= PACKAGE_COMMANDS["docker-ce"]
    for text in texts:
        for match in _APT_INSTALL.finditer(text.replace("\\\n", " ")):
            for word in shlex.split(match.group(1), comments=True):
                if not word.startswith("-"):
                    found |= PACKAGE_COMMANDS.get(word.split("=", 1)[0], frozenset())
    return frozenset(found)


def lifts_userns(texts: list[str]) -> bool:
    """Whether an image build turns Ubuntu's user-namespace restriction off for good (a sysctl.d file setting 0)."""
    setting = re.compile(re.escape(USERNS_SYSCTL) + r"\s*=\s*0")
    return any(setting.search(t) and "/etc/sysctl.d/" in t for t in texts)


def scripts(env: Environment) -> list[GeneratedScript]:
    assert env.slurm is not None
    bp = blueprint(env)
    modules = _modules(bp)
    image = modules["image_script"]["settings"]
    image_texts = [unescape(r["content"]) for r in image["runners"] if r["type"] == "shell"]
    image_commands = installed_commands(image_texts, image)
    lifted = lifts_userns(image_texts)
    installed: list[tuple[str, str | Pinned]] = []  # what the image and the controller put on every node
    out: list[GeneratedScript] = []

    def add(name: str, text: str, host: str, **extra: Any) -> None:
        # Every script sees what the image build installs (the build's own runners: what its runners install, in
        # any order, and what its module's settings install before them); the build VM keeps Ubuntu's restriction.
        out.append(
            GeneratedScript(
                env=env.name,
                name=name,
                text=text,
                host=host,
                image_commands=image_commands,
                userns_lifted=lifted and host != "ubuntu-2404-image-build",
                **extra,
            )
        )

    prologs: list[tuple[str, str]] = []
    for module_id, host in RUNNER_HOSTS.items():
        settings = modules[module_id]["settings"]
        written: list[tuple[str, str | Pinned]] = []  # the module's data runners so far: the runners run in order
        for runner in settings["runners"]:
            content = unescape(runner["content"])
            destination = runner["destination"]
            if runner["type"] == "shell":
                add(f"slurm/{module_id}/{destination}", content, host, files=tuple(written))
            elif runner["type"] == "data":
                written.append((destination, content))
                installed.append((destination, content))
                if destination.startswith(f"{SLURM_ADM}/scripts/"):
                    prologs.append((destination, content))
    login = modules["controller"]["settings"].get("login_startup_script")
    if login:
        add("slurm/login/login_startup_script", unescape(login), "ubuntu-2404-slurm-startup")

    for path, text in prologs:
        partition = path.rsplit("/rxdm-", 1)[-1]
        nodes = env.slices[env.slurm.partitions[partition].slice].slice.hosts
        for context in ("prolog_slurmd", "epilog_slurmd"):
            add(
                f"slurm/{partition}/rxdm.{context}",
                text,
                "ubuntu-2404-slurm-prolog",
                runtime_env=_prolog_env(env, partition, nodes, context),
                files=tuple(installed),
            )

    plugin = f"{slurm_jobs.HOST.plugin_dir}/nccl-env-profile.sh"
    bucket = gcsfuse_mount(modules["bucket"]["settings"])
    for name, text in slurm_jobs.jobs(env).items():
        if not name.endswith(".sbatch"):
            continue
        sources = (PROFILE_KEY,) if f"source {plugin}" in text else ()
        files: tuple[tuple[str, str | Pinned], ...] = (
            *installed,
            *(((plugin, Pinned(PROFILE_KEY)),) if sources else ()),
        )
        add(
            f"slurm/jobs/{name}",
            text,
            "ubuntu-2404-slurm-job",
            runtime_env=_job_env(env, text),
            files=files,
            sources=sources,
            mounts=(bucket,),
            container_commands=CONTAINER_COMMANDS,
            standins=(("git", _git(upstream.NCCL_TESTS_COMMIT)),),
        )
    return out


# What the jobs' container steps call inside their images (nvcr.io/nvidia/pytorch: Ubuntu with git, make and Open
# MPI's compiler wrappers, https://docs.nvidia.com/deeplearning/frameworks/pytorch-release-notes/; the trainer image's
# python), as stand-ins.
CONTAINER_COMMANDS = frozenset({"git", "make", "mpicc", "mpicxx", "python", "python3"})


def _git(commit: str) -> str:
    """The git stand-in of a job that clones a pinned repository: `clone` makes the folder (as the real one does, as
    the job's user), and `rev-parse HEAD` answers the pinned commit."""
    return f"""
case "$*" in
  clone*) mkdir "${{@: -1}}";;
  *"rev-parse HEAD") echo {commit};;
esac"""


def gcsfuse_mount(settings: dict[str, Any]) -> tuple[str, int, int]:
    """(path, owner uid, directory mode) of the blueprint's gcsfuse bucket as a node mounts it: Slurm-GCP mounts
    network storage from /etc/fstab as root, and gcsfuse shows every inode as owned by the mounting process's uid
    unless `uid=` says otherwise, with `dir_mode` (default 755) enforced by the kernel (gcsfuse docs/semantics.md
    "Permissions and ownership"; jacobsa/fuse adds default_permissions)."""
    options = {}
    for option in str(settings.get("mount_options", "")).split(","):
        key, _, value = option.partition("=")
        options[key] = value
    return settings["local_mount"], int(options.get("uid") or 0), int(options.get("dir_mode") or "755", 8)


def _prolog_env(env: Environment, partition: str, nodes: int, context: str) -> tuple[tuple[str, str], ...]:
    """What slurmd gives a prolog or epilog (SchedMD/slurm prep_script_slurmd.c _build_env): no PATH, no HOME."""
    assert env.slurm is not None
    return (
        ("SLURM_JOB_ID", "4242"),
        ("SLURM_JOBID", "4242"),
        ("SLURM_JOB_NUM_NODES", str(nodes)),
        ("SLURM_JOB_PARTITION", partition),
        ("SLURM_SCRIPT_CONTEXT", context),
        ("SLURM_CLUSTER_NAME", env.slurm.name),
        ("SLURMD_NODENAME", f"{env.slurm.name}-{partition}-0"),
        ("SLURM_JOB_USER", "user"),
        ("SLURM_JOB_UID", "1000"),
    )


def _job_env(env: Environment, text: str) -> tuple[tuple[str, str], ...]:
    """What Slurm adds to a batch script's environment (sbatch's output environment variables)."""
    nodes = re.search(r"^#SBATCH --nodes=(\d+)", text, re.M)
    partition = re.search(r"^#SBATCH --partition=(\S+)", text, re.M)
    return (
        ("SLURM_JOB_ID", "4242"),
        ("SLURM_JOB_NUM_NODES", nodes.group(1) if nodes else "1"),
        ("SLURM_JOB_PARTITION", partition.group(1) if partition else ""),
        ("SLURM_SUBMIT_DIR", "/home/user"),
    )
