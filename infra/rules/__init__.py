"""The rules of the real systems the platform runs on, checked before anything is applied.

Our own schemas and invariants say what *we* meant; GKE, Cloud Storage FUSE,
Workload Identity, KubeRay, JobSet, LeaderWorkerSet, Kueue, Pathways and
MaxText each refuse things of their own, at apply, admission, mount, pod
start or engine start. Every such rule that can be known ahead lives in this
package, once, with the source it was taken from and the layer it guards, and
runs on seven kinds of subject:

- ``environment``: the loaded `Environment` (run by `infra.synth.load.load_environment`,
  so a bad file fails at load with the file, field, value, rule and source);
- ``environments``: every environment of the folder together, by name (run by `infra.synth.load.load_all`): what
  one file cannot see alone, such as a global name another file takes; a finding's path starts with the name of the
  environment it is reported in;
- ``terraform``: a synthesized stack (`cdk.tf.json`), exactly what Terraform applies;
- ``manifest``: the objects of one rendered Helm release, exactly what the
  Helm provider sends to the API server;
- ``request``: an API request `make plan` writes for a later call (a Vertex AI CustomJob, a Compute Engine
  bulkInsert), exactly what the client sends (`request_subject.RequestContext` says which API);
- ``script``: a generated shell script with the host it runs on (`infra.shell.GeneratedScript`), held to that
  host's facts (`infra/catalogue/hosts.py`) by `host_scripts.py` (`python -m scripts.shell check`);
- ``upgrade``: the objects a Helm upgrade replaces, each with the object it replaces (the review's baseline
  rendered), held to what the API server and the controllers' webhooks refuse to change (`upgrades.py`).

`make plan` runs all of them and reports how many ran (`python -m scripts.rules`; the upgrade rules in its review,
which has the baseline).

One module per real system holds that system's rules for every subject (`gke.py`, `gcsfuse.py`,
`kuberay.py`, `jobset.py`, `lws.py`, `kueue.py`, `pathways.py`, `maxtext.py`, `vllm.py`, ...); what the
rules of one subject share lives in `environment_subject.py`, `terraform_subject.py` and
`manifest_subject.py`, and the documents several rules cite in `sources.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

# A check yields the platform's one Finding shape: (field path, the value at fault, what is wrong).
from infra.config.findings import FieldPath, Finding, field_path
from infra.rules.terraform_subject import resources

# host-run: a generated shell script (boot runner, prolog, batch job, VM start-up) fails where its host runs it.
# platform: no real system refuses it; the platform does, by its own choice (least privilege, one owner per slice,
# what its generated scripts and charts support), and its source is the document that says why.
Layer = Literal["apply", "admission", "mount", "pod-start", "engine-start", "host-run", "platform"]
Subject = Literal["environment", "environments", "terraform", "manifest", "request", "script", "upgrade"]
LAYERS: tuple[Layer, ...] = ("apply", "admission", "mount", "pod-start", "engine-start", "host-run", "platform")


@dataclass(frozen=True)
class Rule:
    """One rule of a real system: what it enforces, where that is written, and the check."""

    id: str
    system: str
    layer: Layer
    summary: str
    source: str
    subject: Subject
    check: Callable[..., Iterable[Finding]] = field(repr=False, compare=False)
    # What the rule applies to; the framework filters, so the check sees only that: the kinds of a release's
    # objects (manifest rules; upgrade rules: the kind of the new object of each pair), the API of a request
    # (request rules, `request_subject.RequestContext.api`), the resource types of a stack (Terraform rules: the
    # check gets `(where, body)` of each resource of those types, then the whole stack).
    kinds: tuple[str, ...] = ()
    api: str = ""
    types: tuple[str, ...] = ()

    def run(self, *args: Any) -> list[Violation]:
        if self.api and args[-1].api != self.api:
            return []
        if self.types:
            (stack,) = args
            args = ([found for rtype in self.types for found in resources(stack, rtype)], stack)
        if self.kinds:
            objects, *rest = args
            if self.subject == "upgrade":
                objects = [(old, new) for old, new in objects if new.get("kind") in self.kinds]
            else:
                objects = [o for o in objects if o.get("kind") in self.kinds]
            args = (objects, *rest)
        return [Violation(self, path, value, message) for path, value, message in self.check(*args)]


@dataclass(frozen=True)
class Violation:
    """A Finding of one rule: the rule broken, by one field of one subject."""

    rule: Rule
    path: FieldPath
    value: object
    message: str

    @property
    def field(self) -> str:
        return field_path(self.path)

    def line(self, where: str = "") -> str:
        """`<where>: <field>: <value>: <message> [rule <id> (<system>, refused at <layer>); source: <source>]`."""
        prefix = f"{where}: " if where else ""
        refused = "the platform's own choice" if self.rule.layer == "platform" else f"refused at {self.rule.layer}"
        return (
            f"{prefix}{self.field}: {self.value!r}: {self.message} "
            f"[rule {self.rule.id} ({self.rule.system}, {refused}); source: {self.rule.source}]"
        )


RULES: dict[str, Rule] = {}


def rule(
    *,
    id: str,
    system: str,
    layer: Layer,
    summary: str,
    source: str,
    subject: Subject,
    kinds: tuple[str, ...] = (),
    api: str = "",
    types: tuple[str, ...] = (),
) -> Callable:
    """Register the decorated function as the check of a rule; `kinds` (manifest and upgrade rules), `api` (request
    rules) and `types` (Terraform rules) narrow what it is run on."""
    if layer not in LAYERS:
        raise ValueError(f"rule {id}: layer {layer!r} is not one of {LAYERS}")
    if not source.strip():
        raise ValueError(f"rule {id}: every rule names its source")
    if kinds and subject not in ("manifest", "upgrade"):
        raise ValueError(f"rule {id}: kinds= narrows manifest and upgrade rules; this one's subject is {subject}")
    if api and subject != "request":
        raise ValueError(f"rule {id}: api= narrows request rules; this one's subject is {subject}")
    if types and subject != "terraform":
        raise ValueError(f"rule {id}: types= narrows Terraform rules; this one's subject is {subject}")

    def register(check: Callable[..., Iterable[Finding]]) -> Callable[..., Iterable[Finding]]:
        if id in RULES:
            raise ValueError(f"rule {id} is defined twice")
        RULES[id] = Rule(id, system, layer, summary, source, subject, check, tuple(kinds), api, tuple(types))
        return check

    return register


def rules_for(subject: Subject) -> list[Rule]:
    return [r for r in RULES.values() if r.subject == subject]


def all_rules() -> list[Rule]:
    return list(RULES.values())


def check_environment(env: Any) -> list[Violation]:
    """Every environment rule on one loaded environment."""
    return [v for r in rules_for("environment") for v in r.run(env)]


def check_environments(envs: dict[str, Any]) -> dict[str, list[Violation]]:
    """Every rule of the environments together, on every loaded environment by name: {name: its violations}, each
    with the path inside that environment's file."""
    found: dict[str, list[Violation]] = {}
    for r in rules_for("environments"):
        for v in r.run(envs):
            assert isinstance(v.path, tuple), f"rule {r.id}: a path across environments starts with the name"
            found.setdefault(str(v.path[0]), []).append(Violation(r, v.path[1:], v.value, v.message))
    return found


