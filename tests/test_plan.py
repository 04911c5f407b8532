"""`make plan` is all or nothing: a later step that refuses leaves the last good cdktf.out and its review."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from infra.cdk.layout import read_stack, stack_file
from scripts.plan import main, run_plan, steps
from tests.helpers import ENVIRONMENT_NAMES, REPO
from tests.in_process import run_main


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
    assert names == ["synth", "rules", "policy", "slurm", "vertex", "vms", "scripts", "chart-scripts", "review"]
    assert planned[0][2] == {"CDKTF_OUTDIR": str(staging)}
    assert all(str(staging) in " ".join(argv) for _, argv, _ in planned[1:])


# One environment's parts of a plan's output, as the steps lay them out.
PARTS = [
    "stacks/platform-{env}/cdk.tf.json",
    "review/{env}.md",
    "slurm/{env}/blueprint.yaml",
    "vertex/{env}/train.json",
    "vms/{env}/a3mega/startup.sh",
    "scripts/{env}/prolog.sh",
    "rendered/platform-{env}/ray.json",
    "placement/platform-{env}.md",
]


def _outputs(outdir: Path, env: str, text: str) -> dict[str, str]:
    """Write one environment's parts under `outdir`, each file holding `text`; {relative path: text}."""
    parts = {part.format(env=env): text for part in PARTS}
    for relative, body in parts.items():
        (outdir / relative).parent.mkdir(parents=True, exist_ok=True)
        (outdir / relative).write_text(body)
    return parts


def _tree(outdir: Path) -> dict[str, str]:
    return {str(p.relative_to(outdir)): p.read_text() for p in sorted(outdir.rglob("*")) if p.is_file()}


def _manifest(stacks: list[str]) -> str:
    return json.dumps({"stacks": {s: {"name": s} for s in stacks}, "version": "0.21.0"})


def test_planning_one_environment_leaves_the_others_output_and_review_as_they_were(tmp_path: Path) -> None:
    """`make plan ENV=dev`: dev's parts of cdktf.out are the new plan's; prod's stack, review, blueprints, requests,
    scripts, rendered releases and placement stay byte for byte, and the manifest still lists prod's stack. The
    steps write other environments' parts into the staging copy too (the rules load every file): those are dropped."""
    outdir = tmp_path / "cdktf.out"
    prod_before = _outputs(outdir, "prod", "prod as it was")
    _outputs(outdir, "dev", "dev as it was")
    (outdir / "manifest.json").write_text(_manifest(["platform-dev", "platform-prod"]))
    staging = tmp_path / "cdktf.out.next"
    # The step, as synth and the other steps would: dev's parts, prod's parts again (as the steps that load every
    # environment write them), cdktf's manifest of the stacks it synthesized.
    step = tmp_path / "step.py"
    step.write_text(
        "import pathlib\n"
        f"staging = pathlib.Path({str(staging)!r})\n"
        f"for env, text in (('dev', 'dev planned'), ('prod', 'prod planned again: must not land')):\n"
        f"    for part in {PARTS!r}:\n"
        "        path = staging / part.format(env=env)\n"
        "        path.parent.mkdir(parents=True, exist_ok=True)\n"
        "        path.write_text(text)\n"
        f"(staging / 'manifest.json').write_text({_manifest(['platform-dev'])!r})\n"
    )
    assert run_plan(outdir, [("synth", [sys.executable, str(step)], {})], env="dev") == 0
    after = _tree(outdir)
    assert {k: v for k, v in after.items() if "prod" in k} == prod_before
    assert {v for k, v in after.items() if "dev" in k} == {"dev planned"}
    assert set(json.loads(after["manifest.json"])["stacks"]) == {"platform-dev", "platform-prod"}
    assert not staging.exists() and not (tmp_path / "cdktf.out.merge").exists()


def test_a_refused_plan_of_one_environment_changes_nothing(tmp_path: Path) -> None:
    outdir = tmp_path / "cdktf.out"
    _outputs(outdir, "prod", "prod as it was")
    _outputs(outdir, "dev", "dev as it was")
    before = _tree(outdir)
    staging = tmp_path / "cdktf.out.next"
    refused = [
        ("synth", _write(staging / "stacks.json", "new"), {}),
        ("rules", [sys.executable, "-c", "import sys; sys.exit(1)"], {}),
    ]
    assert run_plan(outdir, refused, env="dev") == 1
    assert _tree(outdir) == before


