"""`make new-env`: a new environment in one command, in a region unlike the source's, planned with no edit."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from infra.cdk.layout import stack_file
from infra.config import ENVIRONMENTS_DIR
from infra.delivery.new_env import NewEnvironmentError, place, write_new_environment
from infra.synth.load import load_environment
from tests.helpers import REPO


def _new_env(environments: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """`python -m scripts.new_env <argv>` on the environments folder `environments`."""
    return subprocess.run(
        [sys.executable, "-m", "scripts.new_env", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PLATFORM_ENVIRONMENTS_DIR": str(environments)},
    )


def _environments(tmp_path: Path) -> Path:
    environments = tmp_path / "environments"
    environments.mkdir()
    for path in ENVIRONMENTS_DIR.glob("*.yaml"):
        shutil.copy(path, environments / path.name)
    return environments


@pytest.mark.slow
def test_make_new_env_in_another_region_is_planned_with_no_edit(tmp_path: Path) -> None:
    """Before: copying dev by hand kept dev's registry, zones and Slurm name, and the plan passed. Now the file
    `make new-env` writes names nothing of dev's, and `make plan` plans it beside dev and prod."""
    environments = _environments(tmp_path)
    env = {**os.environ, "PLATFORM_ENVIRONMENTS_DIR": str(environments)}
    made = subprocess.run(
        ["make", "--no-print-directory", "new-env", "NAME=staging", "FROM=dev", "PROJECT=acme-ml-staging",
         "PROJECT_NUMBER=100000000077", "REGION=us-central1"],
        cwd=REPO, capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert "cpu_pools.convert: m1-ultramem-80 instead of c4-highmem-288" in made.stdout
    text = (environments / "staging.yaml").read_text()
    dev = load_environment(ENVIRONMENTS_DIR / "dev.yaml")
    for of_dev in (dev.project, dev.registry_url, dev.region, dev.cluster.name, dev.slurm.name if dev.slurm else "x"):
        body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
        assert of_dev not in body, f"the new environment still names dev's {of_dev!r}"
    staging = load_environment(environments / "staging.yaml")
    assert staging.registry_url == "us-central1-docker.pkg.dev/acme-ml-staging/ml-platform"
    assert all(zone.startswith("us-central1-") for zone in staging.zones)
    assert {staging.bucket_name(k) for k in staging.buckets}.isdisjoint({dev.bucket_name(k) for k in dev.buckets})
    out = tmp_path / "cdktf.out"
    planned = subprocess.run(
        ["make", "--no-print-directory", "plan", f"OUT={out}"], cwd=REPO, capture_output=True, text=True, env=env
    )
    assert planned.returncode == 0, planned.stderr[-3000:]
    assert (out / "review" / "staging.md").exists() and stack_file(out, "platform-staging").exists()


def test_a_region_without_the_accelerators_is_refused_listing_each_and_where_they_are(tmp_path: Path) -> None:
    environments = _environments(tmp_path)
    with pytest.raises(NewEnvironmentError) as err:
        write_new_environment(
            environments / "dev.yaml", environments / "af.yaml",
            name="af", project="acme-ml-af", project_number="100000000079", region="africa-south1",
        )  # fmt: skip
    said = str(err.value)
    assert "slices.train: ct6e-standard-4t is offered in no zone of africa-south1" in said
    assert "slices.a3mega: a3-megagpu-8g is offered in no zone of africa-south1" in said
    assert "us-central1" in said.splitlines()[-1]
    assert not (environments / "af.yaml").exists()


def test_an_existing_name_or_a_bad_region_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    environments = _environments(tmp_path)
    before = (environments / "prod.yaml").read_text()
    with pytest.raises(NewEnvironmentError, match="exists already"):
        write_new_environment(
            environments / "dev.yaml", environments / "prod.yaml",
            name="prod", project="p-1234567", project_number="1", region="us-east5",
        )  # fmt: skip
    assert (environments / "prod.yaml").read_text() == before
    with pytest.raises(NewEnvironmentError, match="not a Compute Engine region"):
        place(load_environment(environments / "dev.yaml"), "us-east99")


def test_the_command_says_what_it_refused_and_exits_2(tmp_path: Path) -> None:
    environments = _environments(tmp_path)
    done = _new_env(
        environments, "dev", "--project", "x-123456", "--project-number", "1",
         "--region", "us-east5",
    )  # fmt: skip
    assert done.returncode == 2 and "exists already" in done.stderr and "nothing was written" in done.stderr
    assert "Traceback" not in done.stderr
    assert yaml.safe_load((environments / "dev.yaml").read_text())["project"] != "x-123456"


@pytest.mark.parametrize(
    ("argument", "value", "said"),
    [
        # YAML in the project id broke the parse of the text it was pasted into (a traceback) before the fix.
        ("project", "x: [1", "PROJECT='x: [1': a project id is 6-30 lowercase letters"),
        ("project", "Acme-Prod", "PROJECT='Acme-Prod'"),
        ("project_number", "12ab", "PROJECT_NUMBER='12ab': the project's number, 6 to 20 digits"),
        ("name", "a" * 22, "1 to 21 lowercase letters"),
    ],
)
def test_an_argument_new_env_cannot_write_is_refused_by_name_before_anything_is_read(
    tmp_path: Path, argument: str, value: str, said: str
) -> None:
    environments = _environments(tmp_path)
    given = {"name": "staging", "project": "acme-staging", "project_number": "123456789", "region": "us-east5"}
    with pytest.raises(NewEnvironmentError, match=re.escape(said)):
        write_new_environment(
            environments / "dev.yaml", environments / f"{given['name']}.yaml", **{**given, argument: value}
        )
    assert sorted(p.name for p in environments.iterdir()) == ["dev.yaml", "prod.yaml"]


def test_a_new_environment_is_held_together_with_the_folder_and_names_its_arguments(tmp_path: Path) -> None:
    """make new-env validated the new file alone: a second environment in dev's project was written (both stacks
    make the build account there), and a reserved NAME was refused naming a temporary file's `name` field."""
    environments = _environments(tmp_path)
    done = _new_env(
        environments, "stage", "--project", "acme-ml-platform-dev", "--project-number",
         "123456789", "--region", "us-east5",
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"{environments / 'stage.yaml'}: project: 'image-builder@acme-ml-platform-dev" in done.stderr
    assert "dev.yaml names its build service account the same in project acme-ml-platform-dev" in done.stderr
    assert sorted(p.name for p in environments.iterdir()) == ["dev.yaml", "prod.yaml"]
    with pytest.raises(NewEnvironmentError, match=re.escape("NAME='platform-x': starts with 'platform-'")):
        write_new_environment(
            environments / "dev.yaml", environments / "platform-x.yaml",
            name="platform-x", project="acme-x-12345", project_number="123456789", region="us-east5",
        )  # fmt: skip


def test_the_copied_comments_name_the_new_environment_and_mark_the_old_regions_facts(tmp_path: Path) -> None:
    """The comments copied from dev told the reader to run `make image ENV=dev` and to read
    cdktf.out/placement/platform-dev.md in staging's own file; a statement of where us-east5 offers what was
    copied as if it held in the new region."""
    environments = _environments(tmp_path)
    write_new_environment(
        environments / "dev.yaml", environments / "staging.yaml",
        name="staging", project="acme-staging-123", project_number="123456789", region="us-central1",
    )  # fmt: skip
    text = (environments / "staging.yaml").read_text()
    header, body = text.split("\n# Development platform.", 1)  # the header new-env writes, then dev's own comments
    comments = [line for line in body.splitlines() if "#" in line]
    assert "written for dev.yaml and may not hold in us-central1" in header
    assert "# `make image IMAGE=trainer ENV=staging`; `make deploy` refuses to deploy it." in text
    assert "cdktf.out/placement/platform-staging.md" in text and "platform-dev" not in text
    assert not [c for c in comments if re.search(r"(?<![\w.-])dev(?!\w)", c.split("#", 1)[1]) and "dev.yaml" not in c]
    assert "# [us-east5] us-east5-b holds the TPU slices; A3 Mega is offered in us-east5-a only." in text
    assert all("[us-east5]" in c for c in comments if "us-east5" in c)


def test_a_new_environment_reserves_its_own_capacity_and_never_draws_on_the_sources(tmp_path: Path) -> None:
    """A reservation is its project's and its zone's: make new-env FROM=prod copied prod's five reservation names
    into another project and region, where none of them is (and prod's, if shared, would be drawn on twice). Each
    is now the new environment's own, said in the file and by the command with the zone to make it in."""
    environments = _environments(tmp_path)
    prod = load_environment(environments / "prod.yaml")
    done = _new_env(
        environments, "staging", "--from", "prod", "--project", "acme-staging-123",
         "--project-number", "123456789", "--region", "us-central1",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    staging = load_environment(environments / "staging.yaml")
    reserved = {
        key: [t.reservation for t in spec.tiers if t.reservation]
        for key, spec in prod.slices.items()
        if any(t.reservation for t in spec.tiers)
    }
    assert len(reserved) == 5
    for key, names in reserved.items():
        ours = [t.reservation for t in staging.slices[key].tiers if t.reservation]
        assert ours == [f"{name}-staging" for name in names]
        zone = staging.slices[key].zone or staging.zones[0]
        assert zone.startswith("us-central1-")
        for name in names:
            assert (
                f"slices.{key}.capacity.reservation: {name}-staging (prod draws on {name}): reserve it in {zone} "
                "before make deploy (make preflight ENV=staging checks it)"
            ) in done.stdout
            text = (environments / "staging.yaml").read_text()
            assert f"({prod.name} draws on {name}): make it before the deploy" in text


def test_the_command_ends_with_the_documented_next_steps_in_their_order(tmp_path: Path) -> None:
    """It said "build its images, then make plan" where docs/new-environment.md says plan first, then the images."""
    environments = _environments(tmp_path)
    done = _new_env(
        environments, "staging", "--project", "acme-staging-123", "--project-number",
         "123456789", "--region", "us-east5",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    last = done.stdout.splitlines()[-1]
    assert last.index("make plan") < last.index("make images ENV=staging"), last
    steps = (REPO / "docs" / "new-environment.md").read_text().split("Then:", 1)[1]
    assert steps.index("`make plan`") < steps.index("`make images ENV=staging`")
