"""`python -m scripts.logs --env ENV` (`make logs ENV=`): where each workload of an environment writes its logs.

Generated from the environment file, for its own project, region and cluster:

- every Helm release on the GKE cluster (the Ray training cluster, each serving deployment, the GPU JobSets, the
  controllers): a Cloud Logging query (resource.type="k8s_container", the cluster, the namespace and the pods'
  `app.kubernetes.io/instance` label), the `gcloud logging read` command and the console's Logs Explorer URL, and
  `kubectl logs` for the live pods;
- the Ray jobs `make train` submits: `ray job logs` through the head's dashboard;
- the Slurm cluster's batch jobs: their output files (the `#SBATCH --output` of the jobs `make plan` writes);
- the Vertex AI jobs: resource.type="ml_job" by job id, found by the display name the request sets;
- the Compute Engine VM groups: each VM's serial port output.

In-cluster processes of this repository (the trainer, the canary server) write one JSON object per line
(workloads/logs.py): Cloud Logging reads them as `jsonPayload` (`jsonPayload.message`, `severity`, and their own
fields such as `jsonPayload.step` and `jsonPayload.loss`). Nothing here calls a cloud API.

Exit codes: 0 printed; 2 an environment that does not load, an unknown workload, or usage.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import quote

from infra.catalogue.controllers import CONTROLLERS
from infra.catalogue.serving_metrics import ADAPTER_NAMESPACE
from infra.config import ConfigError, Environment, JetStreamServing, Serving, VllmServing, environments_dir
from infra.synth.load import load_named
from scripts.parser import ArgumentParser, refuse

# The label Helm charts put on a release's pods, as Cloud Logging names it on a k8s_container entry (GKE writes
# pod labels as `k8s-pod/<key>`, dots in the key as underscores).
INSTANCE_LABEL = 'labels."k8s-pod/app_kubernetes_io/instance"'
CONSOLE = "https://console.cloud.google.com/logs/query"
FRESHNESS = "1d"


@dataclass(frozen=True)
class LogSource:
    """Where one workload's logs are: a Cloud Logging query (with its command and URL) and commands to run."""

    workload: str  # the environment field that declares it, e.g. serving.llama70b-vllm
    orchestrator: str  # GKE, Ray, Slurm, Vertex AI, VMs
    what: str
    query: str | None = None
    commands: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    # GKE: the namespace, the release whose pods carry its instance label, and the names of pods that carry none.
    namespace: str | None = None
    release: str | None = None
    pod_prefixes: tuple[str, ...] = ()

    def read_command(self, project: str) -> str | None:
        if self.query is None:
            return None
        return f"gcloud logging read '{self.query}' --project={project} --freshness={FRESHNESS} --limit=200"

    def console_url(self, project: str) -> str | None:
        if self.query is None:
            return None
        return f"{CONSOLE};query={quote(self.query, safe='')};duration=P1D?project={project}"

    def selects(self, namespace: str, labels: dict[str, str], pod_name: str) -> bool:
        """Whether the query takes a pod's containers (GKE sources): its namespace, then its label or its name."""
        if self.namespace is None or namespace != self.namespace:
            return False
        if self.release is None and not self.pod_prefixes:
            return True
        return labels.get("app.kubernetes.io/instance") == self.release or pod_name.startswith(self.pod_prefixes)


def container_query(
    env: Environment, namespace: str, release: str | None = None, pod_prefixes: tuple[str, ...] = ()
) -> str:
    """The Cloud Logging filter of the containers of one release (or one namespace) on the environment's cluster:
    the release's pods by their instance label, those its chart leaves unlabeled by their names."""
    parts = [
        'resource.type="k8s_container"',
        f'resource.labels.project_id="{env.project}"',
        f'resource.labels.location="{env.region}"',
        f'resource.labels.cluster_name="{env.cluster.name}"',
        f'resource.labels.namespace_name="{namespace}"',
    ]
    which = [f'{INSTANCE_LABEL}="{release}"'] if release is not None else []
    which += [f'resource.labels.pod_name=~"^{prefix}"' for prefix in pod_prefixes]
    if which:
        parts.append(which[0] if len(which) == 1 else f"({' OR '.join(which)})")
    return " AND ".join(parts)


def _credentials(env: Environment) -> str:
    """kubectl's credentials for the environment's cluster (its DNS endpoint, as make deploy reaches it)."""
    return (
        f"gcloud container clusters get-credentials {env.cluster.name} --location {env.region} "
        f"--project {env.project} --dns-endpoint"
    )


