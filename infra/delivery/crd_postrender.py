"""The controllers' Helm post-renderer: their CRDs installed and upgraded from the pinned files, kept on uninstall
(and their aggregated ClusterRoles kept, which an uninstall cannot reliably delete).

  python -m infra.delivery.crd_postrender render <controller> <version>   < rendered manifests  > manifests
  python -m infra.delivery.crd_postrender fetch <controller> <version> ...
      fetch the pinned crds/ files (all or nothing)
  python -m infra.delivery.crd_postrender record <controller> <version> [--from <source tree>]
      a new version's CRD files read from its chart, hashed, printed as the CrdSet to commit in
      infra/catalogue/controller_crds.py (the chart from the controller's Go module, through the Go module proxy
      and its checksum database, unless --from names a checkout)

Helm (helm_release's `postrender`, scripts/crd-postrender) pipes every rendered template of the release through
`render`; CRDs under a chart's crds/ are never in that stream, and the release sets `skip_crds` so that Helm
does not install them on its own either. `render`:
- marks every CRD the chart's templates rendered `helm.sh/resource-policy: keep` (Helm then leaves it on
  uninstall, and when an upgrade's manifest no longer has it), after checking it is one of the version's
  pinned CRDs;
- adds the version's pinned crds/ files (infra/catalogue/controller_crds.py), each checked against its sha256,
  marked keep too: they become part of the release, so Helm creates them on install and updates them on every
  upgrade (crds/ alone is applied on the first install only);
- marks an aggregated ClusterRole (one with an `aggregationRule`) keep as well: kube-controller-manager's
  clusterrole-aggregation-controller force-applies the aggregate's rules whenever one of its member roles changes
  (server-side apply, since Kubernetes 1.21: kubernetes/kubernetes#99462; pkg/controller/clusterroleaggregation
  @ v1.35.4 syncClusterRole), and an apply creates what is not there: when an uninstall deletes the aggregate
  with its members, the controller's apply for a member's deletion can land after the aggregate's and make it
  again, unlabelled, and `helm uninstall --wait` then waits for it until its timeout (Kueue's batch user and
  admin roles; found by make destroy-local, infra/localcluster/destroy.py). Kept, it stays with no rules once
  its members are gone, and the next install adopts it;
- passes every other object through byte for byte.
It refuses (exit 1, Helm stops the install or upgrade before it changes anything) a CRD that is not pinned for
the version, a pinned template CRD the chart did not render, and a missing or altered file.

The fetched files live in .cache/controller-crds/<controller>-<version>/ (PLATFORM_CONTROLLER_CRDS overrides the
parent directory). `render` fetches a missing one itself, at the apply, when Terraform also pulls the chart from
its OCI registry; `fetch` does it ahead of time (a machine that reaches GitHub only then, or a check).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from infra import settings
from infra.catalogue.controller_crds import KEEP_ANNOTATION, CrdFile, CrdSet, crd_set

REPO = Path(__file__).resolve().parents[2]
PIN_FILE = REPO / "infra" / "catalogue" / "controller_crds.py"

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_SEPARATOR = re.compile(r"^---[ \t]*$", re.MULTILINE)
_CRD = re.compile(r"^kind:[ \t]*CustomResourceDefinition[ \t]*$", re.MULTILINE)
_CLUSTER_ROLE = re.compile(r"^kind:[ \t]*ClusterRole[ \t]*$", re.MULTILINE)
_AGGREGATION = re.compile(r"^aggregationRule:", re.MULTILINE)


class PostRenderError(Exception):
    """Why the post-renderer refuses a release's manifests."""


def cache_root() -> Path:
    return settings.CONTROLLER_CRDS.path() or REPO / ".cache" / "controller-crds"


def _keep(doc: dict[str, Any]) -> dict[str, Any]:
    metadata = doc.setdefault("metadata", {})
    annotations = metadata.get("annotations") or {}
    annotations[KEEP_ANNOTATION[0]] = KEEP_ANNOTATION[1]
    metadata["annotations"] = annotations
    return doc


