"""The CRD files each controller version ships, pinned at its release tag: what the platform applies.

These are not the schemas the charts' objects are validated against (infra/charts/crds.yaml pins those at
commits near the controllers): they are the files of the controller's chart at the tag of the version an
environment installs, each by its path, its URL at the tag and its sha256 (computed from the repositories at
the tags: `git show <tag>:<path> | sha256sum`).

Where each chart keeps them decides what Helm does with them (https://helm.sh/docs/chart_best_practices/
custom_resource_definitions/; helm/helm#8163):
- `crds/` (JobSet 0.12.0, LWS 0.8.0): installed on the first install only, never upgraded, never deleted. The
  platform installs the release with `skip_crds` and its post-renderer (infra/delivery/crd_postrender.py) adds these
  files to the release's manifest instead, so Helm installs *and upgrades* them.
- `templates/` (LWS 0.7.0, Kueue 0.17.3 and 0.19.2): rendered and applied with the release, so an upgrade whose chart no
  longer renders one deletes it, and every object of its kind, and an uninstall deletes them all. The
  post-renderer marks every CRD `helm.sh/resource-policy: keep`, which Helm honours on uninstall and on an
  upgrade's removal of what the old manifest had and the new one lacks.
Kueue's are Helm templates (`{{ include "kueue.fullname" . }}` in the conversion webhook's service): their pin
is the template text, and Helm renders them; LWS 0.7.0's carries no template directive.
"""

from __future__ import annotations

from dataclasses import dataclass

# The repository each controller is released from (its tags are v<chart version>).
REPOSITORIES = {
    "jobset": "kubernetes-sigs/jobset",
    "kueue": "kubernetes-sigs/kueue",
    "lws": "kubernetes-sigs/lws",
}

KEEP_ANNOTATION = ("helm.sh/resource-policy", "keep")


@dataclass(frozen=True)
class CrdFile:
    name: str  # the CRD's metadata.name
    path: str  # in the repository, at the tag
    sha256: str

    @property
    def templated(self) -> bool:
        """A chart template (rendered and applied with the release) rather than a file under crds/."""
        return "/templates/" in self.path

    @property
    def file_name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class CrdSet:
    controller: str
    version: str
    files: tuple[CrdFile, ...]

    @property
    def tag(self) -> str:
        return f"v{self.version}"

    def url(self, crd: CrdFile) -> str:
        return f"https://raw.githubusercontent.com/{REPOSITORIES[self.controller]}/{self.tag}/{crd.path}"

    @property
    def directory(self) -> str:
        """Where the files are kept once fetched, under the cache (.cache/controller-crds/<this>)."""
        return f"{self.controller}-{self.version}"

    @property
    def injected(self) -> tuple[CrdFile, ...]:
        """The chart's crds/ files: Helm leaves them out with skip_crds; the post-renderer adds them."""
        return tuple(f for f in self.files if not f.templated)

    @property
    def templated(self) -> tuple[CrdFile, ...]:
        return tuple(f for f in self.files if f.templated)

    def pins(self) -> dict[str, str]:
        """File name -> sha256 of the injected files (what must be on disk at deploy time)."""
        return {f.file_name: f.sha256 for f in self.injected}

    def sources(self) -> dict[str, tuple[str, str]]:
        return {f.file_name: (self.url(f), f.sha256) for f in self.injected}


def _kueue(version: str, files: dict[str, str]) -> CrdSet:
    return CrdSet(
        "kueue",
        version,
        tuple(
            CrdFile(f"{plural}.kueue.x-k8s.io", f"charts/kueue/templates/crd/kueue.x-k8s.io_{plural}.yaml", sha)
            for plural, sha in files.items()
        ),
    )


