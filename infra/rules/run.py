"""Run every rule on what `make synth` wrote: each environment, each stack, each rendered release."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.cdk.layout import STACK_FILE
from infra.charts.check import ChartCheckError
from infra.config import environment_file
from infra.derive.provenance import release_field, resource_field
from infra.rules import Violation, check_environment, check_environments, check_release, check_stack, rules_for
from infra.rules.manifest_subject import ReleaseContext


@dataclass
class Report:
    """What ran and what it found; `lines` name the file, field, value, rule and source of each violation."""

    rules: dict[str, int] = field(default_factory=dict)
    subjects: dict[str, int] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    # Each synthesized stack with its rendered releases, by stack name: rendered once, read again by the
    # placement report.
    rendered: dict[str, tuple[dict[str, Any], Releases]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.lines

    def summary(self) -> str:
        ran = sum(self.rules.values())
        parts = ", ".join(f"{self.rules[s]} {_label(s)} rules on {self.subjects[s]} {_noun(s)}" for s in self.rules)
        verdict = "no violations" if self.ok else f"{len(self.lines)} violation(s)"
        return f"rules: {ran} rules ran ({parts}): {verdict}"


def _noun(subject: str) -> str:
    return {"environment": "environments", "environments": "folder", "terraform": "stacks", "manifest": "releases"}[
        subject
    ]


def _label(subject: str) -> str:
    return "across-environment" if subject == "environments" else subject


Releases = dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]


class ReleaseRefused(ChartCheckError):
    """A release whose chart refuses the values the stack passes (Helm's values.schema.json), by release name."""

    def __init__(self, release: str, err: ChartCheckError) -> None:
        self.release = release
        super().__init__(" ".join(str(err).split()))  # Helm's lines, on one line


def local_releases(stack: dict[str, Any]) -> list[dict[str, Any]]:
    """The helm_release resources of a stack's local charts (an upstream controller's chart, from a repository, is
    not rendered here)."""
    return [r for r in (stack.get("resource", {}).get("helm_release") or {}).values() if "repository" not in r]


def render_release(release: dict[str, Any], charts: Path | None = None) -> list[dict[str, Any]]:
    """The objects a local chart's helm_release (a synthesized stack's) renders: its chart from `charts` (this
    checkout's by default) with its values; ChartCheckError where Helm refuses them."""
    from infra.charts.check import render

    chart = str(release["chart"]).rsplit("/", 1)[-1]
    return render(chart, _values(release), name=release["name"], namespace=release["namespace"], charts=charts)


def _values(release: dict[str, Any]) -> dict[str, Any]:
    values = release["values"][0]
    return json.loads(values) if isinstance(values, str) else values


def stack_releases(stack: dict[str, Any]) -> Releases:
    """(helm_release resource, rendered objects) of every local chart release of a stack, by release name; a
    release whose runs are RayJobs (ray-training, runs: jobs) also with what one run makes, marked as such
    (infra/charts/runs.py), so the rules, the policy and the placement hold it at plan."""
    from infra.charts.runs import PLAN_RUN_COMMAND, PLAN_RUN_NAME, made_per_run, runs_as_jobs, with_run

    out = {}
    for release in local_releases(stack):
        try:
            objects = render_release(release)
            values = _values(release)
            if runs_as_jobs(values):
                run = {**release, "values": [with_run(values, PLAN_RUN_NAME, PLAN_RUN_COMMAND)]}
                objects += made_per_run(render_release(run))
        except ChartCheckError as err:
            raise ReleaseRefused(release["name"], err) from None
        out[release["name"]] = (release, objects)
    return out


def check_synthesized(
    stack: dict[str, Any], releases: Releases | None = None
) -> tuple[list[Violation], list[tuple[str, Violation]], int]:
    """(terraform violations, (release, violation) pairs, releases checked) of one synthesized stack."""
    releases = stack_releases(stack) if releases is None else releases
    objects = {name: objs for name, (_, objs) in releases.items()}
    manifest: list[tuple[str, Violation]] = []
    for name, (release, objs) in releases.items():
        ctx = ReleaseContext(name=name, namespace=release["namespace"], stack=stack, stack_objects=objects)
        manifest += [(name, v) for v in check_release(objs, ctx)]
    return check_stack(stack), manifest, len(releases)


def shown_file(name: str) -> str:
    """Environment `name`'s file (the one the loader read) as a refusal names it: relative to the working
    directory where it lies below it."""
    path = environment_file(name)
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


def _origin(name: str, field: str | None, what: str) -> str:
    """Where a refusal found in environment `name`'s stack points: `<environment file>: <field> (synthesized as
    <what>)` where one field of the environment made it, else `<what>`."""
    return f"{shown_file(name)}: {field} (synthesized as {what})" if field else what


def run(envs: dict[str, Any], stacks_dir: Path) -> Report:
    report = Report()
    for subject in ("environment", "environments", "terraform", "manifest"):
        report.rules[subject] = len(rules_for(subject))
        report.subjects[subject] = 0
    for name, env in envs.items():
        report.subjects["environment"] += 1
        report.lines += [v.line(shown_file(name)) for v in check_environment(env)]
    report.subjects["environments"] = 1
    for name, found in check_environments(envs).items():
        report.lines += [v.line(shown_file(name)) for v in found]
    for path in sorted(stacks_dir.glob(f"*/{STACK_FILE}")):
        stack = json.loads(path.read_text())
        name = path.parent.name.removeprefix("platform-")
        env = envs.get(name) if path.parent.name.startswith("platform-") else None
        try:
            releases = stack_releases(stack)
        except ReleaseRefused as err:
            # A release Helm would refuse to render (its chart's values.schema.json): a refusal, not a traceback.
            where = _origin(name, release_field(env, err.release), f"{path} helm_release {err.release}")
            report.lines.append(
                f"{where}: {err} [Helm: the chart's values.schema.json refuses the values the stack passes]"
            )
            continue
        report.rendered[path.parent.name] = (stack, releases)
        terraform, manifest, count = check_synthesized(stack, releases)
        report.subjects["terraform"] += 1
        report.subjects["manifest"] += count
        report.lines += [v.line(_origin(name, resource_field(env, v.field), str(path))) for v in terraform]
        report.lines += [v.line(_origin(name, release_field(env, r), f"{path} helm_release {r}")) for r, v in manifest]
    return report