def _dump(doc: dict[str, Any], source: str) -> str:
    return f"# Source: {source}\n" + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=1 << 16)


def _source(chunk: str, default: str) -> str:
    """The template a rendered object came from (Helm's `# Source:` line)."""
    return next((line[len("# Source: ") :] for line in chunk.splitlines() if line.startswith("# Source: ")), default)


def pinned_file(crds: CrdSet, name: str, root: Path | None = None, *, fetch_missing: bool = True) -> bytes:
    """The text of one pinned crds/ file, checked against its sha256; fetched first when it is not there yet
    (at the apply, which fetches the controller's chart from its OCI registry at the same moment)."""
    crd = next(f for f in crds.injected if f.name == name)
    path = (root or cache_root()) / crds.directory / crd.file_name
    if not path.is_file() and fetch_missing:
        try:
            fetch(crds.controller, crds.version, root)
        except (OSError, ValueError) as err:
            raise PostRenderError(f"{path}: missing, and fetching it failed: {err}") from None
    if not path.is_file():
        raise PostRenderError(
            f"{path}: missing (python -m infra.delivery.crd_postrender fetch {crds.controller} {crds.version} "
            "fetches it)"
        )
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != crd.sha256:
        raise PostRenderError(f"{path}: sha256 {digest} is not the pinned {crd.sha256} ({PIN_FILE})")
    return data


def render(
    manifests: str, controller: str, version: str, root: Path | None = None, *, fetch_missing: bool = True
) -> str:
    """The release's manifests with its CRDs marked keep and the pinned crds/ files added."""
    crds = crd_set(controller, version)
    if crds is None:
        raise PostRenderError(f"{controller} {version}: no pinned CRD set ({PIN_FILE})")
    pinned_templates = {f.name for f in crds.templated}
    injected = {f.name for f in crds.injected}
    rendered: set[str] = set()
    out: list[str] = []
    for chunk in _SEPARATOR.split(manifests):
        if not chunk.strip():
            continue
        if _CLUSTER_ROLE.search(chunk) and _AGGREGATION.search(chunk):
            out.append(_dump(_keep(yaml.load(chunk, Loader=_Loader)), _source(chunk, "an aggregated ClusterRole")))
            continue
        if not _CRD.search(chunk):
            out.append(chunk.strip("\n") + "\n")
            continue
        doc = yaml.load(chunk, Loader=_Loader)
        name = str((doc.get("metadata") or {}).get("name"))
        if name in injected:
            raise PostRenderError(
                f"{controller} {version}: the chart's templates render {name}, pinned as a crds/ file"
            )
        if name not in pinned_templates:
            raise PostRenderError(
                f"{controller} {version}: the chart renders the CRD {name}, which is not pinned for this version "
                f"({PIN_FILE})"
            )
        rendered.add(name)
        out.append(_dump(_keep(doc), _source(chunk, name)))
    missing = sorted(pinned_templates - rendered)
    if missing:
        raise PostRenderError(
            f"{controller} {version}: the chart did not render the pinned CRDs {', '.join(missing)} ({PIN_FILE})"
        )
    for crd in crds.injected:
        doc = yaml.load(pinned_file(crds, crd.name, root, fetch_missing=fetch_missing), Loader=_Loader)
        out.append(_dump(_keep(doc), f"{controller}/crds/{crd.file_name} (pinned at {crds.tag})"))
    return "".join(f"---\n{chunk}" for chunk in out)


def fetch(controller: str, version: str, root: Path | None = None) -> Path:
    """Fetch the pinned crds/ files of one controller version unless they are all there already."""
    from workloads import pinned_files

    crds = crd_set(controller, version)
    if crds is None:
        raise PostRenderError(f"{controller} {version}: no pinned CRD set ({PIN_FILE})")
    target = (root or cache_root()) / crds.directory
    if crds.injected and pinned_files.problems(target, crds.pins()):
        offline = pinned_files.local_copy(settings.CONTROLLER_CRDS.name, [root or cache_root()], PIN_FILE)
        pinned_files.fetch(target, crds.sources(), PIN_FILE, offline=f"{offline} (under {crds.directory}/)")
    return target


