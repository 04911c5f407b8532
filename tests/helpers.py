"""What the tests share: the repository's paths and environments, finders over a synthesized stack and a release's
objects, the rendered charts of a stack, and the check that a request is refused. Fixtures are in conftest.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from infra.charts.check import render, validate
from infra.charts.crds import available

REPO = Path(__file__).resolve().parents[1]

# Every environment file of the repository: a new one (`make new-env`) is planned and snapshotted by the tests
# that take this list, without anyone editing a test.
ENVIRONMENT_NAMES = sorted(p.stem for p in (REPO / "infra" / "environments").glob("*.yaml"))

# Strict validation of custom resources needs the pinned upstream schemas (`make crds`). Outside CI a
# clone without them skips these tests and says so; in CI (CI=true) nothing is skipped: they fail.
IN_CI = os.environ.get("CI") == "true"
needs_crds = pytest.mark.skipif(
    not IN_CI and not available(), reason="pinned upstream CRD schemas not available: run `make crds`"
)


def of_type(stack: dict[str, Any], rtype: str) -> dict[str, dict[str, Any]]:
    """Resources of one type in a synthesized stack, by logical id."""
    return stack.get("resource", {}).get(rtype, {})


def by_name(stack: dict[str, Any], rtype: str) -> dict[str, dict[str, Any]]:
    """Resources of one type in a synthesized stack, by their `name` attribute."""
    return {r["name"]: r for r in of_type(stack, rtype).values()}


def one(stack: dict[str, Any], rtype: str) -> dict[str, Any]:
    items = list(of_type(stack, rtype).values())
    assert len(items) == 1, f"expected one {rtype}, found {len(items)}"
    return items[0]


def one_of_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The one rendered object of `kind` among a release's objects."""
    (found,) = [o for o in objects if o["kind"] == kind]
    return found


def assert_request_refused(
    request: dict[str, Any], ctx: Any, path: Path, field: str, rule_id: str, source: str
) -> None:
    """`request`, written to `path` and read back, is refused by `rule_id` at `field`, and the error line names the
    file, the field, the rule and (a part of) its source."""
    from infra.rules import check_request

    path.write_text(json.dumps(request))
    violations = check_request(json.loads(path.read_text()), ctx)
    found = [v for v in violations if v.rule.id == rule_id and v.field == field]
    assert found, [v.line() for v in violations]
    line = found[0].line(str(path))
    assert line.startswith(f"{path}: {field}: ") and f"rule {rule_id}" in line and source in line