def test_every_step_of_a_one_environment_plan_is_told_the_environment(tmp_path: Path) -> None:
    planned = steps(tmp_path / "cdktf.out.next", base=None, env="dev")
    assert all(extra.get("PLATFORM_ENVS") == "dev" for _, _, extra in planned)
    # The policy gate judges stale skips only when every stack is there.
    assert dict((name, argv) for name, argv, _ in planned)["policy"][-1] == "--partial"
    assert all("PLATFORM_ENVS" not in extra for _, _, extra in steps(tmp_path / "x", base=None))


def test_with_a_baseline_the_real_providers_plan_the_change_before_the_review_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`make plan BASE_REF=`: an `engine` step after the synth plans the change with OpenTofu where the engine is
    built, writing the plans the review step (after it) reads; without the engine it says so and builds nothing."""
    from scripts import tofu

    staging, base = tmp_path / "cdktf.out.next", tmp_path / "base"
    planned = steps(staging, base=base)
    names = [name for name, _, _ in planned]
    assert names.index("synth") < names.index("engine") < names.index("review") == len(names) - 1
    engine = dict((name, argv) for name, argv, _ in planned)["engine"]
    assert engine[2:] == ["scripts.tofu", "plan", "--base", str(base), "--stacks", str(staging),
                          "--out", str(staging / "tofu"), "--if-built", "--no-gate"]  # fmt: skip
    assert "engine" not in [name for name, _, _ in steps(staging, base=None)]

    monkeypatch.setattr(tofu, "engine_built", lambda: False)
    monkeypatch.setattr(tofu, "build", lambda: pytest.fail("built the engine"))
    assert tofu.main(engine[3:]) == 0
    assert "the engine is not built (`make tofu` builds it)" in capsys.readouterr().out


def test_planning_an_unknown_environment_is_refused_before_any_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--outdir", str(tmp_path / "cdktf.out"), "--env", "no-such-env"]) == 2
    said = capsys.readouterr().err
    assert f"ENV='no-such-env': not one; the environments here: {', '.join(ENVIRONMENT_NAMES)}" in said
    assert not (tmp_path / "cdktf.out").exists() and not (tmp_path / "cdktf.out.next").exists()


@pytest.mark.slow
def test_the_real_synth_and_review_of_one_environment_leave_the_other_review(tmp_path: Path) -> None:
    """The real synth (PLATFORM_ENVS) and review steps of `make plan ENV=dev`, into an outdir under tmp_path."""
    outdir = tmp_path / "cdktf.out"
    (outdir / "review").mkdir(parents=True)
    (outdir / "review" / "prod.md").write_text("prod's review as it was")
    (outdir / "stacks" / "platform-prod").mkdir(parents=True)
    stack_file(outdir, "platform-prod").write_text("{}")
    planned = [
        s for s in steps(outdir.with_name("cdktf.out.next"), base=None, env="dev") if s[0] in ("synth", "review")
    ]
    assert run_plan(outdir, planned, env="dev") == 0
    assert (outdir / "review" / "prod.md").read_text() == "prod's review as it was"
    assert stack_file(outdir, "platform-prod").read_text() == "{}"
    assert (outdir / "review" / "dev.md").read_text().startswith("#")
    assert read_stack(outdir, "platform-dev")["resource"]


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_steps_that_do_not_read_each_other_run_side_by_side_and_print_in_order(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The Slurm step reads only the environment files: it runs beside the synth. The synth here passes only if it
    sees the Slurm step's file while it waits, which it cannot if the steps ran one after the other; the output
    still reads in the steps' order."""
    marker = tmp_path / "slurm-ran"
    planned = [
        (
            "synth",
            _py(
                "import pathlib, sys, time\n"
                f"p = pathlib.Path({str(marker)!r})\n"
                "for _ in range(200):\n"
                "    if p.exists(): print('synth saw slurm'); sys.exit(0)\n"
                "    time.sleep(0.05)\n"
                "sys.exit(1)\n"
            ),
            {},
        ),
        ("slurm", _py(f"import pathlib; pathlib.Path({str(marker)!r}).touch(); print('slurm wrote')"), {}),
    ]
    assert run_plan(tmp_path / "cdktf.out", planned) == 0
    out = capfd.readouterr().out
    assert out.index("synth saw slurm") < out.index("slurm wrote")


