"""The local cluster (infra/localcluster): its nodes, the stack's Kubernetes half as OpenTofu is given it, the Go
builds, and `make deploy-local`: OpenTofu and the real providers against the real control plane and controllers (the
slow tests)."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.catalogue import upstream
from infra.cdk.layout import read_stack
from infra.config import PLACEHOLDER_DIGEST
from infra.engine import build
from infra.localcluster import apply, nodes
from infra.localcluster.cluster import Cluster
from infra.localcluster.controllers import LOCAL_CONTROLLERS, Controllers
from infra.review.costs import pool_cost
from infra.rules.run import stack_releases
from scripts import deploy_local, rehearse, status
from scripts.cli import main as platform_main
from tests.helpers import REPO, charts_with_fixed_jetstream_name, dev_edited
from tests.in_process import run_main


def test_every_node_of_every_pool_at_its_largest_is_a_node_as_gke_makes_it(stacks: dict[str, dict[str, Any]]) -> None:
    made = nodes.nodes(stacks["dev"], "us-east5")
    by_pool: dict[str, list[dict[str, Any]]] = {}
    for node in made:
        by_pool.setdefault(node["metadata"]["labels"]["cloud.google.com/gke-nodepool"], []).append(node)
    pools = stacks["dev"]["resource"]["google_container_node_pool"].values()
    assert set(by_pool) == {p["name"] for p in pools}
    assert len(by_pool["train"]) == 4 and len(by_pool["system"]) == 5 and len(by_pool["a3mega"]) == 2
    train = by_pool["train"][0]
    assert train["metadata"]["labels"]["cloud.google.com/gke-tpu-accelerator"] == "tpu-v6e-slice"
    assert train["metadata"]["labels"]["cloud.google.com/gke-tpu-topology"] == "4x4"
    assert train["spec"]["taints"] == [{"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}]
    assert train["status"]["allocatable"]["google.com/tpu"] == "4"
    gpu_taints = {t["key"] for t in by_pool["a3mega"][0]["spec"]["taints"]}
    assert gpu_taints == {"nvidia.com/gpu", "cloud.google.com/gke-queued"}
    assert all(n["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"} for n in made)


def test_the_engine_is_given_the_stacks_kubernetes_half_with_what_it_reads_of_the_google_half_from_the_synth(
    stacks: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """What OpenTofu applies locally is the stack's own Kubernetes half: every helm_release and kubernetes_* resource
    as synthesized, the service accounts' emails resolved from the synth, a depends_on on the Google half dropped,
    the providers pointed at the local kubeconfig, and every local chart and post-renderer at the path Terraform
    opens from the stack's folder."""
    stack_dir = REPO / "cdktf.out" / "stacks" / "platform-dev"
    config = apply.configuration(stacks["dev"], stack_dir, tmp_path / "kubeconfig")
    kept = {f"{t}.{k}" for t, items in stacks["dev"]["resource"].items() if apply.in_kubernetes_half(t) for k in items}
    assert {f"{t}.{k}" for t, items in config["resource"].items() for k in items} == kept and len(kept) == 41
    assert "${google_" not in json.dumps(config)
    assert set(config["terraform"]["required_providers"]) == {"kubernetes", "helm"}
    assert config["provider"]["kubernetes"] == [{"config_path": str(tmp_path / "kubeconfig")}]
    assert config["provider"]["helm"][0]["kubernetes"] == {"config_path": str(tmp_path / "kubeconfig")}
    emails = [
        body["metadata"]["annotations"]["iam.gke.io/gcp-service-account"]
        for body in config["resource"]["kubernetes_service_account_v1"].values()
        if "iam.gke.io/gcp-service-account" in (body["metadata"].get("annotations") or {})
    ]
    assert emails and all(
        re.fullmatch(r"[a-z0-9-]+@acme-ml-platform-dev\.iam\.gserviceaccount\.com", e) for e in emails
    )
    for key, body in config["resource"]["helm_release"].items():
        original = stacks["dev"]["resource"]["helm_release"][key]
        wanted = [d for d in original.get("depends_on") or [] if not d.startswith("google_")]
        assert body.get("depends_on", []) == wanted, key
        if "repository" not in body:
            assert Path(body["chart"]).is_absolute() and (Path(body["chart"]) / "Chart.yaml").is_file(), key
    with pytest.raises(apply.UnsupportedResource, match=r"google_compute_address\.ip\.address"):
        apply.resolve("${google_compute_address.ip.address}", stacks["dev"])


def test_a_pool_whose_nodes_gke_would_recreate_gets_new_node_names(stacks: dict[str, dict[str, Any]]) -> None:
    """GKE names nodes after the pool's instance group, which a recreation renews: so do the local nodes, and the
    old ones are drained and deleted (Cluster.up). A label or taint is updated on the running nodes."""
    pools = stacks["dev"]["resource"]["google_container_node_pool"]
    train = next(p for p in pools.values() if p["name"] == "train")
    reshaped = {**train, "placement_policy": {**train["placement_policy"], "tpu_topology": "4x8"}}
    relabelled = {**train, "node_config": {**train["node_config"], "labels": {"team": "x"}}}
    assert nodes.generation(reshaped) != nodes.generation(train) == nodes.generation(relabelled)
    names = {n["metadata"]["name"] for n in nodes.nodes(stacks["dev"], "us-east5")}
    assert f"train-{nodes.generation(train)}-0" in names


def test_the_pods_of_what_runs_here_are_running_but_not_ready_until_it_serves() -> None:
    """KWOK's pod stages at the pinned version, but the pods of the controllers' and the metrics adapter's namespaces
    kept out of its pod-ready stage: theirs makes them Running with an address and not Ready (the supervisor marks
    them Ready once what stands for them serves, as a readiness probe would)."""
    from infra.localcluster.controllers import SERVED_NAMESPACES
    from infra.localcluster.stages import NOT_READY, pod_stages

    stages = {s["metadata"]["name"]: s for s in pod_stages(list(SERVED_NAMESPACES))}
    assert set(stages) == {"pod-ready", "pod-complete", "pod-delete", NOT_READY}
    served = sorted(SERVED_NAMESPACES)
    assert served == ["custom-metrics", "jobset-system", "kueue-system", "lws-system"]
    expressions = {s: stages[s]["spec"]["selector"]["matchExpressions"] for s in ("pod-ready", NOT_READY)}
    assert {"key": ".metadata.namespace", "values": served, "operator": "NotIn"} in expressions["pod-ready"]
    assert {"key": ".metadata.namespace", "values": served, "operator": "In"} in expressions[NOT_READY]
    status = yaml.safe_load(stages[NOT_READY]["spec"]["next"]["statusTemplate"].replace("{{", "#").replace("}}", ""))
    assert status["phase"] == "Running" and "podIP" in stages[NOT_READY]["spec"]["next"]["statusTemplate"]
    conditions = {c["type"]: c["status"] for c in status["conditions"] if isinstance(c, dict) and "type" in c}
    assert conditions["Ready"] == "False" and conditions["ContainersReady"] == "False"


def test_a_nodes_heartbeat_is_its_lease_and_its_status_is_written_rarely_as_a_kubelets_is(tmp_path: Path) -> None:
    """KWOK renews each node's Lease every 10 s (--node-lease-duration-seconds=40), and the config it is given names
    the node stages of that heartbeat: the status written every 10 to 20 minutes, not also every 20 to 45 s (the
    stage KWOK v0.7.0 picks when the config names none and leases are on), which sent every node's status to every
    watcher of nodes."""
    from infra.localcluster.controllers import SERVED_NAMESPACES
    from infra.localcluster.stages import write_config

    written = yaml.safe_load_all(write_config(tmp_path / "kwok.yaml", list(SERVED_NAMESPACES)).read_text())
    nodes_ = {s["metadata"]["name"]: s for s in written if s["spec"]["resourceRef"]["kind"] == "Node"}
    assert set(nodes_) == {"node-initialize", "node-heartbeat-with-lease"}
    delay = nodes_["node-heartbeat-with-lease"]["spec"]["delay"]
    assert delay["durationMilliseconds"] >= 300_000, "a kubelet writes an unchanged status every 5 minutes"


