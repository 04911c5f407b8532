"""A real one-node Slurm on this machine, for tests: Debian's slurm-wlm (slurmctld, slurmd) with MUNGE.

Started and stopped by the test that uses it: a configuration, state and logs in a temporary directory, the
daemons started as root without systemd or cgroups (proctrack/linuxproc, task/none), stopped by their PIDs.
`make test` installs the packages (the Makefile's slurm prerequisite); where they are missing the tests skip,
except under CI=true, where that is a failure.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

DAEMONS = ("slurmctld", "slurmd", "munged", "sbatch", "sinfo")


# The person who submits the jobs here (`make slurm-local` creates the account): on the cluster an OS Login user,
# never root.
JOB_USER = "platform-user"


def missing() -> list[str]:
    """The Slurm and MUNGE commands this machine lacks."""
    absent = [d for d in DAEMONS if shutil.which(d) is None and not Path(f"/usr/sbin/{d}").exists()]
    try:
        pwd.getpwnam(JOB_USER)
    except KeyError:
        absent.append(f"the user {JOB_USER}")
    return absent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpus() -> int:
    out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True).stdout
    for part in out.split():
        if part.startswith("CPUs="):
            return int(part.split("=", 1)[1])
    return os.cpu_count() or 1


@dataclass
class LocalSlurm:
    """A running one-node cluster: its configuration file, and the environment its clients need."""

    directory: Path
    conf: Path
    node: str

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def sbatch(
        self, script: Path, *, env: dict[str, str], timeout: float = 600, user: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Submit `script` and wait for it to end (`sbatch --wait` exits with the job's exit code); with `user`, the
        job runs as that user (root's `sbatch --uid/--gid`), as a person's job does on the cluster."""
        as_user = [f"--uid={user}", f"--gid={grp.getgrgid(pwd.getpwnam(user).pw_gid).gr_name}"] if user else []
        return subprocess.run(
            ["sbatch", "--wait", "--parsable", *as_user, str(script)],
            cwd=script.parent,
            env={**env, "SLURM_CONF": str(self.conf)},
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def _start(command: list[str], log: Path, env: dict[str, str], user: str | None = None) -> subprocess.Popen[bytes]:
    if user is not None:
        command = ["runuser", "-u", user, "--", *command]
    return subprocess.Popen(command, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)


@contextmanager
def local_slurm(directory: Path, *, ready_timeout: float = 60) -> Iterator[LocalSlurm]:
    """Start munged, slurmctld and slurmd (foreground processes of this test); stop all three at the end."""
    node = socket.gethostname().split(".", 1)[0]
    state = directory / "state"
    spool = directory / "spool"
    for folder in (state, spool):
        folder.mkdir(parents=True)
    # munged refuses a socket, key or log in a directory others may write to, or that its user cannot reach
    # (pytest's temporary directories are root's): its own directories, with names of this run.
    run_dir, log_dir, lib_dir = Path("/run/munge"), Path("/var/log/munge"), Path("/var/lib/munge")
    for folder in (run_dir, log_dir, lib_dir):
        folder.mkdir(mode=0o755, parents=True, exist_ok=True)
        shutil.chown(folder, "munge", "munge")
    tag = f"platform-test-{os.getpid()}"
    socket_path = run_dir / f"{tag}.socket"
    munged = [
        "munged",
        "--foreground",
        f"--socket={socket_path}",
        "--key-file=/etc/munge/munge.key",
        f"--pid-file={run_dir / tag}.pid",
        f"--log-file={log_dir / tag}.log",
        f"--seed-file={lib_dir / tag}.seed",
    ]
    conf = directory / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=platform-test",
                f"SlurmctldHost={node}(127.0.0.1)",
                f"SlurmctldPort={_free_port()}",
                f"SlurmdPort={_free_port()}",
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                "CredType=cred/munge",
                f"AuthInfo=socket={socket_path}",
                "MpiDefault=none",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/none",
                "SchedulerType=sched/backfill",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core",
                "ReturnToService=2",
                f"StateSaveLocation={state}",
                f"SlurmdSpoolDir={spool}",
                f"SlurmctldPidFile={directory / 'slurmctld.pid'}",
                f"SlurmdPidFile={directory / 'slurmd.pid'}",
                f"SlurmctldLogFile={directory / 'slurmctld.log'}",
                f"SlurmdLogFile={directory / 'slurmd.log'}",
                # A job's end reaches `sbatch --wait` in seconds, not tens of them.
                "MinJobAge=4",
                "SchedulerParameters=sched_min_interval=0,batch_sched_delay=0",
                "MailProg=/bin/true",
                f"NodeName={node} NodeAddr=127.0.0.1 CPUs={_cpus()} RealMemory=1000 State=UNKNOWN",
                f"PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        )
    )
    env = {**os.environ, "SLURM_CONF": str(conf)}
    processes: list[subprocess.Popen[bytes]] = []
    try:
        processes.append(_start(munged, directory / "munged.out", env, user="munge"))
        _wait(socket_path.exists, ready_timeout, "munged", directory / "munged.out")
        processes.append(_start(["slurmctld", "-D", "-f", str(conf)], directory / "slurmctld.out", env))
        processes.append(_start(["slurmd", "-D", "-f", str(conf)], directory / "slurmd.out", env))

        def idle() -> bool:
            out = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True)
            return out.returncode == 0 and out.stdout.strip() == "idle"

        _wait(idle, ready_timeout, "the node to be idle", directory / "slurmctld.log")
        yield LocalSlurm(directory=directory, conf=conf, node=node)
    finally:
        for process in reversed(processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in reversed(processes):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def _wait(ready: object, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():  # type: ignore[operator]
            return
        time.sleep(0.2)
    tail = log.read_text()[-2000:] if log.exists() else "(no log)"
    raise TimeoutError(f"waited {timeout:.0f} s for {what}; {log}:\n{tail}")
