"""Shared fixtures: the environments and their stacks, synthesized once per test session; how `make test` groups
the tests on its workers. Helpers a test imports are in tests/helpers.py."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from infra.config import Environment
from infra.synth.app import synth
from infra.synth.load import load_all
from tests.helpers import train_local

# `make test` runs the suite on one worker per core and one more (pytest-xdist, --dist loadgroup). Tests of one group
# run on one worker, one after the other: those that share one machine-wide thing (the one local Slurm; a local Ray
# cluster and the cores it takes) and the modules whose module-scoped fixture is expensive (built once per worker
# that runs them); a key ending in / is a folder of tests/ (tests/rules/ shares its rendered releases).
TESTS = Path(__file__).resolve().parent
XDIST_GROUPS: dict[str, str] = {
    "test_slurm_local.py": "slurm",
    "test_trainer.py": "ray",
    "test_multislice.py": "ray",  # its two runs of 4 JAX processes each side by side took 704 s and 480 s
    "test_server.py": "server",
    "test_autoscaling.py": "server",
    "test_vllm.py": "vllm",
    "test_charts.py": "charts",
    "test_chart_scripts.py": "chart-scripts",
    "rules/": "rules",
    "test_bootstrap.py": "bootstrap",
    "test_localcluster.py": "localcluster",
}

# The groups in the order their first test is handed out, the longest first (`make test` keeps this order:
# --no-loadscope-reorder; xdist would otherwise start the groups of most tests first). A long group begun when
# another worker is nearly done holds up the end of the run: the local cluster's (about 550 test-seconds on two
# workers, 700 on three) is the run's longest pole, then the Ray runs' (400).
LONGEST_FIRST = ("localcluster", "ray", "vllm", "slurm", "server")


# The tiers (`make test-unit`, `make test-integration`, `make test-e2e`; `make test` runs all three). A test is
# end to end where it drives the local cluster, the one-node Slurm (root) or the real Terraform engine (the Go
# builds); integration where it runs a real engine on the CPU (vLLM, Ray, Checkov, the cdktf CLI, a whole `make
# plan`) or is marked slow; a unit test otherwise: the venv alone, no Go build, no vLLM environment, no root.
E2E_MODULES = {"test_localcluster.py", "test_slurm_local.py", "test_engine.py"}
INTEGRATION_MODULES = {
    "test_vllm.py",
    "test_trainer.py",
    "test_server.py",
    "test_autoscaling.py",
    "test_policy.py",
    "test_multislice.py",
}


def tier(item: pytest.Item) -> str:
    """`unit`, `integration` or `e2e`: see E2E_MODULES."""
    name = item.path.name
    slow = item.get_closest_marker("slow") is not None
    if name in E2E_MODULES and (slow or name == "test_slurm_local.py"):
        return "e2e"
    if slow or name in INTEGRATION_MODULES:
        return "integration"
    return "unit"


def group_of(path: Path) -> str | None:
    """The XDIST_GROUPS group of the test module at `path`, by its path below tests/: tests/rules/test_vllm.py is of
    rules/, not of tests/test_vllm.py's group."""
    return XDIST_GROUPS.get(path.relative_to(TESTS).as_posix()) or XDIST_GROUPS.get(f"{path.parent.name}/")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test's tier marker (`unit`, `integration`, `e2e`); each test of a module in XDIST_GROUPS in its group;
    the groups of LONGEST_FIRST first, in its order, then the slow tests (so that the longest ones do not start last
    on a worker and hold up the end of the run), then the rest in their usual order. Runs before xdist's own hook,
    which reads the groups; the same order on every worker, as xdist requires."""
    rank = {}
    for item in items:
        item.add_marker(getattr(pytest.mark, tier(item)))
        group = group_of(item.path)
        if group and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(group))
        rank[item.nodeid] = LONGEST_FIRST.index(group) if group in LONGEST_FIRST else len(LONGEST_FIRST)
    items.sort(key=lambda item: (rank[item.nodeid], item.get_closest_marker("slow") is None))


@pytest.fixture(scope="session", autouse=True)
def jax_compilation_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """One persistent JAX compilation cache for every process the tests start (the canary trained by the Slurm,
    Vertex AI, JobSet and server tests compiles the same step): JAX_COMPILATION_CACHE_DIR, inherited by children.
    What is compiled is the same; a test compiles it once instead of in every process."""
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "jax-compilation-cache"))


@pytest.fixture(scope="session")
def canary_one_slice(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """The canary on one slice of 2 CPU workers x 2 devices (fsdp 4) trained by one `make train-local` run of 8
    steps, a worker killed right after step 3's checkpoint (Ray restarts the group, which resumes from it). Its
    losses are what a run on two slices must reproduce (tests/test_multislice.py); tests/test_trainer.py holds it to
    resuming. Both modules run in the `ray` group, so on one worker, which makes this once."""
    ckpt = tmp_path_factory.mktemp("canary-one-slice")
    # A Ray address in the environment (here one nothing answers: TEST-NET-1) is not the private instance's.
    summary, stderr = train_local(ckpt, "--steps", "8", "--fail-at-step", "3", env={"RAY_ADDRESS": "192.0.2.1:6379"})
    return SimpleNamespace(ckpt=ckpt, summary=summary, stderr=stderr)


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
