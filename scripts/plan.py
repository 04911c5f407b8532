"""`make plan`, all or nothing: synthesize every environment, run the rules and the policy gate, write the
plan review, and only then put the result in place of the previous `cdktf.out`.

Each step runs as `make <step>` would run it, on a staging copy (`<outdir>.next`). When every step
passes, the staging copy replaces `<outdir>`. When one refuses, `<outdir>` stays exactly as it was (the
last good stacks with their review) and the refused output moves to `<outdir>.failed` for a look.

With `--env NAME` (`make plan ENV=NAME`) only that environment is planned: every step runs with
PLATFORM_ENVS=NAME, and only its parts of the staging copy (its stack, review, blueprints, requests, scripts,
rendered releases and placement) replace its parts of `<outdir>`; the other environments' output and reviews stay
exactly as they were. Skips no planned stack needs are then not stale (the other stacks may need them).

Steps that do not read each other's output run side by side (`NEEDS`): the Slurm, Vertex AI and VM steps and the
scripts generated from the environment files, which read only those files, beside the synth; the policy gate beside
the charts' scripts, both after the rules. With a baseline and the real engine built (`make tofu`), an `engine` step
beside the rules plans the change with OpenTofu and the real providers, and the review takes its actions from that
plan (infra/review/real_plan.py); without the engine the step says so and the review's actions are its own.
Each step's output is held and printed whole, in the steps' order. The environment files are loaded and checked
once before any step starts, so a bad file is refused once, by name, and no step is started for it.

Exit codes: 0 every step passed; otherwise the failing step's own code (2 a bad environment file or
usage, 1 a policy or rule violation or a refused blueprint, 3 a review that blocks a destroy or replacement).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from scripts.parser import ArgumentParser, refuse

Step = tuple[str, list[str], dict[str, str]]


def steps(staging: Path, base: Path | None, env: str | None = None) -> list[Step]:
    """The steps of `make plan`, each as (name, argv, extra environment), writing into `staging`; with `env`, each
    step is given PLATFORM_ENVS=env (synth writes that stack alone, the others write that environment's parts)."""
    py = sys.executable
    review = [py, "-m", "scripts.review", "--outdir", str(staging), *(["--base", str(base)] if base else [])]
    only = {"PLATFORM_ENVS": env} if env else {}
    planned: list[Step] = [
        ("synth", [py, "-m", "infra"], {"CDKTF_OUTDIR": str(staging), **only}),
        # The rules before Checkov: a refusal of the rules comes in seconds, and Checkov takes the longest.
        ("rules", [py, "-m", "scripts.rules", str(staging / "stacks")], only),
        (
            "policy",
            [py, "-m", "infra.policy", str(staging / "stacks"), "--rendered", str(staging / "rendered")]
            + (["--partial"] if env else []),
            only,
        ),
        # The Slurm clusters' Cluster Toolkit blueprints, validated against the pinned module interfaces.
        ("slurm", [py, "-m", "scripts.slurm", "write", str(staging)], only),
        # The Vertex AI jobs' requests and the VM groups' bulkInsert requests, held to the client libraries' types.
        ("vertex", [py, "-m", "scripts.vertex", "write", str(staging)], only),
        ("vms", [py, "-m", "scripts.vms", "write", str(staging)], only),
        # Every generated shell script: ShellCheck, bash -euo pipefail against its host's facts, the host rules; those
        # generated from the environment files, then the charts' (from the releases the rules step rendered).
        ("scripts", [py, "-m", "scripts.shell", "check", str(staging), "--part", "generated"], only),
        ("chart-scripts", [py, "-m", "scripts.shell", "check", str(staging), "--part", "charts"], only),
        ("review", review, only),  # its paths name the staging copy; the final ones are printed at the end
    ]
    if base is None:
        return planned
    # With a baseline, the real providers' plan of the change, where the engine is built (never waiting for its
    # build): the review reads its actions (infra/review/real_plan.py) and says where its own differ.
    engine = [py, "-m", "scripts.tofu", "plan", "--base", str(base), "--stacks", str(staging)]
    engine += ["--out", str(staging / "tofu"), "--if-built", "--no-gate"]
    return [*planned[:-1], ("engine", engine, only), planned[-1]]


def _is_of(entry: Path, env: str) -> bool:
    """Whether an entry of an output folder (cdktf.out/<folder>/<entry>) belongs to environment `env`."""
    return entry.name.split(".")[0] in (env, f"platform-{env}")


def _merged(staging: Path, outdir: Path, env: str) -> Path:
    """A copy of `outdir` whose parts of `env` are the staging copy's (everything else as it was), beside them."""
    merged = outdir.with_name(f"{outdir.name}.merge")
    shutil.rmtree(merged, ignore_errors=True)
    if outdir.exists():
        shutil.copytree(outdir, merged, symlinks=True)
    else:
        merged.mkdir()
    for folder in sorted(p for p in staging.iterdir() if p.is_dir()):
        target = merged / folder.name
        target.mkdir(exist_ok=True)
        for old in [e for e in target.iterdir() if _is_of(e, env)]:
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old)
            else:
                old.unlink()
        for new in [e for e in folder.iterdir() if _is_of(e, env)]:
            new.rename(target / new.name)
    # cdktf's manifest lists every stack: the others' entries stay.
    manifest, planned = merged / "manifest.json", staging / "manifest.json"
    if planned.exists():
        stacks = json.loads(manifest.read_text()).get("stacks", {}) if manifest.exists() else {}
        new = json.loads(planned.read_text())
        new["stacks"] = {**stacks, **new.get("stacks", {})}
        manifest.write_text(json.dumps(new, indent=2) + "\n")
    shutil.rmtree(staging)
    return merged


