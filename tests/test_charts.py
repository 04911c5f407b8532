"""Charts rendered with the Helm SDK from exactly the values the synthesized stack passes, validated strictly."""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.catalogue.images import image_name, image_users
from infra.charts.check import ChartCheckError, lint, render, validate
from infra.rules import containers, pod_templates, where
from tests.helpers import REPO, needs_crds, of_type, release_values, rendered
from workloads.constants import RAY_VERSION

CHART_DIRS = sorted(p.parent for p in (REPO / "workloads" / "charts").glob("*/Chart.yaml"))


@pytest.fixture(scope="module")
def ray_cluster(stacks: dict[str, dict[str, Any]]) -> dict[str, Any]:
    release, values = release_values(stacks["dev"], "ray-training")
    objects = render("ray-training", values, name=release["name"], namespace=release["namespace"])
    # dev's cluster is queued: its Kueue queue (two flavors: the head's, the slice's) beside it.
    kinds = ["ResourceFlavor", "ResourceFlavor", "ClusterQueue", "LocalQueue", "RayCluster"]
    assert [o["kind"] for o in objects] == kinds
    return _cluster(objects)


def _cluster(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (cluster,) = [o for o in objects if o["kind"] == "RayCluster"]
    return cluster


def test_the_training_cluster_is_named_after_its_spec_and_its_head_keeps_one_address(
    stacks: dict[str, dict[str, Any]], ray_cluster: dict[str, Any]
) -> None:
    """KubeRay rolls no pod of a running cluster when the template changes, and orphans the pods of a renamed worker
    group (ray-project/kuberay#1739): a new image or slice shape must be a new RayCluster (make deploy-local found
    every pod on the old trainer digest after a promotion). The head's Service keeps its name across the swap."""
    release, values = release_values(stacks["dev"], "ray-training")
    again = _cluster(render("ray-training", values, name=release["name"], namespace=release["namespace"]))
    assert again["metadata"]["name"] == ray_cluster["metadata"]["name"], "the same values: the same cluster"
    assert re.fullmatch(r"ray-training-[0-9a-f]{8}", ray_cluster["metadata"]["name"])
    promoted = _cluster(render(
        "ray-training", {**values, "image": values["image"].split("@")[0] + "@sha256:" + "cd" * 32},
        name=release["name"], namespace=release["namespace"],
    ))  # fmt: skip
    assert promoted["metadata"]["name"] != ray_cluster["metadata"]["name"]
    for cluster in (ray_cluster, promoted):
        assert cluster["spec"]["headGroupSpec"]["headService"]["metadata"]["name"] == "ray-training-head-svc"


@pytest.mark.parametrize("chart", CHART_DIRS, ids=lambda p: p.name)
def test_every_chart_has_a_schema_and_ci_values_that_lint_clean(chart: Path) -> None:
    assert (chart / "values.schema.json").exists()
    ci_files = sorted((chart / "ci").glob("*.yaml"))
    assert ci_files, f"{chart.name} has no ci/*.yaml values"
    for ci in ci_files:
        assert lint(chart.name, yaml.safe_load(ci.read_text())) == [], ci.name


def test_ci_values_are_what_the_dev_stack_passes(stacks: dict[str, dict[str, Any]]) -> None:
    """`ci/dev-<release>.yaml` of each local chart is exactly what the dev stack passes (`make snapshots`)."""
    releases = [r for r in of_type(stacks["dev"], "helm_release").values() if "repository" not in r]
    assert {r["name"] for r in releases} >= {"ray-training", "gpu-networking", "kueue-queues", "nccl-test"}
    for release in releases:
        chart = release["chart"].rsplit("/", 1)[-1]
        path = REPO / "workloads/charts" / chart / "ci" / f"dev-{release['name']}.yaml"
        values = json.loads(release["values"][0])
        if os.environ.get("UPDATE_SNAPSHOTS") == "1":
            path.write_text(yaml.safe_dump(values, sort_keys=True))
        assert path.exists(), f"{path} is missing; run `make snapshots`"
        assert yaml.safe_load(path.read_text()) == values, f"{path.name} drifted from the stack; run `make snapshots`"


@needs_crds
@pytest.mark.parametrize("env", ["dev", "prod"])
def test_every_local_chart_release_renders_and_validates_strictly(env: str, stacks: dict[str, dict[str, Any]]) -> None:
    releases = [r["name"] for r in of_type(stacks[env], "helm_release").values() if "repository" not in r]
    assert len(releases) >= 9
    for release in releases:
        assert rendered(stacks[env], release), release


def test_dev_worker_group_is_derived_from_the_v6e_4x4_slice(ray_cluster: dict[str, Any]) -> None:
    group = ray_cluster["spec"]["workerGroupSpecs"][0]
    assert group["numOfHosts"] == 4
    assert group["groupName"] == "v6e-16"
    pod = group["template"]["spec"]
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": "4x4",
        "cloud.google.com/gke-nodepool": "train",
    }
    resources = pod["containers"][0]["resources"]
    assert resources["requests"]["google.com/tpu"] == "4"
    assert resources["limits"]["google.com/tpu"] == "4"
    assert resources["requests"] == resources["limits"]


