"""The image catalogue: every image pinned, linted, and its build inputs in one place."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import REPO

CATALOGUE: dict[str, Any] = yaml.safe_load((REPO / "images" / "images.yaml").read_text())
HADOLINT = Path(sys.executable).with_name("hadolint")


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_image_dockerfile_is_hadolint_clean(name: str) -> None:
    dockerfile = REPO / CATALOGUE[name]["dockerfile"]
    result = subprocess.run([str(HADOLINT), "--no-color", str(dockerfile)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_image_is_built_from_pinned_inputs(name: str) -> None:
    entry = CATALOGUE[name]
    text = (REPO / entry["dockerfile"]).read_text()
    stages = set(re.findall(r"^FROM\s+\S+\s+AS\s+(\S+)", text, re.M | re.I))
    if entry.get("target"):
        assert entry["target"] in stages, f"target {entry['target']!r} is not a stage: {sorted(stages)}"
    for line in re.findall(r"^FROM\s+(\S+)", text, re.M):
        if line in stages:
            continue  # builds on an earlier stage of the same file
        assert re.search(r":[0-9][\w.-]*(@sha256:[0-9a-f]{64})?$", line), f"FROM {line} is not pinned to a version"
        assert ":latest" not in line
    declared = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", text, re.M))
    for arg, value in entry.get("build_args", {}).items():
        assert declared.get(arg) == str(value), f"{arg}: Dockerfile default {declared.get(arg)} != catalogue {value}"


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_image_runs_as_a_non_root_user(name: str) -> None:
    text = (REPO / CATALOGUE[name]["dockerfile"]).read_text()
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and users[-1].split(":")[0] not in ("root", "0")


# The user each base image runs its build steps as (its own USER): rayproject/ray's Dockerfile ends with
# `USER ray` (uid 1000), the python images set none (root).
BASE_USERS = {"rayproject/ray": "1000", "python": "root"}


def _workdirs_unwritable_by_the_classic_builder(text: str) -> list[str]:
    """WORKDIRs that a non-root user's later RUN would find owned by root under the classic builder.

    The classic builder creates a missing WORKDIR as root whatever the current USER (moby/moby#36677);
    BuildKit creates it for the current user. A Dockerfile builds under either only if a non-root stage's
    WORKDIR was created, and given to that user, by an earlier root RUN.
    """
    problems, owned, user, stage_users, stage = [], set(), "root", {}, None
    for line in text.splitlines():
        instruction, _, rest = line.partition(" ")
        if instruction == "FROM":
            image, *alias = rest.split()
            user = stage_users.get(image) or BASE_USERS[image.split(":")[0]]
            stage = alias[-1] if alias else None
        elif instruction == "USER":
            uid = rest.split(":")[0]
            user = "root" if uid in ("root", "0") else uid
        elif instruction == "RUN" and user == "root" and (m := re.match(r"mkdir -p (\S+) && chown (\d+)", rest)):
            owned.add((m.group(1), m.group(2)))
        elif instruction == "WORKDIR" and user != "root" and (rest, user) not in owned:
            problems.append(f"WORKDIR {rest} as user {user}: root-owned under the classic builder")
        if stage:
            stage_users[stage] = user
    return problems


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_image_builds_with_the_classic_builder_and_buildkit(name: str) -> None:
    """Cloud Build's docker step uses the classic builder: the trainer's `pip install -e .` as uid 1000 failed
    writing its egg-info into a root-owned /opt/platform."""
    text = (REPO / CATALOGUE[name]["dockerfile"]).read_text()
    assert _workdirs_unwritable_by_the_classic_builder(text) == []


def test_the_classic_builder_check_finds_the_old_trainer_workdir() -> None:
    old = "FROM rayproject/ray:2.60.0-py312 AS trainer\nWORKDIR /opt/platform\nRUN pip install -e .\n"
    assert _workdirs_unwritable_by_the_classic_builder(old) == [
        "WORKDIR /opt/platform as user 1000: root-owned under the classic builder"
    ]


def _pins(path: Path) -> dict[str, str]:
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==([^\s;]+)", path.read_text(), re.M))


def test_gpu_image_uses_the_repository_lock_versions() -> None:
    """The GPU image's own lock (CUDA wheels) agrees with requirements.lock on every shared package."""
    gpu = _pins(REPO / "workloads/trainer/requirements-gpu.lock")
    main = _pins(REPO / "requirements.lock")
    for package in ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "pydantic", "pyyaml"):
        assert gpu[package] == main[package], (
            f"{package}: GPU image {gpu[package]} != requirements.lock {main[package]}"
        )
    assert "jax-cuda12-plugin" in gpu