# What the plan (and the commands that write beside it: `make synth`, `platform tofu plan`) writes at the top of its
# output folder.
PLAN_ENTRIES = frozenset(
    {"manifest.json", "stacks", "bootstrap", "placement", "rendered", "review", "scripts", "slurm", "vertex", "vms",
     "tofu"}
)  # fmt: skip


def not_a_plan_folder(outdir: Path) -> str | None:
    """Why `outdir` is not a folder the plan may replace, or None. The plan replaces its output folder whole, so it
    writes only a folder it owns: one that does not exist yet, or one that holds nothing but what a plan writes
    (PLAN_ENTRIES: an earlier plan's output, an empty folder). Anything else (OUT=. or OUT=<a folder of yours>)
    would be deleted."""
    resolved = outdir.resolve()
    repo = Path(__file__).resolve().parents[1]
    if resolved in (repo, *repo.parents, Path.home()):
        return f"OUT={outdir}: the plan replaces its output folder whole, and {resolved} holds the checkout or home"
    if not resolved.exists():
        return None
    if not resolved.is_dir():
        return f"OUT={outdir}: {resolved} is a file, not a folder"
    foreign = sorted(p.name for p in resolved.iterdir() if p.name not in PLAN_ENTRIES)
    if not foreign:
        return None
    return (
        f"OUT={outdir}: {resolved} holds what no plan writes ({', '.join(foreign[:3])}"
        f"{', ...' if len(foreign) > 3 else ''}): the plan replaces its output folder whole"
    )