def test_the_control_plane_is_stamped_with_its_kubernetes_version() -> None:
    kube = build.components()["kube"]
    flags = " ".join(kube.ldflags())
    assert "k8s.io/component-base/version.gitVersion=v1.35.4" in flags
    assert "gitMinor=35" in flags
    assert set(kube.programs) == {"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "etcd"}
    assert build.components()["kwok"].programs == ["kwok"]


class _Listed:
    """A cluster whose API server lists the given objects (what `collect` reads)."""

    def __init__(self, **items: list[dict[str, Any]]) -> None:
        self.items = items

    def get(self, kind: str, *_: str) -> dict[str, Any]:
        return {"items": self.items.get(kind.split(".", 1)[0], [])}


def test_a_template_the_report_places_that_made_no_pod_is_a_disagreement_unless_kueue_holds_it(
    stacks: dict[str, dict[str, Any]],
) -> None:
    """A pod refused at admission never exists: deploy-local holds every pod-making object to the report, not only
    the pods that exist (a conversion Job whose account came later made no pod, and nothing said so). A Kueue-held
    JobSet making no pod is expected."""
    from infra.localcluster.verdicts import allowed_pools, collect

    templates = allowed_pools(stacks["dev"])
    convert = next(t for t in templates if t.startswith("Job/serve-llama405b-convert-"))
    training = next(t for t in templates if t.startswith("JobSet/gpu-training-"))
    job, jobset = convert.split(":")[0].split("/")[1], training.split(":")[0].split("/")[1]
    refused = (
        'Error creating: pods "x" is forbidden: error looking up service account ml-serving/checkpoint-converter: '
        'serviceaccount "checkpoint-converter" not found'
    )
    cluster = _Listed(
        events=[
            {"type": "Warning", "reason": "FailedCreate", "message": refused, "lastTimestamp": "2026-11-27T23:00:00Z",
             "involvedObject": {"kind": "Job", "name": job}},
        ],
        workloads=[
            {"metadata": {"namespace": "ml-gpu", "name": "w", "ownerReferences": [
                {"kind": "JobSet", "name": jobset, "controller": True}]},
             "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                        "message": "insufficient unused quota"}]}},
        ],
    )  # fmt: skip
    found = collect(cluster, stacks["dev"], [])
    assert found.missing[convert] == f"FailedCreate: {refused}"
    assert training in found.held and "insufficient unused quota" in found.missing[training]
    unexpected = found.unexpected()
    assert f"{convert}: the report places its pods, but none exists: FailedCreate: {refused}" in unexpected
    assert not any(line.startswith(training) for line in unexpected)


# --- make deploy-local, for real -------------------------------------------------------------------------------


def _deploy(tmp_path: Path, envs: Path) -> tuple[int, str, str]:
    done = run_main(
        deploy_local.main,
        ["dev", "--dir", str(tmp_path / "cluster")],
        env={**os.environ, "PLATFORM_ENVIRONMENTS_DIR": str(envs)},
        cwd=REPO,
    )
    return done.returncode, done.stdout, done.stderr


def _verdicts() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((REPO / "cdktf.out.local-dev" / "verdicts.json").read_text())
    return loaded


def _envs(
    tmp_path: Path, name: str, digest: str | None = None, edits: dict[str, str] | None = None, every: bool = False
) -> Path:
    """The environments with dev's trainer (`every`: each of its images) at `digest` and each of `edits` (text:
    replacement) made in dev.yaml."""

    def pinned(text: str) -> str:
        if digest is not None and every:
            assert text.count(f"@{PLACEHOLDER_DIGEST}") >= 5
            return text.replace(f"@{PLACEHOLDER_DIGEST}", f"@{digest}")
        if digest is not None:
            return re.sub(r"(/trainer@)" + re.escape(PLACEHOLDER_DIGEST), r"\g<1>" + digest, text)
        return text

    return dev_edited(tmp_path, *(edits or {}).items(), folder=name, transform=pinned).parent


def _ray(cluster: Cluster) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The training release's one RayCluster (named after its spec) and every pod of the release's clusters."""
    selector = "app.kubernetes.io/instance=ray-training"
    (ray,) = cluster.get("rayclusters", "-n", "ml-training", "-l", selector)["items"]
    return ray, cluster.get("pods", "-n", "ml-training", "-l", selector)["items"]


def _platform(cluster: Cluster, *argv: str, envs: Path | None = None) -> str:
    """A platform command (`make <command> ENV=dev`) against this cluster (PLATFORM_KUBECONFIG), with the
    environments of `envs` if given: its output."""
    env = {
        **os.environ,
        "PLATFORM_KUBECONFIG": str(cluster.kubeconfig),
        "PLATFORM_KUBECTL": str(build.build_all(["kube"])["kubectl"]),
        **({"PLATFORM_ENVIRONMENTS_DIR": str(envs)} if envs else {}),
    }
    done = run_main(platform_main, list(argv), env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _status(cluster: Cluster, envs: Path | None = None) -> dict[str, dict[str, Any]]:
    """`make status ENV=dev JSON=1` against this cluster: its rows by namespace/name."""
    return _rows(json.loads(_platform(cluster, "status", "dev", "--json", envs=envs)))


def _rows(shown: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{r['namespace']}/{r['name']}": r for r in shown["rows"]}


@pytest.fixture(scope="module")
def cluster_dir(tmp_path_factory: pytest.TempPathFactory) -> Any:
    folder = tmp_path_factory.mktemp("deploy-local")
    yield folder
    Cluster((folder / "cluster").resolve()).down(quiet=True)


@pytest.mark.slow
def test_deploy_local_applies_dev_and_the_real_components_agree_with_the_placement_report(cluster_dir: Path) -> None:
    code, out, err = _deploy(cluster_dir, _envs(cluster_dir, "first"))
    assert code == 0, (out + err)[-4000:]
    assert "Apply complete! Resources: 41 added, 0 changed, 0 destroyed." in err
    found = _verdicts()
    assert set(found["releases"].values()) == {"deployed"} and len(found["releases"]) == 16
    pending = [p for p in found["pods"] if p["pool"] is None]
    assert pending == [], pending
    assert "disagrees with the placement report" not in out
    bound = {pool: sum(p["pool"] == pool for p in found["pods"]) for pool in {p["pool"] for p in found["pods"]}}
    # The autoscaled vLLM at its fewest servers, on one of its ComputeClass's tiers (the HorizontalPodAutoscaler owns
    # the count from 1 to 3; which tier is GKE's autoscaler's choice, spot first: the local scheduler has every
    # tier's nodes already and takes any).
    assert sum(bound.pop(tier, 0) for tier in ("vllm", "vllm-flex-start", "vllm-on-demand")) == 1
    # The multi-host vLLM at its fewest servers: one group, a whole slice, on one of its two pools.
    groups = {pool: n for pool in ("vllm-multihost", "vllm-multihost-1") if (n := bound.pop(pool, 0))}
    assert list(groups.values()) == [4], groups
    # The placement report's "every pod together" table (cdktf.out/placement/platform-dev.md).
    assert bound == {
        "a3mega": 4,
        "convert": 2,
        "decode": 2,
        "prefill": 2,
        "sax-a": 8,
        "sax-b": 8,
        "serve": 4,
        # The metrics adapter's pod with the controllers.
        "system": 11,
        "train": 4,
    }
    # The controllers' work: KubeRay's head and four workers, LWS's groups, JobSet's jobs for Saxml.
    objects = found["objects"]
    (ray,) = [key for key in objects if key.startswith("RayCluster/ml-training/ray-training-")]
    assert objects[ray] == 5
    # The JetStream server's LeaderWorkerSet, named after its hosts per slice (the chart: a reshape makes a new one).
    (jetstream,) = [key for key in objects if key.startswith("LeaderWorkerSet/ml-serving/serve-llama405b-")]
    assert objects[jetstream] == 5
    assert sum(n for key, n in objects.items() if key.startswith("JobSet/ml-serving/serve-saxml")) == 16
    # Kueue admitted the training RayCluster through dev's queue `training`: its head on the head's flavor, its
    # worker group on the slice's (the pods above run only once it is admitted).
    workloads = dict(found["workloads"])
    (training,) = [key for key in workloads if key.startswith("ml-training/")]
    assert workloads.pop(training) == "admitted"
    # Kueue: the two GPU JobSets want the a3mega flavor's 16 GPUs each; one holds the quota, the other waits.
    states = sorted(workloads.values())
    assert len(states) == 2 and "insufficient unused quota for nvidia.com/gpu in flavor a3mega" in states[0]
    # The platform's queue is guaranteed 8 of the 16 GPUs (team research holds the other 8, unused): the JobSet that
    # asks for 16 gets its quota by borrowing 8 from the cohort, as Kueue's own status of the queue says (reserved:
    # the queued-provisioning check, which no local controller answers, holds it short of admission).
    assert states[1] == "QuotaReserved: Quota reserved in ClusterQueue gpu"
    cluster = Cluster((cluster_dir / "cluster").resolve())
    usage = cluster.get("clusterqueues", "gpu")["status"]["flavorsReservation"]
    gpus = next(r for f in usage if f["name"] == "a3mega" for r in f["resources"] if r["name"] == "nvidia.com/gpu")
    assert (gpus["total"], gpus["borrowed"]) == ("16", "8")
    # The training JobSet's Jobs, made by the real JobSet controller (suspended while Kueue holds them) and accepted
    # by the API server with their pod failure policy: exit codes other than dev's retry codes fail the Job.
    jobs = cluster.get("jobs", "-n", "ml-gpu")["items"]
    policies = [j["spec"]["podFailurePolicy"]["rules"] for j in jobs if j["spec"].get("podFailurePolicy")]
    assert policies and all(r[0]["onExitCodes"]["values"] == [42, *range(128, 256)] for r in policies), jobs


@pytest.mark.slow
def test_a_redeploy_sends_gkes_crds_again_only_where_one_changed_since(
    cluster_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deploy before applied GKE's CRDs (3 MB); the next sends them only where one was edited or deleted since
    (its generation moved), and then all of them, as they are pinned."""
    cluster = Cluster((cluster_dir / "cluster").resolve())
    sent: list[str] = []
    kubectl = Cluster.kubectl

    def recorded(self: Cluster, *args: str, **kwargs: Any) -> Any:
        sent.append(args[0])
        return kubectl(self, *args, **kwargs)

    monkeypatch.setattr(Cluster, "kubectl", recorded)
    local = apply.LocalApply(cluster, "platform-dev")
    names = local.gke_crds()
    assert "computeclasses.cloud.google.com" in names and "apply" not in sent and not local.crds_sent
    # A person's edit of one (a short name added): its generation moves, and the next deploy applies them again.
    short_name = '{"spec":{"names":{"shortNames":["cc"]}}}'
    kubectl(cluster, "patch", "crd", "computeclasses.cloud.google.com", "--type=merge", "-p", short_name)
    assert local.gke_crds() == names and sent.count("apply") == 1 and local.crds_sent
    assert json.loads((cluster.folder / apply.CRDS_APPLIED).read_text())["generations"] == local.established(names)
    sent.clear()
    local.gke_crds()
    assert "apply" not in sent


@pytest.mark.slow
def test_a_second_training_cluster_in_the_queue_waits_whole_while_the_first_holds_the_slice(
    cluster_dir: Path, stacks: dict[str, dict[str, Any]]
) -> None:
    """Kueue admits a queued RayCluster all or none: a second cluster of the same shape in dev's queue `training`
    (the real Kueue's webhook suspends it at create) gets no pod, neither its head nor any worker, while the first
    holds the slice's quota, and Kueue says why (as `make status` does); gone, it leaves the first as it was."""
    cluster = Cluster((cluster_dir / "cluster").resolve())
    (first,) = cluster.get("rayclusters", "-n", "ml-training")["items"]
    assert first["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training" and not first["spec"].get("suspend")
    second = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "second", "namespace": "ml-training", "labels": first["metadata"]["labels"]},
        "spec": {**first["spec"], "headGroupSpec": {**first["spec"]["headGroupSpec"], "headService": None}},
    }
    second["spec"]["headGroupSpec"].pop("headService")
    cluster.kubectl("apply", "-f", "-", input=json.dumps(second))
    try:
        deadline, reason = time.monotonic() + 60, ""
        while time.monotonic() < deadline and "insufficient unused quota" not in reason:
            time.sleep(2)
            workloads = cluster.get("workloads.kueue.x-k8s.io", "-n", "ml-training")["items"]
            mine = [w for w in workloads if w["metadata"]["ownerReferences"][0]["name"] == "second"]
            conditions = {c["type"]: c for c in (mine[0].get("status") or {}).get("conditions", [])} if mine else {}
            reason = conditions.get("QuotaReserved", {}).get("message", "")
        assert "insufficient unused quota" in reason and "flavor training-" in reason, reason
        assert cluster.get("rayclusters", "second", "-n", "ml-training")["spec"]["suspend"] is True
        assert cluster.get("pods", "-n", "ml-training", "-l", "ray.io/cluster=second")["items"] == []
        # `make status`: the first holds the whole slice (its four hosts, at the review's price of dev's pool
        # `train`), the second waits with Kueue's reason and holds nothing.
        shown = json.loads(_platform(cluster, "status", "dev", "--json"))
        rows = _rows(shown)
        holding, waiting = rows[f"ml-training/{first['metadata']['name']}"], rows["ml-training/second"]
        assert (holding["kind"], holding["queue"], holding["state"], holding["ready"]) == (
            "RayCluster",
            "training",
            "running",
            5,
        )
        assert (holding["holds"], holding["pools"]) == ("1 x v6e 4x4 (4 nodes)", ["train"])
        (pool,) = [pool_cost(b) for b in stacks["dev"]["resource"]["google_container_node_pool"].values() if
                   b["name"] == "train"]  # fmt: skip
        assert holding["usd_per_hour"] == pytest.approx(4 * pool.price.usd_per_hour, abs=0.01)
        assert holding["usd_so_far"] > 0
        # Kueue 0.19 waits for an admitted workload's pods (waitForPodsReady): its PodsReady condition, Started, says
        # when every pod was Ready, and the row says how long after the admission that was (KWOK's kubelet: seconds).
        assert 0 <= holding["pods_ready_s"] < WAIT_S, holding
        # ...and that start is what `make status` offers to record for the training slice (slices.train.queued_start).
        assert shown["measured_starts"] == {
            "train": {"seconds": holding["pods_ready_s"], "run": f"ml-training/{first['metadata']['name']}"}
        }
        assert (waiting["queue"], waiting["state"], waiting["holds"], waiting["usd_so_far"]) == (
            "training",
            "waiting",
            "",
            None,
        )
        assert "insufficient unused quota" in waiting["why"]
        # Its place in line, from Kueue's visibility API: the real API server's aggregator calls Kueue's server at
        # its pod through dev's firewall (its webhook rule opens 8082) with its front-proxy certificate.
        assert waiting["queue_position"] == [0, 1] and "(place 1 of 1 waiting in its ClusterQueue)" in waiting["why"]
        # A server's last start, read off its pods' timestamps as on GKE (KWOK's kubelet makes it ready at once):
        # the phases the cold-start catalogue records, adding up to its pod's creation to Ready.
        server = rows["ml-serving/serve-llama70b-vllm"]
        assert (server["kind"], server["state"]) == ("LeaderWorkerSet", "running")
        assert set(server["cold_start"]) == {"node", "image", "serve"}
        assert all(seconds >= 0 for seconds in server["cold_start"].values()), server
    finally:
        cluster.kubectl("delete", "raycluster", "second", "-n", "ml-training", "--wait=true")
    pods = cluster.get("pods", "-n", "ml-training", "-l", f"ray.io/cluster={first['metadata']['name']}")["items"]
    assert len(pods) == 5 and all(p["spec"].get("nodeName") for p in pods)


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions", [])}


# How long a test waits for a real controller's event: it returns as soon as the event comes, so the limit is room
# for a loaded machine (Kueue's preemption took more than 90 s on a new machine at load 10 to 18), not a target.
WAIT_S = 600


def _until(what: str, check: Any, timeout: float = WAIT_S, describe: Any = None) -> Any:
    """Poll `check` every 2 s until it returns something true; fail naming `what` and its last answer (or what
    `describe` says of the objects then)."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(2)
    said = describe() if describe is not None else last
    raise AssertionError(f"{what}: not within {timeout:.0f} s (last: {said!r})")


def _team_tpu_job(worker: dict[str, Any]) -> dict[str, Any]:
    """Dev's team `research`'s TPU job on the training slice (its queue may borrow it): a pod on each host of the
    slice of the Ray worker group `worker`, each with its chips (the whole slice, as a TPU job needs: review 10, M3),
    held before scheduling, as make rehearse-local's runs are: KWOK completes a Job's pods the moment they run (its
    pod-complete stage), and a finished job frees the slice with no preemption to see (the CI failure). Held, the
    admitted job keeps its quota on the training flavor until Kueue reclaims it."""
    hosts = worker.get("replicas", 1) * worker.get("numOfHosts", 1)
    chips = int(worker["template"]["spec"]["containers"][0]["resources"]["limits"]["google.com/tpu"])
    shape = rehearse.Shape("research", "ml-gpu", "research", "train", "google.com/tpu", hosts, chips)
    job = rehearse.stand_in(shape, "research-tpu", "borrow-test")
    pod = job["spec"]["template"]["spec"]
    pod["nodeSelector"] = worker["template"]["spec"]["nodeSelector"]
    pod["tolerations"] = worker["template"]["spec"].get("tolerations") or []
    return job


@pytest.mark.slow
def test_a_team_borrows_the_idle_training_slice_and_the_training_queue_takes_it_back(cluster_dir: Path) -> None:
    """Dev's team `research` may borrow the training slice (borrow_training): its TPU job waits while the training
    cluster holds the slice; once the cluster's workload is stopped (Kueue evicts it), the real Kueue admits the
    team's job by borrowing from the training queue; when the cluster comes back, Kueue preempts the team's job
    (the training queue's reclaimWithinCohort) and admits the cluster again."""
    cluster = Cluster((cluster_dir / "cluster").resolve())
    ray, _ = _ray(cluster)
    (training,) = [
        w
        for w in cluster.get("workloads.kueue.x-k8s.io", "-n", "ml-training")["items"]
        if w["metadata"]["ownerReferences"][0]["name"] == ray["metadata"]["name"]
    ]
    worker = ray["spec"]["workerGroupSpecs"][0]
    hosts = worker["replicas"] * worker.get("numOfHosts", 1)
    job = _team_tpu_job(worker)

    def team() -> dict[str, Any]:
        """The team's job's Kueue Workload; empty until Kueue has made it (a loaded machine: the first wait began
        before it existed, and the unpacking failed instead of waiting)."""
        found = [
            w
            for w in cluster.get("workloads.kueue.x-k8s.io", "-n", "ml-gpu")["items"]
            if w["metadata"]["ownerReferences"][0]["name"] == "research-tpu"
        ]
        assert len(found) <= 1, [w["metadata"]["name"] for w in found]
        return found[0] if found else {}

    def command(action: str) -> str:
        """make training-pause / training-resume ENV=dev, against this cluster."""
        return _platform(cluster, f"training-{action}", "dev")

    cluster.kubectl("apply", "-f", "-", input=json.dumps(job))
    try:
        reason = _until(
            "the team's job waits while the cluster holds the slice",
            lambda: (
                "insufficient unused quota" in (m := _conditions(team()).get("QuotaReserved", {}).get("message", ""))
                and m
            ),
        )
        assert "training-" in reason, reason
        paused = command("pause")
        assert f"ml-training/{training['metadata']['name']}: paused: Kueue evicts the training cluster" in paused
        admitted = _until("the team's job admitted on the idle slice", lambda: _conditions(team()).get("Admitted"))
        assert admitted["status"] == "True"
        # `make status`: the training cluster paused (its pods gone with KubeRay's suspend: an event to wait for),
        # the team's job admitted on its queue.
        name = f"ml-training/{ray['metadata']['name']}"
        rows = _until("make status: the training cluster paused, holding nothing", lambda: (
            (now := _status(cluster))[name]["state"] == "paused" and now[name]["holds"] == "" and now
        ))  # fmt: skip
        lent, borrower = rows[name], rows["ml-gpu/research-tpu"]
        assert "make training-resume" in lent["why"]
        assert (borrower["kind"], borrower["queue"], borrower["team"], borrower["state"]) == (
            "Job",
            "research",
            "research",
            "admitted",
        )
        flavors = {a["flavors"]["google.com/tpu"] for a in team()["status"]["admission"]["podSetAssignments"]}
        assert flavors == {f"training-{worker['template']['spec']['nodeSelector']['cloud.google.com/gke-nodepool']}"}
        _until(
            "the team's pods made, held before scheduling",
            lambda: len(cluster.get("pods", "-n", "ml-gpu", "-l", "job-name=research-tpu")["items"]) == hosts,
        )
        assert "active: the training queue reclaims its slices" in command("resume")

        def state() -> dict[str, Any]:
            """Both workloads' conditions: what a failure says."""
            theirs = cluster.get("workloads.kueue.x-k8s.io", training["metadata"]["name"], "-n", "ml-training")
            return {
                "team": {k: (c.get("status"), c.get("reason"), c.get("message", "")[:160]) for k, c in _conditions(
                    team()).items()},
                "training": {k: (c.get("status"), c.get("reason")) for k, c in _conditions(theirs).items()},
            }  # fmt: skip

        def given_back() -> bool:
            """The slice given back: the team's workload holds no quota, the training cluster's is admitted."""
            now = state()
            return (
                now["team"].get("QuotaReserved", ("",))[0] != "True"
                and now["training"].get("Admitted", ("",))[0] == "True"
            )

        _until("the team's job preempted and the training cluster admitted again", given_back, describe=state)
        rows = _status(cluster)
        borrower = rows["ml-gpu/research-tpu"]
        assert borrower["state"] in ("evicted", "waiting") and borrower["holds"] == "", borrower
        assert "Preempted" in borrower["why"] or "insufficient unused quota" in borrower["why"], borrower
        assert rows[name]["state"] in ("admitted", "running")
        # Kueue evicts the team's workload before it admits the training cluster's; its Job controller suspends the
        # Job after that, on its own reconcile: an event to wait for, not a state to read at once (read at once, it
        # failed under load).
        _until(
            "the team's Job suspended by Kueue",
            lambda: cluster.get("jobs", "research-tpu", "-n", "ml-gpu")["spec"]["suspend"] is True,
        )
    finally:
        cluster.kubectl("delete", "job", "research-tpu", "-n", "ml-gpu", "--wait=true", check=False)
        command("resume")  # already active where the test got that far: said, nothing changed
    _until(
        "the training cluster's pods back on the slice",
        lambda: len([p for p in _ray(cluster)[1] if p["spec"].get("nodeName")]) == 5,
    )


# The guarded metrics servers the platform scrapes with a token: (namespace, token Secret, scraper account, the
# account of the server that asks the API server about the token, if it is the release's).
GUARDED_METRICS = (
    ("kueue-system", "kueue-metrics-scraper-token", "kueue-metrics-scraper", None),
    ("ml-serving", "serve-llama70b-vllm-epp-metrics-reader-token", "serve-llama70b-vllm-epp-metrics-reader",
     "serve-llama70b-vllm-epp"),
)  # fmt: skip


@pytest.mark.slow
def test_metrics_tokens_are_ones_the_real_api_server_authenticates_and_authorizes_for_metrics_alone(
    cluster_dir: Path,
) -> None:
    """Kueue and the endpoint picker answer /metrics only to a bearer token the API server authenticates
    (TokenReview) and authorizes for GET /metrics (SubjectAccessReview), as controller-runtime's filter asks it. Each
    token Secret is filled by the real token controller; the API server says whose the token is and that it may read
    /metrics and nothing else; Managed Prometheus's collector may read that Secret and no other; the picker may ask
    the API server those questions."""
    import base64

    cluster = Cluster((cluster_dir / "cluster").resolve())
    collector = "--as=system:serviceaccount:gmp-system:collector"
    for namespace, name, account, server in GUARDED_METRICS:
        secret = _until(
            f"the token controller fills {namespace}/{name}",
            lambda namespace=namespace, name=name: (
                (s := cluster.get("secret", name, "-n", namespace)).get("data") and s
            ),
        )
        token = base64.b64decode(secret["data"]["token"]).decode()
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        status = json.loads(cluster.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(review)).stdout)[
            "status"
        ]
        user = f"system:serviceaccount:{namespace}:{account}"
        assert status["authenticated"] is True and status["user"]["username"] == user, status

        def allowed(
            path: str, verb: str = "get", user: str = user, groups: list[str] = status["user"]["groups"]
        ) -> bool:
            attributes = {"path": path, "verb": verb}
            sar = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                   "spec": {"user": user, "groups": groups, "nonResourceAttributes": attributes}}  # fmt: skip
            answer = cluster.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(sar))
            return bool(json.loads(answer.stdout)["status"].get("allowed"))

        assert allowed("/metrics") and not allowed("/metrics", "post") and not allowed("/debug/pprof"), name
        can = cluster.kubectl("auth", "can-i", "get", f"secret/{name}", "-n", namespace, collector)
        assert can.stdout.strip() == "yes", name
        other = cluster.kubectl("auth", "can-i", "get", "secrets", "-n", namespace, collector, check=False)
        assert other.stdout.strip() == "no", name
        if server is not None:
            asks = f"--as=system:serviceaccount:{namespace}:{server}"
            for resource in ("tokenreviews.authentication.k8s.io", "subjectaccessreviews.authorization.k8s.io"):
                assert cluster.kubectl("auth", "can-i", "create", resource, asks).stdout.strip() == "yes", resource


