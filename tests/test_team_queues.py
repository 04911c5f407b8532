"""Teams sharing the batch slices through Kueue: a ClusterQueue per team in one cohort with the platform's own, each
guaranteed its quota of a slice and lending what it leaves unused; Kueue's priority classes; the review's table of
who can use and borrow what."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.catalogue.cloud_metrics import KUEUE_METRICS
from infra.catalogue.controllers import (
    CONTROLLERS,
    KUEUE_FAIR_SHARING,
    KUEUE_MANAGER_CONFIG,
    KUEUE_WAIT_FOR_PODS_READY,
)
from infra.cdk.layout import read_stack
from infra.config import ENVIRONMENTS_DIR, ConfigError, Environment
from infra.derive.queues import PRIORITIES, queue_shares
from infra.review import review_stack
from infra.review.render import render
from infra.rules import check_environment
from infra.synth.app import synth
from infra.synth.load import load_environment
from tests.helpers import dev_edited, kueue_module, of_type, one, release_values, rendered


def _kinds(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def _quota(queue: dict[str, Any]) -> dict[str, dict[str, str]]:
    """flavor -> resource -> nominal quota (and borrowing limit, where one is set) of a ClusterQueue."""
    (group,) = queue["spec"]["resourceGroups"]
    return {
        f["name"]: {
            r["name"]: r["nominalQuota"] + (f" (borrow {r['borrowingLimit']})" if "borrowingLimit" in r else "")
            for r in f["resources"]
        }
        for f in group["flavors"]
    }


def test_each_team_has_a_queue_in_the_cohort_and_the_platform_keeps_the_rest(
    stacks: dict[str, dict[str, Any]],
) -> None:
    objects = rendered(stacks["dev"], "kueue-queues")  # each validated against the pinned CRDs and their CEL rules
    queues = _kinds(objects, "ClusterQueue")
    assert set(queues) == {"gpu", "research"}
    assert {q["spec"]["cohortName"] for q in queues.values()} == {"platform"}
    # a3mega: 2 nodes of 8 H100s, 208 vCPUs and 1,872 GB each; research is guaranteed half, the platform the rest.
    half = {"cpu": "208", "memory": "1872G", "google.com/tpu": "0", "nvidia.com/gpu": "8"}
    assert _quota(queues["research"])["a3mega"] == half
    assert _quota(queues["gpu"])["a3mega"] == half
    assert queues["research"]["spec"]["preemption"] == {
        "reclaimWithinCohort": "Any",
        "borrowWithinCohort": {"policy": "Never"},
        "withinClusterQueue": "LowerPriority",
    }
    # The slice's queued provisioning is checked on the team's queue as on the platform's.
    assert queues["research"]["spec"]["admissionChecksStrategy"] == queues["gpu"]["spec"]["admissionChecksStrategy"]
    local = _kinds(objects, "LocalQueue")
    assert local["research"]["metadata"]["namespace"] == "ml-gpu"
    assert local["research"]["spec"]["clusterQueue"] == "research"
    classes = _kinds(objects, "WorkloadPriorityClass")
    assert {name: c["value"] for name, c in classes.items()} == PRIORITIES


def test_without_teams_the_platform_queue_is_what_it_was(stacks: dict[str, dict[str, Any]]) -> None:
    """prod has no teams: one ClusterQueue holding the whole slice, in no cohort, no priority classes."""
    objects = rendered(stacks["prod"], "kueue-queues")
    (queue,) = _kinds(objects, "ClusterQueue").values()
    assert "cohortName" not in queue["spec"] and "preemption" not in queue["spec"]
    assert _kinds(objects, "WorkloadPriorityClass") == {}


def test_a_borrowing_limit_caps_what_a_team_takes_from_the_cohort(envs: dict[str, Environment]) -> None:
    env = envs["dev"].model_copy(deep=True)
    env.teams["research"] = env.teams["research"].model_copy(update={"borrowing_limit": {"a3mega": 4}})
    platform, research = queue_shares(env)
    assert research.borrowing_limit == {"a3mega": {"nvidia.com/gpu": 4, "cpu": 104, "memory": 936}}
    assert platform.nominal["a3mega"]["nvidia.com/gpu"] == 8 and platform.borrowing_limit == {}


def test_a_team_may_borrow_the_training_slice_which_the_training_queue_takes_back(
    stacks: dict[str, dict[str, Any]],
) -> None:
    """research has borrow_training: its queue names the training slice's flavor with no quota and no limit (it may
    borrow all of it), the platform's batch queue may borrow none of it; the training queue joins the cohort, lends
    its whole slice and reclaims it (preempting borrowers), and the flavor stays the training release's."""
    queues = _kinds(rendered(stacks["dev"], "kueue-queues"), "ClusterQueue")
    lent = {"cpu": "0", "memory": "0", "google.com/tpu": "0", "nvidia.com/gpu": "0"}
    assert _quota(queues["research"])["training-train"] == lent
    assert _quota(queues["gpu"])["training-train"] == {**{r: "0 (borrow 0)" for r in lent}, "nvidia.com/gpu": "0"}
    assert "training-train" not in _kinds(rendered(stacks["dev"], "kueue-queues"), "ResourceFlavor")
    training = rendered(stacks["dev"], "ray-training")
    assert "training-train" in _kinds(training, "ResourceFlavor")
    (queue,) = _kinds(training, "ClusterQueue").values()
    assert queue["spec"]["cohortName"] == "platform"
    assert queue["spec"]["preemption"]["reclaimWithinCohort"] == "Any"
    assert _quota(queue)["training-train"]["google.com/tpu"] == "16"


