"""The hosts generated shell scripts run on: what each operating system and runtime refuses a script.

Every script `infra.shell.generated_scripts` lists is held to the facts of the host it runs on
(`infra/catalogue/hosts.py`, dated and sourced): the commands its image has and the PATH it runs with, the
directories it cannot write or execute from, and whether unprivileged user namespaces are blocked there. The
commands are read from the script's text (`infra.shell.commands`); `make plan`'s scripts step also runs each script
under bash with `set -euo pipefail` (`infra.shell.run`), which catches what reading it cannot.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from typing import TYPE_CHECKING

from infra.catalogue.hosts import (
    CTK_A3MEGA,
    CTK_USERNS_QUOTE,
    DOCKER_GPUS,
    HOSTS,
    NEEDS,
    SLURM_PROLOG_EPILOG,
    SLURM_PROLOG_PATH_QUOTE,
    SNAP_GCLOUD,
    UBUNTU_USERNS,
    Host,
)
from infra.rules import Finding, rule
from infra.shell.commands import Command, commands

if TYPE_CHECKING:
    from infra.shell import GeneratedScript

SYSTEM = "host operating system"
MOUNT_NOEXEC = "mount(8) (noexec: 'Do not permit direct execution of any binaries on the mounted filesystem')"
MOUNT_RO = "mount(8) (ro: 'Mount the filesystem read-only')"


def _host(script: GeneratedScript) -> Host:
    return HOSTS[script.host]


def _read(script: GeneratedScript) -> list[Command]:
    host = _host(script)
    runtime = dict(host.env) | dict(script.runtime_env)
    return commands(script.text, host.path, runtime.get("HOME", "/root"))


def _where(script: GeneratedScript, command: Command) -> str:
    return f"{script.name}:{command.line}"


def _image_directory(script: GeneratedScript, host: Host, name: str) -> str | None:
    found = host.directory(name)
    if found is None and name in script.image_commands:
        return "/usr/bin"
    return found


def _on_path(directory: str, path: tuple[str, ...]) -> bool:
    # /bin and /sbin are /usr/bin and /usr/sbin on a merged-/usr system (Ubuntu since 20.04, COS).
    merged = {"/bin": "/usr/bin", "/sbin": "/usr/sbin"}
    wanted = merged.get(directory, directory)
    return any(merged.get(p, p) == wanted for p in path)


def _defined_by_script(script: GeneratedScript, name: str) -> bool:
    """A command the script itself installs before calling it (`cat > /usr/local/bin/x`, `install ... /x`)."""
    return f"/{name}" in script.text and (f"> /usr/local/bin/{name}" in script.text)


@rule(
    id="host.command-on-path",
    system=SYSTEM,
    layer="host-run",
    summary=(
        "Every command a generated script runs is on the image of the host it runs on, and in a directory of the "
        "PATH it runs with there (a Slurm prolog gets no PATH, so bash's default: /snap/bin, where Ubuntu's gcloud "
        "is, is not on it); a command called by its full path is where the image has it."
    ),
    source=(
        f"{SLURM_PROLOG_EPILOG}: {SLURM_PROLOG_PATH_QUOTE!r}; bash's default PATH without one "
        f"(config-top.h DEFAULT_PATH_VALUE); {SNAP_GCLOUD}; infra/catalogue/hosts.py (each host's commands, PATH)"
    ),
    subject="script",
)
def _command_on_path(script: GeneratedScript) -> Iterator[Finding]:
    host = _host(script)
    for command in _read(script):
        name = command.name
        if name.startswith(("./", "../")) or name in (":",) or _defined_by_script(script, name):
            continue
        if name.startswith("/"):
            folder, base = posixpath.split(name)
            at = _image_directory(script, host, base)
            if at is None or posixpath.normpath(at) not in (folder, {"/bin": "/usr/bin"}.get(folder)):
                if any(path == name for path, _ in script.files):
                    continue
                yield Finding(
                    _where(script, command),
                    name,
                    f"host {host.name}: the image has no {name} "
                    f"({base + ' is in ' + at if at else 'no ' + base + ' at all'}) [{host.description}]",
                )
            continue
        directory = _image_directory(script, host, name)
        if directory is None:
            yield Finding(
                _where(script, command),
                name,
                f"host {host.name}: the image has no command {name!r} (neither its host record nor what the "
                f"environment's image build installs) [{host.description}]",
            )
        elif not _on_path(directory, command.path):
            yield Finding(
                _where(script, command),
                name,
                f"host {host.name}: {name} is in {directory}, not on the PATH the script runs with there "
                f"({':'.join(command.path)}); set PATH in the script or call {directory}/{name} "
                f"[{host.description}]",
            )


@rule(
    id="host.docker-gpus-needs-toolkit",
    system=SYSTEM,
    layer="host-run",
    summary=(
        "A script that runs `docker run --gpus` runs on an image with the NVIDIA Container Toolkit "
        "(nvidia-container-runtime-hook on PATH): without it dockerd has no GPU device driver and refuses --gpus."
    ),
    source=DOCKER_GPUS,
    subject="script",
)
def _docker_gpus(script: GeneratedScript) -> Iterator[Finding]:
    host = _host(script)
    for command in _read(script):
        for name, argument, needed, _source in NEEDS:
            uses = any(w == argument or w.startswith(argument + "=") for w in command.words)
            if command.name == name and uses and _image_directory(script, host, needed) is None:
                yield Finding(
                    _where(script, command),
                    " ".join(command.words[:2]) + f" ... {argument}",
                    f"host {host.name}: the image has no {needed} (package nvidia-container-toolkit): "
                    f'`{name} {argument}` fails with \'could not select device driver "" with capabilities: '
                    f"[[gpu]]' [{host.description}]",
                )


def _covered(path: str, directories: tuple[str, ...]) -> str | None:
    norm = posixpath.normpath(path)
    for directory in directories:
        if norm == directory or norm.startswith(directory.rstrip("/") + "/"):
            return directory
    return None


def _remounted(commands_before: list[Command], directory: str, option: str) -> bool:
    """Whether an earlier command mounts something writable/exec over `directory` (or a directory under it)."""
    for command in commands_before:
        if command.name != "mount":
            continue
        words = command.words
        target = words[-1] if len(words) > 1 else ""
        opts = ",".join(w for i, w in enumerate(words) if i and words[i - 1] == "-o")
        if option == "exec" and "exec" in opts.split(",") and _covered(directory, (target,)):
            return True
        if option == "rw" and ("-t" in words or "--bind" in words) and _covered(directory, (target,)):
            return True
    return False


@rule(
    id="host.noexec-path",
    system=SYSTEM,
    layer="host-run",
    summary=(
        "A script does not execute a program, or load libraries (LD_LIBRARY_PATH), from a directory its host "
        "mounts noexec, unless it remounted that directory exec first (a bind mount keeps its source's flags)."
    ),
    source=f"{MOUNT_NOEXEC}; infra/catalogue/hosts.py (each host's noexec directories and their sources)",
    subject="script",
)
def _noexec(script: GeneratedScript) -> Iterator[Finding]:
    host = _host(script)
    if not host.noexec:
        return
    read = _read(script)
    for i, command in enumerate(read):
        candidates = [command.name] if command.name.startswith("/") else []
        for word in command.words:
            if word.startswith(("LD_LIBRARY_PATH=", "--env=LD_LIBRARY_PATH=")):
                candidates += [p for p in word.split("=", 2)[-1].split(":") if p.startswith("/")]
        for path in candidates:
            directory = _covered(path, host.noexec)
            if directory and not _remounted(read[:i], posixpath.dirname(path), "exec"):
                yield Finding(
                    _where(script, command),
                    path,
                    f"host {host.name}: {directory} is mounted noexec there: nothing under it can be executed or "
                    f"mapped executable (remount it exec first) [{host.description}]",
                )
    for line_no, line in enumerate(script.text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("export LD_LIBRARY_PATH=") or stripped.startswith("LD_LIBRARY_PATH="):
            value = stripped.split("=", 1)[1].strip("\"'")
            before = [c for c in read if c.line < line_no]
            for path in value.split(":"):
                directory = _covered(path, host.noexec) if path.startswith("/") else None
                if directory and not _remounted(before, path, "exec"):
                    yield Finding(
                        f"{script.name}:{line_no}",
                        path,
                        f"host {host.name}: LD_LIBRARY_PATH names {path}, under {directory}, mounted noexec there: "
                        f"the loader cannot map its libraries [{host.description}]",
                    )


# Commands that write their last argument (cp, mv, ln, install), every argument (mkdir, touch, rm), or a file
# under $HOME (docker's and gcloud's client configuration: ~/.docker/config.json).
_WRITES_LAST = {"cp", "mv", "ln", "install"}
_WRITES_ALL = {"mkdir", "touch", "rm", "tee", "chmod", "chown"}
_WRITES_HOME = {("docker-credential-gcr", "configure-docker"), ("gcloud", "configure-docker")}


@rule(
    id="host.read-only-path",
    system=SYSTEM,
    layer="host-run",
    summary=(
        "A script does not write under a directory its host mounts read-only (redirections, mkdir, cp, tee, ...; "
        "docker's and gcloud's configure-docker write $HOME/.docker), unless it mounted something writable there "
        "first."
    ),
    source=(
        f"{MOUNT_RO}; docker/cli cli/config/config.go (configuration in $DOCKER_CONFIG or $HOME/.docker); "
        "infra/catalogue/hosts.py (each host's read-only directories and their sources)"
    ),
    subject="script",
)
def _read_only(script: GeneratedScript) -> Iterator[Finding]:
    host = _host(script)
    if not host.read_only:
        return
    read = _read(script)
    for i, command in enumerate(read):
        targets = list(command.redirects)
        args = [w for w in command.words[1:] if not w.startswith("-")]
        if command.name in _WRITES_LAST and args:
            targets.append(args[-1])
        elif command.name in _WRITES_ALL:
            targets += args
        sub = command.words[1] if len(command.words) > 1 else ""
        writes_home = (command.name, sub) in _WRITES_HOME or (
            command.name == "gcloud" and "configure-docker" in command.words
        )
        if writes_home and "DOCKER_CONFIG" not in script.text:
            targets.append(posixpath.join(command.home, ".docker/config.json"))
        for target in targets:
            if not target.startswith("/"):
                continue
            directory = _covered(target, host.read_only)
            if directory and not _remounted(read[:i], target, "rw"):
                yield Finding(
                    _where(script, command),
                    target,
                    f"host {host.name}: {directory} is read-only there: {command.name} cannot write {target} "
                    f"[{host.description}]",
                )


@rule(
    id="host.containers-need-userns",
    system=SYSTEM,
    layer="host-run",
    summary=(
        "A script starts containers with enroot or Pyxis (`srun --container-image`, `enroot`) only on a host where "
        "unprivileged user namespaces are allowed: Ubuntu 24.04 blocks them until the image sets "
        "kernel.apparmor_restrict_unprivileged_userns=0, as Cluster Toolkit's A3 Mega example does."
    ),
    source=f"{UBUNTU_USERNS}; {CTK_A3MEGA} (image runner fix_enroot_env.sh: {CTK_USERNS_QUOTE!r})",
    subject="script",
)
def _userns(script: GeneratedScript) -> Iterator[Finding]:
    host = _host(script)
    if not host.userns_restricted or script.userns_lifted:
        return
    for command in _read(script):
        container = command.name == "enroot" or (
            command.name == "srun" and any(w.startswith("--container-image") for w in command.words)
        )
        if container:
            yield Finding(
                _where(script, command),
                " ".join(command.words[:1] + tuple(w for w in command.words if w.startswith("--container-image"))),
                f"host {host.name}: unprivileged user namespaces are restricted there "
                "(kernel.apparmor_restrict_unprivileged_userns=1) and the environment's image build does not lift "
                f"it: enroot cannot create the container's namespace [{host.description}]",
            )
