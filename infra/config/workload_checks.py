"""Checks across an environment's sections about its workloads: training, GPU batch jobs and serving
name slices, identities, buckets and images that exist, and can write where they must."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from infra.catalogue.charts import SERVING_CHART
from infra.catalogue.controllers import controllers_of_chart
from infra.catalogue.storage_roles import OBJECT_WRITE_ROLES, ROLES_DOC
from infra.config.base import Problem, _not_in
from infra.config.findings import Finding
from infra.config.serving import CanaryServing, JetStreamServing, SaxmlServing, VllmServing, bucket_fields

if TYPE_CHECKING:
    from infra.config.environment import Environment


KUBERAY_TPU = (
    "https://cloud.google.com/kubernetes-engine/docs/add-on/ray-on-gke/tutorials/deploy-ray-serve-stable-diffusion-tpu"
)


def training_problems(env: Environment) -> list[Problem]:
    t = env.training
    if t is None:
        return []
    problems: list[Problem] = []
    problems += _not_in(("training", "slice"), t.slice, env.slices, "slices")
    problems += _not_in(("training", "identity"), t.identity, env.identities, "identities")
    problems += _not_in(("training", "bucket"), t.bucket, env.buckets, "buckets")
    problems += _not_in(("training", "image"), t.image, env.release.images, "release.images")
    if t.slice in env.slices and env.slices[t.slice].slice.kind != "tpu":
        problems.append(
            Finding(
                ("training", "slice"),
                t.slice,
                f"slice {t.slice!r} is {env.slices[t.slice].slice.name}, not TPU: the Ray training cluster (chart "
                "ray-training) runs MaxText on a TPU slice; GPU training is `batch` (JobSet), `slurm` or `vertex` "
                f"[source: workloads/charts/ray-training; {KUBERAY_TPU}]",
            )
        )
    if t.queue is not None and "kueue" not in env.release.controllers:
        problems.append(
            Finding(
                ("training", "queue"),
                t.queue,
                "Kueue admits a queued Ray cluster: pin it in release.controllers.kueue",
            )
        )
    return problems


def gpu_problems(env: Environment) -> list[Problem]:
    problems: list[Problem] = []
    needs = env.gpudirect_networks
    if needs and env.network.gpudirect_cidr is None:
        users = ", ".join(k for k, s in env.slices.items() if s.slice.gpudirect and env.slice_holder(k) != "vertex")
        problems.append(
            Finding(
                ("network", "gpudirect_cidr"),
                None,
                f"slices {users} need {needs} GPUDirect networks: give a /20 or larger range, "
                "for example 192.168.0.0/16",
            )
        )
    batch = env.batch
    # GKE's queued provisioning; another orchestrator's queued slice is refused by its own rule.
    queued = [k for k, s in env.gke_slices.items() if s.primary.type == "queued"]
    for key in queued:
        if env.slices[key].slice.kind == "tpu":
            # Kueue's ProvisioningRequests here are the GPU batch jobs'; nothing queues a TPU slice's workload.
            problems.append(
                Finding(
                    ("slices", key, "capacity", "type"),
                    "queued",
                    "queued provisioning is requested through Kueue, which queues the GPU batch jobs here "
                    "(batch.slices takes GPU slices); a TPU slice takes on-demand, spot, reservation or flex-start "
                    "(flex-start: the Dynamic Workload Scheduler's TPUs without a queue)",
                )
            )
        elif batch is None or key not in batch.slices:
            problems.append(
                Finding(
                    ("slices", key, "capacity", "type"),
                    "queued",
                    "queued provisioning is requested through Kueue: list this slice in `batch.slices`",
                )
            )
    if batch is None:
        return problems
    missing = [c for c in ("jobset", "kueue") if c not in env.release.controllers]
    if missing:
        problems.append(
            Finding(
                ("release", "controllers"),
                dict(env.release.controllers),
                f"batch jobs need the JobSet and Kueue controllers: pin {', '.join(missing)} (an exact chart version)",
            )
        )
    problems += _not_in(("batch", "identity"), batch.identity, env.identities, "identities")
    for i, key in enumerate(batch.slices):
        if key not in env.slices:
            problems += _not_in(("batch", "slices", i), key, env.slices, "slices")
        elif env.slices[key].slice.kind != "gpu":
            problems.append(Finding(("batch", "slices", i), key, "Kueue queues GPU slices here; this is a TPU slice"))
    if len(set(batch.slices)) != len(batch.slices):
        problems.append(Finding(("batch", "slices"), batch.slices, "a slice is listed twice"))
    for section, job in (("nccl_test", batch.nccl_test), ("training", batch.training)):
        if job is not None and job.slice not in batch.slices:
            problems.append(
                Finding(("batch", section, "slice"), job.slice, f"not one of batch.slices: {', '.join(batch.slices)}")
            )
    test = batch.nccl_test
    if test is not None and test.nodes is not None and test.slice in env.slices:
        hosts = env.slices[test.slice].slice.hosts
        if test.nodes > hosts:
            problems.append(
                Finding(("batch", "nccl_test", "nodes"), test.nodes, f"slice {test.slice!r} has only {hosts} nodes")
            )
    training = batch.training
    if training is not None:
        problems += _not_in(("batch", "training", "image"), training.image, env.release.images, "release.images")
        problems += _not_in(("batch", "training", "bucket"), training.bucket, env.buckets, "buckets")
    return problems


def serving_problems(env: Environment) -> list[Problem]:
    problems: list[Problem] = []
    for key, d in env.serving.items():
        chart = SERVING_CHART[d.engine]
        for controller in controllers_of_chart(chart):
            if controller not in env.release.controllers:
                problems.append(
                    Finding(
                        ("release", "controllers"),
                        dict(env.release.controllers),
                        f"serving.{key} ({d.engine}, chart {chart}) creates custom resources of the {controller} "
                        f"controller: pin its chart version",
                    )
                )
    for key, d in env.serving.items():
        where: tuple[str | int, ...] = ("serving", key)
        problems += _known(env, where, d)
        slices = {}
        for field_path, slice_key in d.slice_fields():
            spec = env.slices.get(slice_key)
            if spec is None:
                problems += _not_in((*where, *field_path), slice_key, env.slices, "slices")
            elif spec.slice.kind != "tpu":
                problems.append(
                    Finding((*where, *field_path), slice_key, "serving here runs on TPU slices; this is GPU")
                )
            else:
                slices[slice_key] = spec.slice
        # The fit check: every slice holds a whole replica of the model.
        for slice_key, slice_ in slices.items():
            assert not isinstance(d, CanaryServing)
            reason = d.model.fit_problem(slice_key, slice_)
            if reason:
                problems.append(Finding((*where, "model"), f"{d.model.parameters_b:g}B {d.model.precision}", reason))
        if isinstance(d, JetStreamServing) and len(slices) == 2:
            prefill, decode = slices.get(d.prefill_slice or ""), slices.get(d.decode_slice or "")
            if (
                prefill
                and decode
                and (prefill.topology, prefill.machine_type) != (decode.topology, decode.machine_type)
            ):
                problems.append(
                    Finding(
                        (*where, "decode_slice"),
                        d.decode_slice,
                        f"prefill and decode slices must have one shape: {prefill.topology} on "
                        f"{prefill.machine_type} vs {decode.topology} on {decode.machine_type}",
                    )
                )
        if isinstance(d, SaxmlServing):
            problems += _saxml_identity_problems(env, where, d)
        if isinstance(d, (VllmServing, CanaryServing)) and d.autoscaling is not None:
            problems += _autoscaling_problems(where, d)
    return problems


def _autoscaling_problems(where: tuple[str | int, ...], d: VllmServing | CanaryServing) -> list[Problem]:
    """The autoscaler owns the replica count (the signal it scales on: infra/rules/monitoring.py)."""
    assert d.autoscaling is not None
    problems: list[Problem] = []
    if d.replicas != 1:
        problems.append(
            Finding(
                (*where, "replicas"),
                d.replicas,
                "the autoscaler sets the number of servers between autoscaling.min and autoscaling.max: remove "
                "replicas",
            )
        )
    return problems


def _known(env: Environment, where: tuple[str | int, ...], d: Any) -> list[Problem]:
    """The identity, buckets, images and pool a serving deployment names exist; servers only read their model."""
    problems: list[Problem] = []
    problems += _not_in((*where, "identity"), d.identity, env.identities, "identities")
    for field_name, bucket in bucket_fields(d):
        problems += _not_in((*where, *field_name.split(".")), bucket, env.buckets, "buckets")
    conversion = getattr(d, "conversion", None)
    if not isinstance(d, SaxmlServing):  # Saxml's `bucket` is its admin state, which it writes
        problems += _reader_only_problems(env, where, d)
    images = [("image", getattr(d, "image", None))]
    if conversion is not None:
        problems += _conversion_identity_problems(env, where, d)
        images.append(("conversion.image", conversion.image))
        problems += _not_in((*where, "conversion", "pool"), conversion.pool, env.cpu_pools, "cpu_pools")
    for field_name, image in images:
        if image is not None:
            problems += _not_in((*where, *field_name.split(".")), image, env.release.images, "release.images")
    return problems


def _reader_only_problems(env: Environment, where: tuple[str | int, ...], d: Any) -> list[Problem]:
    """Model servers read their model: a write role on its bucket would let any server (and whoever takes one over)
    overwrite or delete every model there. Writing the models is the conversion's, under its own identity."""
    identity = env.identities.get(d.identity)
    role = identity.bucket_roles.get(d.bucket) if identity is not None else None
    if role not in OBJECT_WRITE_ROLES:
        return []
    return [
        Finding(
            ("identities", d.identity, "bucket_roles", d.bucket),
            role,
            f"serving.{where[-1]} runs as {d.identity!r} and only reads its model from bucket {d.bucket!r}: give it "
            "roles/storage.objectViewer there (a checkpoint conversion writes with its own identity, "
            f"conversion.identity) [source: {ROLES_DOC}]",
        )
    ]


