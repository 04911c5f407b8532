"""`make plan` is all or nothing: a later step that refuses leaves the last good cdktf.out and its review."""

from __future__ import annotations

import sys
from pathlib import Path

from scripts.plan import run_plan, steps


def _write(path: Path, text: str) -> list[str]:
    """A step that writes `text` to `path`, as synth and review write into the staging copy."""
    return [sys.executable, "-c", f"import pathlib; pathlib.Path({str(path)!r}).write_text({text!r})"]


def test_a_refused_step_leaves_the_previous_plan_as_it_was(tmp_path: Path) -> None:
    outdir = tmp_path / "cdktf.out"
    (outdir / "review").mkdir(parents=True)
    (outdir / "review" / "dev.md").write_text("the last good review")
    staging = tmp_path / "cdktf.out.next"
    refused = [
        ("synth", _write(staging / "stack.json", "new stacks"), {}),
        ("rules", [sys.executable, "-c", "import sys; sys.exit(1)"], {}),
        ("review", _write(staging / "never.md", "x"), {}),
    ]
    assert run_plan(outdir, refused) == 1
    assert [p.name for p in outdir.rglob("*")] == ["review", "dev.md"]
    assert (outdir / "review" / "dev.md").read_text() == "the last good review"
    failed = tmp_path / "cdktf.out.failed"
    assert (failed / "stack.json").read_text() == "new stacks" and not (failed / "never.md").exists()
    assert not staging.exists()


def test_a_plan_whose_steps_all_pass_replaces_the_previous_one(tmp_path: Path) -> None:
    outdir = tmp_path / "cdktf.out"
    outdir.mkdir()
    (outdir / "old.json").write_text("old")
    (tmp_path / "cdktf.out.failed").mkdir()
    staging = tmp_path / "cdktf.out.next"
    assert run_plan(outdir, [("synth", _write(staging / "stack.json", "new"), {})]) == 0
    assert [p.name for p in outdir.iterdir()] == ["stack.json"]
    assert not (tmp_path / "cdktf.out.failed").exists() and not staging.exists()


def test_make_plan_runs_every_step_into_the_staging_copy(tmp_path: Path) -> None:
    staging = tmp_path / "cdktf.out.next"
    planned = steps(staging, base=None)
    names = [name for name, _, _ in planned]
    assert names == ["synth", "policy", "rules", "slurm", "vertex", "vms", "scripts", "review"]
    assert planned[0][2] == {"CDKTF_OUTDIR": str(staging)}
    assert all(str(staging) in " ".join(argv) for _, argv, _ in planned[1:])
