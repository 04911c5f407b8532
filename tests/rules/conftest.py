"""The rendered releases of the dev stack, once per session for every rule module's tests."""

from __future__ import annotations

from typing import Any

import pytest

from infra.rules.run import stack_releases


@pytest.fixture(scope="session")
def releases(stacks: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The rendered objects of every local release of the dev stack (tests copy them before a change)."""
    return {name: objs for name, (_, objs) in stack_releases(stacks["dev"]).items()}