def test_a_team_that_would_borrow_an_unqueued_training_slice_is_refused(tmp_path: Path) -> None:
    text = (ENVIRONMENTS_DIR / "dev.yaml").read_text()
    assert "\n  queue: training\n" in text
    path = tmp_path / "dev.yaml"
    path.write_text(text.replace("\n  queue: training\n", "\n"))
    with pytest.raises(ConfigError, match=r"teams\.research\.borrow_training: True: .*set training\.queue"):
        load_environment(path)


def test_the_review_says_who_can_use_and_borrow_what(stacks: dict[str, dict[str, Any]]) -> None:
    review = review_stack("platform-dev", stacks["dev"], None)
    rows = [(q.queue, q.namespace, q.flavor, q.guaranteed, q.borrow_limit) for q in review.queues]
    assert rows == [
        ("gpu", "ml-gpu", "a3mega", 8, None),
        ("research", "ml-gpu", "a3mega", 8, None),
        ("gpu", "ml-gpu", "training-train", 0, 0),
        ("research", "ml-gpu", "training-train", 0, None),
        ("training", "ml-training", "training-train", 16, 0),
    ]
    assert review_stack("platform-prod", stacks["prod"], None).queues == []


def test_the_review_says_when_the_training_slice_is_free_to_borrow(stacks: dict[str, dict[str, Any]]) -> None:
    """A standing cluster (dev's training.runs: cluster) holds its slice whenever Kueue admits it, training or not:
    research borrows it only while a person pauses the cluster. Runs as jobs free it between runs."""
    said = render(review_stack("platform-dev", stacks["dev"], None))
    assert "The training queue `training` lends its slice only while the training cluster is paused (make " in said
    jobs = copy.deepcopy(stacks["dev"])
    release = next(r for r in of_type(jobs, "helm_release").values() if r["name"] == "ray-training")
    values = json.loads(release["values"][0])
    release["values"][0] = json.dumps({**values, "runs": "jobs"})
    said = render(review_stack("platform-dev", jobs, None))
    assert "lends its slice between runs, with no step (training.runs: jobs" in said
    assert "lends its slice" not in render(review_stack("platform-prod", stacks["prod"], None))


def test_a_training_queue_whose_flavor_is_named_like_a_batch_slice_is_refused(envs: dict[str, Environment]) -> None:
    """ResourceFlavors are cluster-wide: the batch queue's are named after its slices, the training queue's
    `<queue>-head` and `<queue>-<pool>`; two of one name would be one object of two releases."""
    data = envs["dev"].model_dump(mode="json", exclude_unset=True)
    data["slices"]["gpus-head"] = data["slices"].pop("a3mega")
    data["batch"]["slices"] = ["gpus-head"]
    for section in ("nccl_test", "training"):
        data["batch"][section]["slice"] = "gpus-head"
    data["teams"]["research"]["quota"] = {"gpus-head": 8}
    data["training"]["queue"] = "gpus"
    found = [v.line() for v in check_environment(Environment.model_validate(data))]
    assert any("its ResourceFlavor 'gpus-head' is the name of the batch slice" in line for line in found), found
    assert any("[rule kueue.cluster-scoped-names-unique (Kueue / Helm, refused at apply)" in line for line in found)


