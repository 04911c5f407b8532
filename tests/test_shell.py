"""Every generated shell script runs: the inventory (infra/shell), the host records it runs against
(infra/catalogue/hosts.py), ShellCheck, execution under bash -euo pipefail with stand-ins, and the host rules."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import Any

import pytest

from infra.catalogue.hosts import HOSTS, Host
from infra.config import Environment
from infra.rules import RULES
from infra.shell import GeneratedScript, Pinned, generated_scripts, pinned
from infra.shell.run import rooted, run_script, shellcheck
from infra.shell.slurm import PROFILE_KEY
from tests.refused import SCRIPT_REFUSED


def test_the_inventory_holds_every_slurm_script_with_a_known_host(envs: dict[str, Environment]) -> None:
    scripts = generated_scripts(envs["dev"])
    names = {s.name for s in scripts}
    assert {
        "slurm/image_script/install_slurm.sh",
        "slurm/image_script/install_tcpxo_host.sh",
        "slurm/compute_startup/wait_for_aperture_devices.sh",
        "slurm/controller_startup/install_platform_scripts.sh",
        "slurm/a3mega/rxdm.prolog_slurmd",
        "slurm/a3mega/rxdm.epilog_slurmd",
        "slurm/jobs/nccl-test.sbatch",
        "slurm/jobs/train.sbatch",
    } <= names
    for script in scripts:
        assert script.host in HOSTS, script.label
        assert "\\$(" not in script.text, "the host receives gcluster's literal, unescaped"
    prolog = next(s for s in scripts if s.name == "slurm/a3mega/rxdm.prolog_slurmd")
    assert HOSTS[prolog.host].path[-1] == ".", "slurmd gives a prolog no PATH: bash's default"
    assert dict(prolog.runtime_env)["SLURM_SCRIPT_CONTEXT"] == "prolog_slurmd" and "PATH" not in dict(
        prolog.runtime_env
    )


def test_every_host_record_is_dated_and_sourced() -> None:
    for host in HOSTS.values():
        assert host.checked >= "2026-01-01" and host.sources, host.name
        for command, directory in host.locations:
            assert host.directory(command) == directory


# --- the harness: ShellCheck, bash -euo pipefail under the host's root, the pinned files ----------------------------

PROFILE = "/var/lib/tcpxo/lib64/nccl-env-profile.sh"


def _script(text: str, host: str = "ubuntu-2404-slurm-job", **extra: Any) -> GeneratedScript:
    return GeneratedScript(env="dev", name=f"test/{host}.sh", text=text, host=host, **extra)


def _sourcing(before: str) -> GeneratedScript:
    return _script(
        f'#!/bin/bash\nset -euo pipefail\n{before}source {PROFILE}\necho "NCCL_PROTO=$NCCL_PROTO"\n',
        sources=(PROFILE_KEY,),
        files=((PROFILE, Pinned(PROFILE_KEY)),),
    )


def test_the_tcpxo_profile_stops_a_set_u_script_unless_its_variables_are_set_first() -> None:
    """What review 4 reproduced against the real v1.0.15 profile, with the file this machine has (the real one where
    fetched, else the stand-in made from its record): NCCL_LIB_DIR is required (`:?`), LD_LIBRARY_PATH is expanded
    without a default."""
    unset = run_script(_sourcing(""))
    assert unset.returncode == 1 and "NCCL_LIB_DIR" in unset.output, unset.output
    no_library_path = run_script(_sourcing("export NCCL_LIB_DIR=/var/lib/tcpxo/lib64\n"))
    assert no_library_path.returncode == 1 and "LD_LIBRARY_PATH: unbound variable" in no_library_path.output
    both = run_script(
        _sourcing('export NCCL_LIB_DIR=/var/lib/tcpxo/lib64\nexport LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"\n')
    )
    assert both.ok and "NCCL_PROTO=Simple,LL128" in both.output, both.output
    assert set(both.pinned) == {PROFILE_KEY}
    print(f"{PROFILE_KEY}: {both.pinned[PROFILE_KEY]}")


def test_the_record_of_the_profile_is_the_real_files_where_it_is_present() -> None:
    """The stand-in is made from the record; the record was written from the real file at the pinned commit. Where
    `make pinned-scripts` could fetch it (GitHub reachable), the record is held to it; the stand-in always is."""
    assert pinned.record_problems(PROFILE_KEY, pinned.standin(PROFILE_KEY)) == []
    real = pinned.real(PROFILE_KEY)
    if real is not None:
        assert pinned.record_problems(PROFILE_KEY, real.read_text()) == []
    else:
        # Not fetched here (CI reaches no GitHub): the record still names the one file it was written from, so
        # `make pinned-scripts` anywhere GitHub answers holds it to that file, checksum first.
        pin = pinned.pinned()[PROFILE_KEY]
        assert re.fullmatch(r"[0-9a-f]{40}", pin.commit) and re.fullmatch(r"[0-9a-f]{64}", pin.sha256)


def test_a_pinned_file_with_another_checksum_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLATFORM_PINNED_SCRIPTS_DIR", str(tmp_path))
    target = tmp_path / pinned.pinned()[PROFILE_KEY].name
    target.parent.mkdir(parents=True)
    target.write_text(": changed\n")
    with pytest.raises(pinned.PinnedFileMismatch, match="is not the pinned"):
        pinned.real(PROFILE_KEY)


def test_absolute_paths_are_read_under_the_scripts_root() -> None:
    text = '#!/bin/bash\nmv "$src" /usr/src/\nls -d "$w"/usr/src/x\ndocker run -v /var/lib:/var/lib x >/dev/null\n'
    assert rooted(text, Path("/R")) == (
        '#!/bin/bash\nmv "$src" /R/usr/src/\nls -d "$w"/usr/src/x\ndocker run -v /R/var/lib:/R/var/lib x >/dev/null\n'
    )
    assert rooted("curl https://github.com/a/b /opt/x", Path("/R")) == "curl https://github.com/a/b /R/opt/x"
    # A parameter's default, and a top directory the host's image has (its record's dirs, the script's files).
    assert (
        rooted("S=${S:-/scripts}; ls a-/scripts", Path("/R"), frozenset({"scripts"}))
        == "S=${S:-/R/scripts}; ls a-/scripts"
    )


def test_a_script_that_installs_and_writes_system_files_changes_nothing_here(envs: dict[str, Environment]) -> None:
    (script,) = [s for s in generated_scripts(envs["dev"]) if s.name.endswith("install_tcpxo_host.sh")]
    before = set(Path("/usr/src").iterdir()) if Path("/usr/src").is_dir() else set()
    outcome = run_script(script)
    assert outcome.ok, outcome.summary()
    assert "dkms install -m dmabuf-import-helper -v 1.1" in outcome.calls
    assert (set(Path("/usr/src").iterdir()) if Path("/usr/src").is_dir() else set()) == before


def test_shellcheck_reads_every_script_and_reports_warnings() -> None:
    bad = _script('#!/bin/bash\nrm -rf "$dir"/*\nfor f in $(ls); do echo "$f"; done\n')
    (found,) = shellcheck([bad]).values()
    assert any("SC2154" in f for f in found) and any("SC2045" in f for f in found), found


def test_a_command_that_is_not_on_the_prologs_path_fails_there_and_is_refused() -> None:
    """slurmd gives a prolog no PATH (bash's default); Ubuntu's gcloud is a snap in /snap/bin."""
    prolog = _script(
        "#!/bin/bash\nset -euo pipefail\ngcloud auth configure-docker --quiet us-docker.pkg.dev\n",
        host="ubuntu-2404-slurm-prolog",
    )
    outcome = run_script(prolog)
    assert outcome.returncode == 127 and "gcloud: command not found" in outcome.output
    (violation,) = RULES["host.command-on-path"].run(prolog)
    line = violation.line("dev")
    assert "gcloud is in /snap/bin, not on the PATH" in line and "prolog_epilog.html" in line
    fixed = _script(
        "#!/bin/bash\nset -euo pipefail\nexport PATH=/usr/bin:/snap/bin\ngcloud auth configure-docker --quiet x\n",
        host="ubuntu-2404-slurm-prolog",
    )
    assert run_script(fixed).ok and RULES["host.command-on-path"].run(fixed) == []


# --- the host rules: each refuses what its host refuses, naming the script, the host fact and the source ------------

# A host with a read-only root and noexec /var, as Container-Optimized OS mounts them (the shape of the facts only).
READ_ONLY_NOEXEC = Host(
    name="test-read-only",
    description="a test host with a read-only / and /root and a noexec /var",
    path=("/usr/bin", "/bin"),
    commands=frozenset({"docker", "docker-credential-gcr", "mount", "mkdir", "cp", "echo"}),
    read_only=("/root", "/usr", "/etc/ro"),
    noexec=("/var", "/home"),
    userns_restricted=False,
    checked="2026-11-26",
    sources=("test",),
    env=(("HOME", "/root"),),
)


@pytest.mark.parametrize("case", sorted(SCRIPT_REFUSED))
def test_a_script_that_breaks_its_hosts_facts_is_refused_naming_script_fact_and_source(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    text, host, rule_id, fragment = SCRIPT_REFUSED[case]
    monkeypatch.setitem(HOSTS, READ_ONLY_NOEXEC.name, READ_ONLY_NOEXEC)
    script = _script(f"#!/bin/bash\nset -euo pipefail\n{text}", host=host)
    found = RULES[rule_id].run(script)
    assert found and fragment in found[0].message, [v.line() for v in found]
    line = found[0].line("dev")
    assert line.startswith(f"dev: {script.name}:3: ") and f"host {host}" in line
    assert f"rule {rule_id}" in line and RULES[rule_id].source in line


def test_what_lifts_a_hosts_fact_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Remounting a directory exec, a writable HOME, the image's sysctl and the toolkit on the image pass."""
    monkeypatch.setitem(HOSTS, READ_ONLY_NOEXEC.name, READ_ONLY_NOEXEC)
    remounted = _script(
        "mount --bind /var/lib/tcpxo /var/lib/tcpxo\nmount -o remount,exec /var/lib/tcpxo\n"
        "docker run --env=LD_LIBRARY_PATH=/var/lib/tcpxo/lib64 image\n"
        "export HOME=/var/lib/platform/home\ndocker-credential-gcr configure-docker --registries=x\n",
        host=READ_ONLY_NOEXEC.name,
    )
    assert RULES["host.noexec-path"].run(remounted) == [] and RULES["host.read-only-path"].run(remounted) == []
    lifted = _script("srun --container-image=x true\n", userns_lifted=True)
    assert RULES["host.containers-need-userns"].run(lifted) == []
    toolkit = _script(
        "docker run --gpus all x\n",
        host="ubuntu-2404-slurm-prolog",
        image_commands=frozenset({"docker", "nvidia-container-runtime-hook"}),
    )
    assert RULES["host.docker-gpus-needs-toolkit"].run(toolkit) == []


# --- make plan's scripts step: every script of every environment, and bad edits refused ------------------------------


def test_make_plan_runs_the_scripts_step(tmp_path: Path) -> None:
    from scripts.plan import steps

    planned = {name: argv[1:] for name, argv, _ in steps(tmp_path, base=None)}
    # The scripts generated from the environment files beside the synth; the charts' once the rules rendered them.
    assert planned["scripts"] == ["-m", "scripts.shell", "check", str(tmp_path), "--part", "generated"]
    assert planned["chart-scripts"] == ["-m", "scripts.shell", "check", str(tmp_path), "--part", "charts"]


@pytest.mark.parametrize("name", ["dev", "prod"])
def test_every_generated_script_runs_and_keeps_its_hosts_facts(envs: dict[str, Environment], name: str) -> None:
    from scripts.shell import check

    scripts = generated_scripts(envs[name])
    failures, used, rules = check(scripts)
    assert failures == [] and rules == 5, "\n".join(failures)
    assert set(used) == {PROFILE_KEY}


def _plan_scripts_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """make plan's scripts step (`python -m scripts.shell check <staging>`), in this process so a test can edit what
    generates the scripts; only the Slurm scripts (other packages' scripts are theirs to test)."""
    from scripts.shell import main

    code = main(["check", str(tmp_path)])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def slurm_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from infra.shell import slurm

    monkeypatch.setattr("infra.shell.generated_scripts", lambda env: slurm.scripts(env) if env.slurm else [])
    monkeypatch.setattr("scripts.shell.generated_scripts", lambda env: slurm.scripts(env) if env.slurm else [])


def test_the_scripts_step_passes_the_shipped_slurm_scripts_and_says_which_profile_it_used(
    slurm_only: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _plan_scripts_step(tmp_path, capsys)
    assert code == 0, err
    assert "generated scripts run and checked (ShellCheck, bash -euo pipefail, host facts: 5 host rules)" in out
    assert f"scripts: pinned file {PROFILE_KEY} (google/nccl-plugin-gpudirect-tcpxo @ v1.0.15" in out
    assert (tmp_path / "scripts" / "dev" / "slurm" / "jobs" / "train.sbatch").is_file()


def test_a_prolog_that_calls_a_command_not_on_its_path_is_refused_by_the_plan(
    slurm_only: None, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Class "host and OS facts": the prolog without its PATH line (as main had it)."""
    from infra.slurm import blueprint

    real = blueprint.rxdm_prolog
    monkeypatch.setattr(
        blueprint,
        "rxdm_prolog",
        lambda slice_: "\n".join(x for x in real(slice_).split("\n") if "export PATH=" not in x),
    )
    code, _, err = _plan_scripts_step(tmp_path, capsys)
    assert code == 1
    assert (
        "dev: slurm/a3mega/rxdm.prolog_slurmd: exit 127 under bash -euo pipefail on host ubuntu-2404-slurm-prolog"
        in err
    )
    assert "gcloud: command not found" in err
    assert "dev: slurm/a3mega/rxdm.prolog_slurmd:" in err and "gcloud is in /snap/bin, not on the PATH" in err
    assert "rule host.command-on-path" in err and "https://slurm.schedmd.com/prolog_epilog.html" in err


def test_a_job_that_sources_the_profile_before_its_variables_is_refused_by_the_plan(
    slurm_only: None, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Class "every generated shell script runs": the batch jobs as main had them (profile first)."""
    monkeypatch.setattr("infra.slurm.jobs.PROFILE_ENV", {})
    code, _, err = _plan_scripts_step(tmp_path, capsys)
    assert code == 1
    assert "dev: slurm/jobs/train.sbatch: exit 1 under bash -euo pipefail on host ubuntu-2404-slurm-job" in err
    assert "NCCL_LIB_DIR: Must set NCCL_LIB_DIR" in err
    assert f"it sources {PROFILE_KEY} (google/nccl-plugin-gpudirect-tcpxo @ v1.0.15 (8c073c57e22e)" in err


def test_an_image_that_keeps_the_userns_restriction_is_refused_by_the_plan(
    slurm_only: None, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Class "host and OS facts": containers on Ubuntu 24.04 without the image's sysctl (as main had it)."""
    monkeypatch.setattr("infra.shell.slurm.lifts_userns", lambda texts: False)
    code, _, err = _plan_scripts_step(tmp_path, capsys)
    assert code == 1
    assert "dev: slurm/jobs/nccl-test.sbatch:" in err and "unprivileged user namespaces are restricted there" in err
    assert "rule host.containers-need-userns" in err and "Required for enroot/pyxis to work" in err


def test_the_command_reader_follows_path_substitutions_heredocs_and_wrappers() -> None:
    from infra.shell.commands import commands

    text = """#!/bin/bash
set -euo pipefail
helper() { echo hi; }
cat > /usr/local/bin/x.sh <<'END'
gcloud inside-a-heredoc
END
for _ in $(seq 3); do [ -n "$(ls -A /dev/x 2>/dev/null)" ] && break; done
export PATH="$PATH:/snap/bin"
sudo -E gcloud auth list 2>&1 | grep -q x || true
helper
exec python3 -m app
"""
    found = [(c.line, c.name, c.path[-1]) for c in commands(text, ("/usr/bin",), "/root")]
    assert found == [
        (4, "cat", "/usr/bin"),
        (7, "seq", "/usr/bin"),
        (7, "ls", "/usr/bin"),
        (9, "sudo", "/snap/bin"),
        (9, "gcloud", "/snap/bin"),
        (9, "grep", "/snap/bin"),
        (11, "python3", "/snap/bin"),
    ]
    assert commands(text, ("/usr/bin",), "/root")[0].redirects == ("/usr/local/bin/x.sh",)


def test_the_metadata_server_and_hostname_stand_ins_read_the_files_a_script_is_given() -> None:
    script = _script(
        "#!/bin/bash\nset -euo pipefail\nmd=http://metadata.google.internal/computeMetadata/v1/instance\n"
        'echo "$(curl -sf -H \'Metadata-Flavor: Google\' "$md/attributes/hosts") on $(hostname -s)"\n'
        'curl -sf -X PUT --data ok "$md/guest-attributes/x/y"\n'
        'if curl -sf "$md/attributes/missing"; then exit 3; fi\n',
        files=(("/run/platform-standins/metadata/attributes/hosts", "a,b"), ("/etc/hostname", "b\n")),
    )
    outcome = run_script(script)
    assert outcome.ok and "a,b on b" in outcome.output, outcome.summary()


@pytest.mark.parametrize(
    ("flags", "free_mib", "expected"),
    [(0, 1024, "/dev/shm"), (os.ST_NOEXEC, 1024, None), (os.ST_RDONLY, 1024, None), (0, 64, None)],
    ids=["writable and executable", "noexec", "read-only", "a container's 64 MiB"],
)
def test_the_scripts_roots_go_to_dev_shm_only_where_its_stand_ins_can_run(
    flags: int, free_mib: int, expected: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The roots hold the stand-ins the scripts execute: a /dev/shm mounted noexec (as hardened hosts mount it),
    read-only or nearly full would fail every script, so they go to the default temporary folder there."""
    from infra.shell import run

    class Mount:
        f_flag = flags
        f_frsize = 4096
        f_bavail = free_mib * 256

    monkeypatch.setattr(run.os, "statvfs", lambda path: Mount())
    monkeypatch.setattr(run.os, "access", lambda path, mode: True)
    run.scratch.cache_clear()
    try:
        assert run.scratch() == expected
    finally:
        run.scratch.cache_clear()


# --- scripts run as the user who runs them -----------------------------------------------------------------------

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="only root can run a script as its host's user (CI is root)")


def _job(envs: dict[str, Environment], name: str) -> GeneratedScript:
    (script,) = [s for s in generated_scripts(envs["dev"]) if s.name == f"slurm/jobs/{name}"]
    return script


@as_root
def test_a_slurm_job_runs_as_the_person_who_submits_it(envs: dict[str, Environment]) -> None:
    """The batch jobs run as an OS Login user (uid 1000 here): nccl-tests is built in their home, and the trainer
    writes its checkpoints into the bucket gcsfuse mounts with the blueprint's modes."""
    assert HOSTS["ubuntu-2404-slurm-job"].user == ("user", 1000, 1000)
    nccl = run_script(_job(envs, "nccl-test.sbatch"))
    assert nccl.ok, nccl.summary()
    assert any(
        c.startswith("git clone") and c.endswith("/home/user/.cache/platform/nccl-tests-v2.19.6.tmp")
        for c in nccl.calls
    ), nccl.calls
    train = _job(envs, "train.sbatch")
    assert train.mounts == (("/gcs/checkpoints", 0, 0o777),)
    assert run_script(train).ok


@as_root
def test_a_job_writing_where_its_user_may_not_fails_as_it_would_there(envs: dict[str, Environment]) -> None:
    """The two jobs as main had them: the build into root's /opt/apps/platform, checkpoints into a bucket mounted
    775 by root (gcsfuse enforces the bits for everyone but the mounting uid)."""
    train = dataclasses.replace(_job(envs, "train.sbatch"), mounts=(("/gcs/checkpoints", 0, 0o775),))
    refused = run_script(train)
    assert not refused.ok and re.search(
        r"cannot create directory .?/gcs/checkpoints/slurm.?: Permission denied", refused.output
    )
    nccl = _job(envs, "nccl-test.sbatch")
    into_opt = dataclasses.replace(nccl, text=nccl.text.replace("${HOME}/.cache/platform", "/opt/apps/platform"))
    refused = run_script(into_opt)
    assert not refused.ok and re.search(
        r"cannot create directory .?/opt/apps/platform/nccl-tests-v2.19.6.tmp", refused.output
    )
    # The same script as root, as the old harness ran it, passes: the user is what finds it.
    as_root_host = dataclasses.replace(HOSTS["ubuntu-2404-slurm-job"], user=("root", 0, 0))
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(HOSTS, "ubuntu-2404-slurm-job", as_root_host)
        assert run_script(into_opt).ok