ENGINE_LOCK = "workloads/trainer/requirements-maxtext.lock"


def test_trainer_image_installs_exactly_the_engine_lock() -> None:
    """The trainer and converter stages install the lock `make engine` installs, and resolve nothing anew."""
    text = (REPO / "workloads/trainer/Dockerfile").read_text()
    installs = re.findall(r"pip install ([^\n&]+)", text)
    assert f"--no-cache-dir --no-deps -r {ENGINE_LOCK}" in [i.strip() for i in installs]
    assert f"COPY --chown=1000:100 {ENGINE_LOCK} " in text
    # Nothing else MaxText or JAX related comes from anywhere but the lock.
    for install in installs:
        if "-r " not in install and "-e ." not in install:
            assert not re.search(r"\b(maxtext|jax|jaxlib|libtpu|ray|flax)\b", install), install
    assert "github.com" not in text, "MaxText comes from the lock, not a git checkout"


def test_engine_lock_pins_maxtext_jax_with_its_libtpu_and_the_repository_versions() -> None:
    engine = _pins(REPO / ENGINE_LOCK)
    main = _pins(REPO / "requirements.lock")
    requested = (REPO / "workloads/trainer/requirements-maxtext.in").read_text()
    assert re.search(r"^maxtext\[tpu\]==\d", requested, re.M)
    jax_pin = re.search(r"^jax\[tpu\]==(\S+)", requested, re.M)
    assert jax_pin and engine["jax"] == jax_pin.group(1) == engine["jaxlib"]
    assert re.search(rf"^libtpu=={re.escape(engine['libtpu'])}$", requested, re.M), "libtpu is pinned with jax"
    for package in ("ray", "pydantic", "pyyaml"):
        assert engine[package] == main[package], f"{package}: engine {engine[package]} != requirements.lock"
    # No package index named in the lock (the pattern is split so this file names none either).
    no_index = r"^\s*(-i |--(?:extra-)?index" + r"-url)"
    assert not re.search(no_index, (REPO / ENGINE_LOCK).read_text(), re.M)


def test_converter_stage_adds_only_its_lock_which_moves_nothing_the_engine_lock_pins() -> None:
    text = (REPO / "workloads/trainer/Dockerfile").read_text()
    converter = text[text.index("AS converter") :]
    assert "pip install --no-cache-dir --no-deps -r workloads/trainer/requirements-converter.lock" in converter
    engine = _pins(REPO / ENGINE_LOCK)
    extra = _pins(REPO / "workloads/trainer/requirements-converter.lock")
    assert "torch" in extra
    moved = {p: (engine[p], v) for p, v in extra.items() if p in engine and engine[p] != v}
    assert not moved, f"the converter lock moves engine pins: {moved}"


