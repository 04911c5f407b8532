"""The trainer finds its coordinator, process count and rank the same way under each orchestrator, each from
the variables that orchestrator really sets (Slurm's held against JAX's own Slurm detection)."""

from __future__ import annotations

import json

import pytest

from workloads.trainer.discovery import (
    COORDINATOR_PORT,
    DiscoveryError,
    ProcessGroup,
    discover,
    first_host,
    from_gce,
    from_jobset,
)

# What slurmstepd gives task 1 of a 2-node step of job 4242 (the variables JAX's SlurmCluster reads too).
SLURM = {
    "SLURM_JOB_ID": "4242",
    "SLURM_STEP_NODELIST": "mlp-dev-a3mega-[0-1]",
    "SLURM_NTASKS": "2",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "0",
    "SLURM_STEP_NUM_NODES": "2",
}


def _vertex(task: str, index: int, workers: int = 1) -> dict[str, str]:
    """CLUSTER_SPEC as Vertex AI sets it for a job of one primary replica and `workers` workers."""
    spec = {
        "cluster": {
            "workerpool0": ["cmle-training-workerpool0-ab12-0:2222"],
            "workerpool1": [f"cmle-training-workerpool1-ab12-{i}:2222" for i in range(workers)],
        },
        "environment": "cloud",
        "task": {"type": task, "index": index},
        "job": '{"python_module": "", "package_uris": []}',
    }
    return {"CLUSTER_SPEC": json.dumps(spec), "CLOUD_ML_JOB_ID": "1234567890"}


def test_jobset_reads_the_index_kubernetes_gives_an_indexed_jobs_pod() -> None:
    group = from_jobset({"JOB_COMPLETION_INDEX": "1"}, coordinator="job-node-0-0.job:8476", processes=2)
    assert group == ProcessGroup("job-node-0-0.job:8476", 2, 1, "jobset")
    with pytest.raises(DiscoveryError, match="JOB_COMPLETION_INDEX is not set"):
        from_jobset({}, coordinator="c:1", processes=2)


@pytest.mark.parametrize(
    "nodelist",
    ["node001", "node001,host2", "node[001-0015],host2", "node[001,007-015],host2", "a3mega-[0-1]", "x-1"],
)
def test_slurm_discovery_agrees_with_jaxs_own_slurm_detection(nodelist: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from jax._src.clusters.slurm_cluster import SlurmCluster

    env = {**SLURM, "SLURM_STEP_NODELIST": nodelist}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert SlurmCluster.is_env_present()
    group = discover("slurm", env)
    assert group.coordinator == SlurmCluster.get_coordinator_address(None, None)
    assert (group.processes, group.process_id) == (SlurmCluster.get_process_count(), SlurmCluster.get_process_id())


def test_slurm_discovery_refuses_a_task_outside_the_step() -> None:
    with pytest.raises(DiscoveryError, match=r"outside 0\.\.1"):
        discover("slurm", {**SLURM, "SLURM_PROCID": "2"})
    with pytest.raises(DiscoveryError, match="SLURM_STEP_NODELIST is not set"):
        discover("slurm", {k: v for k, v in SLURM.items() if k != "SLURM_STEP_NODELIST"})
    assert first_host("gpu[07-09]") == "gpu07"


def test_vertex_discovery_reads_the_cluster_spec_primary_first() -> None:
    assert discover("vertex", _vertex("workerpool0", 0, workers=3)) == ProcessGroup(
        "cmle-training-workerpool0-ab12-0:2222", 4, 0, "vertex"
    )
    assert discover("vertex", _vertex("workerpool1", 2, workers=3)).process_id == 3
    with pytest.raises(DiscoveryError, match="not a training replica"):
        discover("vertex", _vertex("workerpool2", 0))
    with pytest.raises(DiscoveryError, match="not the distributed-training JSON"):
        discover("vertex", {"CLUSTER_SPEC": "{not json"})


def test_gce_discovery_finds_this_host_in_the_groups_hosts() -> None:
    hosts = {"PLATFORM_HOSTS": "a3mega-dev-0001,a3mega-dev-0002,a3mega-dev-0003"}
    group = from_gce(hosts, hostname="a3mega-dev-0002.us-east5-a.c.acme.internal")
    assert group == ProcessGroup(f"a3mega-dev-0001:{COORDINATOR_PORT}", 3, 1, "gce")
    with pytest.raises(DiscoveryError, match="not one of the group's hosts"):
        from_gce(hosts, hostname="elsewhere")


def test_an_unknown_orchestrator_is_named() -> None:
    with pytest.raises(DiscoveryError, match="known: jobset, slurm, vertex, gce"):
        discover("kubeflow", {})
