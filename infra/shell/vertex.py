"""Vertex AI's generated scripts: each job's container entry (infra/vertex/job.py, the `bash -c` argument of every
worker pool's container), as the primary replica of the job runs it, with the variables the request and Vertex AI
give the container (its `env`, CLUSTER_SPEC) and the files the image and Vertex AI put there (the plugin's directory;
for the NCCL test, stand-ins for the TCPXO image's own /scripts)."""

from __future__ import annotations

import json

from infra.config import Environment
from infra.shell import GeneratedScript
from infra.vertex.job import HOST as VERTEX_HOST
from infra.vertex.job import custom_job, job_names

# The host record each job's container is (infra/catalogue/hosts.py).
HOSTS = {"nccl-test": "vertex-tcpxo-image", "train": "vertex-trainer-image"}
# The TCPXO image's scripts the NCCL test calls (tcpxo_scripts/ @ v1.0.15, copied to /scripts), stood in for: the
# benchmark prints one nccl-tests row; mpirun is a stand-in of the harness.
IMAGE_SCRIPTS = {
    "/scripts/init_ssh.sh": "#!/bin/bash\nexit 0\n",
    "/scripts/gen_hostfiles.sh": (
        '#!/bin/bash\nmkdir -p "hostfiles$#" && printf "%s\\n" "$@" > "hostfiles$#/hostfile1"\n'
    ),
    "/scripts/demo-run-nccl-test-tcpxo-via-mpi.sh": (
        "#!/bin/bash\n"
        'echo "#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong"\n'
        'echo "  8589934592 134217728 float none -1 45000 190.9 190.9 0 45000 190.9 190.9 0  (stand-in)"\n'
    ),
}


def _cluster_spec(job: dict[str, object]) -> str:
    """Vertex AI's CLUSTER_SPEC for the job's primary replica (https://cloud.google.com/vertex-ai/docs/training/
    distributed-training): each pool's replicas as host:port, this replica's task."""
    pools = job["jobSpec"]["workerPoolSpecs"]  # type: ignore[index]
    cluster = {
        f"workerpool{i}": [f"cmle-training-workerpool{i}-ab12-{n}:2222" for n in range(int(pool["replicaCount"]))]
        for i, pool in enumerate(pools)
    }
    return json.dumps({"cluster": cluster, "environment": "cloud", "task": {"type": "workerpool0", "index": 0}})


def scripts(env: Environment) -> list[GeneratedScript]:
    out = []
    for name in job_names(env):
        job = custom_job(env, name)
        container = job["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]
        files: list[tuple[str, str]] = [(f"{VERTEX_HOST.plugin_dir}/libnccl-net.so", "")]
        if name == "nccl-test":
            files += IMAGE_SCRIPTS.items()
        runtime = {e["name"]: e["value"] for e in container["env"]}
        runtime["CLUSTER_SPEC"] = _cluster_spec(job)
        out.append(
            GeneratedScript(
                env=env.name,
                name=f"vertex/{name}/entry.sh",
                text=container["args"][0],
                host=HOSTS[name],
                runtime_env=tuple(runtime.items()),
                files=tuple(files),
            )
        )
    return out