def _conversion_identity_problems(env: Environment, where: tuple[str | int, ...], d: JetStreamServing) -> list[Problem]:
    """The conversion Job's identity: its own (no workload runs as it), in the deployment's namespace (a pod runs as
    a Kubernetes service account of its own namespace); what it may read and write: infra/rules/cloud_storage_iam.py."""
    conversion = d.conversion
    assert conversion is not None
    at = (*where, "conversion", "identity")
    if conversion.identity not in env.identities:
        return _not_in(at, conversion.identity, env.identities, "identities")
    users = sorted(
        {f"serving.{k}" for k, s in env.serving.items() if s.identity == conversion.identity}
        | ({"training"} if env.training is not None and env.training.identity == conversion.identity else set())
        | ({"batch"} if env.batch is not None and env.batch.identity == conversion.identity else set())
    )
    if users:
        return [
            Finding(
                at,
                conversion.identity,
                f"{', '.join(users)} run(s) as {conversion.identity!r} too: the conversion writes the models, so it "
                "runs as an identity of its own, which no server shares (servers that share it can overwrite every "
                f"model) [source: {ROLES_DOC}]",
            )
        ]
    problems: list[Problem] = []
    identity, served = env.identities[conversion.identity], env.identities.get(d.identity)
    if served is not None and identity.namespace != served.namespace:
        problems.append(
            Finding(
                at,
                conversion.identity,
                f"its namespace {identity.namespace!r} is not the deployment's ({served.namespace!r}, identity "
                f"{d.identity!r}): the Job runs in the release's namespace, as a service account of that namespace "
                "[source: https://kubernetes.io/docs/concepts/security/service-accounts/ (a ServiceAccount is a "
                "namespaced object; a Pod uses one of its own namespace)]",
            )
        )
    return problems


