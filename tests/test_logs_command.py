"""`make logs ENV=` (scripts/logs.py): every workload an environment declares has a logs entry, generated for that
environment's own project, region and cluster, and the GKE queries take every pod of every release."""

from __future__ import annotations

import json
from typing import Any

import pytest

from infra.config import Environment
from infra.slurm.jobs import jobs as slurm_jobs
from infra.vertex.job import job_names
from scripts.logs import LogSource, log_sources, main
from tests.helpers import ENVIRONMENT_NAMES


def _declared(env: Environment) -> set[str]:
    """The environment's workloads, read from its sections (what the logs command must cover)."""
    out = {f"release.controllers.{name}" for name in env.release.controllers}
    out |= {f"serving.{key}" for key in env.serving}
    if env.autoscales:
        out.add("metrics-adapter")
    if env.training is not None:
        out |= {"training", "training.ray-jobs"}
    if env.batch is not None:
        out |= {f"batch.{s}" for s in ("nccl_test", "training") if getattr(env.batch, s) is not None}
    if env.gke_gpudirect_networks:
        out.add("gpudirect")
    files = slurm_jobs(env) if env.slurm is not None else {}
    out |= {f"slurm.{s}" for s, f in (("nccl_test", "nccl-test.sbatch"), ("training", "train.sbatch")) if f in files}
    out |= {f"vertex.{name}" for name in job_names(env)}
    out |= {f"vm_groups.{key}" for key in env.vm_groups}
    return out


@pytest.mark.parametrize("name", ENVIRONMENT_NAMES)
def test_every_workload_the_environment_declares_has_a_logs_entry(name: str, envs: dict[str, Environment]) -> None:
    env = envs[name]
    sources = log_sources(env)
    assert sorted(s.workload for s in sources) == sorted(_declared(env))
    assert all(s.query or s.commands for s in sources)


@pytest.mark.parametrize("name", ENVIRONMENT_NAMES)
def test_the_queries_name_this_environments_project_and_cluster_and_no_others(
    name: str, envs: dict[str, Environment]
) -> None:
    env = envs[name]
    text = json.dumps([[s.query, s.commands, s.read_command(env.project), s.console_url(env.project)] for s in
                       log_sources(env)])  # fmt: skip
    for s in log_sources(env):
        if s.orchestrator == "GKE":
            assert s.query and f'resource.labels.cluster_name="{env.cluster.name}"' in s.query
            assert f'resource.labels.project_id="{env.project}"' in s.query
            assert f'resource.labels.location="{env.region}"' in s.query
        if s.query:
            assert f"?project={env.project}" in (s.console_url(env.project) or "")
    for other in envs.values():
        if other.name != env.name:
            assert other.project not in text and f'"{other.cluster.name}"' not in text, other.name


def _pods(objects: list[dict[str, Any]], namespace: str) -> list[tuple[str, dict[str, str], str]]:
    """(namespace, labels, a pod name) of every pod template of a release's objects."""
    pods = []

    def walk(node: Any, owner: str) -> None:
        if isinstance(node, dict):
            spec = node.get("spec")
            if isinstance(spec, dict) and "containers" in spec:
                pods.append((namespace, dict((node.get("metadata") or {}).get("labels") or {}), f"{owner}-x1y2z"))
            for value in node.values():
                walk(value, owner)
        elif isinstance(node, list):
            for value in node:
                walk(value, owner)

    for obj in objects:
        walk(obj, obj["metadata"]["name"])
    return pods


def test_every_pod_of_every_release_is_taken_by_its_releases_query(
    envs: dict[str, Environment], stacks: dict[str, dict[str, Any]]
) -> None:
    """The stack's releases, rendered as make plan renders them: each pod template's containers are selected by the
    entry of its own release (its instance label, or its name where the chart sets no label), by no other."""
    from infra.rules.run import stack_releases

    env = envs["dev"]
    sources = [s for s in log_sources(env) if s.orchestrator == "GKE"]
    by_release = {s.release: s for s in sources if s.release}
    for release in stacks["dev"]["resource"]["helm_release"].values():
        if "repository" in release:  # an upstream controller: its namespace's entry
            assert any(s.namespace == release["namespace"] and s.release is None for s in sources), release["name"]
    checked = 0
    for name, (release, objects) in stack_releases(stacks["dev"]).items():
        for namespace, labels, pod in _pods(objects, release["namespace"]):
            taking = [s.workload for s in sources if s.release and s.selects(namespace, labels, pod)]
            assert taking == [by_release[name].workload], (name, pod, labels, taking)
            checked += 1
    assert checked >= 10


def test_the_command_prints_one_workload_or_refuses_an_unknown_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--env", "prod", "--workload", "vertex.train", "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)
    assert entry["orchestrator"] == "Vertex AI" and "prod-train-run" in entry["what"]
    assert 'resource.type="ml_job"' in entry["query"] and "--project=acme-ml-platform-prod" in entry["read"]
    assert main(["--env", "prod", "--workload", "serving.nope"]) == 2
    assert "not a workload of prod; workloads: release.controllers.jobset" in capsys.readouterr().err
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0


def test_a_log_source_without_a_namespace_selects_no_pod() -> None:
    assert not LogSource("slurm.training", "Slurm", "x").selects("ml-training", {}, "ray-training-head-x")