# Each controller's Go module: its source at the tag holds the chart (charts/<controller>/).
GO_MODULES = {"jobset": "sigs.k8s.io/jobset", "kueue": "sigs.k8s.io/kueue", "lws": "sigs.k8s.io/lws"}


def module_source(controller: str, version: str) -> Path:
    """The controller's source tree at v<version>, from the Go module proxy (`go mod download`, checked against the
    checksum database; cached in the module cache)."""
    import subprocess

    module = f"{GO_MODULES[controller]}@v{version}"
    done = subprocess.run(["go", "mod", "download", "-json", module], capture_output=True, text=True, check=False)
    info = json.loads(done.stdout or "{}")
    if done.returncode or "Dir" not in info:
        raise ValueError(f"go mod download {module}: {info.get('Error') or done.stderr.strip() or 'failed'}")
    return Path(info["Dir"])


def record(controller: str, version: str, source: Path | None = None) -> CrdSet:
    """The CRD files the chart of `controller` ships at `version` (crds/, and templates that render a
    CustomResourceDefinition), each with its path at the tag and its sha256: the CrdSet to pin."""
    if controller not in GO_MODULES:
        raise ValueError(f"unknown controller {controller!r}; known: {', '.join(GO_MODULES)}")
    root = source if source is not None else module_source(controller, version)
    chart = root / "charts" / controller
    if not chart.is_dir():
        raise ValueError(f"{chart}: no chart there")
    files = []
    for path in sorted([*chart.glob("crds/**/*.yaml"), *chart.glob("templates/**/*.yaml")]):
        data = path.read_bytes()
        if b"kind: CustomResourceDefinition" not in data:
            continue
        try:
            name = str((yaml.safe_load(data) or {})["metadata"]["name"])
        except Exception:  # a Helm template (Kueue's): its name from the file's, <group>_<plural>.yaml
            group, _, plural = path.stem.partition("_")
            name = f"{plural}.{group}"
        files.append(CrdFile(name, str(path.relative_to(root)), hashlib.sha256(data).hexdigest()))
    if not files:
        raise ValueError(f"{chart}: no CustomResourceDefinition in crds/ or templates/")
    return CrdSet(controller, version, tuple(files))


def as_python(crds: CrdSet) -> str:
    """`crds` as the literal infra/catalogue/controller_crds.py holds (its quotes)."""
    q = json.dumps
    lines = ["    CrdSet(", f"        {q(crds.controller)},", f"        {q(crds.version)},", "        ("]
    for f in crds.files:
        values = (f"                {q(v)}," for v in (f.name, f.path, f.sha256))
        lines += ["            CrdFile(", *values, "            ),"]
    return "\n".join([*lines, "        ),", "    ),"]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m infra.delivery.crd_postrender", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("action", choices=["render", "fetch", "record"])
    parser.add_argument("pairs", nargs="+", metavar="CONTROLLER VERSION")
    parser.add_argument("--from", dest="source", type=Path, help="record: a source tree at the tag (a checkout)")
    args = parser.parse_args(argv)
    if len(args.pairs) % 2:
        parser.error("give a version after each controller")
    pairs = list(zip(args.pairs[::2], args.pairs[1::2], strict=True))
    try:
        if args.action == "record":
            for controller, version in pairs:
                crds = record(controller, version, args.source)
                print(f"# {controller} {version}: add to _SETS in infra/catalogue/controller_crds.py")
                print(as_python(crds), end="")
            print(
                "# then: the version in infra/catalogue/controllers.py `versions` (with its schemas in "
                "infra/charts/crds.yaml and its webhooks' rules), make pin, make plan (the review shows what "
                "the bump does to each CRD)"
            )
        elif args.action == "render":
            if len(pairs) != 1:
                parser.error("render takes one controller and its version")
            sys.stdout.write(render(sys.stdin.read(), *pairs[0]))
        else:
            for controller, version in pairs:
                print(f"{controller} {version}: pinned CRDs in {fetch(controller, version)}")
    except PostRenderError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as err:
        print(f"error: fetching the pinned CRDs: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