def check_stack(stack: dict[str, Any]) -> list[Violation]:
    """Every terraform rule on one synthesized stack."""
    return [v for r in rules_for("terraform") for v in r.run(stack)]


def check_request(request: dict[str, Any], ctx: Any) -> list[Violation]:
    """Every request rule on one written API request (`ctx`: a request_subject.RequestContext)."""
    return [v for r in rules_for("request") for v in r.run(request, ctx)]


def check_script(script: Any) -> list[Violation]:
    """Every script rule on one generated shell script (`script`: an infra.shell.GeneratedScript)."""
    return [v for r in rules_for("script") for v in r.run(script)]


def check_release(objects: list[dict[str, Any]], ctx: Any) -> list[Violation]:
    """Every manifest rule on the rendered objects of one Helm release (`ctx`: a manifests.ReleaseContext)."""
    return [v for r in rules_for("manifest") for v in r.run(objects, ctx)]


def upgrade_pairs(
    before: list[dict[str, Any]], after: list[dict[str, Any]]
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(old, new) of every object of a release that an upgrade from `before` to `after` keeps: the same API group,
    kind, namespace and name (Helm patches it; an object renamed is created anew, and the old one deleted). A hook
    (`helm.sh/hook`) is not patched: Helm creates it when its hook runs."""

    def key(obj: dict[str, Any]) -> tuple[str, str, str, str]:
        meta = obj.get("metadata") or {}
        group = str(obj.get("apiVersion", "")).rpartition("/")[0]
        return group, str(obj.get("kind")), str(meta.get("namespace", "")), str(meta.get("name"))

    def hook(obj: dict[str, Any]) -> bool:
        return "helm.sh/hook" in ((obj.get("metadata") or {}).get("annotations") or {})

    old = {key(o): o for o in before if not hook(o)}
    return [(old[key(o)], o) for o in after if key(o) in old and not hook(o)]


def check_upgrade(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[Violation]:
    """Every upgrade rule on a release's objects before and after a Helm upgrade."""
    pairs = upgrade_pairs(before, after)
    return [v for r in rules_for("upgrade") for v in r.run(pairs)]


# Helpers the checks share -------------------------------------------------------------------------


def pod_templates(obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(field path, pod template) of every pod an object creates: Deployments, Jobs, JobSets, LWS, RayClusters, a
    RayJob's submitter."""
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
        yield "spec.template", spec.get("template") or {}
    elif kind == "JobSet":
        for i, job in enumerate(spec.get("replicatedJobs") or []):
            yield f"spec.replicatedJobs[{i}].template.spec.template", job["template"]["spec"]["template"]
    elif kind == "LeaderWorkerSet":
        lwt = spec.get("leaderWorkerTemplate") or {}
        if "leaderTemplate" in lwt:
            yield "spec.leaderWorkerTemplate.leaderTemplate", lwt["leaderTemplate"]
        yield "spec.leaderWorkerTemplate.workerTemplate", lwt.get("workerTemplate") or {}
    elif kind == "RayCluster":
        yield "spec.headGroupSpec.template", spec["headGroupSpec"]["template"]
        for i, group in enumerate(spec.get("workerGroupSpecs") or []):
            yield f"spec.workerGroupSpecs[{i}].template", group["template"]
    elif kind == "RayJob" and spec.get("submitterPodTemplate"):
        # Its own pod: the submitter. Its cluster's pods are the RayCluster KubeRay makes from spec.rayClusterSpec
        # (held as that RayCluster: infra/charts/runs.py made_per_run).
        yield "spec.submitterPodTemplate", spec["submitterPodTemplate"]


def containers(pod_spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(field path inside the pod spec, container) of every container and init container."""
    for section in ("initContainers", "containers"):
        for i, c in enumerate(pod_spec.get(section) or []):
            yield f"{section}[{i}]", c


def probe_budget(probe: dict[str, Any]) -> int:
    """Seconds a probe allows before the kubelet gives up (Kubernetes' defaults: period 10 s, threshold 3)."""
    return int(probe.get("initialDelaySeconds", 0)) + int(probe.get("periodSeconds", 10)) * int(
        probe.get("failureThreshold", 3)
    )


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    """Whether a matchLabels selector selects an object with `labels`: every key with its value."""
    return all(labels.get(k) == v for k, v in selector.items())


def where(obj: dict[str, Any]) -> str:
    return f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}"


# Every module of this package but the runner is imported, which registers its rules: RULES is complete once
# `infra.rules` is imported. A new rule module is found; nothing lists it.
def _import_rule_modules() -> None:
    import importlib
    import pkgutil

    for module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        if module != "run":
            importlib.import_module(f"{__name__}.{module}")


_import_rule_modules()