def test_a_failed_step_stops_the_steps_beside_it_and_starts_no_other(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    late, never = tmp_path / "slurm-finished", tmp_path / "rules-ran"
    planned = [
        ("synth", _py("import sys, time; time.sleep(0.5); print('bad file', file=sys.stderr); sys.exit(2)"), {}),
        ("slurm", _py(f"import pathlib, time; time.sleep(30); pathlib.Path({str(late)!r}).touch()"), {}),
        ("rules", _py(f"import pathlib; pathlib.Path({str(never)!r}).touch()"), {}),
    ]
    assert run_plan(tmp_path / "cdktf.out", planned) == 2
    err = capfd.readouterr().err
    assert "bad file" in err and "plan: slurm stopped" in err and "make plan failed at `synth` (exit 2)" in err
    assert not never.exists()
    time.sleep(0.5)  # a step left running would still be sleeping: it must be gone, not finish later
    assert not late.exists()


def test_a_bad_environment_file_is_refused_once_before_any_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    environments = tmp_path / "environments"
    environments.mkdir()
    (environments / "dev.yaml").write_text("name: dev\nproject: [not, a, project]\n")
    monkeypatch.setenv("PLATFORM_ENVIRONMENTS_DIR", str(environments))
    assert main(["--outdir", str(tmp_path / "cdktf.out")]) == 2
    err = capsys.readouterr().err
    assert err.count(str(environments / "dev.yaml")) >= 1 and "plan: " not in err
    assert not (tmp_path / "cdktf.out").exists() and not (tmp_path / "cdktf.out.next").exists()


@pytest.mark.slow
def test_a_baseline_is_made_from_a_git_ref_once_per_commit(stacks: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    """`make plan BASE_REF=main` diffs against what the ref synthesizes, with no baseline built by hand;
    a ref that names no commit is refused by name."""
    from scripts.plan import BaselineError, baseline_of

    with pytest.raises(BaselineError, match="not a commit of this repository"):
        baseline_of("no-such-ref-anywhere", tmp_path)
    made = baseline_of("HEAD", tmp_path)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    assert made == tmp_path / commit / "cdktf.out"
    base = {p.parent.name: json.loads(p.read_text()) for p in (made / "stacks").glob("*/cdk.tf.json")}
    assert sorted(base) == ["platform-dev", "platform-prod"]
    # What HEAD synthesizes is what this tree synthesizes, where the tree is HEAD's (CI's clean clone).
    clean = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "infra", "workloads"], cwd=REPO).returncode == 0
    if clean:
        for name, body in base.items():
            assert body == stacks[name.removeprefix("platform-")], name
    assert baseline_of("HEAD", tmp_path) == made, "made once per commit"


def _prints(path: Path, code: int = 0) -> list[str]:
    """A step that writes a file into the staging copy and prints its path, as the real steps do."""
    script = (
        f"import pathlib, sys; p = pathlib.Path({str(path)!r}); p.parent.mkdir(parents=True, exist_ok=True); "
        f"p.write_text('x'); print(p); sys.exit({code})"
    )
    return [sys.executable, "-c", script]


def test_a_steps_paths_are_printed_where_they_end_up(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """make plan printed paths under cdktf.out.next/, gone when it ended: a passing plan names them in the output
    folder, a refused one in the refused output's folder, and a passing one ends saying where to look next."""
    outdir, staging = tmp_path / "cdktf.out", tmp_path / "cdktf.out.next"
    passing = [("synth", _prints(staging / "stack.json"), {}), ("review", _prints(staging / "review" / "dev.md"), {})]
    assert run_plan(outdir, passing) == 0
    out, err = capfd.readouterr()
    assert f"{outdir / 'stack.json'}\n" in out and f"{outdir / 'review' / 'dev.md'}\n" in out
    assert ".next" not in out + err
    assert "next: read the review above (the same facts as JSON beside each, dev.json)" in err
    refused = [("synth", _prints(staging / "stack.json"), {}), ("rules", _prints(staging / "x", code=1), {})]
    assert run_plan(outdir, refused) == 1
    out, _ = capfd.readouterr()
    failed = tmp_path / "cdktf.out.failed"
    assert f"{failed / 'x'}\n" in out and ".next" not in out


def test_one_environments_plan_shows_its_own_recipes_only(tmp_path: Path, synth_dir: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "scripts.rules", str(synth_dir / "stacks")],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PLATFORM_ENVS": "dev"},
    )
    recipes = [line for line in done.stdout.splitlines() if line.startswith("recipes: ") and "training.slice" in line]
    assert [line.split()[1] for line in recipes] == ["dev:"], done.stdout[-2000:]