def test_each_namespace_is_labelled_with_the_team_its_spend_is_counted_to(stacks: dict[str, dict[str, Any]]) -> None:
    """A team's namespace carries its team, every other the platform's (labels.team): what `make cost` counts each
    namespace's spend to, and what a cost report by namespace label groups by."""
    teams = {
        ns["metadata"]["name"]: ns["metadata"]["labels"].get("team")
        for ns in stacks["dev"]["resource"]["kubernetes_namespace_v1"].values()
    }
    assert teams.pop("ml-gpu") == "research"
    assert set(teams.values()) == {"ml-platform"}, teams


# research weighs 3 and a second team, vision (no quota of its own), 1.5: Kueue's fair sharing is on.
WEIGHTED = (
    "    borrow_training: true\n",
    "    borrow_training: true\n    weight: 3\n"
    "  vision:\n    namespace: ml-gpu\n    quota: {a3mega: 0}\n    weight: 1.5\n",
)


@pytest.fixture(scope="module")
def weighted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """dev with two weighted teams, loaded with every rule and synthesized."""
    folder = tmp_path_factory.mktemp("weighted")
    env = load_environment(dev_edited(folder, WEIGHTED))
    synth({"dev": env}, folder / "out")
    return read_stack(folder / "out", "platform-dev")


def test_a_teams_weight_turns_kueues_fair_sharing_on_and_weighs_its_queue(
    weighted: dict[str, Any], stacks: dict[str, dict[str, Any]]
) -> None:
    """Each weighted team's ClusterQueue carries its weight (the platform's queue Kueue's default, 1), and Kueue's
    release writes the chart's own Configuration with fair sharing's preemption strategies added, beside the wait for
    pods to be Ready the platform always writes at this Kueue: nothing else of it changes. Without a weight (dev as it
    is) the release writes no fair sharing."""
    queues = _kinds(rendered(weighted, "kueue-queues"), "ClusterQueue")
    assert {name: q["spec"].get("fairSharing") for name, q in queues.items()} == {
        "gpu": None,
        "research": {"weight": "3"},
        "vision": {"weight": "1.5"},
    }
    release, values = release_values(weighted, "kueue")
    config = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    assert config.pop("fairSharing") == {
        "preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]
    }
    assert config.pop("waitForPodsReady") == KUEUE_WAIT_FOR_PODS_READY[release["version"]]
    assert config == KUEUE_MANAGER_CONFIG[release["version"]]
    plain = release_values(stacks["dev"], "kueue")[1]["managerConfig"]["controllerManagerConfigYaml"]
    assert yaml.safe_load(plain) == {**config, "waitForPodsReady": KUEUE_WAIT_FOR_PODS_READY[release["version"]]}


def test_the_review_shows_each_queues_weight_where_fair_sharing_is_on(
    weighted: dict[str, Any], stacks: dict[str, dict[str, Any]]
) -> None:
    review = review_stack("platform-dev", weighted, None)
    assert {(q.queue, q.weight) for q in review.queues} == {
        ("gpu", 1.0), ("research", 3.0), ("vision", 1.5), ("training", 1.0)
    }  # fmt: skip
    said = render(review)
    assert "Fair sharing is on: when several queues want more than is left unused, Kueue admits from" in said
    assert "| vision | ml-gpu | a3mega | 0 nvidia.com/gpu | all unused | " in said and " | 1.5 |" in said
    assert {q.weight for q in review_stack("platform-dev", stacks["dev"], None).queues} == {None}
    assert "Fair sharing" not in render(review_stack("platform-dev", stacks["dev"], None))


@pytest.mark.parametrize("weight", ["0", "-1", "1001"])
def test_a_weight_kueue_would_read_as_never_borrowing_or_out_of_range_is_refused(tmp_path: Path, weight: str) -> None:
    path = dev_edited(tmp_path, ("    borrow_training: true\n", f"    borrow_training: true\n    weight: {weight}\n"))
    bound = "greater than or equal to 0.001" if weight != "1001" else "less than or equal to 1000"
    with pytest.raises(ConfigError, match=rf"dev\.yaml: teams\.research\.weight: {weight}: Input should be {bound}"):
        load_environment(path)


