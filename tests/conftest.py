"""Shared fixtures: the environments and their stacks, synthesized once per test session."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from infra.app import synth
from infra.config import Environment
from infra.load import load_all

# jsii's banner for Node 20 (past end of life) would fill every failure report.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

REPO = Path(__file__).resolve().parents[1]

# Every environment file of the repository: a new one (`make new-env`) is planned and snapshotted by the tests
# that take this list, without anyone editing a test.
ENVIRONMENT_NAMES = sorted(p.stem for p in (REPO / "infra" / "environments").glob("*.yaml"))


@pytest.fixture(scope="session")
def envs() -> dict[str, Environment]:
    return load_all()


@pytest.fixture(scope="session")
def synth_dir(tmp_path_factory: pytest.TempPathFactory, envs: dict[str, Environment]) -> Path:
    """Every shipped environment synthesized in this process (fast provider import)."""
    out = tmp_path_factory.mktemp("cdktf.out")
    synth(envs, out)
    return out


@pytest.fixture(scope="session")
def stacks(synth_dir: Path) -> dict[str, dict[str, Any]]:
    """Synthesized stack JSON by environment name."""
    return {
        p.parent.name.removeprefix("platform-"): json.loads(p.read_text())
        for p in sorted((synth_dir / "stacks").glob("*/cdk.tf.json"))
    }


def of_type(stack: dict[str, Any], rtype: str) -> dict[str, dict[str, Any]]:
    """Resources of one type in a synthesized stack, by logical id."""
    return stack.get("resource", {}).get(rtype, {})


def by_name(stack: dict[str, Any], rtype: str) -> dict[str, dict[str, Any]]:
    """Resources of one type in a synthesized stack, by their `name` attribute."""
    return {r["name"]: r for r in of_type(stack, rtype).values()}


def one(stack: dict[str, Any], rtype: str) -> dict[str, Any]:
    items = list(of_type(stack, rtype).values())
    assert len(items) == 1, f"expected one {rtype}, found {len(items)}"
    return items[0]


def one_of_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The one rendered object of `kind` among a release's objects."""
    (found,) = [o for o in objects if o["kind"] == kind]
    return found


def assert_request_refused(
    request: dict[str, Any], ctx: Any, path: Path, field: str, rule_id: str, source: str
) -> None:
    """`request`, written to `path` and read back, is refused by `rule_id` at `field`, and the error line names the
    file, the field, the rule and (a part of) its source."""
    from infra.rules import check_request

    path.write_text(json.dumps(request))
    violations = check_request(json.loads(path.read_text()), ctx)
    found = [v for v in violations if v.rule.id == rule_id and v.field == field]
    assert found, [v.line() for v in violations]
    line = found[0].line(str(path))
    assert line.startswith(f"{path}: {field}: ") and f"rule {rule_id}" in line and source in line