def test_pods_mount_the_checkpoint_bucket_with_workload_identity(ray_cluster: dict[str, Any]) -> None:
    for template in (
        ray_cluster["spec"]["headGroupSpec"]["template"],
        ray_cluster["spec"]["workerGroupSpecs"][0]["template"],
    ):
        assert template["metadata"]["annotations"]["gke-gcsfuse/volumes"] == "true"
        assert template["metadata"]["labels"]["app.kubernetes.io/name"] == "kuberay", "TPU webhook selects on it"
        spec = template["spec"]
        assert spec["serviceAccountName"] == "ray-trainer"
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["checkpoints"]["csi"]["driver"] == "gcsfuse.csi.storage.gke.io"
        assert volumes["checkpoints"]["csi"]["volumeAttributes"]["bucketName"] == "acme-ml-platform-dev-checkpoints"
        assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
        mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
        assert mounts == {"checkpoints": "/data/checkpoints", "dshm": "/dev/shm"}


@needs_crds
def test_rendered_objects_validate_against_the_upstream_crds(ray_cluster: dict[str, Any]) -> None:
    validate(ray_cluster)


@needs_crds
@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda o: o["spec"]["workerGroupSpecs"][0].update(numOfHost=4), "'numOfHost' was unexpected"),
        (lambda o: o["spec"]["workerGroupSpecs"][0]["template"]["spec"].update(nodeselector={}), "'nodeselector'"),
        (lambda o: o["spec"]["workerGroupSpecs"][0].update(numOfHosts="4"), "is not of type 'integer'"),
    ],
)
def test_a_misspelled_or_mistyped_field_fails_validation(
    ray_cluster: dict[str, Any], mutate: Any, message: str
) -> None:
    obj = json.loads(json.dumps(ray_cluster))
    mutate(obj)
    with pytest.raises(ChartCheckError, match=re.escape(message)):
        validate(obj)


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("image",), "us-east5-docker.pkg.dev/p/r/trainer:latest", "image"),
        (("worker", "numOfHosts"), 0, "numOfHosts"),
        (("worker", "nodeSelector"), {}, "nodeSelector"),
        (("worker", "acceleratorResource"), "google.com/gpu", "acceleratorResource"),
        (("runAs",), {"uid": 0, "gid": 100}, "runAs"),
        (("runAs",), {"uid": 1000, "gid": "users"}, "gid"),
        (("runAs",), {"uid": 1000, "gid": 100, "fsGroup": 100}, "fsGroup"),
    ],
)
def test_values_schema_refuses_bad_values(
    stacks: dict[str, dict[str, Any]], path: tuple[str, ...], value: Any, message: str
) -> None:
    _, values = release_values(stacks["dev"], "ray-training")
    node = values
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(ChartCheckError, match=message):
        render("ray-training", values, name="ray-training", namespace="ml-training")


def test_ray_version_is_the_same_everywhere() -> None:
    pyproject = (REPO / "pyproject.toml").read_text()
    assert f'"ray[default,train]=={RAY_VERSION}"' in pyproject
    chart = yaml.safe_load((REPO / "workloads/charts/ray-training/Chart.yaml").read_text())
    assert chart["appVersion"] == RAY_VERSION
    dockerfile = (REPO / "workloads/trainer/Dockerfile").read_text()
    assert re.search(rf"^FROM rayproject/ray:{re.escape(RAY_VERSION)}-py312", dockerfile, re.M)


def test_core_objects_are_validated_strictly_against_kubernetes_schemas() -> None:
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "ray-trainer"}}
    validate(account)
    with pytest.raises(ChartCheckError, match=r"ServiceAccount/ray-trainer: .*'automountToken' was unexpected"):
        validate({**account, "automountToken": True})


@needs_crds
def test_gke_network_objects_validate_against_gkes_published_crds(stacks: dict[str, dict[str, Any]]) -> None:
    """GKE's Network and GKENetworkParamSet against GKE's own CRDs (gke-networking-api), not schemas we wrote."""
    objects = rendered(stacks["dev"], "gpu-networking")
    kinds = {o["kind"] for o in objects}
    assert {"Network", "GKENetworkParamSet"} <= kinds
    network = copy.deepcopy(next(o for o in objects if o["kind"] == "Network"))
    network["spec"]["parametersRef"]["nmae"] = network["spec"]["parametersRef"].pop("name")
    with pytest.raises(ChartCheckError, match="nmae"):
        validate(network)


def test_each_controllers_api_group_is_the_group_of_its_pinned_crds() -> None:
    """The group the stack orders releases by (infra/catalogue/controllers.py) is the one the controller's own
    CRDs define (the pinned upstream files), so a release of that group cannot be applied before them."""
    from infra.catalogue.controllers import CONTROLLERS
    from infra.charts import crds

    source = crds.locate()
    pins = yaml.safe_load(crds.PINS.read_text())["files"]
    for name, controller in CONTROLLERS.items():
        groups = {
            yaml.safe_load((source / file).read_text())["spec"]["group"]
            for file, pin in pins.items()
            if pin["source"] == name
        }
        assert groups == {controller.api_group}, name