_SETS = (
    CrdSet(
        "jobset",
        "0.12.0",
        (
            CrdFile(
                "jobsets.jobset.x-k8s.io",
                "charts/jobset/crds/jobset.x-k8s.io_jobsets.yaml",
                "d022b87624512cf0b6741b31b24a2bea9945b5a838b50713af29332c878bb6fe",
            ),
        ),
    ),
    CrdSet(
        "lws",
        "0.7.0",
        (
            CrdFile(
                "leaderworkersets.leaderworkerset.x-k8s.io",
                "charts/lws/templates/crds/leaderworkerset.x-k8s.io_leaderworkersets.yaml",
                "507e167ae5c2c40e1d312152bf859704d03d0e14bb300f5b1e7ba33fdd610e26",
            ),
        ),
    ),
    # The next LWS: its CRD moved to crds/ (kubernetes-sigs/lws 2b876383, "Try to fix Helm so it does not allow
    # deleting CRDs (#718)"). Pinned so that the review can say what a bump to it does; environments may install
    # only what CONTROLLERS[...].versions lists.
    CrdSet(
        "lws",
        "0.8.0",
        (
            CrdFile(
                "leaderworkersets.leaderworkerset.x-k8s.io",
                "charts/lws/crds/leaderworkerset.x-k8s.io_leaderworkersets.yaml",
                "988424a32228c3b494c1a11bb2856c6425c435fc1dbf47d95dc940d2eada15f8",
            ),
        ),
    ),
    _kueue(
        "0.17.3",
        {
            "admissionchecks": "a00f76f1a28b2f73af021af31d9733ae9ead3f370622a4e7d7d717ff7507da46",
            "clusterqueues": "182deb86b62c7bb4c93f7276e62a2ff2b920bef1a0ba1c4b52fe299479588476",
            "cohorts": "61dc6dc3c1403baa1fc6a3f6a6c2cca2ce9572e79717c2f8929dca387c680f74",
            "localqueues": "242565113f9ca0fc8b1cafd8f2271c2fd2aa0a38df87d6d095bd2809bfff829a",
            "multikueueclusters": "5a9e5b3aca3dd842a728884cd4fbf767c14e586c8fcb609f8a4f8ee856a5726c",
            "multikueueconfigs": "2e6946129bc53f4589250d1568adc383c381bd2df7aea23dd523198984951c08",
            "provisioningrequestconfigs": "165c641225732731bb185e34e139b4500f2fb5f115e52e2cc178afe0b5ae8b01",
            "resourceflavors": "ccd48c3b63b744fae05eaeef958eac1bd2969d4769cb7a2762a8339b88bfc2d1",
            "topologies": "eb0c347613a3bc7c7ca54651d7ecf9cb98fd155c1f71dff4f8bde39d51d2b0fa",
            "workloadpriorityclasses": "b4231f491823682fce1eecffd0ed571774b4608e9923ff25f1e34788fe7f028b",
            "workloads": "6d75735167f2bab1b7905aecd1b871c1eedb59bce407994f094d8a6982d1cf17",
        },
    ),
    _kueue(
        "0.19.2",
        {
            "admissionchecks": "5631a832c00c441ecf7dd257eedd05db390298cd752da9f1a5dd9daa27a8c54c",
            "clusterqueues": "41eef808a233c44722acc87a7d48e9a50537e72650222a5699a4212fcec4a877",
            "cohorts": "4ce98f9fc39f845ce8320ce965527e11c29797bd9fb5c324d2644f25c9cb641b",
            "localqueues": "514543b2d977532c10080b26f6f9e09e220f3c3a0c8d0e8773a2280b6d85d955",
            "multikueueclusters": "c939c5fcdb68ee6b820234b334fbd81fc8d1491452d933aa264cf896004e5497",
            "multikueueconfigs": "c384a9609d4dbd5e185fcad6c71826feb3e8382abb4fd2a3441029ad857483c7",
            "provisioningrequestconfigs": "a0efeeca4210585b2cb2136934bd5d4d26d31ffa28fd9ffd88f228e5689775c7",
            "resourceflavors": "ccd48c3b63b744fae05eaeef958eac1bd2969d4769cb7a2762a8339b88bfc2d1",
            "topologies": "4edd48facfe379698e05f80ffbb8161cda689b759927248e6ea4c4d664a51232",
            "workloadpriorityclasses": "69667f891ff35c114c2bf8e6b4d07badbeb7eb3f9e4278b27925fc1e2f85d278",
            "workloads": "5a0e30b8e764786e2e37f73768270b4a825fe9635615602267417a0d057c013f",
        },
    ),
)

CRD_SETS: dict[tuple[str, str], CrdSet] = {(s.controller, s.version): s for s in _SETS}


def crd_set(controller: str, version: str) -> CrdSet | None:
    return CRD_SETS.get((controller, version))


def crd_changes(controller: str, old: str, new: str) -> list[str]:
    """What moving `controller` from version `old` to `new` does to its CRDs, one line per CRD (empty: nothing;
    a version without a pinned set is named as unknown)."""
    before, after = crd_set(controller, old), crd_set(controller, new)
    missing = [v for v, s in ((old, before), (new, after)) if s is None]
    if missing:
        return [f"{controller} {', '.join(missing)}: no pinned CRD set (infra/catalogue/controller_crds.py)"]
    assert before is not None and after is not None
    old_files = {f.name: f for f in before.files}
    new_files = {f.name: f for f in after.files}
    lines = []
    for name in sorted(old_files.keys() | new_files.keys()):
        was, now = old_files.get(name), new_files.get(name)
        if now is None:
            lines.append(f"{name} is no longer in the chart (kept: the platform marks it keep; remove it by hand)")
        elif was is None:
            lines.append(f"{name} is new")
        else:
            notes = []
            if was.templated and not now.templated:
                notes.append(
                    "moves from templates/ to crds/ (Helm alone would delete it, and every object of its kind, on "
                    "this upgrade: helm/helm#8163; the platform keeps it and applies the new file)"
                )
            elif now.templated != was.templated:
                notes.append("moves from crds/ to templates/")
            if was.sha256 != now.sha256:
                notes.append(f"its file changes (sha256 {was.sha256[:12]} -> {now.sha256[:12]})")
            if notes:
                lines.append(f"{name}: {'; '.join(notes)}")
    return lines