@pytest.mark.slow
def test_the_real_autoscaler_scales_a_vllm_server_on_its_metric_only_through_the_firewalls_opening(
    cluster_dir: Path,
) -> None:
    """The vLLM release's HorizontalPodAutoscaler, run by the real HPA controller: its metric comes through the API
    server's aggregation layer and the cluster's firewall (infra/localcluster/firewall.py) to the metrics adapter's
    pod, whose stand-in serves the queue the test writes (infra/localcluster/metrics_adapter.py). With the firewall
    dev had before its fix (the control plane's range opened to 9443, not the adapter's 6443), a queue four times
    the target scales nothing: the custom metrics API is unavailable, naming the port, and the HPA cannot read its
    metric. With dev's own firewall the same queue scales the LeaderWorkerSet up."""
    from infra.localcluster import firewall
    from infra.localcluster.metrics_adapter import write_series

    cluster = Cluster((cluster_dir / "cluster").resolve())
    release = "serve-llama70b-vllm"
    stack = read_stack(REPO / "cdktf.out.local-dev", "platform-dev")
    before_fix = copy.deepcopy(stack)
    for rule in before_fix["resource"]["google_compute_firewall"].values():
        for allow in rule.get("allow") or []:
            allow["ports"] = [p for p in allow.get("ports") or [] if str(p) != "6443"]
    assert 6443 in firewall.opened(stack) and 6443 not in firewall.opened(before_fix)
    hpa = cluster.get("hpa", "-n", "ml-serving", release)
    (metric,) = hpa["spec"]["metrics"]
    target = float(metric["pods"]["target"]["averageValue"])

    def condition(kind: str, name: str, wanted: str) -> dict[str, Any]:
        obj = cluster.get(kind, *(["-n", "ml-serving"] if kind == "hpa" else []), name)
        return {c["type"]: c for c in obj.get("status", {}).get("conditions") or []}.get(wanted) or {}

    def replicas() -> int:
        return int(cluster.get("leaderworkerset", "-n", "ml-serving", release)["spec"]["replicas"])

    try:
        firewall.write_rules(cluster.firewall_rules, before_fix)
        write_series(cluster.metric_series, "ml-serving", metric["pods"]["metric"]["name"], target * 4)
        unavailable = _until(
            "the custom metrics API unavailable behind the firewall",
            lambda: (
                (c := condition("apiservice", "v1beta2.custom.metrics.k8s.io", "Available")).get("status") == "False"
                and c
            ),
        )
        assert "does not open tcp:6443" in unavailable["message"], unavailable
        failing = _until(
            "the HPA unable to read its metric",
            lambda: (c := condition("hpa", release, "ScalingActive")).get("reason") == "FailedGetPodsMetric" and c,
        )
        assert failing["status"] == "False" and replicas() == 1, failing
        firewall.write_rules(cluster.firewall_rules, stack)
        _until("the HPA scales the server up on its metric", lambda: replicas() > 1)
        assert condition("hpa", release, "ScalingActive")["reason"] == "ValidMetricFound"
    finally:
        firewall.write_rules(cluster.firewall_rules, stack)
        shutil.rmtree(cluster.metric_series, ignore_errors=True)  # no series: the HPA holds, and the scale-down stays
        for lws in (release, f"{release}-mh"):
            cluster.kubectl("scale", "leaderworkerset", lws, "-n", "ml-serving", "--replicas=1")


