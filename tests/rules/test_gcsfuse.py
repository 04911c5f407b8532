"""The rules of `infra/rules/gcsfuse.py`, each failing on its example: a change to one of dev's rendered releases
(the dev stack as it ships passes them all: tests/rules/test_framework.py)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.rules import RULES
from infra.rules.manifest_subject import ReleaseContext
from tests.helpers import REPO
from tests.rules.examples import (
    ManifestExample,
    assert_every_rule_has_an_example,
    fails_on_its_example,
    ray_worker_template,
    vllm_container,
    vllm_pod_template,
)


def _fuse_volume(pod_spec: dict[str, Any]) -> dict[str, Any]:
    return next(v for v in pod_spec["volumes"] if "csi" in v)


def _old_ray_mount(objs: list[dict[str, Any]]) -> None:
    attributes = _fuse_volume(ray_worker_template(objs)["spec"])["csi"]["volumeAttributes"]
    attributes["mountOptions"] = "implicit-dirs,file-cache:enable-parallel-downloads:true"


def _vllm_on_gce_pool(objs: list[dict[str, Any]]) -> None:
    vllm_pod_template(objs)["spec"]["nodeSelector"]["cloud.google.com/gke-nodepool"] = "serve"


def _forbidden_option(objs: list[dict[str, Any]]) -> None:
    attributes = _fuse_volume(vllm_pod_template(objs)["spec"])["csi"]["volumeAttributes"]
    attributes["mountOptions"] += ",temp-dir=/tmp/x"


def _fuse_as_before(objs: list[dict[str, Any]]) -> None:
    """The vLLM pod as it was before no user, no fsGroup, the XLA cache mounted `implicit-dirs` only."""
    pod = vllm_pod_template(objs)["spec"]
    pod.pop("securityContext")
    vllm_container(objs).pop("securityContext")
    attributes = _fuse_volume(pod)["csi"]["volumeAttributes"]
    attributes["mountOptions"] = attributes["mountOptions"].split(",uid=")[0]


VLLM_AT = "LeaderWorkerSet/serve-llama70b-vllm: spec.leaderWorkerTemplate.workerTemplate.spec.containers[0]"


def _vllm_fuse(
    pod_sc: dict[str, Any] | None, c_sc: dict[str, Any] | None, options: str = "implicit-dirs"
) -> Callable[[list[dict[str, Any]]], None]:
    """The vLLM pod with this pod securityContext, container securityContext and XLA cache mountOptions."""

    def mutate(objs: list[dict[str, Any]]) -> None:
        pod, container = vllm_pod_template(objs)["spec"], vllm_container(objs)
        for holder, sc in ((pod, pod_sc), (container, c_sc)):
            holder.pop("securityContext", None)
            if sc is not None:
                holder["securityContext"] = sc
        _fuse_volume(pod)["csi"]["volumeAttributes"]["mountOptions"] = f"{options},only-dir=xla-cache/x"

    return mutate


# The chart edit the plan must refuse: the XLA cache mount and the pod as they were before the fix, while the
# container still says runAsUser 1000.
VLLM_WITHOUT_FUSE_OWNER = {
    "    fsGroup: {{ $v.runAs.gid }}\n": "",
    ",uid={{ $v.runAs.uid }},gid={{ $v.runAs.gid }},file-mode=664,dir-mode=775": "",
}


MANIFEST: dict[str, ManifestExample] = {
    # Before the fix the Ray and vLLM mounts asked for parallel downloads without a file cache.
    "gcsfuse.parallel-downloads-need-file-cache": ("ray-training", _old_ray_mount, "parallel downloads need a file"),
    "gcsfuse.pod-annotation": (
        "serve-llama70b-vllm",
        lambda o: vllm_pod_template(o)["metadata"]["annotations"].pop("gke-gcsfuse/volumes"),
        'must be "true"',
    ),
    "gcsfuse.sidecar-limits": (
        "ray-training",
        lambda o: ray_worker_template(o)["metadata"]["annotations"].pop("gke-gcsfuse/memory-limit"),
        "set gke-gcsfuse/memory-limit",
    ),
    "gcsfuse.needs-gke-metadata-node": ("serve-llama70b-vllm", _vllm_on_gce_pool, "pools serve use GCE_METADATA"),
    "gcsfuse.allowed-mount-options-and-attributes": ("serve-llama70b-vllm", _forbidden_option, "set by the driver"),
    # Before the fix: vLLM (uid 1000) could not create its XLA cache folder on a root-owned 0755 mount.
    "gcsfuse.writable-by-the-container-user": (
        "serve-llama70b-vllm",
        _fuse_as_before,
        "uid 1000, groups [100] (image vllm-tpu (workloads/serving/Dockerfile.vllm-tpu: USER 1000:100)) cannot "
        "write to FUSE volume 'xla-cache'",
    ),
}


@pytest.mark.parametrize(
    ("mutate", "refused"),
    [
        # Each way the driver documents is enough on its own: fsGroup (delegated: gid, 664, 775) ...
        (_vllm_fuse({"fsGroup": 100}, None), None),
        # ... or uid with the image's user (owner bits of the default 755 / 644 let the owner write) ...
        (_vllm_fuse(None, None, "implicit-dirs,uid=1000"), None),
        # ... or the user's group with group-writable modes.
        (_vllm_fuse(None, {"runAsGroup": 100}, "implicit-dirs,gid=100,file-mode=664,dir-mode=775"), None),
        (_vllm_fuse(None, {"runAsUser": 0}), None),
        # The container's runAsUser wins over the pod's: the image's user, in the image's group 100.
        (
            _vllm_fuse({"runAsUser": 2000}, {"runAsUser": 1000}, "implicit-dirs,gid=100,file-mode=664,dir-mode=775"),
            None,
        ),
        # The image's user (catalogue: its Dockerfile's USER 1000:100) on the default root-owned mount.
        (_vllm_fuse(None, None), "uid 1000, groups [100] (image vllm-tpu (workloads/serving/Dockerfile.vllm-tpu"),
        # runAsUser 1000 said outright, without the mount options or fsGroup.
        (_vllm_fuse(None, {"runAsUser": 1000}), "uid 1000, groups [100] (container securityContext.runAsUser)"),
        # The group without group-writable modes: gcsfuse's 755 / 644 give the group r-x.
        (_vllm_fuse(None, None, "implicit-dirs,gid=100"), "mounted uid 0, gid 100, dir-mode 755, file-mode 644"),
        # The volume's own dir-mode overrides the fsGroup delegation's 775 (the driver joins them in that order).
        (_vllm_fuse({"fsGroup": 100}, None, "implicit-dirs,dir-mode=755"), "gid 100, dir-mode 755, file-mode 664"),
        # Another user than the mount's owner and group.
        (_vllm_fuse({"runAsUser": 2000}, None, "implicit-dirs,uid=1000"), "uid 2000 (pod securityContext.runAsUser)"),
    ],
)
def test_fuse_writes_need_the_mount_given_to_the_containers_user(
    mutate: Callable[[list[dict[str, Any]]], None],
    refused: str | None,
    stacks: dict[str, dict[str, Any]],
    releases: dict[str, list[dict[str, Any]]],
) -> None:
    objects = copy.deepcopy(releases["serve-llama70b-vllm"])
    ctx = ReleaseContext(name="serve-llama70b-vllm", namespace="x", stack=stacks["dev"], stack_objects=releases)
    mutate(objects)
    found = RULES["gcsfuse.writable-by-the-container-user"].run(objects, ctx)
    if refused is None:
        assert found == [], [v.line() for v in found]
        return
    [violation] = found
    assert violation.field == f"{VLLM_AT}.volumeMounts[1]"
    assert violation.value == "xla-cache"
    assert refused in violation.message and "cannot write to FUSE volume 'xla-cache'" in violation.message


def test_fuse_writers_of_unknown_images_are_taken_as_not_root(
    stacks: dict[str, dict[str, Any]], releases: dict[str, list[dict[str, Any]]]
) -> None:
    """An image of another publisher: its user is unknown, and unknown is not root (only runAsUser 0 is)."""
    objects = copy.deepcopy(releases["serve-llama70b-vllm"])
    _vllm_fuse(None, None)(objects)
    vllm_container(objects)["image"] = "docker.io/vllm/vllm-tpu:v0.11.1"
    ctx = ReleaseContext(name="serve-llama70b-vllm", namespace="x", stack=stacks["dev"], stack_objects=releases)
    [violation] = RULES["gcsfuse.writable-by-the-container-user"].run(objects, ctx)
    assert "a user that is not root (image 'docker.io/vllm/vllm-tpu:v0.11.1': its user is unknown" in violation.message
    # Read-only mounts need nothing: the others' r-x of 755 / 644 reads.
    next(m for m in vllm_container(objects)["volumeMounts"] if m["name"] == "xla-cache")["readOnly"] = True
    assert RULES["gcsfuse.writable-by-the-container-user"].run(objects, ctx) == []


def test_image_users_are_read_from_the_dockerfiles_stage_by_stage() -> None:
    from infra.catalogue.images import dockerfile_user, image_users

    text = (
        "FROM python:3.12 AS base\nUSER 0\nUSER 1000:100\nFROM base AS converter\nRUN true\nFROM base AS other\nUSER 7"
    )
    assert dockerfile_user(text, "converter") == "1000:100"  # inherited from its stage's base
    assert dockerfile_user(text) == "7"
    assert dockerfile_user("FROM python:3.12\nRUN true") is None
    users = image_users()
    assert set(users) == set(yaml.safe_load((REPO / "images" / "images.yaml").read_text()))
    assert {(u.uid, u.gid) for u in users.values()} == {(1000, 100)}
    assert users["checkpoint-converter"].source == "workloads/trainer/Dockerfile (stage converter): USER 1000:100"


@pytest.mark.parametrize(
    ("edits", "refused"),
    [
        (VLLM_WITHOUT_FUSE_OWNER, True),
        # Either half alone still lets uid 1000 write: fsGroup (delegated) or the mount options.
        (dict(list(VLLM_WITHOUT_FUSE_OWNER.items())[:1]), False),
        (dict(list(VLLM_WITHOUT_FUSE_OWNER.items())[1:]), False),
    ],
    ids=["without-fsgroup-and-mount-options", "without-fsgroup", "without-mount-options"],
)
def test_make_plan_refuses_a_vllm_chart_whose_xla_cache_its_user_cannot_write(
    edits: dict[str, str],
    refused: bool,
    synth_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`make plan`'s rules step (python -m scripts.rules) on the shipped stacks, with the vllm-tpu chart edited."""
    import shutil

    from infra.charts import check
    from scripts.rules import main

    charts = tmp_path / "charts"
    for chart in check.CHARTS.glob("*/Chart.yaml"):
        shutil.copytree(chart.parent, charts / chart.parent.name)
    helpers = charts / "vllm-tpu" / "templates" / "_helpers.tpl"
    text = helpers.read_text()
    for old, new in edits.items():
        assert old in text
        text = text.replace(old, new)
    helpers.write_text(text)
    assert "runAsUser: {{ $v.runAs.uid }}" in text
    monkeypatch.setattr(check, "CHARTS", charts)
    stacks = tmp_path / "out" / "stacks"
    shutil.copytree(synth_dir / "stacks", stacks)

    code = main([str(stacks)])
    errors = [line for line in capsys.readouterr().err.splitlines() if "gcsfuse.writable-by-the-container-user" in line]
    if not refused:
        assert errors == []
        return
    assert code == 1
    # Both environments, both vLLM releases (the multi-host group's leader and worker pods).
    assert len(errors) == 6, errors
    [line] = [e for e in errors if "platform-dev/cdk.tf.json helm_release serve-llama70b-vllm)" in e]
    assert "dev.yaml: serving.llama70b-vllm (synthesized as " in line
    assert (
        f"{VLLM_AT}.volumeMounts[1]: 'xla-cache': uid 1000, groups [100] (container securityContext.runAsUser)" in line
    )
    assert "mounted uid 0, gid 0, dir-mode 755, file-mode 644" in line
    assert "source: GoogleCloudPlatform/gcs-fuse-csi-driver (v1.24.0) docs/authentication.md" in line


@pytest.mark.parametrize("rule_id", sorted(MANIFEST))
def test_each_rule_fails_on_its_example(rule_id: str, request: pytest.FixtureRequest) -> None:
    fails_on_its_example(rule_id, MANIFEST[rule_id], request)


def test_every_rule_of_the_module_has_a_failing_example() -> None:
    assert_every_rule_has_an_example("gcsfuse", MANIFEST)
