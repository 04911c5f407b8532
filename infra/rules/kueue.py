"""Kueue: queues that exist and cover what a workload asks for, flavors that list the covered resources, the teams'
quotas within what the slices hold, preemption the webhook accepts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from infra.catalogue.controllers import CONTROLLERS, kueue_max_pod_sets
from infra.rules import Finding, containers, pod_templates, rule, where
from infra.rules.manifest_subject import ReleaseContext, _queues

if TYPE_CHECKING:
    from infra.config import Environment


@rule(
    id="kueue.queue-exists-and-covers-resources",
    system="Kueue",
    layer="admission",
    summary=(
        "A job's kueue.x-k8s.io/queue-name names a LocalQueue in its namespace whose ClusterQueue covers every "
        "resource its pods request; otherwise the workload is never admitted."
    ),
    source=(
        "https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/#resources (covered resources; a workload "
        "requesting another stays pending: 'resource ... unavailable in ClusterQueue'); kueue LocalQueue docs"
    ),
    subject="manifest",
)
def _kueue(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    queues = _queues(ctx)
    for obj in objects:
        queue = ((obj.get("metadata") or {}).get("labels") or {}).get("kueue.x-k8s.io/queue-name")
        if not queue:
            continue
        namespace = obj["metadata"].get("namespace") or ctx.namespace
        cq = queues.get((namespace, queue))
        if cq is None:
            known = ", ".join(f"{ns}/{n}" for ns, n in sorted(queues)) or "(none)"
            yield Finding(
                f"{where(obj)}: metadata.labels.kueue.x-k8s.io/queue-name", queue, f"no LocalQueue; known: {known}"
            )
            continue
        covered = {r for g in cq.get("spec", {}).get("resourceGroups") or [] for r in g.get("coveredResources") or []}
        for path, template in pod_templates(obj):
            for cpath, c in containers(template.get("spec") or {}):
                for name in (c.get("resources") or {}).get("requests") or {}:
                    if name not in covered:
                        yield Finding(
                            f"{where(obj)}: {path}.spec.{cpath}.resources.requests.{name}",
                            name,
                            f"ClusterQueue {cq['metadata']['name']} covers only {', '.join(sorted(covered))}",
                        )


@rule(
    id="kueue.flavors-list-covered-resources",
    system="Kueue webhook",
    layer="admission",
    summary="Every flavor of a ClusterQueue resource group lists exactly the group's coveredResources, in order.",
    source=(
        "kubernetes-sigs/kueue @ v0.17.3 and v0.19.2: apis/kueue/v1beta2/clusterqueue_types.go CEL validation (each "
        "flavor lists as many resources as coveredResources) and pkg/webhooks/clusterqueue_webhook.go (each by the "
        "name at its place in coveredResources); CRD pinned in infra/charts/crds.yaml"
    ),
    kinds=("ClusterQueue",),
    subject="manifest",
)
def _kueue_flavors(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for obj in objects:
        for i, group in enumerate(obj["spec"].get("resourceGroups") or []):
            covered = list(group.get("coveredResources") or [])
            for j, flavor in enumerate(group.get("flavors") or []):
                names = [r.get("name") for r in flavor.get("resources") or []]
                if names != covered:
                    yield Finding(
                        f"{where(obj)}: spec.resourceGroups[{i}].flavors[{j}].resources",
                        names,
                        f"must list {covered}",
                    )


KUEUE_CLUSTER_QUEUE_DOC = (
    "https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/ (a ClusterQueue admits a workload when its requests fit "
    "the quota; the nodes are not consulted: quota the nodes cannot hold admits jobs whose pods then wait)"
)


@rule(
    id="kueue.no-local-queue-named-default",
    system="Kueue",
    layer="admission",
    summary=(
        "No LocalQueue of the platform is named `default`: with LocalQueueDefaulting (on by default since 0.12, "
        "always on from 0.19) Kueue puts every job and pod of its namespace that names no queue in the LocalQueue "
        "`default`, so "
        "a team, the training queue or the batch queue called so would take over the namespace's other workloads."
    ),
    source=(
        "kubernetes-sigs/kueue pkg/features/kube_features.go @ v0.17.0 (LocalQueueDefaulting: on from 0.12, GA "
        "and locked at 0.17) and @ v0.19.2 (the gate removed: always on); pkg/controller/constants/constants.go "
        'DefaultLocalQueueName = "default"; pkg/controller/jobs/pod/pod_webhook.go (the label set on a pod that names '
        "none) @ v0.19.2"
    ),
    subject="environment",
)
def _no_default_local_queue(env: Environment) -> Iterator[Finding]:
    named: list[tuple[str, str]] = [(f"teams.{name}", name) for name in env.teams]
    if env.training is not None and env.training.queue:
        named.append(("training.queue", env.training.queue))
    if env.batch is not None:
        named.append(("batch.queue", env.batch.queue))
    for field, queue in named:
        if queue == "default":
            yield Finding(
                field,
                queue,
                "Kueue's default LocalQueue name: every job and pod of its namespace that names no queue would be "
                "admitted through it; choose another name",
            )


@rule(
    id="kueue.team-quotas-within-the-slices",
    system="Kueue",
    layer="admission",
    summary=(
        "The teams' guaranteed quotas of a batch slice add up to no more than the slice's accelerators (the "
        "platform's own queue keeps the rest): Kueue admits by quota alone."
    ),
    source=KUEUE_CLUSTER_QUEUE_DOC,
    subject="environment",
)
def _team_quotas(env: Environment) -> Iterator[Finding]:
    from infra.derive.queues import capacity

    if env.batch is None:
        return
    for key in env.batch.slices:
        if key not in env.slices:
            continue
        asked = {name: team.quota.get(key, 0) for name, team in sorted(env.teams.items())}
        held = capacity(env, key).accelerators
        if sum(asked.values()) > held:
            shares = ", ".join(f"{name} {n}" for name, n in asked.items() if n)
            yield Finding(
                f"teams.*.quota.{key}",
                sum(asked.values()),
                f"the teams' quotas ({shares}) add up to more than slice {key}'s {held} "
                f"{env.slices[key].slice.resource_name} ({env.slices[key].slice.hosts} nodes)",
            )


@rule(
    id="platform.team-quota-within-budget",
    system="ML platform (cost)",
    layer="platform",
    summary=(
        "A team's guaranteed quota, as whole nodes of each batch slice at list price for a month, is within its "
        "budget (teams.<team>.budget): the quota is capacity held for the team whether or not its jobs run."
    ),
    source=f"infra/catalogue/prices.py (the review's list prices, 730 hours a month); {KUEUE_CLUSTER_QUEUE_DOC}",
    subject="environment",
)
def _team_budget(env: Environment) -> Iterator[Finding]:
    from infra.derive.queues import guaranteed_cost

    for name, team in sorted(env.teams.items()):
        if team.budget is None:
            continue
        held = guaranteed_cost(env, name)
        if held.usd_per_month is not None and held.usd_per_month > team.budget.monthly_usd:
            yield Finding(
                f"teams.{name}.budget.monthly_usd",
                team.budget.monthly_usd,
                f"its guaranteed quota commits {held.usd_per_month:,.2f} USD a month at list price "
                f"({'; '.join(held.parts)}), over its budget: lower teams.{name}.quota or raise the budget",
            )


@rule(
    id="kueue.borrow-within-cohort-needs-reclaim",
    system="Kueue webhook",
    layer="admission",
    summary=(
        "A queue that preempts while borrowing (borrow_within_cohort LowerPriority) also reclaims its own share "
        "(reclaim_within_cohort not Never): Kueue's webhook refuses the ClusterQueue otherwise."
    ),
    source=(
        "kubernetes-sigs/kueue pkg/webhooks/clusterqueue_webhook.go validatePreemption @ v0.17.0 and v0.19.2 "
        "('reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never')"
    ),
    subject="environment",
)
def _borrow_within(env: Environment) -> Iterator[Finding]:
    for name, team in sorted(env.teams.items()):
        p = team.preemption
        if p.reclaim_within_cohort == "Never" and p.borrow_within_cohort != "Never":
            yield Finding(
                f"teams.{name}.preemption.borrow_within_cohort",
                p.borrow_within_cohort,
                "needs reclaim_within_cohort LowerPriority or Any (it is Never)",
            )


KUEUE_RAYCLUSTER_WEBHOOK = (
    "kubernetes-sigs/kueue @ v0.17.3 and v0.19.2 pkg/controller/jobs/raycluster/raycluster_webhook.go "
    "(validateCreate, MaxPodSets) and common.go (a pod set per worker group and the head's)"
)
KUEUE_RAYJOB = (
    "kubernetes-sigs/kueue @ v0.19.2 pkg/controller/jobs/rayjob (rayjob_webhook.go validateCreate: its own cluster, "
    "deleted after the run, then the cluster validated as a RayCluster, without the submitter; rayjob_controller.go "
    "PodSets adds the submitter's in K8sJobMode) and apis/kueue/v1beta2/workload_types.go (PodSets MaxItems: the API "
    "server refuses a Workload over it)"
)
# The pod sets a Workload holds at the pinned Kueue (infra/catalogue/controllers.py KUEUE_MAX_POD_SETS): a queued
# RayCluster's are its head's and one per worker group; a queued RayJob's also its submitter's (K8sJobMode).
PINNED_KUEUE = CONTROLLERS["kueue"].versions[-1]


def max_worker_groups(kind: str, kueue: str = PINNED_KUEUE) -> int:
    """The worker groups (slices) a queued RayCluster or RayJob may have at Kueue version `kueue`."""
    return kueue_max_pod_sets(kueue) - (2 if kind == "RayJob" else 1)


@rule(
    id="kueue.raycluster-queued-whole",
    system="Kueue",
    layer="admission",
    summary=(
        "A RayCluster Kueue admits (kueue.x-k8s.io/queue-name) has at most one worker group fewer than the pinned "
        f"Kueue's Workload holds pod sets (Kueue {PINNED_KUEUE}: {max_worker_groups('RayCluster')}; the head's is "
        f"one), a queued RayJob two fewer ({max_worker_groups('RayJob')}; its submitter's another), none named `head`, "
        "and no in-tree autoscaling (what Kueue reserved, the cluster keeps); a queued RayJob brings its own cluster "
        "(rayClusterSpec, no clusterSelector) and deletes it when the run ends (shutdownAfterJobFinishes, else it "
        "holds the queue's quota after the run): Kueue's webhook refuses it otherwise. A RayJob with one group too "
        "many passes the webhook and gets no Workload (the API server refuses it), so it stays suspended."
    ),
    source=f"{KUEUE_RAYCLUSTER_WEBHOOK} (validateCreate); {KUEUE_RAYJOB}",
    subject="manifest",
    kinds=("RayCluster", "RayJob"),
)
def _raycluster_queued(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for obj in objects:
        if not ((obj.get("metadata") or {}).get("labels") or {}).get("kueue.x-k8s.io/queue-name"):
            continue
        job = obj.get("kind") == "RayJob"
        if job:
            yield from _rayjob_queued(obj)
        spec = (obj.get("spec") or {}).get("rayClusterSpec") or {} if job else obj.get("spec") or {}
        at = f"{where(obj)}: spec{'.rayClusterSpec' if job else ''}"
        kueue = ctx.chart_version("kueue") or PINNED_KUEUE if ctx is not None else PINNED_KUEUE
        try:
            most = max_worker_groups(str(obj.get("kind")), kueue)
        except KeyError as err:
            yield Finding(f"{at}.workerGroupSpecs", len(spec.get("workerGroupSpecs") or []), str(err.args[0]))
            continue
        groups = spec.get("workerGroupSpecs") or []
        if len(groups) > most:
            yield Finding(
                f"{at}.workerGroupSpecs",
                len(groups),
                f"at most {most} worker groups in a queued {obj.get('kind')} at Kueue {kueue} (one per slice: "
                f"slices.<training slice>.count at most {most})",
            )
        for i, group in enumerate(groups):
            if group.get("groupName") == "head":
                yield Finding(f"{at}.workerGroupSpecs[{i}].groupName", "head", "reserved for the head")
        if spec.get("enableInTreeAutoscaling"):
            yield Finding(
                f"{at}.enableInTreeAutoscaling",
                True,
                "a Kueue-managed RayCluster may autoscale only as an elastic job (ElasticJobsViaWorkloadSlices)",
            )


def _rayjob_queued(job: dict[str, Any]) -> Iterator[Finding]:
    """What Kueue's RayJob webhook refuses of a queued RayJob before it looks at its cluster (KUEUE_RAYJOB)."""
    spec, at = job.get("spec") or {}, f"{where(job)}: spec"
    if spec.get("clusterSelector") and spec.get("rayClusterSpec"):
        yield Finding(f"{at}.clusterSelector", spec["clusterSelector"], "a queued RayJob brings its own cluster "
                      "(rayClusterSpec): Kueue refuses one that also selects an existing cluster")  # fmt: skip
    elif not spec.get("clusterSelector") and not spec.get("rayClusterSpec"):
        yield Finding(f"{at}.rayClusterSpec", None, "a queued RayJob needs its own cluster (rayClusterSpec)")
    if spec.get("rayClusterSpec") and spec.get("shutdownAfterJobFinishes") is not True:
        yield Finding(f"{at}.shutdownAfterJobFinishes", spec.get("shutdownAfterJobFinishes"), "true: Kueue refuses a "
                      "queued RayJob whose cluster outlives the run (it would hold the queue's quota)")  # fmt: skip