@pytest.mark.slow
def test_multi_host_servers_added_by_the_scale_subresource_take_a_whole_pool_each(cluster_dir: Path) -> None:
    """The multi-host vLLM scaled to its most groups through the scale subresource, as its HorizontalPodAutoscaler
    does: the real LWS controller and scheduler put each group's four pods on one pool (its leader's) and the two
    groups on different pools, each a whole v6e-16 slice."""
    cluster = Cluster((cluster_dir / "cluster").resolve())
    release = "serve-llama70b-vllm-mh"
    pool_of = {n["metadata"]["name"]: n["metadata"]["labels"]["cloud.google.com/gke-nodepool"]
               for n in cluster.get("nodes")["items"]}  # fmt: skip

    def pods() -> list[dict[str, Any]]:
        return cluster.get("pods", "-n", "ml-serving", "-l", f"app.kubernetes.io/instance={release}")["items"]

    def placed() -> tuple[dict[str, set[str]], list[dict[str, Any]]] | None:
        """The groups' pools and the pods, once two groups of four are bound (one reading: LWS may recreate a pod
        between two, and a later reading's group had no leader in an earlier one: a CI failure)."""
        found, groups = pods(), {}
        for pod in found:
            group = pod["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"]
            groups.setdefault(group, set()).add(pool_of.get(pod["spec"].get("nodeName") or "", "pending"))
        bound = sum(bool(p["spec"].get("nodeName")) for p in found)
        return (groups, found) if len(groups) == 2 and bound == len(found) == 8 else None

    cluster.kubectl("scale", "leaderworkerset", release, "-n", "ml-serving", "--replicas=2")
    try:
        groups, found = _until("two groups of four bound pods", placed)
        assert sorted(map(sorted, groups.values())) == [["vllm-multihost"], ["vllm-multihost-1"]], groups
        # How: LWS's webhook gave each leader an anti-affinity to other groups on the pool label, and its controller
        # pinned each group's workers to the leader's pool.
        leaders = {p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"]: p for p in found
                   if p["metadata"]["labels"].get("leaderworkerset.sigs.k8s.io/worker-index") == "0"}  # fmt: skip
        for pod in found:
            group = pod["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"]
            if pod["metadata"]["name"] == leaders[group]["metadata"]["name"]:
                (term,) = pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                assert term["topologyKey"] == "cloud.google.com/gke-nodepool", term
            else:
                pool = pool_of[leaders[group]["spec"]["nodeName"]]
                assert pod["spec"]["nodeSelector"]["cloud.google.com/gke-nodepool"] == pool, pod["spec"]
    finally:
        cluster.kubectl("scale", "leaderworkerset", release, "-n", "ml-serving", "--replicas=1")


