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
    return problems + _launcher_problems(env)


# MaxText starts JAX's distributed runtime itself for multi-tier checkpointing (maxtext utils/max_utils.py
# initialize_jax_for_tpu, the enable_multi_tier_checkpointing branch @ 0.2.5); under Ray Train's JAX backend the
# runtime is Ray's, started before MaxText runs.
MAXTEXT_MTC = "maxtext utils/max_utils.py (initialize_multi_tier_checkpointing) @ 0.2.5"


def _launcher_problems(env: Environment) -> list[Problem]:
    t = env.training
    assert t is not None
    problems: list[Problem] = []
    if t.launcher == "ray":
        if t.resilience.local_tier is not None:
            problems.append(
                Finding(
                    ("training", "resilience", "local_tier"),
                    t.resilience.local_tier.model_dump(),
                    "MaxText's multi-tier checkpointing starts JAX's distributed runtime itself, which Ray Train "
                    f"has started under launcher ray: set training.launcher: jobset [source: {MAXTEXT_MTC}]",
                )
            )
        return problems
    if t.runs != "jobs":
        problems.append(
            Finding(
                ("training", "runs"),
                t.runs,
                "launcher jobset makes each run a JobSet, with no standing cluster: write runs: jobs",
            )
        )
    if t.resilience.min_slices is not None:
        problems.append(
            Finding(
                ("training", "resilience", "min_slices"),
                t.resilience.min_slices,
                "elastic slices are Ray Train's (launcher ray); a JobSet restarts the run on all its slices",
            )
        )
    tier = t.resilience.local_tier
    if tier is not None:
        problems += _local_tier_problems(env, tier)
    if "jobset" not in env.release.controllers:
        problems.append(
            Finding(
                ("training", "launcher"),
                t.launcher,
                "a JobSet run needs the JobSet controller: pin release.controllers.jobset",
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
    weighted = next(
        (f"teams.{name}.weight" for name, team in sorted(env.teams.items()) if team.weight is not None), None
    )
    for name, team in env.teams.items():
        problems += _not_in(("teams", name, "namespace"), team.namespace, env.namespaces, "the identities' namespaces")
        for field in ("quota", "borrowing_limit"):
            for key in getattr(team, field):
                problems += _not_in(("teams", name, field, key), key, env.batch.slices, "batch.slices")
        if weighted and team.preemption.borrow_within_cohort != "Never":
            problems.append(
                Finding(
                    ("teams", name, "preemption", "borrow_within_cohort"),
                    team.preemption.borrow_within_cohort,
                    f"Kueue allows it with its classic preemption only, and {weighted} turns fair sharing on: "
                    "set Never, or remove every team's weight (apis/kueue/v1beta2/clusterqueue_types.go "
                    "BorrowWithinCohort @ v0.19.2)",
                )
            )
        if team.borrow_training and (env.training is None or env.training.queue is None):
            problems.append(
                Finding(
                    ("teams", name, "borrow_training"),
                    True,
                    "the training slice is lent through its cluster's Kueue queue: set training.queue (or remove it)",
                )
            )
    return problems


# GKE's multi-tier checkpointing: https://cloud.google.com/kubernetes-engine/docs/how-to/machine-learning/training/multi-tier-checkpointing
# (its backup bucket needs hierarchical namespace); MaxText's guide assumes a job of several slices, whose peers hold
# each other's saves (maxtext docs/guides/checkpointing_solutions/multi_tier_checkpointing.md).
GKE_MTC = "https://cloud.google.com/kubernetes-engine/docs/how-to/machine-learning/training/multi-tier-checkpointing"


def _local_tier_problems(env: Environment, tier: Any) -> list[Problem]:
    t = env.training
    assert t is not None
    at = ("training", "resilience", "local_tier")
    problems: list[Problem] = list(_not_in((*at, "bucket"), tier.bucket, env.buckets, "buckets"))
    if tier.bucket in env.buckets and not env.buckets[tier.bucket].hierarchical_namespace:
        problems.append(
            Finding(
                (*at, "bucket"),
                tier.bucket,
                f"the add-on's backups need a bucket with hierarchical namespace: give one with "
                f"`hierarchical_namespace: true` (set when a bucket is made; an existing bucket would be replaced) "
                f"[source: {GKE_MTC}]",
            )
        )
    if t.slice in env.slices and env.slices[t.slice].count < 2:
        problems.append(
            Finding(
                at,
                tier.model_dump(),
                f"slice {t.slice!r} is one slice: the peer tier keeps each host's save on the same host of another "
                f"slice, so a lost host loses it; the local tier needs slices.{t.slice}.count 2 or more "
                "[source: maxtext docs/guides/checkpointing_solutions/multi_tier_checkpointing.md, its assumptions]",
            )
        )
    return problems
