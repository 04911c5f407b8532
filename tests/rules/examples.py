"""What the rule tests share (each module of infra/rules/ has its tests in tests/rules/test_<module>.py): dev's and
prod's files as data, how each kind of failing example is run, the check that a module's every rule has one, and
the finders of the parts of dev's stack and releases that several modules' examples change.

Each failing example is a small change to exactly what the dev stack applies (its environment, its synthesized
JSON, its rendered releases); many of them are the defects the rules were written for, as the platform produced them
before the fix. The request, script and upgrade rules fail on the examples of tests/refused.py (run by
tests/test_vertex.py, tests/test_vms.py, tests/test_shell.py and tests/test_upgrades.py).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from infra.config import ENVIRONMENTS_DIR, Environment
from infra.config.findings import field_path
from infra.rules import RULES, containers, pod_templates
from infra.rules.manifest_subject import ReleaseContext
from tests.helpers import of_type, one_of_kind
from tests.refused import SCRIPT_REFUSED, UPGRADE_REFUSED, VERTEX_REFUSED, VM_REFUSED

DEV = yaml.safe_load((ENVIRONMENTS_DIR / "dev.yaml").read_text())
PROD = yaml.safe_load((ENVIRONMENTS_DIR / "prod.yaml").read_text())

# An edit of dev.yaml (its data, and the test's monkeypatch for what is not in the file) -> the field refused, a
# fragment of what the rule says.
EnvironmentExample = tuple[Callable[[dict[str, Any], pytest.MonkeyPatch], Any], str, str]
# An edit of prod.yaml that dev and prod refuse together -> the field of prod.yaml refused, a fragment.
TogetherExample = tuple[Callable[[dict[str, Any]], Any], str, str]
# A change to dev's synthesized stack -> a fragment every violation says.
TerraformExample = tuple[Callable[[dict[str, Any]], Any], str]
# The release, a change to its rendered objects, a fragment every violation says, and optionally a change to the
# stack the release is held against.
ManifestExample = (
    tuple[str, Callable[[list[dict[str, Any]]], Any], str]
    | tuple[str, Callable[[list[dict[str, Any]]], Any], str, Callable[[dict[str, Any]], Any]]
)


def environment(data: dict[str, Any]) -> Environment:
    """The environment without running the rules (load_environment runs them)."""
    return Environment.model_validate(data)


def fails_on_environment_example(rule_id: str, example: EnvironmentExample, monkeypatch: pytest.MonkeyPatch) -> None:
    mutate, field, fragment = example
    data = copy.deepcopy(DEV)
    assert RULES[rule_id].run(environment(data)) == []
    mutate(data, monkeypatch)
    found = RULES[rule_id].run(environment(data))
    assert any(v.field == field and fragment in v.message for v in found), [v.line() for v in found]


def fails_on_together_example(rule_id: str, example: TogetherExample) -> None:
    mutate, field, fragment = example
    dev, prod = copy.deepcopy(DEV), copy.deepcopy(PROD)
    assert RULES[rule_id].run({"dev": environment(dev), "prod": environment(prod)}) == []
    mutate(prod)
    found = RULES[rule_id].run({"dev": environment(dev), "prod": environment(prod)})
    assert any(v.path[0] == "prod" and field_path(v.path[1:]) == field and fragment in v.message for v in found), [
        v.line() for v in found
    ]


def fails_on_terraform_example(rule_id: str, example: TerraformExample, stacks: dict[str, dict[str, Any]]) -> None:
    mutate, fragment = example
    stack = copy.deepcopy(stacks["dev"])
    assert RULES[rule_id].run(stack) == []
    mutate(stack)
    found = RULES[rule_id].run(stack)
    assert found and all(fragment in v.message for v in found), [v.line() for v in found]


def fails_on_manifest_example(
    rule_id: str,
    example: ManifestExample,
    stacks: dict[str, dict[str, Any]],
    releases: dict[str, list[dict[str, Any]]],
) -> None:
    release, mutate, fragment, *change_stack = example
    stack = copy.deepcopy(stacks["dev"])
    objects = copy.deepcopy(releases[release])
    namespace = next(r["namespace"] for r in of_type(stack, "helm_release").values() if r["name"] == release)
    ctx = ReleaseContext(name=release, namespace=namespace, stack=stack, stack_objects=releases)
    assert RULES[rule_id].run(objects, ctx) == []
    mutate(objects)
    for change in change_stack:
        change(stack)
    found = RULES[rule_id].run(objects, ctx)
    assert found and all(fragment in v.message for v in found), [v.line() for v in found]


def fails_on_its_example(rule_id: str, example: Any, request: pytest.FixtureRequest) -> None:
    """Run `example` the way its rule's subject takes it (an edit of dev.yaml, of prod.yaml with dev beside it, of
    dev's stack or of one of its releases), with the fixtures that subject needs only."""
    subject = RULES[rule_id].subject
    if subject == "environment":
        fails_on_environment_example(rule_id, example, request.getfixturevalue("monkeypatch"))
    elif subject == "environments":
        fails_on_together_example(rule_id, example)
    elif subject == "terraform":
        fails_on_terraform_example(rule_id, example, request.getfixturevalue("stacks"))
    else:
        assert subject == "manifest", f"{rule_id}: a {subject} rule's examples are in tests/refused.py"
        stacks, releases = request.getfixturevalue("stacks"), request.getfixturevalue("releases")
        fails_on_manifest_example(rule_id, example, stacks, releases)