def test_plan_json_is_one_document_on_stdout_saying_what_the_lines_say(tmp_path: Path) -> None:
    """`platform plan --json`: stdout holds one JSON document (docs/plan.schema.json) and nothing else; the steps'
    lines go to stderr; the document names the steps, their codes, and the reviews (or the refused output)."""
    import jsonschema

    schema = json.loads((REPO / "docs" / "plan.schema.json").read_text())
    outdir, staging = tmp_path / "cdktf.out", tmp_path / "cdktf.out.next"
    passing = [("synth", _prints(staging / "stack.json"), {}), ("review", _prints(staging / "review" / "dev.md"), {})]
    done = run_main(_run_plan_main(outdir, passing), [], env=dict(os.environ), cwd=REPO)
    document = json.loads(done.stdout)
    jsonschema.validate(document, schema)
    assert document["exit"] == 0 == done.returncode and document["failed_step"] is None
    assert [s["name"] for s in document["steps"]] == ["synth", "review"]
    review = outdir / "review" / "dev.md"
    json_review = str(review.with_suffix(".json"))
    assert document["reviews"] == [{"environment": "dev", "markdown": str(review), "json": json_review}]
    assert f"review: {outdir / 'review' / 'dev.md'}" in done.stderr and str(outdir / "stack.json") in done.stderr
    refused = [("synth", _prints(staging / "stack.json"), {}), ("rules", _prints(staging / "x", code=1), {})]
    done = run_main(_run_plan_main(outdir, refused), [], env=dict(os.environ), cwd=REPO)
    document = json.loads(done.stdout)
    jsonschema.validate(document, schema)
    assert document["exit"] == 1 == done.returncode and document["failed_step"] == "rules"
    assert document["refused_output"] == str(tmp_path / "cdktf.out.failed") and document["reviews"] == []
    assert "make plan failed at `rules` (exit 1)" in done.stderr


def test_plan_json_says_so_when_the_files_are_refused_before_any_step(tmp_path: Path) -> None:
    """A bad environment file, or an OUT= the plan does not own: refused on stderr and, with --json, a document on
    stdout too (review round 4: it printed none), valid against the schema, naming what refused it."""
    import jsonschema

    from scripts.plan import main

    schema = json.loads((REPO / "docs" / "plan.schema.json").read_text())
    folder = tmp_path / "environments"
    shutil.copytree(REPO / "infra" / "environments", folder)
    dev = folder / "dev.yaml"
    dev.write_text(dev.read_text().replace("\nname: dev\n", "\nname: devv\n", 1))
    env = {**os.environ, "PLATFORM_ENVIRONMENTS_DIR": str(folder)}
    done = run_main(main, ["--json", "--outdir", str(tmp_path / "out")], env=env, cwd=REPO)
    document = json.loads(done.stdout)
    jsonschema.validate(document, schema)
    assert document["exit"] == 2 == done.returncode and document["failed_step"] == "environments"
    assert "name: 'devv': must equal the file's name 'dev'" in done.stderr
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("mine")
    done = run_main(main, ["--json", "--outdir", str(tmp_path / "notes")], env=dict(os.environ), cwd=REPO)
    assert json.loads(done.stdout)["failed_step"] == "outdir" and (tmp_path / "notes" / "mine.txt").exists()


def _run_plan_main(outdir: Path, planned: list[Any]) -> Any:
    return lambda argv: run_plan(outdir, planned, as_json=True)


@pytest.mark.parametrize("kind", ["a folder of someone's files", "the checkout", "a file"])
def test_make_plan_writes_only_a_folder_it_owns_and_deletes_nothing_else(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """The plan replaces its output folder whole. Before the fix, OUT=<an existing folder> replaced it with the
    plan's output and deleted what was in it (exit 0), and OUT=. would have deleted the checkout: now a folder that
    is not empty and not an earlier plan's output is refused before anything is written, naming it."""
    if kind == "a folder of someone's files":
        out = tmp_path / "notes"
        out.mkdir()
        (out / "thesis.md").write_text("years of work")
    elif kind == "a file":
        out = tmp_path / "plan.txt"
        out.write_text("keep")
    else:
        out = REPO
    assert main(["--outdir", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"OUT={out}:" in err and "nothing was written or deleted" in err
    if kind == "a folder of someone's files":
        assert [p.name for p in out.iterdir()] == ["thesis.md"] and not out.with_name("notes.next").exists()
    if kind == "a file":
        assert out.read_text() == "keep"


def test_an_earlier_plans_output_and_an_empty_folder_are_the_plans_to_replace(tmp_path: Path) -> None:
    from scripts.plan import not_a_plan_folder

    earlier = tmp_path / "cdktf.out"
    (earlier / "stacks").mkdir(parents=True)
    (earlier / "manifest.json").write_text("{}")
    (tmp_path / "empty").mkdir()
    assert not_a_plan_folder(earlier) is None
    assert not_a_plan_folder(tmp_path / "empty") is None
    assert not_a_plan_folder(tmp_path / "new") is None
