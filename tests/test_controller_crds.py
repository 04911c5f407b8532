"""The controllers' CRDs: pinned per version at the release tag, installed and upgraded with the release by the
post-renderer, kept on uninstall and when an upgrade no longer renders them.

Nothing here reaches a cluster. What Helm does is modelled from its documentation
(https://helm.sh/docs/chart_best_practices/custom_resource_definitions/: crds/ is applied on install only, never
upgraded or deleted; https://helm.sh/docs/howto/charts_tips_and_tricks/#tell-helm-not-to-uninstall-a-resource:
`helm.sh/resource-policy: keep`; helm/helm#8163: an upgrade deletes what the old manifest had and the new one
lacks, unless the live object is marked keep). The charts are rendered by Helm's own engine (helm_python) from
the controllers' sources at their tags, as the Go module proxy serves them (UNSERVED below says which version it
does not, and how those are tested).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.catalogue.controller_crds import CRD_SETS, KEEP_ANNOTATION, REPOSITORIES, crd_changes, crd_set
from infra.catalogue.controllers import CONTROLLERS
from infra.cdk.layout import stack_file
from infra.delivery.crd_postrender import PostRenderError, module_source, render
from tests.helpers import REPO, of_type

MIRRORS = Path(os.environ.get("PLATFORM_UPSTREAM_MIRRORS", "/work/.mirror"))
# The Go module proxy serves each controller's source at its tag (the local cluster's builds fetch the same
# modules), except Kueue's 0.17.3: the tests of that version read a copy of the repository
# (PLATFORM_UPSTREAM_MIRRORS, bare git directories as `fetch` leaves them) and carry the marker `upstream`, which
# `make test` deselects and `make test-upstream` runs (failing where no copy is).
UNSERVED = {("kueue", "0.17.3")}


def _upstream(controller: str, version: str) -> Any:
    """The marks of a test of `controller` at `version`: `upstream` where the module proxy does not serve it."""
    return [pytest.mark.upstream] if (controller, version) in UNSERVED else []


@cache
def _tree(controller: str, version: str) -> Path:
    """The controller's source tree at v<version>: the Go module's, else the copy's at the tag."""
    if (controller, version) not in UNSERVED:
        return module_source(controller, version)
    repo = MIRRORS / REPOSITORIES[controller].replace("/", "+") / "repo"
    if not (repo / "HEAD").exists():
        pytest.fail(f"no copy of {REPOSITORIES[controller]} under {MIRRORS} (PLATFORM_UPSTREAM_MIRRORS)")
    out = Path(tempfile.mkdtemp(prefix=f"platform-{controller}-{version}-"))
    archive = subprocess.run(["git", "-C", str(repo), "archive", f"v{version}"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    return out


# libyaml's loader: the CRDs these tests read again and again are megabytes of YAML (the same documents).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _chart(controller: str, version: str) -> Path:
    """The chart directory at the version's tag."""
    return _tree(controller, version) / "charts" / controller


def _rendered(chart: Path, name: str, namespace: str) -> str:
    """The release's manifests as Helm hands them to a post-renderer: every template, crds/ not included."""
    import helm_python as helm

    manifests = helm.Chart.load(chart).render({}, name=name, namespace=namespace, is_install=True)
    return "".join(
        f"---\n# Source: {path}\n{text}\n"
        for path, text in sorted(manifests.items())
        if path.endswith((".yaml", ".yml")) and text.strip()
    )


def _pinned_cache(controller: str, version: str, tmp: Path) -> Path:
    """A cache directory holding the version's pinned crds/ files, as `fetch` leaves them (from the repository)."""
    crds = crd_set(controller, version)
    assert crds is not None
    root = tmp / "cache"
    target = root / crds.directory
    target.mkdir(parents=True, exist_ok=True)
    for crd in crds.injected:
        (target / crd.file_name).write_bytes((_tree(controller, version) / crd.path).read_bytes())
    return root


def _objects(manifests: str) -> dict[tuple[str, str], dict[str, Any]]:
    docs = [d for d in yaml.load_all(manifests, Loader=_LOADER) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def _crds(manifests: str) -> dict[str, dict[str, Any]]:
    return {name: d for (kind, name), d in _objects(manifests).items() if kind == "CustomResourceDefinition"}


def _kept(doc: dict[str, Any]) -> bool:
    return (doc["metadata"].get("annotations") or {}).get(KEEP_ANNOTATION[0]) == KEEP_ANNOTATION[1]


class Helm:
    """The CRDs in a cluster as Helm leaves them, by its documented rules (see the module's docstring)."""

    def __init__(self) -> None:
        self.crds: dict[str, dict[str, Any]] = {}
        self.manifest = ""

    def install(self, manifests: str, crds_dir: list[dict[str, Any]], *, skip_crds: bool) -> None:
        if not skip_crds:
            for doc in crds_dir:  # created if absent, never touched again
                self.crds.setdefault(doc["metadata"]["name"], doc)
        self.crds.update(_crds(manifests))
        self.manifest = manifests

    def upgrade(self, manifests: str) -> None:
        old, new = _crds(self.manifest), _crds(manifests)
        for name in old.keys() - new.keys():
            if name in self.crds and not _kept(self.crds[name]):
                del self.crds[name]  # and with it every object of its kind
        self.crds.update(new)
        self.manifest = manifests

    def uninstall(self) -> None:
        for name, doc in _crds(self.manifest).items():
            if not _kept(doc):
                self.crds.pop(name, None)
        self.manifest = ""


def _crds_dir(chart: Path) -> list[dict[str, Any]]:
    return [yaml.load(p.read_text(), Loader=_LOADER) for p in sorted((chart / "crds").glob("*.yaml"))]


# --- the pins --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", [pytest.param(k, marks=_upstream(*k)) for k in sorted(CRD_SETS)])
def test_each_pinned_crd_set_is_the_charts_at_its_tag(key: tuple[str, str]) -> None:
    crds = CRD_SETS[key]
    tree = _tree(*key)
    chart = tree / "charts" / crds.controller
    at_tag = {
        str(p.relative_to(tree))
        for p in [*chart.glob("crds/**/*"), *chart.glob("templates/crd*"), *chart.glob("templates/crd*/**/*")]
        if p.is_file()
    }
    assert {f.path for f in crds.files} == at_tag, "every CRD file of the chart at the tag, and no other"
    for crd in crds.files:
        text = (tree / crd.path).read_bytes()
        assert hashlib.sha256(text).hexdigest() == crd.sha256, crd.path
        assert f"\n  name: {crd.name}\n".encode() in text, crd.path
    assert crds.url(crds.files[0]).startswith(f"https://raw.githubusercontent.com/{REPOSITORIES[crds.controller]}/v")


def test_every_version_an_environment_may_install_has_its_crds_pinned() -> None:
    for name, controller in CONTROLLERS.items():
        for version in controller.versions:
            crds = crd_set(name, version)
            assert crds is not None, f"{name} {version}"
            assert all(f.name.endswith(f".{controller.api_group}") for f in crds.files)


def test_a_bump_says_what_it_does_to_the_crds() -> None:
    (line,) = crd_changes("lws", "0.7.0", "0.8.0")
    assert line.startswith("leaderworkersets.leaderworkerset.x-k8s.io: moves from templates/ to crds/")
    assert "helm/helm#8163" in line and "its file changes (sha256 507e167ae5c2 -> 988424a32228)" in line
    assert crd_changes("lws", "0.7.0", "0.7.0") == []
    assert crd_changes("kueue", "0.17.3", "0.18.0") == [
        "kueue 0.18.0: no pinned CRD set (infra/catalogue/controller_crds.py)"
    ]


# --- the post-renderer on synthetic manifests (always run) ------------------------------------------------------

CRD = """apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {name}
spec:
  group: example
"""
DEPLOYMENT = (
    "# Source: lws/templates/manager.yaml\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: m  # as is\n"
)


def test_the_post_renderer_keeps_templated_crds_and_passes_the_rest_byte_for_byte() -> None:
    stream = f"---\n{DEPLOYMENT}---\n# Source: lws/templates/crds/x.yaml\n" + CRD.format(
        name="leaderworkersets.leaderworkerset.x-k8s.io"
    )
    out = render(stream, "lws", "0.7.0")
    assert DEPLOYMENT in out
    crd = _crds(out)["leaderworkersets.leaderworkerset.x-k8s.io"]
    assert _kept(crd)


AGGREGATE = """# Source: kueue/templates/rbac/batch_user_role.yaml
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: kueue-batch-user-role
aggregationRule:
  clusterRoleSelectors:
  - matchLabels:
      rbac.kueue.x-k8s.io/batch-user: "true"
"""
MEMBER = """# Source: kueue/templates/rbac/job_editor_role.yaml
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: kueue-job-editor-role
  labels:
    rbac.kueue.x-k8s.io/batch-user: "true"
rules: []
"""


def test_the_post_renderer_keeps_an_aggregated_cluster_role_which_an_uninstall_cannot_delete() -> None:
    """kube-controller-manager's aggregation controller applies an aggregate's rules when a member goes, and an
    apply creates: deleted with its members by `helm uninstall --wait`, Kueue's batch-user role came back and the
    uninstall waited 15 minutes for it (make destroy-local). Kept, Helm leaves it; its members still go."""
    crd = "---\n" + CRD.format(name="leaderworkersets.leaderworkerset.x-k8s.io")
    out = render(f"---\n{AGGREGATE}---\n{MEMBER}{crd}", "lws", "0.7.0")
    aggregate = _objects(out)[("ClusterRole", "kueue-batch-user-role")]
    assert _kept(aggregate) and aggregate["aggregationRule"]["clusterRoleSelectors"]
    assert MEMBER in out, "a member role passes byte for byte (Helm deletes it)"


def test_the_post_renderer_refuses_what_is_not_pinned(tmp_path: Path) -> None:
    unpinned = "---\n" + CRD.format(name="widgets.leaderworkerset.x-k8s.io")
    with pytest.raises(PostRenderError, match=r"the CRD widgets\.leaderworkerset\.x-k8s\.io, which is not pinned"):
        render(unpinned, "lws", "0.7.0")
    with pytest.raises(PostRenderError, match="did not render the pinned CRDs leaderworkersets"):
        render(f"---\n{DEPLOYMENT}", "lws", "0.7.0")
    with pytest.raises(PostRenderError, match="no pinned CRD set"):
        render(f"---\n{DEPLOYMENT}", "lws", "0.6.0")
    with pytest.raises(PostRenderError, match=r"jobset\.x-k8s\.io_jobsets\.yaml: missing \(python -m infra"):
        render(f"---\n{DEPLOYMENT}", "jobset", "0.12.0", tmp_path, fetch_missing=False)
    altered = tmp_path / "jobset-0.12.0"
    altered.mkdir()
    (altered / "jobset.x-k8s.io_jobsets.yaml").write_text(CRD.format(name="jobsets.jobset.x-k8s.io"))
    with pytest.raises(PostRenderError, match="is not the pinned d022b876"):
        render(f"---\n{DEPLOYMENT}", "jobset", "0.12.0", tmp_path)


def test_a_missing_file_is_fetched_at_the_apply_and_a_failed_fetch_stops_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import urllib.request

    asked: list[str] = []

    def offline(url: str, timeout: float) -> Any:
        asked.append(url)
        raise OSError("offline")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    # The failure names the URL, and where a copy goes without network access.
    with pytest.raises(
        PostRenderError,
        match=rf"missing, and fetching it failed: https://\S+: offline; without network access, copy the pinned "
        rf"files .* into {tmp_path}, or set PLATFORM_CONTROLLER_CRDS=.* \(under jobset-0.12.0/\)",
    ):
        render(f"---\n{DEPLOYMENT}", "jobset", "0.12.0", tmp_path)
    assert asked == [
        "https://raw.githubusercontent.com/kubernetes-sigs/jobset/v0.12.0/charts/jobset/crds/jobset.x-k8s.io_jobsets.yaml"
    ]
    assert not (tmp_path / "jobset-0.12.0").exists(), "nothing half-fetched is left"


def test_helm_runs_the_post_renderer_through_the_repositorys_script() -> None:
    stream = "---\n" + CRD.format(name="leaderworkersets.leaderworkerset.x-k8s.io")
    done = subprocess.run(
        [str(REPO / "scripts" / "crd-postrender"), "render", "lws", "0.7.0"],
        input=stream,
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    assert "helm.sh/resource-policy: keep" in done.stdout
    refused = subprocess.run(
        [str(REPO / "scripts" / "crd-postrender"), "render", "lws", "0.6.0"],
        input=stream,
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 1 and "lws 0.6.0: no pinned CRD set" in refused.stderr


# --- the stack ---------------------------------------------------------------------------------------------------


def test_every_controller_release_runs_the_post_renderer_and_skips_the_charts_crds(
    stacks: dict[str, dict[str, Any]],
) -> None:
    for env, stack in stacks.items():
        for release in of_type(stack, "helm_release").values():
            if release["name"] not in CONTROLLERS:
                continue
            assert release["skip_crds"] is True, (env, release["name"])
            assert release["postrender"] == {
                "binary_path": "../../../scripts/crd-postrender",
                "args": ["render", release["name"], release["version"]],
            }
            # Terraform runs in cdktf.out/stacks/<stack>: the path reaches the repository's script.
            assert (REPO / "cdktf.out" / "stacks" / "x" / release["postrender"]["binary_path"]).resolve() == (
                REPO / "scripts" / "crd-postrender"
            )


# --- real charts, rendered by Helm's engine at their tags --------------------------------------------------------


def test_an_lws_bump_without_the_post_renderer_deletes_its_crd_and_with_it_keeps_and_upgrades_it(
    tmp_path: Path,
) -> None:
    old, new = _chart("lws", "0.7.0"), _chart("lws", "0.8.0")
    name = "leaderworkersets.leaderworkerset.x-k8s.io"
    # As the charts stand: 0.7.0 renders the CRD as a template; 0.8.0 keeps it in crds/, which an upgrade ignores.
    plain = Helm()
    plain.install(_rendered(old, "lws", "lws-system"), _crds_dir(old), skip_crds=False)
    assert name in plain.crds
    plain.upgrade(_rendered(new, "lws", "lws-system"))
    assert name not in plain.crds, "Helm deletes the CRD, and every LeaderWorkerSet with it"
    # Through the platform's post-renderer.
    cache = _pinned_cache("lws", "0.8.0", tmp_path)
    platform = Helm()
    first = render(_rendered(old, "lws", "lws-system"), "lws", "0.7.0", cache)
    platform.install(first, _crds_dir(old), skip_crds=True)
    assert _kept(platform.crds[name])
    second = render(_rendered(new, "lws", "lws-system"), "lws", "0.8.0", cache)
    platform.upgrade(second)
    pinned_path = CRD_SETS[("lws", "0.8.0")].files[0].path
    pinned = yaml.load((_tree("lws", "0.8.0") / pinned_path).read_bytes(), Loader=_LOADER)
    assert platform.crds[name]["spec"] == pinned["spec"], "upgraded to 0.8.0's pinned schema"
    assert _kept(platform.crds[name])
    platform.uninstall()
    assert name in platform.crds, "kept on uninstall"
    # Everything but the CRD passes through unchanged.
    rendered = _objects(_rendered(new, "lws", "lws-system"))
    through = _objects(second)
    assert {k: v for k, v in through.items() if k[0] != "CustomResourceDefinition"} == rendered


def test_jobsets_crd_is_upgraded_with_the_release_not_left_at_its_first_install(tmp_path: Path) -> None:
    chart = _chart("jobset", "0.12.0")
    name = "jobsets.jobset.x-k8s.io"
    plain = _rendered(chart, "jobset", "jobset-system")
    assert name not in _crds(plain), "crds/ is not part of the release: Helm never upgrades it"
    through = render(plain, "jobset", "0.12.0", _pinned_cache("jobset", "0.12.0", tmp_path))
    crd = _crds(through)[name]
    assert _kept(crd) and crd["spec"] == _crds_dir(chart)[0]["spec"]
    helm = Helm()
    helm.install(through, _crds_dir(chart), skip_crds=True)
    helm.uninstall()
    assert name in helm.crds


@pytest.mark.upstream
def test_kueues_templated_crds_are_kept_on_uninstall() -> None:
    chart = _chart("kueue", "0.17.3")
    plain = _rendered(chart, "kueue", "kueue-system")
    pinned = {f.name for f in CRD_SETS[("kueue", "0.17.3")].files}
    assert set(_crds(plain)) == pinned
    before = Helm()
    before.install(plain, [], skip_crds=False)
    before.uninstall()
    assert before.crds == {}, "as the chart stands, uninstalling Kueue deletes every queue and workload"
    through = render(plain, "kueue", "0.17.3")
    after = Helm()
    after.install(through, [], skip_crds=True)
    after.uninstall()
    assert set(after.crds) == pinned
    webhook = _crds(through)["workloads.kueue.x-k8s.io"]["spec"]["conversion"]["webhook"]["clientConfig"]["service"]
    assert webhook["namespace"] == "kueue-system", "rendered by Helm with the release, not replaced"


def test_the_post_renderer_runs_as_a_module(tmp_path: Path) -> None:
    stream = "---\n" + CRD.format(name="leaderworkersets.leaderworkerset.x-k8s.io")
    done = subprocess.run(
        [sys.executable, "-m", "infra.delivery.crd_postrender", "render", "lws"],
        input=stream,
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 2 and "give a version after each controller" in done.stderr


# --- the plan gate -------------------------------------------------------------------------------------------------


def _bumped(synth_dir: Path, tmp_path: Path, controller: str, version: str) -> tuple[Path, str]:
    """A copy of the synthesized stacks with dev's `controller` release at `version`; its address."""
    import json
    import shutil

    current = tmp_path / "current"
    shutil.copytree(synth_dir / "stacks", current / "stacks")
    path = stack_file(current, "platform-dev")
    stack = json.loads(path.read_text())
    (key,) = (k for k, r in of_type(stack, "helm_release").items() if r["name"] == controller)
    release = stack["resource"]["helm_release"][key]
    release["version"] = version
    release["postrender"]["args"][-1] = version
    path.write_text(json.dumps(stack))
    return current, f"helm_release.{key}"


def test_a_controller_bump_that_changes_a_crd_blocks_until_confirmed(synth_dir: Path, tmp_path: Path) -> None:
    current, address = _bumped(synth_dir, tmp_path, "lws", "0.8.0")
    command = [sys.executable, "-m", "scripts.review", "--outdir", str(current), "--base", str(synth_dir)]
    env = {k: v for k, v in os.environ.items() if k != "CONFIRM_CHANGE"}
    blocked = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=env)
    assert blocked.returncode == 3, blocked.stderr
    blocking = f"BLOCKING: update {address} (platform-dev): capacity or work lost: controller lws 0.7.0 -> 0.8.0"
    assert f"{blocking} changes the CRDs of " in blocked.stderr
    assert "leaderworkersets.leaderworkerset.x-k8s.io: moves from templates/ to crds/" in blocked.stderr
    assert f"confirm with CONFIRM_CHANGE={address}" in blocked.stderr
    review = (current / "review" / "dev.md").read_text()
    assert f"`CONFIRM_CHANGE={address}` for your own run" in review and '`version`: "0.7.0" \u2192 "0.8.0"' in review
    confirmed = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, env={**env, "CONFIRM_CHANGE": address}
    )
    assert confirmed.returncode == 0, confirmed.stderr
    assert f"confirmed: update {address} (platform-dev)" in confirmed.stderr


def test_a_bump_to_a_version_without_pinned_crds_blocks_and_one_of_the_same_crds_does_not() -> None:
    from infra.review import gate

    lws = {"name": "lws", "repository": CONTROLLERS["lws"].repository, "version": "0.7.0"}
    why, confirmable, _ = gate("helm_release", "update", ["version"], lws, {**lws, "version": "0.9.0"})
    assert "lws 0.9.0: no pinned CRD set" in why and confirmable
    assert gate("helm_release", "update", ["version"], lws, lws).why == ""
    chart = {"name": "serve-canary", "chart": "../../../workloads/charts/canary-server", "version": "0.1.0"}
    assert gate("helm_release", "update", ["version"], chart, {**chart, "version": "0.2.0"}).why == ""


def test_a_real_plans_controller_bump_is_gated_too() -> None:
    from infra.review import review_plan

    before = {"name": "lws", "repository": CONTROLLERS["lws"].repository, "version": "0.7.0", "skip_crds": True}
    entry = {
        "address": "helm_release.lws_release_1",
        "type": "helm_release",
        "change": {"actions": ["update"], "before": before, "after": {**before, "version": "0.8.0"}},
    }
    review = review_plan("platform-dev", {"format_version": "1.2", "resource_changes": [entry]})
    (blocked,) = review.blocking
    assert blocked.address == "helm_release.lws_release_1" and "moves from templates/ to crds/" in blocked.blocked


def test_a_new_versions_crds_are_read_from_its_chart_hashed_and_printed_to_pin() -> None:
    """`crd_postrender record`: the chart of a controller version, from its Go module through the module proxy
    (the local cluster's LWS 0.8.0 build has it in the module cache), read, hashed and printed as the CrdSet to
    commit: for LWS 0.8.0 exactly the set pinned by hand from the tag (git show v0.8.0:<path> | sha256sum)."""
    done = subprocess.run(
        [sys.executable, "-m", "infra.delivery.crd_postrender", "record", "lws", "0.8.0"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    pinned = crd_set("lws", "0.8.0")
    assert pinned is not None
    for f in pinned.files:
        assert f'"{f.name}",\n' in done.stdout and f'"{f.path}",\n' in done.stdout and f'"{f.sha256}",\n' in done.stdout
    assert "add to _SETS in infra/catalogue/controller_crds.py" in done.stdout


def test_recording_reads_crds_and_templated_crds_from_a_checkout(tmp_path: Path) -> None:
    from infra.delivery.crd_postrender import as_python, record

    chart = tmp_path / "charts" / "kueue"
    (chart / "crds").mkdir(parents=True)
    (chart / "templates" / "crd").mkdir(parents=True)
    plain = b"apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: a.x.io\n"
    templated = b'kind: CustomResourceDefinition\nmetadata:\n  name: b.x.io\n  labels: {{ include "x" . }}\n'
    (chart / "crds" / "x.io_a.yaml").write_bytes(plain)
    (chart / "templates" / "crd" / "x.io_bs.yaml").write_bytes(templated)
    (chart / "templates" / "deployment.yaml").write_text("kind: Deployment\n")
    crds = record("kueue", "9.9.9", tmp_path)
    assert [(f.name, f.path, f.sha256) for f in crds.files] == [
        ("a.x.io", "charts/kueue/crds/x.io_a.yaml", hashlib.sha256(plain).hexdigest()),
        ("bs.x.io", "charts/kueue/templates/crd/x.io_bs.yaml", hashlib.sha256(templated).hexdigest()),
    ]
    literal = as_python(crds)
    namespace: dict[str, Any] = {}
    exec("from infra.catalogue.controller_crds import CrdSet, CrdFile\nS = (\n" + literal + ")", namespace)
    assert namespace["S"][0] == crds, "the printed literal is the set"
