"""Plan review: what a change does, in Markdown for the pull request and in JSON for machines.

One review, two inputs:
- offline (no credentials): the synthesized stacks of this checkout against a baseline `cdktf.out`, by resource
  address (`diff.review_stack`);
- online: a real Terraform plan as `terraform show -json` prints it (`diff.review_plan`).

It reports counts per action, every create / update / replace / delete with the attributes that changed (and those
forcing a replacement), resource drift, the accelerator inventory before and after (`holdings`), what every node
pool costs at its fewest and most nodes and what the change does to it (`costs`), the GPUs each orchestrator would
hold, the security posture (`posture`), and a blocking section for any change the gate stops (`gate`).

The modules, lowest first: `model` (the shapes), `costs`, `holdings`, `gate`, `upgrades` (the Helm upgrades the
API server would refuse), `diff`, `real_plan` (the providers' own plan of the change, where one is at hand),
`posture`, `render`; this module writes the files.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from infra.cdk.layout import stack_files
from infra.review import real_plan
from infra.review.costs import cost_summary, pool_costs, render_costs, stack_pools
from infra.review.diff import changed_values, diff, resources, review_plan, review_stack
from infra.review.gate import gate
from infra.review.holdings import (
    accelerator_inventory,
    gke_holdings,
    pool_inventory,
    slurm_holdings,
    vertex_holdings,
    vm_holdings,
)
from infra.review.model import (
    BLOCKED,
    PROTECTED_TYPES,
    Change,
    Holding,
    PlanFormatError,
    PoolCost,
    StackReview,
)
from infra.review.posture import security_posture
from infra.review.render import REVIEW_SCHEMA, render, review_json
from infra.review.upgrades import refused_upgrades

__all__ = [
    "BLOCKED",
    "PROTECTED_TYPES",
    "REVIEW_SCHEMA",
    "Change",
    "Holding",
    "PlanFormatError",
    "PoolCost",
    "StackReview",
    "accelerator_inventory",
    "changed_values",
    "cost_summary",
    "diff",
    "gate",
    "gke_holdings",
    "pool_costs",
    "pool_inventory",
    "render",
    "render_costs",
    "resources",
    "review_json",
    "review_plan",
    "review_stack",
    "security_posture",
    "slurm_holdings",
    "stack_pools",
    "vertex_holdings",
    "vm_holdings",
    "write_reviews",
]


def _load_stacks(outdir: Path) -> dict[str, dict[str, Any]]:
    """Every `stacks/<stack>/cdk.tf.json` under `outdir`; a file that is not a stack's JSON object is refused by
    path (PlanFormatError)."""
    stacks = {}
    for path in stack_files(outdir):
        try:
            body = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise PlanFormatError(f"{path}: not JSON ({err}); synthesize it again (make synth)") from err
        if not isinstance(body, dict):
            raise PlanFormatError(f"{path}: a {type(body).__name__}, not a synthesized stack (a JSON object)")
        stacks[path.parent.name] = body
    return stacks


def _training_sections(env: str) -> str:
    """Which training recipes run on the environment's training slice (`python -m scripts.recipes`) and what a
    failure costs each training job (workloads/trainer/recovery.py), if its file is among the environments."""
    from infra.config import environments_dir, parse_environment
    from workloads.trainer.compiled import environment_recipes
    from workloads.trainer.recovery import recovery_lines

    path = environments_dir() / f"{env}.yaml"
    if not path.exists():
        return ""
    parsed = parse_environment(path)
    sections = (
        ("Training recipes on its slice", environment_recipes(parsed)),
        ("Surviving a failure", recovery_lines(parsed)),
    )
    return "".join(f"\n## {title}\n\n```\n" + "\n".join(lines) + "\n```\n" for title, lines in sections if lines)


def _holdings(outdir: Path, env: str, body: Mapping[str, Any]) -> list[Holding]:
    """What every orchestrator of the environment would hold: its GKE pools and VM groups (the stack), its Slurm
    partitions (`slurm/<env>/blueprint.yaml`) and its Vertex AI jobs (`vertex/<env>/*.json`)."""
    holdings = gke_holdings(body)
    blueprint = outdir / "slurm" / env / "blueprint.yaml"
    if blueprint.exists():
        holdings += slurm_holdings(yaml.safe_load(blueprint.read_text()))
    jobs = sorted((outdir / "vertex" / env).glob("*.json"))
    holdings += vertex_holdings({p.stem: json.loads(p.read_text()) for p in jobs})
    return holdings + vm_holdings(body)


def write_reviews(
    outdir: Path,
    baseline: Path | None = None,
    confirmed: Iterable[str] = (),
    confirmed_by_stack: Mapping[str, Iterable[str]] | None = None,
    in_change_by_stack: Mapping[str, Iterable[str]] | None = None,
) -> list[StackReview]:
    """Write `<outdir>/review/<env>.md` for every synthesized stack; return the reviews. `confirmed` holds for every
    stack, `confirmed_by_stack` for the stack it names (an environment file's `confirm:` entries merged before the
    change), `in_change_by_stack` likewise for the entries of the change itself (StackReview.is_confirmed)."""
    current = _load_stacks(outdir)
    if not current:
        raise FileNotFoundError(f"no synthesized stacks under {outdir}/stacks; run `make synth` first")
    base = _load_stacks(baseline) if baseline else None
    if baseline is not None and not base:
        # A baseline folder with no stacks (a typo, an unsynthesized checkout) would review everything as new.
        raise FileNotFoundError(f"baseline {baseline}: no synthesized stacks under {baseline}/stacks")
    review_dir = outdir / "review"
    review_dir.mkdir(exist_ok=True)
    reviews = []
    for stack, body in current.items():
        mine = [*confirmed, *(confirmed_by_stack or {}).get(stack, ())]
        env = stack.removeprefix("platform-")
        before = base.get(stack, {}) if base is not None else None
        upgrades = refused_upgrades(stack, body, before, baseline) if before and baseline else None
        in_change = (in_change_by_stack or {}).get(stack, ())
        review = review_stack(
            stack,
            body,
            before,
            mine,
            holdings=_holdings(outdir, env, body),
            posture=security_posture(body),
            upgrades=upgrades,
            in_change=in_change,
        )
        planned = real_plan.read(outdir / "tofu", stack, body, before) if before is not None else None
        if planned is not None:
            real = review_plan(stack, planned, mine, held=upgrades, in_change=in_change).changes
            review.disagreements = real_plan.disagreements(review.changes, real)
            review.changes = real
            review.real_plan = str(real_plan.plan_file(Path("tofu"), stack))  # in the plan's own folder
        (review_dir / f"{env}.md").write_text(render(review) + _training_sections(env))
        (review_dir / f"{env}.json").write_text(json.dumps(review_json(review), indent=1, sort_keys=True) + "\n")
        reviews.append(review)
    return reviews