def _release(
    env: Environment, workload: str, release: str, namespace: str, what: str, unlabeled: tuple[str, ...] = ()
) -> LogSource:
    """A Helm release's pods; `unlabeled`: the name prefixes of the pods its chart gives no instance label."""
    kubectl = [
        f"kubectl -n {namespace} logs -l app.kubernetes.io/instance={release} --all-containers --prefix --tail=200",
        *(f"kubectl -n {namespace} get pods -o name | grep '/{prefix}'  # then: kubectl logs" for prefix in unlabeled),
    ]
    return LogSource(
        workload,
        "GKE",
        f"Helm release {release} in namespace {namespace}: {what}",
        container_query(env, namespace, release, unlabeled),
        (_credentials(env), *kubectl),
        namespace=namespace,
        release=release,
        pod_prefixes=unlabeled,
    )


def _unlabeled(release: str, d: Serving) -> tuple[str, ...]:
    """Pods of a serving release that carry no instance label: JetStream's conversion Job (jetstream-pathways
    templates/conversion.yaml) and vLLM's endpoint picker (vllm-tpu templates/gateway.yaml)."""
    if isinstance(d, JetStreamServing) and d.conversion is not None:
        return (f"{release}-convert-",)
    if isinstance(d, VllmServing) and d.gateway:
        return (f"{release}-epp-",)
    return ()


def gke_sources(env: Environment) -> list[LogSource]:
    """The GKE cluster's releases: controllers, GPUDirect set-up, the Ray training cluster, the GPU JobSets, the
    serving deployments."""
    sources = []
    for name, version in sorted(env.release.controllers.items()):
        namespace = CONTROLLERS[name].namespace
        sources.append(
            LogSource(
                f"release.controllers.{name}",
                "GKE",
                f"the {name} controller ({version}) in namespace {namespace}",
                container_query(env, namespace),
                (
                    _credentials(env),
                    f"kubectl -n {namespace} get pods",
                    f"kubectl -n {namespace} logs <pod> --all-containers --tail=200",
                ),
                namespace=namespace,
            )
        )
    if env.gke_gpudirect_networks:
        # Its DaemonSets' pods (chart gpu-networking) carry no instance label: by their names in kube-system.
        transports = sorted({s.slice.gpudirect.transport for s in env.gke_slices.values() if s.slice.gpudirect})
        prefixes = ("device-injector-", *(f"nccl-{t}-installer-" for t in transports))
        sources.append(
            _release(env, "gpudirect", "gpu-networking", "kube-system", "GPUDirect set-up on the GPU nodes", prefixes)
        )
    if env.training is not None:
        namespace = env.identities[env.training.identity].namespace
        where = f"the Ray head and workers on slice {env.training.slice}"
        sources.append(_release(env, "training", "ray-training", namespace, where))
    if env.batch is not None:
        namespace = env.identities[env.batch.identity].namespace
        for section, release in (("nccl_test", "nccl-test"), ("training", "gpu-training")):
            if getattr(env.batch, section) is not None:
                sources.append(_release(env, f"batch.{section}", release, namespace, "a JobSet queued in Kueue"))
    for key, d in env.serving.items():
        release = f"serve-{key}"
        namespace = env.identities[d.identity].namespace
        sources.append(_release(env, f"serving.{key}", release, namespace, d.engine, _unlabeled(release, d)))
    if env.autoscales:
        what = "the Custom Metrics Stackdriver Adapter the serving autoscalers read through"
        sources.append(_release(env, "metrics-adapter", "metrics-adapter", ADAPTER_NAMESPACE, what))
    return sources


def ray_sources(env: Environment) -> list[LogSource]:
    """The Ray jobs `make train` submits to the training cluster's head."""
    if env.training is None:
        return []
    namespace = env.identities[env.training.identity].namespace
    return [
        LogSource(
            "training.ray-jobs",
            "Ray",
            "each run `make train` submits (its job id is in make train's output: `job_id`): the driver's output "
            "with its workers'",
            None,
            (
                f"kubectl -n {namespace} port-forward svc/ray-training-head-svc 8265",
                "ray job list --address http://127.0.0.1:8265",
                "ray job logs <job_id> --follow --address http://127.0.0.1:8265",
            ),
            ("the head's dashboard, http://127.0.0.1:8265 while the port-forward runs: Jobs, then the job's logs",),
        )
    ]