def release_values(stack: dict[str, Any], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(release, values) of the Helm release `name` in a synthesized stack."""
    release = next(r for r in of_type(stack, "helm_release").values() if r["name"] == name)
    return release, json.loads(release["values"][0])


def rendered(stack: dict[str, Any], release: str) -> list[dict[str, Any]]:
    """The objects of the Helm release `release` of a synthesized stack, each validated strictly."""
    found, values = release_values(stack, release)
    objects = render(found["chart"].rsplit("/", 1)[-1], values, name=found["name"], namespace=found["namespace"])
    for obj in objects:
        validate(obj)
    return objects


def exported_metrics(page: str) -> dict[str, tuple[str, set[str]]]:
    """Each metric family of a Prometheus /metrics page by the name Managed Prometheus writes it under (a counter's
    samples' name, with `_total`), with its type and the label keys of its samples."""
    types = dict(m.groups() for m in re.finditer(r"^# TYPE (\S+) (\S+)$", page, re.M))
    out: dict[str, tuple[str, set[str]]] = {}
    for name, kind in types.items():
        sample = f"{name}_total" if kind == "counter" and not name.endswith("_total") else name
        suffixes = ("_bucket", "_sum", "_count") if kind == "histogram" else ("",)
        labels: set[str] = set()
        for suffix in suffixes:
            for m in re.finditer(rf"^{re.escape(sample + suffix)}(?:\{{(.*)\}})? ", page, re.M):
                labels |= set(re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="', m.group(1) or ""))
        out[sample] = (kind, labels - {"le"})
    return out


def assert_exports(page: str, metrics: Iterable[Any]) -> None:
    """Every Cloud Monitoring metric of `metrics` (prometheus.googleapis.com/<name>/<kind>) is on the page, of its
    kind, with every label the platform's filters may name."""
    exported = exported_metrics(page)
    for metric in metrics:
        _, name, kind = metric.type.rsplit("/", 2)
        assert name in exported, f"{name} is not on the /metrics page: {sorted(exported)}"
        assert exported[name][0] == kind, (name, exported[name])
        assert metric.labels <= exported[name][1], (name, exported[name])


def charts_with_fixed_jetstream_name(folder: Path) -> Path:
    """A copy of the charts in `folder` with the JetStream chart as it was (0.3.0): its LeaderWorkerSet named after
    the release alone, so a reshape is an upgrade of the same object (which LWS's webhook refuses)."""
    from infra.charts import check

    shutil.copytree(check.CHARTS, folder, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    template = folder / "jetstream-pathways" / "templates" / "leaderworkerset.yaml"
    text = template.read_text()
    hashed = (
        '  name: {{ .Release.Name }}-{{ dict "subGroupSize" .Values.subGroupSize | toJson | sha256sum | trunc 8 }}\n'
    )
    assert hashed in text
    template.write_text(text.replace(hashed, "  name: {{ .Release.Name }}\n"))
    return folder


def train_local(ckpt: Path, *args: str, env: dict[str, str] | None = None) -> tuple[dict[str, Any], str]:
    """`make train-local` (`python -m workloads.trainer local`) into `ckpt`, with its own compilation cache beside
    the checkpoints (not the test session's: tests/conftest.py), `env` added to the environment: its summary and
    what it printed on stderr."""
    env = {**{k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}, **(env or {})}
    command = [sys.executable, "-m", "workloads.trainer", "local", "--checkpoint-dir", str(ckpt), *args]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    # The summary line (Ray's raylet may print its notice of the killed workers after it).
    return json.loads(next(line for line in reversed(done.stdout.splitlines()) if line.startswith("{"))), done.stderr


def losses(ckpt: Path) -> list[tuple[int, float]]:
    """Each step a run in `ckpt` completed and its loss, in the order written (metrics.jsonl)."""
    records = map(json.loads, (ckpt / "metrics.jsonl").read_text().splitlines())
    return [(r["step"], r["loss"]) for r in records if "step" in r]  # not a checkpoint's line (`saved`)


def attempts(ckpt: Path) -> list[dict[str, Any]]:
    """Each attempt of the runs in `ckpt` as its first process wrote it when it started training (attempts.jsonl):
    its `start_step` and `slices`."""
    return [json.loads(line) for line in (ckpt / "attempts.jsonl").read_text().splitlines()]


def dev_edited(
    tmp_path: Path,
    *edits: tuple[str, str],
    folder: str = "environments",
    transform: Callable[[str], str] | None = None,
) -> Path:
    """dev.yaml with `transform` applied, then `edits` (text, replacement; each text must be there), beside the
    other environments, in `tmp_path`/`folder`: the path of the edited dev.yaml."""
    from infra.config import ENVIRONMENTS_DIR

    out = tmp_path / folder
    out.mkdir()
    for path in ENVIRONMENTS_DIR.glob("*.yaml"):
        text = path.read_text()
        if path.stem == "dev":
            text = transform(text) if transform is not None else text
            for old, new in edits:
                assert old in text, old
                text = text.replace(old, new, 1)
        (out / path.name).write_text(text)
    return out / "dev.yaml"


def picker_config(objects: list[dict[str, Any]], release: str) -> dict[str, Any]:
    """The endpoint picker's configuration among a vLLM release's rendered objects (its `<release>-epp`
    ConfigMap's default-plugins.yaml)."""
    import yaml

    (config,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == f"{release}-epp"]
    picker: dict[str, Any] = yaml.safe_load(config["data"]["default-plugins.yaml"])
    return picker


def training_objects(env: Any) -> list[dict[str, Any]]:
    """The ray-training release's objects for `env` as the plan holds them (stack_releases), from a stack of this
    one release."""
    from infra.constructs.releases import ray_training_values
    from infra.rules.run import stack_releases

    release = {"name": "ray-training", "namespace": "ml-training", "chart": "../../../workloads/charts/ray-training",
               "values": [json.dumps(ray_training_values(env))]}  # fmt: skip
    ((_, objects),) = stack_releases({"resource": {"helm_release": {"ray_training": release}}}).values()
    return objects


def kueue_module() -> tuple[str, Path]:
    """The Kueue Go module the local cluster builds: its version (its go.mod's; the module proxy does not serve the
    pinned patch release) and its folder in the module cache (downloaded there the first time)."""
    from infra.engine.build import components

    folder = components()["kueue"].folder
    module = re.search(r"^\s*sigs\.k8s\.io/kueue (v\d+\.\d+\.\d+)", (folder / "go.mod").read_text(), re.M)
    assert module, f"{folder / 'go.mod'} requires no sigs.k8s.io/kueue"
    where = subprocess.run(["go", "mod", "download", "-json", f"sigs.k8s.io/kueue@{module.group(1)}"], cwd=folder,
                           capture_output=True, text=True, check=True)  # fmt: skip
    return module.group(1), Path(json.loads(where.stdout)["Dir"])