def test_preempting_while_borrowing_beside_a_weight_is_refused_naming_kueues_rule(tmp_path: Path) -> None:
    """Kueue takes borrowWithinCohort with its classic preemption only; a weight turns fair sharing on."""
    path = dev_edited(
        tmp_path,
        (
            WEIGHTED[0],
            WEIGHTED[1] + "    preemption: {reclaim_within_cohort: Any, borrow_within_cohort: LowerPriority}\n",
        ),
    )
    with pytest.raises(ConfigError) as refused:
        load_environment(path)
    assert (
        "teams.vision.preemption.borrow_within_cohort: 'LowerPriority': Kueue allows it with its classic preemption "
        "only, and teams.research.weight turns fair sharing on: set Never, or remove every team's weight "
        "(apis/kueue/v1beta2/clusterqueue_types.go BorrowWithinCohort @ v0.19.2)"
    ) in str(refused.value)


@pytest.mark.slow  # reads a Go module: downloaded into the module cache the first time
def test_the_configuration_a_weighted_release_writes_is_kueues_chart_default_and_fair_sharing() -> None:
    """The chart takes Kueue's Configuration as one value, so the release that turns fair sharing on writes all of
    it: KUEUE_MANAGER_CONFIG is the chart's default (values.yaml managerConfig) of the module the local cluster
    builds, field for field, and fair sharing's strategies are a set Kueue's own validation accepts."""
    version, module = kueue_module()
    pinned = version.lstrip("v")
    assert pinned in CONTROLLERS["kueue"].versions
    chart = yaml.safe_load((module / "charts/kueue/values.yaml").read_text())
    assert yaml.safe_load(chart["managerConfig"]["controllerManagerConfigYaml"]) == KUEUE_MANAGER_CONFIG[pinned]
    validation = (module / "pkg/config/validation.go").read_text()
    sets = re.search(r"validStrategySets = \[\]\[\]configapi\.PreemptionStrategy\{(.*?)\n\t\}\n", validation, re.S)
    assert sets, "validStrategySets not found"
    accepted = [re.findall(r"configapi\.(\w+)", s) for s in re.findall(r"\{([^{}]*)\}", sets.group(1))]
    assert KUEUE_FAIR_SHARING["preemptionStrategies"] in accepted, accepted


def test_with_fair_sharing_on_the_dashboard_charts_each_queues_weighted_share(
    weighted: dict[str, Any], stacks: dict[str, dict[str, Any]]
) -> None:
    """The figure Kueue admits the lowest of first and preempts the highest of, per queue; Kueue reports it only with
    fair sharing on, so dev as it is has no such chart."""

    def charts(stack: dict[str, Any]) -> dict[str, str]:
        tiles = json.loads(one(stack, "google_monitoring_dashboard")["dashboard_json"])["mosaicLayout"]["tiles"]
        return {t["widget"]["title"]: json.dumps(t["widget"]["xyChart"]) for t in tiles if "xyChart" in t["widget"]}

    chart = charts(weighted)["Fair sharing: borrowed share over weight"]
    assert "prometheus.googleapis.com/kueue_cluster_queue_weighted_share/gauge" in chart
    assert '"groupByFields": ["metric.labels.cluster_queue"]' in chart
    assert "Fair sharing: borrowed share over weight" not in charts(stacks["dev"])


@pytest.mark.slow  # reads a Go module: downloaded into the module cache the first time
def test_the_weighted_share_metric_is_the_one_kueue_exports() -> None:
    """Name and labels of the charted series against Kueue's pkg/metrics/metrics.go in the module the local cluster
    builds (subsystem kueue)."""
    _, module = kueue_module()
    source = (module / "pkg/metrics/metrics.go").read_text()
    found = re.search(
        r'Name:\s+"cluster_queue_weighted_share",.*?append\(\[\]string\{([^}]*)\}, \w+Labels', source, re.S
    )
    assert found, "cluster_queue_weighted_share not found"
    labels = frozenset(re.findall(r'"(\w+)"', found.group(1)))
    assert KUEUE_METRICS["prometheus.googleapis.com/kueue_cluster_queue_weighted_share/gauge"].labels == labels
