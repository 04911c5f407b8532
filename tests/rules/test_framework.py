"""The rule framework (infra/rules): every rule has a source and a layer, what ships breaks none, a broken one names
the file, field, value, rule and source, `make plan` counts them, docs/rules.md lists them, and each rule module has
its test module here with a failing example of each of its rules."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.config import ConfigError, Environment
from infra.rules import LAYERS, RULES, Rule, Violation, all_rules, check_environment, rule
from infra.rules.run import check_synthesized
from infra.synth.load import load_environment
from tests.helpers import ENVIRONMENT_NAMES, REPO
from tests.rules.examples import DEV, covered_by_refused


def test_each_rule_module_has_its_test_module_here() -> None:
    """A module with a rule whose example is not in tests/refused.py has tests/rules/test_<module>.py (which holds
    its module's every rule to a failing example), and each test module here is of a rule module."""
    modules = {r.check.__module__.rsplit(".", 1)[1] for r in RULES.values() if r.id not in covered_by_refused()}
    here = {p.stem.removeprefix("test_") for p in Path(__file__).parent.glob("test_*.py")} - {"framework"}
    assert sorted(modules - here) == [], "rule modules without a test module in tests/rules"
    assert sorted(here - {p.stem for p in (REPO / "infra" / "rules").glob("*.py")}) == []


def test_there_are_at_least_40_rules_each_with_a_source_and_a_layer() -> None:
    rules = all_rules()
    assert len(rules) >= 40
    for r in rules:
        assert r.layer in LAYERS, r.id
        assert len(r.source) > 20 and len(r.summary) > 20, r.id
        assert r.subject in ("environment", "environments", "terraform", "manifest", "request", "script", "upgrade"), (
            r.id
        )


@pytest.mark.parametrize("name", ENVIRONMENT_NAMES)
def test_what_ships_breaks_no_rule(name: str, envs: dict[str, Environment], stacks: dict[str, dict[str, Any]]) -> None:
    assert check_environment(envs[name]) == []
    terraform, manifest, count = check_synthesized(stacks[name])
    assert [v.line() for v in terraform] == []
    assert [f"{release}: {v.line()}" for release, v in manifest] == []
    assert count >= 8


def test_a_broken_rule_fails_loading_with_file_field_value_rule_and_source(tmp_path: Path) -> None:
    data = copy.deepcopy(DEV)
    data["serving"]["llama405b"]["slice"] = "train"
    path = tmp_path / "dev.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        load_environment(path)
    (line,) = err.value.problems
    assert line.startswith("serving.llama405b.slice: 'train': slice 'train' is already used by training.slice")
    assert "[rule platform.tpu.one-workload-per-slice (GKE TPU slices, refused at pod-start); source: https://" in line
    assert str(path) in str(err.value)


def test_make_plan_step_reports_how_many_rules_ran(synth_dir: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "scripts.rules", str(synth_dir / "stacks")], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    # The request rules run where the requests are written (the plan's vertex and vms steps), the script rules in
    # its scripts step.
    ran = [r for r in RULES.values() if r.subject in ("environment", "environments", "terraform", "manifest")]
    assert f"rules: {len(ran)} rules ran (" in done.stdout
    assert "on 2 environments" in done.stdout and "on 2 stacks" in done.stdout and ": no violations" in done.stdout
    # per environment, the training recipes that run on its training slice, the named one marked.
    assert "recipes: dev: training.slice train (v6e-16, topology 4x4), training.recipe llama3-8b" in done.stdout
    assert "recipes:   * llama3-8b: runs: " in done.stdout


def test_violation_line_names_field_value_rule_and_source() -> None:
    rule = RULES["gke.dws.no-auto-repair"]
    line = Violation(rule, "google_container_node_pool.a3mega.management.auto_repair", True, "turn it off").line(
        "x.json"
    )
    assert line == (
        "x.json: google_container_node_pool.a3mega.management.auto_repair: True: turn it off "
        f"[rule gke.dws.no-auto-repair (GKE, refused at apply); source: {rule.source}]"
    )


def test_the_rules_page_lists_every_rule_with_its_source() -> None:
    from scripts.rules import table

    page = (REPO / "docs" / "rules.md").read_text()
    shown = page.split("<!-- rules:begin -->\n", 1)[1].split("\n<!-- rules:end -->", 1)[0]
    assert shown == table(), "regenerate docs/rules.md's table: python -m scripts.rules --table"


def test_a_terraform_rule_declaring_resource_types_sees_only_those_then_the_stack() -> None:
    seen: list[object] = []

    def check(found: list[tuple[str, dict[str, Any]]], stack: dict[str, Any]) -> list[Any]:
        seen.extend([found, stack])
        return [(f"{where}.name", body["name"], "too short") for where, body in found if len(body["name"]) < 3]

    stack = {
        "resource": {
            "google_container_node_pool": {"a": {"name": "p"}, "b": {"name": "pool"}},
            "google_container_cluster": {"c": {"name": "c"}},
        }
    }
    only_pools = Rule("x.pool-names", "X", "apply", "s" * 21, "s" * 21, "terraform", check, types=POOL_TYPES)
    [violation] = only_pools.run(stack)
    assert violation.line() == (
        "google_container_node_pool.p.name: 'p': too short [rule x.pool-names (X, refused at apply); "
        f"source: {'s' * 21}]"
    )
    assert seen == [
        [("google_container_node_pool.p", {"name": "p"}), ("google_container_node_pool.pool", {"name": "pool"})],
        stack,
    ]
    with pytest.raises(ValueError, match="types= narrows Terraform rules; this one's subject is manifest"):
        rule(id="x.y", system="X", layer="apply", summary="s", source="s", subject="manifest", types=POOL_TYPES)


POOL_TYPES = ("google_container_node_pool",)