def test_an_image_of_a_multi_stage_dockerfile_names_its_stage() -> None:
    """Before the fix the trainer named no target, and `docker build` builds the last stage of
    workloads/trainer/Dockerfile: the converter, with PyTorch, shipped as the trainer."""
    import re

    import yaml

    from tests.helpers import REPO

    catalogue = yaml.safe_load((REPO / "images" / "images.yaml").read_text())
    for name, entry in catalogue.items():
        if not isinstance(entry, dict) or "dockerfile" not in entry:
            continue
        stages = re.findall(r"^FROM\s+\S+\s+AS\s+(\S+)", (REPO / entry["dockerfile"]).read_text(), re.M | re.I)
        if len(stages) > 1:
            assert entry.get("target") in stages, f"{name}: name one of {stages} as target"


def _copied(stage: str, root: Path) -> Path:
    """A folder holding exactly what a Dockerfile stage's COPY lines copy into the image's /opt/platform, after
    checking that they copy neither the whole of infra/ nor an environment file (a reshape would need a rebuild)."""
    import shutil

    copies = re.findall(r"^COPY (?:--chown=\S+ )?(\S+) (\S+)$", stage, re.M)
    assert ("infra", "./infra") not in copies, "the image copies the whole of infra/"
    assert not [c for c in copies if "environments" in c[0]], "the image holds an environment file: a reshape rebuilds"
    root = root / "opt" / "platform"
    for source, target in copies:
        dest = root / target.removeprefix("./")
        if (REPO / source).is_dir():
            shutil.copytree(REPO / source, dest, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
        else:
            (dest if target.endswith("/") else dest.parent).mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO / source, dest / Path(source).name if target.endswith("/") else dest)
    return root


def test_the_trainer_runs_from_exactly_what_its_image_copies(tmp_path: Path) -> None:
    """The trainer image copies the schema and the catalogue of infra/, not all of it and no environment file: the
    plan `args` prints from the repository (what `submit` sends) is prepared for training by the trainer run from a
    folder holding only what the Dockerfile's COPY lines copy, and it never imports the rules or the stacks."""
    text = (REPO / "workloads/trainer/Dockerfile").read_text()
    root = _copied(text[: text.index("AS converter")], tmp_path)
    planned = subprocess.run(
        [sys.executable, "-m", "workloads.trainer", "args", "--env", "dev"], cwd=REPO, capture_output=True, text=True
    )
    assert planned.returncode == 0, planned.stderr
    plan = planned.stdout.strip().splitlines()[-1]
    probe = (
        "import json, sys\n"
        "from workloads.trainer.__main__ import prepared\n"
        "slice_, loop, config = prepared(json.loads(sys.argv[1]))\n"
        "print(slice_.name, loop.__name__)\n"
        "import infra\n"
        f"assert infra.__file__.startswith({str(root)!r}), infra.__file__\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('infra.rules', 'infra.stacks', 'infra.synth')))\n"
        "assert not loaded, loaded\n"
    )
    run = subprocess.run([sys.executable, "-c", probe, plan], cwd=root, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.split() == [json.loads(plan)["slice"], "maxtext_loop"], run.stdout


def test_the_gpu_trainer_imports_from_exactly_what_its_image_copies(tmp_path: Path) -> None:
    """The GPU trainer image (one process per node of a JobSet, a Slurm job, a Vertex AI replica or a VM) copies no
    environment file either: each process takes its run from its arguments, and its entry point and the canary
    import from the copied files alone, never the rules or the stacks."""
    root = _copied((REPO / "workloads/trainer/Dockerfile.gpu").read_text(), tmp_path)
    probe = (
        "import sys\n"
        "import workloads.trainer.__main__, workloads.trainer.canary.train, infra\n"
        f"assert infra.__file__.startswith({str(root)!r}), infra.__file__\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('infra.rules', 'infra.stacks', 'infra.synth')))\n"
        "assert not loaded, loaded\n"
    )
    run = subprocess.run([sys.executable, "-c", probe], cwd=root, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    help_ = subprocess.run(
        [sys.executable, "-m", "workloads.trainer", "jobset", "--help"], cwd=root, capture_output=True, text=True
    )
    assert help_.returncode == 0 and "--coordinator" in help_.stdout, help_.stderr