@rule(
    id="kueue.cluster-scoped-names-unique",
    system="Kueue / Helm",
    layer="apply",
    summary=(
        "ClusterQueues and ResourceFlavors are cluster-scoped: the training queue, the batch queue and each team's "
        "queue have names of their own, and the training queue's flavors (<queue>-head, <queue>-<pool>) are not a "
        "batch slice's flavor; two releases (or one) declaring one such object fail their apply."
    ),
    source=(
        "https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/ and /resource_flavor/ (cluster-scoped objects); "
        "helm v3.18.4 pkg/action/validate.go existingResourceConflict (an object of another release is refused)"
    ),
    subject="environment",
)
def _cluster_scoped_names(env: Environment) -> Iterator[Finding]:
    batch = env.batch
    if batch is not None:
        for name in env.teams:
            if name == batch.queue:
                yield Finding(
                    ("teams", name), name, "the name of the platform's own queue (batch.queue): rename the team"
                )
    t = env.training
    if t is None or t.queue is None:
        return
    taken = {batch.queue: "batch.queue"} if batch is not None else {}
    taken |= {team: f"teams.{team}" for team in env.teams}
    if t.queue in taken:
        yield Finding(("training", "queue"), t.queue, f"{taken[t.queue]} names a ClusterQueue {t.queue!r} already")
    from infra.derive.queues import training_flavors

    flavors = {f"{t.queue}-head", *(training_flavors(env) if t.slice in env.slices else [])}
    for key in sorted(flavors & set(batch.slices if batch is not None else ())):
        yield Finding(
            ("training", "queue"),
            t.queue,
            f"its ResourceFlavor {key!r} is the name of the batch slice {key!r}'s flavor: rename the queue",
        )