def covered_by_refused() -> set[str]:
    """The rules whose failing examples are in tests/refused.py (request, script and upgrade rules)."""
    requests = {case[2] for case in [*VERTEX_REFUSED.values(), *VM_REFUSED.values()]}
    scripts = {case[2] for case in SCRIPT_REFUSED.values()}
    upgrades = {case[3] for case in UPGRADE_REFUSED.values()}
    return requests | scripts | upgrades


def rules_of(module: str) -> set[str]:
    """The ids of the rules `infra/rules/<module>.py` defines."""
    return {r.id for r in RULES.values() if r.check.__module__ == f"infra.rules.{module}"}


def assert_every_rule_has_an_example(module: str, *examples: dict[str, Any]) -> None:
    """The rules of `infra/rules/<module>.py` are exactly those with a failing example in `examples` (the test
    module's) or in tests/refused.py."""
    here = {rule_id for cases in examples for rule_id in cases}
    assert sorted(here - rules_of(module)) == [], "examples of rules another module defines"
    assert sorted(rules_of(module) - here - covered_by_refused()) == [], "rules without a failing example"


def node_pool(stack: dict[str, Any], name: str) -> dict[str, Any]:
    """The stack's node pool of this name."""
    return next(p for p in of_type(stack, "google_container_node_pool").values() if p["name"] == name)


def gke_cluster(stack: dict[str, Any]) -> dict[str, Any]:
    """The stack's GKE cluster."""
    return next(iter(of_type(stack, "google_container_cluster").values()))


def ray_worker_template(objs: list[dict[str, Any]]) -> dict[str, Any]:
    """The TPU worker pod template of the RayCluster."""
    return one_of_kind(objs, "RayCluster")["spec"]["workerGroupSpecs"][0]["template"]


def leader_worker_template(objs: list[dict[str, Any]]) -> dict[str, Any]:
    """The group template of the release's LeaderWorkerSet."""
    return one_of_kind(objs, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]


def vllm_pod_template(objs: list[dict[str, Any]]) -> dict[str, Any]:
    """The server pod template of the single-host vLLM group."""
    return one_of_kind(objs, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]["workerTemplate"]


def vllm_container(objs: list[dict[str, Any]]) -> dict[str, Any]:
    """The vLLM server container of the single-host group."""
    return vllm_pod_template(objs)["spec"]["containers"][0]


def container_named(objs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """The first container (or init container) of this name in a release's pods."""
    return next(
        c
        for o in objs
        for _, t in pod_templates(o)
        for _, c in containers(t.get("spec") or {})
        if c.get("name") == name
    )