def _replace(source: Path, target: Path) -> None:
    """Move `source` to `target`, removing whatever `target` was."""
    old = target.with_name(f".{target.name}-old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    source.rename(target)
    shutil.rmtree(old, ignore_errors=True)


# What each step reads of the others' output: it starts when those have passed. A step not named here (review, or
# any step of a list given to run_plan) waits for every step before it. Slurm, Vertex AI, VMs and the scripts
# generated from the environment files read only those files; the policy gate and the charts' scripts read the
# synthesized stacks and the releases the rules step rendered; the rules come before Checkov so that a refusal of
# the rules comes in seconds.
NEEDS: dict[str, tuple[str, ...]] = {
    "synth": (),
    "slurm": (),
    "vertex": (),
    "vms": (),
    "scripts": (),
    "rules": ("synth",),
    "policy": ("rules",),
    "chart-scripts": ("rules",),
    "engine": ("synth",),
}


@dataclass
class _Step:
    name: str
    argv: list[str]
    extra: dict[str, str]
    needs: list[str]
    process: subprocess.Popen[bytes] | None = None
    out: IO[bytes] | None = None
    err: IO[bytes] | None = None
    began: float = 0.0
    took: float = 0.0
    code: int | None = None  # its exit code once it ended by itself
    stopped: bool = False  # stopped because another step failed

    def summary(self) -> dict[str, object]:
        """The step as --json reports it."""
        return {
            "name": self.name,
            "started_s": round(self.began, 1),
            "seconds": round(self.took, 1),
            "exit": self.code,
            "stopped": self.stopped,
        }

    def show(self, moved: tuple[Path, Path] | None = None, *, quiet_stdout: bool = False) -> None:
        """Print its output whole: its heading, then what it wrote to stdout and to stderr; `moved` (staging, where
        it goes): the paths it printed, named where they will be once the plan ends; `quiet_stdout`: its stdout to
        stderr too (--json keeps stdout for the one JSON document)."""
        if self.stopped:
            print(f"plan: {self.name} stopped (a step beside it failed)", file=sys.stderr, flush=True)
            return
        print(f"plan: {self.name} ({self.began:.0f} s, took {self.took:.0f} s)", file=sys.stderr, flush=True)
        for mine, stream in ((self.out, sys.stderr if quiet_stdout else sys.stdout), (self.err, sys.stderr)):
            assert mine is not None
            mine.seek(0)
            text = mine.read()
            if moved is not None:
                text = text.replace(str(moved[0]).encode(), str(moved[1]).encode())
            stream.buffer.write(text)
            stream.flush()


def _needs(planned: Sequence[Step], i: int) -> list[str]:
    name = planned[i][0]
    names = {n for n, _, _ in planned}
    return [n for n in NEEDS[name] if n in names] if name in NEEDS else [n for n, _, _ in planned[:i]]


def _stop(steps: list[_Step]) -> None:
    """Stop these running steps, with whatever each started (each runs in a session of its own)."""
    for step in steps:
        assert step.process is not None
        step.stopped = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(step.process.pid, signal.SIGTERM)
    for step in steps:
        assert step.process is not None
        try:
            step.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(step.process.pid, signal.SIGKILL)
            step.process.wait()


def _wait_any(running: list[_Step]) -> _Step:
    """A running step that has ended (waits for one)."""
    while True:
        for step in running:
            assert step.process is not None
            if step.process.poll() is not None:
                return step
        time.sleep(0.05)


def _moved(places: tuple[Path, Path, Path] | None, *, failed: bool) -> tuple[Path, Path] | None:
    if places is None:
        return None
    staging, outdir, refused = places
    return (staging, refused if failed else outdir)


def _run_steps(
    planned: Sequence[Step],
    started: float,
    places: tuple[Path, Path, Path] | None = None,
    *,
    quiet_stdout: bool = False,
    ran: list[_Step] | None = None,
) -> tuple[str, int] | None:
    """Run the steps, side by side where NEEDS allows (as many at a time as there are cores, two at least),
    printing each one's output whole in the steps' order. Once a step fails no step starts, and the ones running
    are stopped. `places` (staging, outdir, failed): a step's paths under the staging copy are printed where they
    will be, the output folder while every step passes and the refused output's folder once one failed. Returns
    (name, exit code) of the first step, in the steps' order, that failed; None if all passed; `ran` gets the steps.
    """
    steps = [_Step(name, list(argv), extra, _needs(planned, i)) for i, (name, argv, extra) in enumerate(planned)]
    if ran is not None:
        ran.extend(steps)
    by_name = {step.name: step for step in steps}
    limit = max(2, os.cpu_count() or 2)
    shown = 0
    running: list[_Step] = []
    with contextlib.ExitStack() as files:
        try:
            while True:
                failed = any(step.code not in (None, 0) for step in steps)
                for step in steps:
                    ready = all(by_name[n].code == 0 for n in step.needs)
                    if not failed and step.process is None and ready and len(running) < limit:
                        step.out = files.enter_context(tempfile.TemporaryFile())
                        step.err = files.enter_context(tempfile.TemporaryFile())
                        step.began = time.monotonic() - started
                        env = {**os.environ, **step.extra}
                        step.process = subprocess.Popen(
                            step.argv, env=env, stdout=step.out, stderr=step.err, start_new_session=True
                        )
                        running.append(step)
                if not running:
                    break
                ended = _wait_any(running)
                running.remove(ended)
                assert ended.process is not None
                ended.code = ended.process.returncode
                ended.took = time.monotonic() - started - ended.began
                if ended.code != 0:
                    _stop(running)
                    running.clear()
                while shown < len(steps) and steps[shown].code is not None:
                    moved = _moved(places, failed=any(step.code not in (None, 0) for step in steps))
                    steps[shown].show(moved, quiet_stdout=quiet_stdout)
                    shown += 1
        finally:
            _stop(running)
        # After a failure: the steps that ended or were stopped and are not shown yet (a failed step may have come
        # after one that was stopped).
        for step in steps[shown:]:
            if step.code is not None or step.stopped:
                step.show(_moved(places, failed=True), quiet_stdout=quiet_stdout)
    return next(((s.name, s.code) for s in steps if s.code is not None and s.code != 0), None)


def run_plan(
    outdir: Path,
    planned: Sequence[Step] | None = None,
    *,
    base: Path | None = None,
    env: str | None = None,
    as_json: bool = False,
) -> int:
    """Run the steps on a staging copy; swap it in only if all pass (with `env`, that environment's parts of it
    alone). Returns the exit code; `as_json`: the steps' output on stderr and one JSON document on stdout
    (docs/plan.schema.json)."""
    outdir = outdir.resolve()
    staging = outdir.with_name(f"{outdir.name}.next")
    failed = outdir.with_name(f"{outdir.name}.failed")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    started = time.monotonic()
    ran: list[_Step] = []
    refused = _run_steps(
        planned if planned is not None else steps(staging, base, env),
        started,
        (staging, outdir, failed),
        quiet_stdout=as_json,
        ran=ran,
    )
    reviews: list[Path] = []
    if refused is not None:
        name, code = refused
        _replace(staging, failed)
        kept = f"{outdir} is unchanged" if outdir.exists() else f"{outdir} was not written"
        print(
            f"error: make plan failed at `{name}` (exit {code}): {kept}; the refused output is in {failed} (the "
            "paths above name it there)",
            file=sys.stderr,
        )
    else:
        code = 0
        _replace(_merged(staging, outdir, env) if env else staging, outdir)
        shutil.rmtree(failed, ignore_errors=True)
        written = (
            f"{outdir}'s parts of {env} written (the other environments' as they were)" if env else f"{outdir} written"
        )
        print(f"plan: every step passed in {time.monotonic() - started:.0f} s; {written}", file=sys.stderr)
        reviews = sorted((outdir / "review").glob(f"{env}.md" if env else "*.md"))
        for review in reviews:
            print(f"review: {review}", file=sys.stderr if as_json else sys.stdout)
        if reviews:
            print(
                f"next: read the review{'s' if len(reviews) > 1 else ''} above (the same facts as JSON beside each, "
                f"{reviews[0].with_suffix('.json').name}); a pull request shows it as its plan comment",
                file=sys.stderr,
            )
    if as_json:
        document = {
            "schema": PLAN_SCHEMA,
            "exit": code,
            "environment": env,
            "outdir": str(outdir),
            "seconds": round(time.monotonic() - started, 1),
            "steps": [step.summary() for step in ran],
            "failed_step": refused[0] if refused else None,
            "refused_output": str(failed) if refused else None,
            "reviews": [
                {"environment": r.stem, "markdown": str(r), "json": str(r.with_suffix(".json"))} for r in reviews
            ],
        }
        print(json.dumps(document, indent=2))
    return code


PLAN_SCHEMA = "platform-plan/1"


class BaselineError(ValueError):
    """A ref the baseline cannot be made from."""


BASELINES = Path(".cache/baselines")


def baseline_of(ref: str, cache: Path = BASELINES) -> Path:
    """The cdktf.out that the commit `ref` names synthesizes: its tree exported (git archive) and synthesized with
    this checkout's installed tools, once per commit (`<cache>/<commit>/cdktf.out`). Before, `BASE=` needed a
    baseline built by hand in another checkout."""
    found = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], capture_output=True, text=True, check=False
    )
    commit = found.stdout.strip()
    if found.returncode or not commit:
        raise BaselineError("not a commit of this repository (git rev-parse --verify found nothing)")
    done = cache / commit
    if (done / "cdktf.out" / "stacks").is_dir():
        print(f"plan: baseline {ref} ({commit[:12]}): {done / 'cdktf.out'} (made before)", file=sys.stderr)
        return done / "cdktf.out"
    staging = cache / f"{commit}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", "--format=tar", commit], capture_output=True, check=False)
    if archive.returncode:
        raise BaselineError(f"git archive {commit} failed: {archive.stderr.decode(errors='replace').strip()}")
    subprocess.run(["tar", "-x", "-C", str(staging)], input=archive.stdout, check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PLATFORM_ENVIRONMENTS_DIR", "PLATFORM_ENVS")}
    synth = subprocess.run(
        [sys.executable, "-m", "infra"],
        cwd=staging,
        env={**env, "PYTHONPATH": str(staging.resolve()), "CDKTF_OUTDIR": str((staging / "cdktf.out").resolve())},
        capture_output=True,
        text=True,
        check=False,
    )
    if synth.returncode:
        shutil.rmtree(staging, ignore_errors=True)
        raise BaselineError(f"{commit[:12]} does not synthesize with this checkout's tools:\n{synth.stderr[-2000:]}")
    shutil.rmtree(done, ignore_errors=True)
    staging.rename(done)
    print(f"plan: baseline {ref} ({commit[:12]}) synthesized into {done / 'cdktf.out'}", file=sys.stderr)
    return done / "cdktf.out"


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m scripts.plan", description=__doc__.split("\n\n")[0], epilog="exit codes: see the module doc"
    )
    parser.add_argument("--outdir", type=Path, default=Path("cdktf.out"), help="where the plan goes (cdktf.out)")
    parser.add_argument("--base", type=Path, default=None, help="a baseline cdktf.out for the review's diff")
    parser.add_argument("--env", default=None, help="plan this environment only; the others' output stays as it was")
    parser.add_argument(
        "--base-ref",
        default=None,
        help="a git ref (main, a tag, a commit): the baseline is what it synthesizes (cached per commit)",
    )
    parser.add_argument(
        "--json", action="store_true", help="one JSON document on stdout (docs/plan.schema.json); the steps on stderr"
    )
    args = parser.parse_args(argv)
    started = time.monotonic()

    def refused(error: Exception | str, step: str, then: str = "") -> int:
        """A refusal before any step ran: on stderr, and with --json the plan's document too (no step ran)."""
        code = refuse(error, then=then)
        if args.json:
            document = {
                "schema": PLAN_SCHEMA, "exit": code, "environment": args.env, "outdir": str(args.outdir),
                "seconds": round(time.monotonic() - started, 1), "steps": [], "failed_step": step,
                "refused_output": None, "reviews": [],
            }  # fmt: skip
            print(json.dumps(document, indent=2))
        return code

    problem = not_a_plan_folder(args.outdir)
    if problem:
        return refused(problem, "outdir", "nothing was written or deleted; give OUT= a new folder or an earlier plan's")
    if args.base_ref is not None:
        if args.base is not None:
            return refused("give --base or --base-ref (BASE or BASE_REF), not both", "baseline")
        try:
            args.base = baseline_of(args.base_ref)
        except BaselineError as err:
            return refused(f"BASE_REF={args.base_ref}: {err}", "baseline")
    from infra.config import ConfigError, environment_file, environments_dir
    from infra.synth.load import load_planned

    if args.env is not None:
        try:
            environment_file(args.env)
        except ConfigError as err:
            return refused(err, "environments")
    # Every environment file loaded and checked once, before any step: a bad file is refused here, by name, and
    # not by each of the steps that would start side by side.
    try:
        load_planned(environments_dir())
    except ConfigError as err:
        return refused(
            err, "environments", f"error: make plan refused the environment files; {args.outdir} is unchanged"
        )
    return run_plan(args.outdir, base=args.base, env=args.env, as_json=args.json)


if __name__ == "__main__":
    sys.exit(main())
