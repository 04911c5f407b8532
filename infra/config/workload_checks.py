"""The references of an environment's workloads: training, GPU batch jobs, teams and serving name slices (of the
kind each runs on), identities, buckets, images, pools and controllers that exist. What they may do with them is a
rule (infra/rules/)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from infra.catalogue.charts import SERVING_CHART
from infra.catalogue.controllers import controllers_of_chart
from infra.config.base import Problem, _not_in
from infra.config.findings import Finding
from infra.config.serving import bucket_fields

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
    if t.runs == "jobs" and t.queue is None:
        problems.append(
            Finding(
                ("training", "runs"),
                t.runs,
                "each run is a RayJob Kueue admits through training.queue: set training.queue, or runs: cluster",
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
        for field_path, slice_key in d.slice_fields():
            spec = env.slices.get(slice_key)
            if spec is None:
                problems += _not_in((*where, *field_path), slice_key, env.slices, "slices")
            elif spec.slice.kind != "tpu":
                problems.append(
                    Finding((*where, *field_path), slice_key, "serving here runs on TPU slices; this is GPU")
                )
    return problems


def _known(env: Environment, where: tuple[str | int, ...], d: Any) -> list[Problem]:
    """The identity, buckets, images and pool a serving deployment names exist."""
    problems: list[Problem] = []
    problems += _not_in((*where, "identity"), d.identity, env.identities, "identities")
    for field_name, bucket in bucket_fields(d):
        problems += _not_in((*where, *field_name.split(".")), bucket, env.buckets, "buckets")
    conversion = getattr(d, "conversion", None)
    images = [("image", getattr(d, "image", None))]
    if conversion is not None:
        at = (*where, "conversion", "identity")
        problems += _not_in(at, conversion.identity, env.identities, "identities")
        images.append(("conversion.image", conversion.image))
        problems += _not_in((*where, "conversion", "pool"), conversion.pool, env.cpu_pools, "cpu_pools")
    for field_name, image in images:
        if image is not None:
            problems += _not_in((*where, *field_name.split(".")), image, env.release.images, "release.images")
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