def _saxml_identity_problems(env: Environment, where: tuple[str | int, ...], d: SaxmlServing) -> list[Problem]:
    """Saxml's identity: its own Google service account, admin of the Saxml bucket and of nothing else."""
    identity = env.identities.get(d.identity)
    if identity is None:
        return []
    problems: list[Problem] = []
    if identity.mode != "impersonation":
        problems.append(
            Finding((*where, "identity"), d.identity, "Saxml runs as a Google service account: use mode impersonation")
        )
    others = sorted(set(identity.bucket_roles) - {d.bucket})
    if others or identity.bucket_roles.get(d.bucket) != "roles/storage.objectAdmin":
        problems.append(
            Finding(
                ("identities", d.identity, "bucket_roles"),
                dict(identity.bucket_roles),
                f"Saxml's identity gets roles/storage.objectAdmin on bucket {d.bucket!r} and no other role"
                + (f" (remove {', '.join(others)})" if others else ""),
            )
        )
    return problems


def team_problems(env: Environment) -> list[Problem]:
    """Each team's queue refers to what exists: the batch slices it shares, a namespace of the platform (the names
    no other queue of the cluster takes: infra/rules/kueue.py)."""
    if not env.teams:
        return []
    if env.batch is None:
        return [Finding(("teams",), sorted(env.teams), "teams share the batch slices through Kueue: add `batch`")]
    problems: list[Problem] = []
    for name, team in env.teams.items():
        problems += _not_in(("teams", name, "namespace"), team.namespace, env.namespaces, "the identities' namespaces")
        for field in ("quota", "borrowing_limit"):
            for key in getattr(team, field):
                problems += _not_in(("teams", name, field, key), key, env.batch.slices, "batch.slices")
        if team.borrow_training and (env.training is None or env.training.queue is None):
            problems.append(
                Finding(
                    ("teams", name, "borrow_training"),
                    True,
                    "the training slice is lent through its cluster's Kueue queue: set training.queue (or remove it)",
                )
            )
    return problems