# --- Who may write the Cloud Storage FUSE volumes ------------------------------------------

FUSE_DRIVER = "gcsfuse.csi.storage.gke.io"
# The releases whose pods write to a bucket through FUSE: checkpoints (Ray, the GPU trainer), vLLM's XLA cache.
WRITERS = {"ray-training", "gpu-training", "serve-llama70b-vllm", "serve-llama70b-vllm-mh"}


def _registries(stack: dict[str, Any]) -> set[str]:
    repos = of_type(stack, "google_artifact_registry_repository").values()
    return {f"{r['location']}-docker.pkg.dev/{r['project']}/{r['repository_id']}" for r in repos}


def _fuse_writers(stack: dict[str, Any]) -> list[tuple[str, str, dict[str, Any], dict[str, Any], dict[str, Any]]]:
    """(release, where, pod spec, container, FUSE volume) of each container mounting a FUSE volume read-write."""
    found = []
    for release in (r for r in of_type(stack, "helm_release").values() if "repository" not in r):
        for obj in rendered(stack, release["name"]):
            for path, template in pod_templates(obj):
                spec = template["spec"]
                fuse = {
                    v["name"]: v for v in spec.get("volumes") or [] if (v.get("csi") or {}).get("driver") == FUSE_DRIVER
                }
                for cpath, c in containers(spec):
                    for mount in c.get("volumeMounts") or []:
                        volume = fuse.get(mount["name"])
                        if volume and not mount.get("readOnly") and not volume["csi"].get("readOnly"):
                            found.append((release["name"], f"{where(obj)}: {path}.spec.{cpath}", spec, c, volume))
    return found


@needs_crds
@pytest.mark.parametrize("env", ["dev", "prod"])
def test_should_give_a_writable_fuse_mount_to_the_images_user_when_a_container_writes_to_it(
    env: str, stacks: dict[str, dict[str, Any]]
) -> None:
    """The mount is root's 0755/0644 unless told: every container that writes through FUSE runs as its image's
    user, the pod's fsGroup is that user's group (the driver then mounts gid=fsGroup, 664, 775), and the mount
    options give uid, gid and group-writable modes as well, keeping the options it had."""
    writers = _fuse_writers(stacks[env])
    shipped = {r["name"] for r in of_type(stacks[env], "helm_release").values()}
    assert {release for release, *_ in writers} == WRITERS & shipped
    assert {"ray-training", "serve-llama70b-vllm"} <= {release for release, *_ in writers}
    users = image_users()
    for _release, at, spec, c, volume in writers:
        user = users[image_name(c["image"], _registries(stacks[env])) or ""]
        assert (c["securityContext"]["runAsUser"], c["securityContext"]["runAsGroup"]) == (user.uid, user.gid), at
        assert spec["securityContext"]["fsGroup"] == user.gid, at
        options = volume["csi"]["volumeAttributes"]["mountOptions"].split(",")
        assert options[0] == "implicit-dirs", at
        assert options[-4:] == [f"uid={user.uid}", f"gid={user.gid}", "file-mode=664", "dir-mode=775"], at


def test_should_run_as_the_platform_images_user_when_the_stack_passes_no_user() -> None:
    """The charts' default runAs is the USER their images' Dockerfiles end with (1000:100)."""
    users = image_users()
    for chart, image, keys in (
        ("ray-training", "trainer", ("runAs",)),
        ("vllm-tpu", "vllm-tpu", ("runAs",)),
        ("gpu-jobset", "trainer-gpu", ("training", "runAs")),
    ):
        node = yaml.safe_load((REPO / "workloads/charts" / chart / "values.yaml").read_text())
        for key in keys:
            node = node[key]
        assert (node["uid"], node["gid"]) == (users[image].uid, users[image].gid), chart


def test_should_leave_the_nccl_test_as_its_image_runs_when_it_mounts_no_bucket(
    stacks: dict[str, dict[str, Any]],
) -> None:
    """The NCCL test runs NVIDIA's image as that image says; only the training workload gets a user and fsGroup."""
    jobset = next(o for o in rendered(stacks["dev"], "nccl-test") if o["kind"] == "JobSet")
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert "securityContext" not in pod
    assert all("securityContext" not in c for c in pod["containers"])
    assert not [v for v in pod["volumes"] if "csi" in v]


def test_should_keep_the_receive_data_path_daemon_root_when_the_trainer_runs_as_its_user(
    stacks: dict[str, dict[str, Any]],
) -> None:
    """The user is set on the training container, not the pod: the TCPXO daemon (a native sidecar) keeps its own."""
    if "gpu-training" not in {r["name"] for r in of_type(stacks["dev"], "helm_release").values()}:
        pytest.skip("no GPU training release in dev")
    jobset = next(o for o in rendered(stacks["dev"], "gpu-training") if o["kind"] == "JobSet")
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert set(pod["securityContext"]) == {"fsGroup"}
    for daemon in pod.get("initContainers") or []:
        assert "runAsUser" not in (daemon.get("securityContext") or {}), daemon["name"]