@pytest.mark.slow
def test_deploy_local_again_with_every_image_at_a_new_digest_upgrades_in_place(
    cluster_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every image of dev at a new digest, Saxml's model server's (an upstream pin) included. Each release is
    upgraded in place; the Saxml JobSet is replaced by a new one: JobSet's webhook makes spec.replicatedJobs
    immutable, so the chart names the JobSet after them (main's fixed name failed the upgrade: "spec.replicatedJobs:
    Invalid value ... field is immutable", from the real webhook)."""
    saxml = {k for k in _verdicts()["objects"] if k.startswith("JobSet/ml-serving/serve-saxml")}
    monkeypatch.setattr(upstream, "SAXML_MODEL", upstream.SAXML_MODEL.split(":")[0] + "@sha256:" + "5a" * 32)
    code, out, err = _deploy(cluster_dir, _envs(cluster_dir, "second", "sha256:" + "ab" * 32, every=True))
    assert code == 0, (out + err)[-4000:]
    # OpenTofu's real plan of the change: every release that carries one of the images updated in place, nothing
    # created or destroyed.
    summary = re.search(r"Apply complete! Resources: 0 added, (\d+) changed, 0 destroyed\.", err)
    assert summary, err[-3000:]
    modified = set(re.findall(r"^helm_release\.([\w-]+)_release_\w+: Modifying\.\.\.", err, re.M))
    assert int(summary[1]) == len(modified) and "Destroying..." not in err, err[-3000:]
    assert {"ray-training", "serve-canary", "serve-llama70b-vllm", "gpu-training", "serve-saxml"} <= modified, modified
    replaced = {k for k, n in _verdicts()["objects"].items() if k.startswith("JobSet/ml-serving/serve-saxml") and n}
    assert len(replaced) == 1 and replaced.isdisjoint(saxml), "a new JobSet, with its pods"
    cluster = Cluster((cluster_dir / "cluster").resolve())
    jobsets = {
        f"JobSet/ml-serving/{j['metadata']['name']}" for j in cluster.get("jobsets", "-n", "ml-serving")["items"]
    }
    assert {j for j in jobsets if j.startswith("JobSet/ml-serving/serve-saxml")} == replaced, "the old one gone"
    # Every pod runs the new image, not only the spec: KubeRay does not roll a cluster's pods when their template
    # changes (main's fixed RayCluster name kept all five on the old digest), so the chart names the cluster after
    # its spec and the upgrade replaces it.
    ray, pods = _wait_for_pods(cluster, 5)
    wanted = f"us-east5-docker.pkg.dev/acme-ml-platform-dev/ml-platform/trainer@sha256:{'ab' * 32}"
    assert {c["image"] for pod in pods for c in pod["spec"]["containers"]} == {wanted}
    assert all(p["metadata"]["labels"]["ray.io/cluster"] == ray["metadata"]["name"] for p in pods)
    service = cluster.get("service", "-n", "ml-training", "ray-training-head-svc")
    assert service["spec"]["selector"]["ray.io/cluster"] == ray["metadata"]["name"], "the head's one address"
    history = json.loads(
        apply.run_helm(cluster, ["history", "ray-training", "-n", "ml-training", "-o", "json"], cluster.folder).stdout
    )
    assert [h["status"] for h in history][-2:] == ["superseded", "deployed"], "upgraded in place"


# The resource each upgrade rule's example edits, as kubectl names it.
RESOURCES = {
    "LocalQueue": "localqueues.kueue.x-k8s.io",
    "JobSet": "jobsets.jobset.x-k8s.io",
    "LeaderWorkerSet": "leaderworkersets.leaderworkerset.x-k8s.io",
    "Deployment": "deployments.apps",
}


@pytest.mark.slow
def test_the_real_api_server_and_webhooks_refuse_what_the_upgrade_rules_refuse(cluster_dir: Path) -> None:
    """Each failing example of the upgrade rules (tests/refused.py), made to the live objects deploy-local applied
    and sent as an update: the real API server (a CRD's transition rule, a Deployment's selector) and the real JobSet
    and LWS webhooks refuse it, and the rule refuses the same pair of objects."""
    from infra.rules import check_upgrade
    from tests.refused import UPGRADE_REFUSED

    cluster = Cluster((cluster_dir / "cluster").resolve())
    stack = read_stack(REPO / "cdktf.out.local-dev", "platform-dev")
    rendered = {name: objects for name, (_, objects) in stack_releases(stack).items()}
    for case, (release, edit, (kind, field), rule_id, _) in UPGRADE_REFUSED.items():
        names = [o["metadata"]["name"] for o in rendered[release] if o["kind"] == kind]
        live = [
            item
            for item in cluster.get(RESOURCES[kind], "-A")["items"]
            if item["metadata"]["name"] in names
            and (item["metadata"].get("labels") or {}).get("app.kubernetes.io/instance", release) == release
        ]
        assert len(live) == len(names), (case, names)
        sent = copy.deepcopy(live)
        edit(sent)
        assert {v.rule.id for v in check_upgrade(live, sent)} == {rule_id}, case
        for before, after in zip(live, sent, strict=True):
            if before == after:
                continue
            done = cluster.kubectl("replace", "-f", "-", input=json.dumps(after), check=False)
            assert done.returncode != 0, f"{case}: the update of {kind}/{after['metadata']['name']} was taken"
            # (LWS's webhook spells the path spec.leaderWorkerTemplate.SubGroupPolicy.subGroupSize.)
            assert field.lower() in done.stderr.lower() and "field is immutable" in done.stderr, (case, done.stderr)


@pytest.mark.slow
def test_the_apply_gate_reads_the_running_revision_from_helms_record_and_refuses_what_the_real_upgrade_would(
    cluster_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gate at the apply holds each release the plan updates from the revision the cluster runs: read from Helm's
    record with kubectl (scripts/cluster_access.py), decoded as Helm wrote it. A JetStream release of the chart as it
    was (its LeaderWorkerSet named after the release), installed by the real Helm, then reshaped: the gate refuses
    the upgrade, and the real `helm upgrade` of the same values fails at LWS's webhook."""
    from infra.review.upgrades import refused_against_deployed
    from scripts.cluster_access import deployed_objects

    cluster = Cluster((cluster_dir / "cluster").resolve())
    monkeypatch.setenv("PLATFORM_KUBECTL", str(build.build_all(["kube"])["kubectl"]))
    run_env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    stack_dir = REPO / "cdktf.out.local-dev" / "stacks" / "platform-dev"
    stack = json.loads((stack_dir / "cdk.tf.json").read_text())
    (served,) = [r for r in stack["resource"]["helm_release"].values() if r["name"] == "serve-llama405b"]
    rendered = {name: objects for name, (_, objects) in stack_releases(stack).items()}["serve-llama405b"]
    running = deployed_objects(run_env, "serve-llama405b", served["namespace"])
    assert sorted((o["kind"], o["metadata"]["name"]) for o in running) == sorted(
        (o["kind"], o["metadata"]["name"]) for o in rendered
    ), "the record holds what deploy-local's Helm applied"

    charts = charts_with_fixed_jetstream_name(tmp_path / "charts")
    values = json.loads(served["values"][0])
    probe = {**served, "name": "gate-probe", "chart": str(charts / "jetstream-pathways"), "wait": False}
    first = {**probe, "values": [json.dumps({**values, "subGroupSize": 2})]}
    reshaped = {**probe, "values": [json.dumps(values)]}
    assert values["subGroupSize"] != 2

    def install(release: dict[str, Any]) -> Any:
        values = tmp_path / "values.yaml"
        values.write_text(release["values"][0])
        command = ["upgrade", "--install", "gate-probe", release["chart"], "-n", release["namespace"]]
        return apply.run_helm(cluster, [*command, "--values", str(values)], stack_dir)

    try:
        done = install(first)
        assert done.returncode == 0, done.stderr
        found = refused_against_deployed(
            stack_dir, {"resource": {"helm_release": {"probe": reshaped}}}, ["helm_release.probe"],
            lambda name, namespace: deployed_objects(run_env, name, namespace),
        )  # fmt: skip
        why, confirmable = found["helm_release.probe"]
        assert not confirmable and "lws.subgroup-size-immutable" in why, why
        done = install(reshaped)
        assert done.returncode != 0 and "field is immutable" in done.stderr, done.stderr
    finally:
        apply.run_helm(cluster, ["uninstall", "gate-probe", "-n", served["namespace"]], stack_dir)


@pytest.mark.slow
def test_a_field_the_served_crd_does_not_name_is_dropped_by_the_real_api_server_as_the_gate_says(
    cluster_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gate reads the CRDs the cluster serves (`kubectl get crds`): every release of dev sends only fields they
    name. A CRD without a field (a probe kind, as an older KubeRay lacks spec.authOptions): the real Helm installs
    the object, the real API server stores it without the field, and pruned_fields names that field alone."""
    from infra.charts.check import pruned_fields
    from infra.review.served import dropped_fields
    from scripts.cluster_access import served_crds

    cluster = Cluster((cluster_dir / "cluster").resolve())
    monkeypatch.setenv("PLATFORM_KUBECTL", str(build.build_all(["kube"])["kubectl"]))
    run_env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    stack_dir = REPO / "cdktf.out.local-dev" / "stacks" / "platform-dev"
    stack = json.loads((stack_dir / "cdk.tf.json").read_text())
    local = [f"helm_release.{k}" for k, r in stack["resource"]["helm_release"].items() if "repository" not in r]
    served = served_crds(run_env)
    assert ("ray.io/v1", "RayCluster") in served and dropped_fields(stack_dir, stack, local, served) == {}

    spec = {"type": "object", "properties": {"mode": {"type": "string"}}}
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "probes.probe.platform.local"},
        "spec": {"group": "probe.platform.local", "scope": "Namespaced",
                 "names": {"kind": "Probe", "plural": "probes", "singular": "probe", "listKind": "ProbeList"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                     "type": "object", "properties": {"spec": spec}}}}]},
    }  # fmt: skip
    probe = {"apiVersion": "probe.platform.local/v1", "kind": "Probe",
             "metadata": {"name": "p", "namespace": "default"},
             "spec": {"mode": "token", "authOptions": {"mode": "token"}}}  # fmt: skip
    chart = tmp_path / "probe"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: probe\nversion: 0.1.0\n")
    (chart / "templates" / "probe.yaml").write_text(json.dumps(probe))
    try:
        cluster.kubectl("apply", "-f", "-", input=json.dumps(crd))
        cluster.kubectl(
            "wait", "--for=condition=Established", "crd/probes.probe.platform.local", f"--timeout={WAIT_S}s"
        )
        done = apply.run_helm(cluster, ["upgrade", "--install", "probe", str(chart), "-n", "default"], tmp_path)
        assert done.returncode == 0, done.stderr
        stored = cluster.get("probes.probe.platform.local", "p", "-n", "default")
        assert stored["spec"] == {"mode": "token"}, "Helm's install went through; the API server dropped the field"
        schema = served_crds(run_env)[("probe.platform.local/v1", "Probe")]
        assert pruned_fields(probe, schema) == ["spec.authOptions"]
    finally:
        apply.run_helm(cluster, ["uninstall", "probe", "-n", "default"], tmp_path)
        cluster.kubectl("delete", "crd", "probes.probe.platform.local", "--ignore-not-found", check=False)


@pytest.mark.slow
def test_a_controller_bump_keeps_its_crd_and_its_objects_and_the_new_controller_reconciles_them(
    cluster_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LeaderWorkerSet 0.7.0 to 0.8.0 (the version after the pin, allowed in this test only: the rules are sourced
    at 0.7.0), whose CRD moves from the chart's templates/ to crds/ (Helm alone would delete it with every
    LeaderWorkerSet: helm/helm#8163). The CRD is the same object, updated; every LeaderWorkerSet survives with
    its pods, and the 0.8.0 controller built from its module reconciles them."""
    from infra.catalogue import controllers

    lws = controllers.CONTROLLERS["lws"]
    monkeypatch.setitem(controllers.CONTROLLERS, "lws", dataclasses.replace(lws, versions=("0.7.0", "0.8.0")))
    cluster = Cluster((cluster_dir / "cluster").resolve())
    crd = "leaderworkersets.leaderworkerset.x-k8s.io"
    crd_before = cluster.get("crd", crd)["metadata"]
    before = {o["metadata"]["name"]: o["metadata"]["uid"] for o in cluster.get("lws", "-n", "ml-serving")["items"]}
    # The bump alone, as a person makes it: every image at the digest the deploy before left them (the Saxml model's
    # pin, set back after that test, changes too).
    bumped = {"    lws: 0.7.0": "    lws: 0.8.0"}
    code, out, err = _deploy(cluster_dir, _envs(cluster_dir, "lws-bump", "sha256:" + "ab" * 32, bumped, every=True))
    assert code == 0, (out + err)[-4000:]
    modified = set(re.findall(r"^helm_release\.([\w-]+)_release_\w+: Modifying\.\.\.", err, re.M))
    assert modified == {"lws", "serve-saxml"}, modified
    crd_after = cluster.get("crd", crd)["metadata"]
    assert crd_after["uid"] == crd_before["uid"] and crd_after["generation"] > crd_before["generation"]
    after = {o["metadata"]["name"]: o["metadata"]["uid"] for o in cluster.get("lws", "-n", "ml-serving")["items"]}
    assert after == before, "every LeaderWorkerSet survived the bump"
    objects = _verdicts()["objects"]
    assert all(objects[f"LeaderWorkerSet/ml-serving/{name}"] for name in after), objects
    (release,) = [r for r in json.loads(
        apply.run_helm(cluster, ["list", "-n", "lws-system", "-o", "json"], cluster.folder).stdout
    ) if r["name"] == "lws"]  # fmt: skip
    assert release["app_version"] == "v0.8.0" and release["status"] == "deployed"
    pid = int((cluster.folder / "controllers" / "lws.pid").read_text())
    assert "/lws-0.8.0-" in Path(f"/proc/{pid}/cmdline").read_text(), "the controller running is the bumped one"
    # And it reconciles what the old one made: a second group of the 405B server (a leader and four workers).
    (jetstream,) = [name for name in after if name.startswith("serve-llama405b-")]
    cluster.kubectl("scale", "lws", jetstream, "-n", "ml-serving", "--replicas=2")
    selector = f"leaderworkerset.sigs.k8s.io/name={jetstream}"
    deadline = time.monotonic() + 60
    while len(cluster.get("pods", "-n", "ml-serving", "-l", selector)["items"]) < 10 and time.monotonic() < deadline:
        time.sleep(2)
    assert len(cluster.get("pods", "-n", "ml-serving", "-l", selector)["items"]) == 10
    cluster.kubectl("scale", "lws", jetstream, "-n", "ml-serving", "--replicas=1")


@pytest.mark.slow
def test_a_second_training_slice_adds_a_pool_and_a_worker_group_and_replaces_no_node(cluster_dir: Path) -> None:
    """dev's training slice counted twice (docs/examples/multislice): the pool `train` keeps its four nodes, four
    new ones come in `train-1`, and KubeRay's cluster (replaced: a new spec) has a worker group on each pool."""
    cluster = Cluster((cluster_dir / "cluster").resolve())
    before = {n["metadata"]["name"] for n in cluster.get("nodes", "-l", "cloud.google.com/gke-nodepool=train")["items"]}
    edits = {"  train:\n    accelerator: v6e\n": "  train:\n    count: 2\n    accelerator: v6e\n"}
    edits["  recipe: llama3-8b\n"] = "  recipe: llama3-8b-2-slices\n"
    code, out, err = _deploy(cluster_dir, _envs(cluster_dir, "two-slices", "sha256:" + "cd" * 32, edits))
    assert code == 0, (out + err)[-4000:]
    assert "disagrees with the placement report" not in out
    train = {n["metadata"]["name"] for n in cluster.get("nodes", "-l", "cloud.google.com/gke-nodepool=train")["items"]}
    assert train == before and len(train) == 4
    added = cluster.get("nodes", "-l", "cloud.google.com/gke-nodepool=train-1")["items"]
    assert len(added) == 4 and {n["metadata"]["labels"]["cloud.google.com/gke-tpu-topology"] for n in added} == {"4x4"}
    found = _verdicts()
    assert [p for p in found["pods"] if p["pool"] is None] == []
    assert {pool: sum(p["pool"] == pool for p in found["pods"]) for pool in ("train", "train-1")} == {
        "train": 4,
        "train-1": 4,
    }
    ray, pods = _wait_for_pods(cluster, 9)
    assert [(g["groupName"], g["numOfHosts"]) for g in ray["spec"]["workerGroupSpecs"]] == [
        ("v6e-16", 4),
        ("v6e-16-1", 4),
    ]
    pool_of = {
        n["metadata"]["name"]: n["metadata"]["labels"]["cloud.google.com/gke-nodepool"]
        for n in cluster.get("nodes")["items"]
    }
    workers = [
        (p["metadata"]["labels"]["ray.io/group"], pool_of[p["spec"]["nodeName"]])
        for p in pods
        if p["metadata"]["labels"].get("ray.io/node-type") == "worker"
    ]
    groups = {"v6e-16": "train", "v6e-16-1": "train-1"}
    assert sorted(workers) == sorted([(g, pool) for g, pool in groups.items() for _ in range(4)])


@pytest.mark.slow
def test_a_reshaped_slice_gets_new_nodes_and_the_training_cluster_moves_onto_them(cluster_dir: Path) -> None:
    """The training slice from v6e 4x4 to 4x8 (a recipe that runs there): GKE replaces the pool, so its four nodes
    are drained and go and eight new ones come; KubeRay's cluster is replaced (a worker group renamed after the
    shape left its old pods pending forever: ray-project/kuberay#1739), and every pod binds where the report says."""
    cluster = Cluster((cluster_dir / "cluster").resolve())
    before = {n["metadata"]["name"] for n in cluster.get("nodes", "-l", "cloud.google.com/gke-nodepool=train")["items"]}
    edits = {"    accelerator: v6e\n    topology: 4x4": "    accelerator: v6e\n    topology: 4x8"}
    edits["  recipe: llama3-8b"] = "  recipe: maxtext-tiny"
    # And the canary server taken out of the environment: its release goes, as Terraform destroys what its state
    # has and the configuration does not (deploy-local left it running before).
    edits["  canary:\n    engine: canary\n    identity: serving\n    bucket: checkpoints\n    path: canary\n"] = ""
    edits["    image: server\n\n# What the environment watches"] = "\n# What the environment watches"
    code, out, err = _deploy(cluster_dir, _envs(cluster_dir, "reshaped", "sha256:" + "ab" * 32, edits))
    assert code == 0, (out + err)[-4000:]
    releases = json.loads(apply.run_helm(cluster, ["list", "-A", "-o", "json"], cluster.folder).stdout)
    assert "serve-canary" not in {r["name"] for r in releases}
    assert (
        cluster.get("deployments", "-n", "ml-serving", "-l", "app.kubernetes.io/instance=serve-canary")["items"] == []
    )
    after = cluster.get("nodes", "-l", "cloud.google.com/gke-nodepool=train")["items"]
    assert len(after) == 8 and before.isdisjoint(n["metadata"]["name"] for n in after)
    assert {n["metadata"]["labels"]["cloud.google.com/gke-tpu-topology"] for n in after} == {"4x8"}
    found = _verdicts()
    assert [p for p in found["pods"] if p["pool"] is None] == []
    assert sum(p["pool"] == "train" for p in found["pods"]) == 8
    ray, pods = _wait_for_pods(cluster, 9)
    assert ray["spec"]["workerGroupSpecs"][0]["numOfHosts"] == 8 and len(pods) == 9


@pytest.mark.slow
def test_runs_as_jobs_wait_their_turn_and_a_team_borrows_the_slice_between_runs(cluster_dir: Path) -> None:
    """dev with training.runs: jobs. The deploy leaves no standing training cluster; each `make train` is a RayJob
    the real Kueue admits whole or holds: a second run waits while the first holds the slice, and is admitted when the
    first ends (the real KubeRay ends it and deletes its cluster). Between runs the slice is idle and a team's job
    borrows it with no hand step; the next run takes it back (Kueue preempts the team's job)."""
    envs = _envs(cluster_dir, "jobs", edits={"  queue: training\n": "  queue: training\n  runs: jobs\n"})
    code, out, err = _deploy(cluster_dir, envs)
    assert code == 0, (out + err)[-4000:]
    cluster = Cluster((cluster_dir / "cluster").resolve())
    standing = cluster.get("rayclusters", "-n", "ml-training", "-l", "app.kubernetes.io/instance=ray-training")
    assert standing["items"] == []

    def train() -> str:
        """make train ENV=dev RECIPE=canary: the RayJob's namespace/name."""
        out = _platform(cluster, "train", "submit", "--env", "dev", "--recipe", "canary", envs=envs)
        submitted: str = json.loads(out)["rayjob"]
        return submitted

    def rows() -> dict[str, dict[str, Any]]:
        return _status(cluster, envs)

    slice_, team = "1 x v6e 4x4 (4 nodes)", "ml-gpu/research-tpu"
    try:
        first, second = train(), train()
        # The first holds the whole slice (its head, a pod per host, its submitter); the second waits, with Kueue's
        # reason, and has no cluster yet.
        now = _until(
            "the first run holding the slice while the second waits",
            lambda: (r := rows())[first]["holds"] == slice_ and r[second]["state"] == "waiting" and r,
            describe=rows,
        )
        assert now[first]["queue"] == now[second]["queue"] == "training"
        assert "insufficient unused quota" in now[second]["why"] and now[second]["holds"] == ""
        # The first ends (here KubeRay ends it 30 s after its submitter finished, no Ray answering in KWOK's pods: a
        # failed run, and the end a real one has too): its cluster is deleted and the second is admitted whole.
        now = _until(
            "the first run ended and the second holding the slice",
            lambda: (r := rows())[first]["state"] == "finished" and r[second]["holds"] == slice_ and r,
            describe=rows,
        )
        assert now[first]["holds"] == ""
        clusters = cluster.get("rayclusters", "-n", "ml-training")["items"]
        assert [c for c in clusters if c["metadata"]["ownerReferences"][0]["name"] == first.split("/")[1]] == []
        job = cluster.get("rayjobs", second.split("/")[1], "-n", "ml-training")
        worker = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
        # The second is cancelled (`kubectl delete rayjob`: its cluster goes with it) rather than waited for: it would
        # end as the first did, 30 s on.
        cluster.kubectl("delete", "rayjob", second.split("/")[1], "-n", "ml-training", "--wait=true")
        # Between runs the slice is idle: the team's job borrows it, with no training-pause.
        cluster.kubectl("apply", "-f", "-", input=json.dumps(_team_tpu_job(worker)))
        _until("the team's job admitted on the idle slice", lambda: rows()[team]["state"] == "admitted", describe=rows)
        # The next run takes the slice back: Kueue preempts the team's job and admits the run whole.
        third = train()
        now = _until(
            "the team's job preempted and the third run holding the slice",
            lambda: (r := rows())[third]["holds"] == slice_ and r[team]["state"] != "admitted" and r,
            describe=rows,
        )
        assert now[team]["holds"] == ""
    finally:
        cluster.kubectl("delete", "job", "research-tpu", "-n", "ml-gpu", "--wait=true", check=False)
        cluster.kubectl("delete", "rayjobs", "--all", "-n", "ml-training", "--wait=true", check=False)


# dev's research weighing 3 and a second team, vision, weighing 1 and guaranteed nothing: Kueue's fair sharing on.
# Deployed by the JobSet runs' test (its deploy, not one more), read by the fair-sharing test.
FAIR_SHARING = {
    "    borrow_training: true\n": "    borrow_training: true\n    weight: 3\n"
    "  vision:\n    namespace: ml-gpu\n    quota: {a3mega: 0}\n    weight: 1\n",
}
# Starts measured on both queued slices (slices.<key>.queued_start): Kueue's wait for a run's pods becomes twice the
# slowest, 2 x 400 s = 14 minutes, instead of its default 30 (infra/derive/queues.py pods_ready_timeout).
MEASURED_STARTS = {
    "    machine_type: ct6e-standard-4t\n    capacity:\n      type: on-demand\n": (
        "    machine_type: ct6e-standard-4t\n    capacity:\n      type: on-demand\n"
        "    queued_start: {seconds: 400, measured: 2026-12-05, source: local}\n"
    ),
    "    zone: us-east5-a\n    capacity:\n      type: queued\n": (
        "    zone: us-east5-a\n    capacity:\n      type: queued\n"
        "    queued_start: {seconds: 250, measured: 2026-12-05, source: local}\n"
    ),
}


@pytest.mark.slow
def test_jobset_runs_of_maxtext_wait_their_turn_and_each_takes_the_whole_slice(cluster_dir: Path) -> None:
    """dev with training.launcher: jobset. Each `make train` is a JobSet of MaxText's own trainer (one replicated Job
    of a Job per slice, as multi-tier checkpointing needs) that the real Kueue admits whole through the training
    queue's one flavor, or holds: the second waits while the first holds the slice and is admitted when the first
    ends. KWOK completes a Job's pods at once, so a run lasts a few seconds: the test reads what the real Kueue and
    JobSet did from their events, and the JobSets are gone when they end (ttlSecondsAfterFinished: 0). The deploy
    also weighs the teams (FAIR_SHARING: Kueue's fair sharing on), for the fair-sharing test after the rehearsal;
    the training queue's one flavor is within its own quota either way."""
    edits = {
        "  queue: training\n": "  queue: training\n  runs: jobs\n  launcher: jobset\n",
        **FAIR_SHARING,
        **MEASURED_STARTS,
    }
    envs = _envs(cluster_dir, "jobset-runs", edits=edits)
    code, out, err = _deploy(cluster_dir, envs)
    assert code == 0, (out + err)[-4000:]
    cluster = Cluster((cluster_dir / "cluster").resolve())

    def train() -> str:
        """make train ENV=dev (its recipe, llama3-8b): the JobSet's name."""
        submitted: str = json.loads(_platform(cluster, "train", "submit", "--env", "dev", envs=envs))["jobset"]
        assert submitted.startswith("ml-training/"), submitted
        return submitted.split("/")[1]

    def events() -> list[dict[str, Any]]:
        return sorted(
            cluster.get("events", "-n", "ml-training")["items"],
            key=lambda e: e.get("eventTime") or e.get("firstTimestamp") or "",
        )

    def at(e: dict[str, Any]) -> str:
        return str(e.get("eventTime") or e.get("firstTimestamp"))

    def of(run: str, reason: str, kind: str = "Workload") -> list[dict[str, Any]]:
        """The events of `reason` on the run's JobSet, or on its Kueue Workload (named jobset-<run>-<hash>)."""
        prefix = f"jobset-{run}-" if kind == "Workload" else run
        return [e for e in events() if e["reason"] == reason and e["involvedObject"]["kind"] == kind
                and e["involvedObject"]["name"].startswith(prefix)]  # fmt: skip

    # A run lasts a few seconds here, so one submitted after the other could find the slice free: the queue holds its
    # admissions (Kueue's stopPolicy, as an operator pausing it) until both are in it.
    hold = {"spec": {"stopPolicy": "Hold"}}
    cluster.kubectl("patch", "clusterqueue", "training", "--type=merge", "-p", json.dumps(hold))
    try:
        runs = [train(), train()]
        cluster.kubectl("patch", "clusterqueue", "training", "--type=merge", "-p", '{"spec":{"stopPolicy":"None"}}')
        _until(
            "both runs finished",
            lambda: all(of(run, "AllJobsCompleted", "JobSet") for run in runs),
            describe=lambda: [(e["reason"], e["involvedObject"]["name"], e["message"][:120]) for e in events()],
        )
        # One waited for the whole slice, which the other held, and was admitted only once the other ended: its Jobs
        # completed (the JobSet controller's event; Kueue's FinishedWorkload can come after the JobSet went).
        quota = "insufficient unused quota for google.com/tpu in flavor training-slices"
        (second,) = [run for run in runs if any(quota in e["message"] for e in of(run, "Pending"))]
        (first,) = [run for run in runs if run != second]
        (ended,) = of(first, "AllJobsCompleted", "JobSet")
        (admitted,) = of(second, "QuotaReserved")
        assert at(admitted) >= at(ended), (at(admitted), at(ended))
        # Each run's pods, one per host, on the training pool alone (the required affinity), by the real scheduler.
        nodes = {n["metadata"]["name"]: n["metadata"]["labels"] for n in cluster.get("nodes")["items"]}
        for run in (first, second):
            placed = [e["message"].rsplit(" to ", 1)[1] for e in of(run, "Scheduled", "Pod")]
            assert len(placed) == 4, placed
            assert {nodes[n]["cloud.google.com/gke-nodepool"] for n in placed} == {"train"}
        _until("the finished runs deleted", lambda: not cluster.get("jobsets", "-n", "ml-training")["items"])
    finally:
        cluster.kubectl("patch", "clusterqueue", "training", "--type=merge", "-p", '{"spec":{"stopPolicy":"None"}}')
        cluster.kubectl("delete", "jobsets", "--all", "-n", "ml-training", "--wait=true", check=False)


@pytest.mark.slow
def test_rehearse_local_fills_every_queue_and_reports_what_the_real_kueue_did(cluster_dir: Path) -> None:
    """`make rehearse-local ENV=dev` with training runs as jobs (as the test before deployed it): each queue filled
    with two runs of its shapes, one at a time. The real Kueue admits research's run on the idle training slice (it
    borrows it), then preempts it for the training run submitted after it; training's runs are never preempted and
    no two runs ever hold the slice at once; the GPU runs hold each queue's own share of the two A3 Mega nodes, once
    the rehearsal has granted their ProvisioningRequests. Every run ends, and none is left behind."""
    envs = _envs(cluster_dir, "rehearse", edits={"  queue: training\n": "  queue: training\n  runs: jobs\n"})
    cluster = Cluster((cluster_dir / "cluster").resolve())
    argv = ["rehearse-local", "dev", "--dir", str(cluster_dir / "cluster"), "--hold", "10", "--for", "600", "--json"]
    found = json.loads(_platform(cluster, *argv, envs=envs))
    runs = {r["run"]: r for r in found["runs"]}
    shapes = ("research-a3mega", "research-train", "gpu-a3mega", "training-train")
    assert sorted(runs) == sorted(f"rehearsal-{s}-{n}" for s in shapes for n in (1, 2))
    assert all(r["end"] == "done" and r["waited_s"] is not None for r in runs.values()), found
    assert runs["rehearsal-research-train-1"]["preempted"] >= 1, found
    assert [runs[f"rehearsal-training-train-{n}"]["preempted"] for n in (1, 2)] == [0, 0], found
    # One slice, four runs of it in turn: together they held it no longer than the rehearsal lasted (a second's
    # reading for each admission).
    on_slice = [r for r in runs.values() if r["asks"].startswith("train:")]
    admissions = sum(1 + r["preempted"] for r in on_slice)
    assert sum(r["ran_s"] for r in on_slice) <= found["seconds"] + 2 * admissions, found
    # What research held at its peak: at least one A3 Mega node, at list price.
    a3mega = min(
        status._node_price(n) or 0.0
        for n in cluster.get("nodes")["items"]
        if n["metadata"]["labels"].get("cloud.google.com/gke-nodepool") == "a3mega"
    )
    teams = {t["team"]: t for t in found["teams"]}
    assert a3mega > 0 and teams["research"]["usd_per_hour_peak"] >= a3mega, found
    assert teams["research"]["preempted"] >= 1 and teams["platform"]["preempted"] == 0, found
    left = cluster.get("jobs", "--all-namespaces", "-l", "platform.local/rehearsal")["items"]
    assert left == [], [j["metadata"]["name"] for j in left]


@pytest.mark.slow
def test_drift_local_reports_each_object_edited_by_hand_with_what_the_gate_says_of_it(cluster_dir: Path) -> None:
    """`make drift-local ENV=dev`: nothing after the apply; then three objects of the stack changed by hand, each
    reported with its consequence, and what the next apply would do about it (exit 2)."""
    cluster = Cluster((cluster_dir / "cluster").resolve())

    def drift() -> tuple[int, str]:
        env = {**os.environ, "PLATFORM_KUBECTL": str(build.build_all(["kube"])["kubectl"])}
        done = run_main(platform_main, ["drift-local", "dev", "--dir", str(cluster_dir / "cluster")], env=env, cwd=REPO)
        return done.returncode, done.stdout + done.stderr

    code, said = drift()
    assert code == 0 and "platform-dev: nothing changed outside OpenTofu since the last apply" in said, said
    cluster.kubectl("delete", "networkpolicy", "default-deny-ingress", "-n", "ml-training")
    cluster.kubectl("patch", "networkpolicy", "ray-training-within", "-n", "ml-training", "--type=json",
                    "-p", json.dumps([{"op": "replace", "path": "/spec/ingress", "value": [{}]}]))  # fmt: skip
    cluster.kubectl("annotate", "serviceaccount", "ray-trainer", "-n", "ml-training",
                    "iam.gke.io/gcp-service-account=someone@elsewhere.iam.gserviceaccount.com")  # fmt: skip
    code, said = drift()
    assert code == 2, said
    assert "platform-dev: 3 resource(s) changed outside OpenTofu since the last apply" in said, said
    lines = {line.split()[1]: line for line in said.splitlines() if line.startswith("  ")}
    (deleted,) = [v for k, v in lines.items() if "ml-training-default-deny-ingress" in k]
    assert deleted.startswith("  deleted ") and "security weakened: the NetworkPolicy is deleted" in deleted
    (opened,) = [v for k, v in lines.items() if "ml-training-ray-training-within" in k]
    assert "(spec.ingress" in opened and "security weakened: the NetworkPolicy allows more" in opened
    (rebound,) = [v for k, v in lines.items() if k.startswith("kubernetes_service_account_v1.trainer_ksa")]
    assert (
        "(metadata.annotations.iam.gke.io/gcp-service-account): security weakened: the Kubernetes service "
        "account is bound to a Google service account" in rebound
    )
    repairs = said.split("the next deploy-local would: ", 1)[1]
    assert repairs.count("create kubernetes_network_policy_v1.") == 1 and repairs.count("update ") == 2


@pytest.mark.slow
def test_teams_borrow_by_their_weights_under_the_real_kueues_fair_sharing_and_give_it_back(cluster_dir: Path) -> None:
    """dev as the JobSet runs' test deployed it (FAIR_SHARING): research weighing 3 and a second team, vision,
    weighing 1 and guaranteed nothing; that deploy rolled Kueue onto the Configuration with fair sharing on. Both
    teams ask for more than the cohort has: 16 and 8 jobs of one A3 Mega GPU each, on 16 GPUs of which research is
    guaranteed 8 and the platform's queue, idle, lends its 8. The real Kueue splits what is lent 3 to 1 (research
    8 + 6, vision 2; Kueue's classic preemption gave research all 16). Then the platform's queue asks for its own 8:
    Kueue preempts the borrowers until both hold no more than they are guaranteed."""
    cluster = Cluster((cluster_dir / "cluster").resolve())
    label = "platform.local/fair-sharing"

    def submit(queue: str, count: int) -> None:
        shape = rehearse.Shape(queue, "ml-gpu", queue, "a3mega", "nvidia.com/gpu", 1, 1)
        jobs = [rehearse.stand_in(shape, f"fair-{queue}-{n}", "fair-sharing") for n in range(count)]
        for job in jobs:
            job["metadata"]["labels"][label] = queue
        cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": jobs}))

    def reserved() -> dict[str, int]:
        """GPUs each queue's jobs hold (Kueue's QuotaReserved: the A3 Mega flavor's ProvisioningRequest check,
        which no one grants here, comes after it)."""
        held = {"research": 0, "vision": 0, "gpu": 0}
        for w in cluster.get("workloads.kueue.x-k8s.io", "-n", "ml-gpu")["items"]:
            if w["metadata"]["ownerReferences"][0]["name"].startswith("fair-") and (
                _conditions(w).get("QuotaReserved", {}).get("status") == "True"
            ):
                held[w["spec"]["queueName"]] += 1
        return held

    def queues() -> dict[str, Any]:
        return {q["metadata"]["name"]: q for q in cluster.get("clusterqueues.kueue.x-k8s.io")["items"]}

    try:
        # Kueue records each queue's weighted share only with fair sharing on: the running Kueue read it.
        _until("the real Kueue running with fair sharing on", lambda: "weightedShare" in (
            queues()["vision"].get("status", {}).get("fairSharing") or {}
        ), describe=lambda: queues()["vision"].get("status"))  # fmt: skip
        assert queues()["research"]["spec"]["fairSharing"] == {"weight": "3"}
        # The same deploy recorded both queued slices' starts: the Configuration the running Kueue read waits twice
        # the slowest for a run's pods.
        running = yaml.safe_load((cluster.folder / "controllers" / "kueue-config.yaml").read_text())
        assert {k: running["waitForPodsReady"][k] for k in ("timeout", "recoveryTimeout")} == {
            "timeout": "14m",
            "recoveryTimeout": "14m",
        }
        submit("research", 16)
        submit("vision", 8)
        _until("the lent GPUs split 3 to 1", lambda: reserved() == {"research": 14, "vision": 2, "gpu": 0},
               describe=reserved)  # fmt: skip
        # make status ENV=dev: each queue with its weight and the share Kueue weighs it by. The lent GPUs are split
        # where the weighted shares meet: research's 6 borrowed over weight 3 is vision's 2 over 1.
        shown = json.loads(_platform(cluster, "status", "dev", "--json", envs=cluster_dir / "jobset-runs"))
        by_name = {q["name"]: q for q in shown["queues"]}
        research, vision = by_name["research"], by_name["vision"]
        assert (research["team"], research["weight"], vision["weight"]) == ("research", "3", "1")
        gpus = {name: [h for h in q["holds"] if "nvidia.com/gpu" in h] for name, q in by_name.items()}
        assert gpus["research"] == ["a3mega nvidia.com/gpu 14 (6 borrowed)"], research
        assert gpus["vision"] == ["a3mega nvidia.com/gpu 2 (2 borrowed)"], vision
        assert research["share"] == vision["share"] > 0 and by_name["gpu"]["share"] == 0, shown["queues"]
        submit("gpu", 8)
        _until("the platform's queue given its own 8 back",
               lambda: reserved() == {"research": 8, "vision": 0, "gpu": 8}, describe=reserved)  # fmt: skip
    finally:
        cluster.kubectl("delete", "jobs", "-n", "ml-gpu", "-l", label, "--wait=true", check=False)


@pytest.mark.slow
def test_destroy_local_takes_the_stack_down_and_leaves_only_what_helm_keeps(cluster_dir: Path) -> None:
    """make destroy-local: every resource in a destroy order (controllers as early as the graph allows), the
    namespaces gone, nothing of the stack left but what is kept by design. Kueue's aggregated ClusterRoles, deleted
    with their members, came back through kube-controller-manager's aggregation controller and the uninstall
    waited its 15 minutes for them: the post-renderer keeps them now."""
    done = run_main(
        deploy_local.main, ["--destroy", "dev", "--dir", str(cluster_dir / "cluster")], env=dict(os.environ), cwd=REPO
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert re.search(r"Destroy complete! Resources: [1-9]\d* destroyed\.", done.stderr), done.stderr[-3000:]
    assert "left behind" not in done.stdout
    kept = [line for line in done.stdout.splitlines() if line.startswith("left by design: ")]
    assert any("ClusterRole.rbac.authorization.k8s.io /kueue-batch-user-role" in line for line in kept)
    assert any("CustomResourceDefinition.apiextensions.k8s.io /jobsets.jobset.x-k8s.io" in line for line in kept)
    cluster = Cluster((cluster_dir / "cluster").resolve())
    namespaces = {n["metadata"]["name"] for n in cluster.get("namespaces")["items"]}
    assert not namespaces & {"ml-training", "ml-serving", "ml-gpu"}
    assert cluster.get("pods", "--all-namespaces")["items"] == []
    assert not any(Controllers(cluster).running(name) for name in LOCAL_CONTROLLERS), "a controller outlived its pods"
    assert not (REPO / "cdktf.out.local-dev").exists(), "nothing applied is left to destroy"
    again = run_main(
        deploy_local.main, ["--destroy", "dev", "--dir", str(cluster_dir / "cluster")], env=dict(os.environ), cwd=REPO
    )
    assert again.returncode == 2 and "nothing to destroy" in again.stderr


def _wait_for_pods(cluster: Cluster, count: int, timeout: float = 60) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The release's RayCluster once its controller has made `count` pods and the replaced cluster's are gone."""
    deadline = time.monotonic() + timeout
    while True:
        ray, pods = _ray(cluster)
        mine = [p for p in pods if p["metadata"]["labels"].get("ray.io/cluster") == ray["metadata"]["name"]]
        if (len(mine) == count == len(pods)) or time.monotonic() > deadline:
            return ray, pods
        time.sleep(2)


def test_deploy_local_waits_while_a_pod_or_template_has_no_verdict_yet() -> None:
    """On a loaded machine two reads can agree before the scheduler has looked at a pod, or before a Job's
    controller has made or failed to make its pods: settle keeps reading then (until its timeout)."""
    from infra.localcluster.verdicts import NO_WORD_YET, PodVerdict, Verdicts, undecided

    seen = PodVerdict("ml-serving", "p", "Job/j: spec.template", None, None, ("convert",))
    found = Verdicts(pods=[seen], missing={"Job/k: spec.template": NO_WORD_YET})
    assert undecided(found) == ["ml-serving/p", "Job/k: spec.template"]
    decided = Verdicts(
        pods=[PodVerdict("ml-serving", "p", "Job/j: spec.template", None, "Unschedulable: 0/42 nodes", ("convert",))],
        missing={"Job/k: spec.template": "FailedCreate: serviceaccount not found"},
    )
    assert undecided(decided) == []