def slurm_sources(env: Environment) -> list[LogSource]:
    """The Slurm cluster's batch jobs: their output files on the login node."""
    from infra.slurm.jobs import nccl_test_job, training_job

    slurm = env.slurm
    if slurm is None:
        return []
    sources = []
    for section, job in (("nccl_test", nccl_test_job(env)), ("training", training_job(env))):
        if job is None:
            continue
        output = job.output.replace("%x", job.name).replace("%j", "<job id>")
        sources.append(
            LogSource(
                f"slurm.{section}",
                "Slurm",
                f"batch job {job.name}: its output file, in the directory sbatch ran in "
                f"(#SBATCH --output={job.output}), on the login node",
                None,
                (
                    f"gcloud compute instances list --project={env.project} --filter='name~^{slurm.name}.*login'",
                    f"gcloud compute ssh <login node> --zone=<its zone> --project={env.project} --tunnel-through-iap",
                    f"tail -f {output}",
                    "sacct -j <job id> --format=JobID,JobName,State,Elapsed,ExitCode,NodeList",
                ),
            )
        )
    return sources


def vertex_sources(env: Environment) -> list[LogSource]:
    """The Vertex AI custom jobs: their logs by job id (resource.type="ml_job")."""
    from infra.vertex.job import custom_job, job_names

    sources = []
    for name in job_names(env):
        display = custom_job(env, name)["displayName"]
        where = f"--project={env.project} --region={env.region}"
        sources.append(
            LogSource(
                f"vertex.{name}",
                "Vertex AI",
                f"custom job {display} (labels platform_job={name}); <job id> is the last part of the job's name "
                "that make vertex-submit prints",
                f'resource.type="ml_job" AND resource.labels.job_id="<job id>" AND resource.labels.project_id='
                f'"{env.project}"',
                (
                    f"gcloud ai custom-jobs list {where} --filter='displayName={display}'",
                    f"gcloud ai custom-jobs stream-logs <job id> {where}",
                ),
            )
        )
    return sources


def vm_sources(env: Environment) -> list[LogSource]:
    """The Compute Engine VM groups: each VM's serial port (its start-up script and the NCCL gate)."""
    from infra.vms.instance import vm_names

    sources = []
    for key, group in env.vm_groups.items():
        zone = env.zone_of(group.slice)
        sources.append(
            LogSource(
                f"vm_groups.{key}",
                "VMs",
                f"the VMs of group {key} (between make vm-up and make vm-down): their serial port output",
                None,
                tuple(
                    f"gcloud compute instances get-serial-port-output {vm} --zone={zone} --project={env.project}"
                    for vm in vm_names(env, key)
                ),
            )
        )
    return sources


def log_sources(env: Environment) -> list[LogSource]:
    """Every workload of the environment with where its logs are."""
    return [*gke_sources(env), *ray_sources(env), *slurm_sources(env), *vertex_sources(env), *vm_sources(env)]


def render(env: Environment, sources: list[LogSource]) -> str:
    lines = [f"# Logs of {env.name} (project {env.project}, region {env.region}, cluster {env.cluster.name})", ""]
    for s in sources:
        lines += [f"## {s.workload} ({s.orchestrator})", "", s.what, ""]
        if s.query is not None:
            lines += ["Cloud Logging query:", "", f"    {s.query}", ""]
            lines += [f"    {s.read_command(env.project)}", "", f"Logs Explorer: {s.console_url(env.project)}", ""]
        if s.commands:
            lines += ["Commands:", "", *(f"    {c}" for c in s.commands), ""]
        lines += [*(f"{note}" for note in s.notes), *([""] if s.notes else [])]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m scripts.logs",
        description=__doc__.split("\n\n")[0],
        epilog="exit codes: 0 printed; 2 an environment that does not load, an unknown workload, or usage",
    )
    parser.add_argument("--env", default="dev", help="the environment (default dev)")
    parser.add_argument("--workload", default=None, help="one workload, e.g. serving.llama70b-vllm (default: all)")
    parser.add_argument("--json", action="store_true", help="print JSON (commands, queries and URLs) instead")
    parser.add_argument("--environments", type=Path, default=None, help="the environments dir (infra/environments)")
    args = parser.parse_args(argv)
    directory = args.environments or environments_dir()
    try:
        env = load_named(args.env, directory)
    except ConfigError as err:
        return refuse(err)
    sources = log_sources(env)
    if args.workload is not None:
        chosen = [s for s in sources if s.workload == args.workload]
        if not chosen:
            known = ", ".join(s.workload for s in sources)
            print(
                f"error: --workload {args.workload!r}: not a workload of {env.name}; workloads: {known}",
                file=sys.stderr,
            )
            return 2
        sources = chosen
    if args.json:
        out = [
            {**asdict(s), "read": s.read_command(env.project), "console": s.console_url(env.project)} for s in sources
        ]
        print(json.dumps(out, indent=1))
    else:
        print(render(env, sources), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
