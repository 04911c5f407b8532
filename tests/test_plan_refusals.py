"""Bad edits of the classes the rules of the real systems catch only across objects (pods of several releases
on one pool), refused by `make plan` itself: a non-zero exit naming the pod, the pool, the rule and its source,
and cdktf.out left as it was."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from infra.config import ENVIRONMENTS_DIR
from tests.helpers import REPO


@pytest.mark.slow
def test_make_plan_refuses_a_system_pool_too_small_for_the_pods_that_share_it(tmp_path: Path) -> None:
    environments = tmp_path / "environments"
    environments.mkdir()
    shutil.copy(ENVIRONMENTS_DIR / "prod.yaml", environments / "prod.yaml")
    dev = (ENVIRONMENTS_DIR / "dev.yaml").read_text()
    assert "    max_nodes: 5\n" in dev
    (environments / "dev.yaml").write_text(dev.replace("    max_nodes: 5\n", "    max_nodes: 3\n", 1))
    out = tmp_path / "cdktf.out"
    done = subprocess.run(
        ["make", "--no-print-directory", "plan", f"OUT={out}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PLATFORM_ENVIRONMENTS_DIR": str(environments)},
    )
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "Traceback" not in said
    refusal = next(line for line in said.splitlines() if "gke.pools-hold-their-pods-together" in line)
    # The file and the field that made the release, then what the synth made of it.
    assert refusal.startswith(f"error: {environments / 'dev.yaml'}: serving.llama70b-vllm (synthesized as "), refusal
    assert "Deployment/serve-llama70b-vllm-epp" in refusal
    assert "find no room in system (at most 3 nodes)" in refusal
    assert "cluster-autoscaler" in refusal  # the source
    assert not out.exists()


def test_values_a_chart_refuses_are_a_refusal_of_the_rules_step_not_a_traceback(
    synth_dir: Path, tmp_path: Path, envs: dict
) -> None:
    """Before: a value the chart's schema refuses (a vLLM flag the chart's pattern did not take) escaped the rules
    step as ChartCheckError with a Python traceback."""
    import json

    from infra.rules.run import run

    stacks = tmp_path / "stacks"
    shutil.copytree(synth_dir / "stacks", stacks)
    path = stacks / "platform-dev" / "cdk.tf.json"
    stack = json.loads(path.read_text())
    release = next(r for r in stack["resource"]["helm_release"].values() if r["name"] == "serve-llama70b-vllm")
    values = json.loads(release["values"][0])
    values["args"] = [*values["args"], "not-a-flag"]
    release["values"] = [json.dumps(values)]
    path.write_text(json.dumps(stack))
    report = run(envs, stacks)
    [line] = [line for line in report.lines if "values.schema.json" in line]
    # The environment file and the field that made the release, the value refused and the rule of the chart, on one
    # line (Helm's message spans several).
    assert line.startswith("infra/environments/dev.yaml: serving.llama70b-vllm (synthesized as "), line
    assert "helm_release serve-llama70b-vllm): vllm-tpu:" in line and "'not-a-flag' does not match pattern" in line


def test_every_pool_and_release_a_stack_makes_is_traced_to_the_field_that_made_it(
    envs: dict, stacks: dict[str, dict[str, Any]]
) -> None:
    """A refusal the rules find only in a synthesized stack or a rendered release names the environment file's field
    (infra/derive/provenance.py): each node pool and release of what ships is traced to a field the file has."""
    import yaml

    from infra.derive.provenance import resource_field

    for name, stack in stacks.items():
        data = yaml.safe_load((ENVIRONMENTS_DIR / f"{name}.yaml").read_text())
        traced = ("google_container_node_pool", "helm_release", "google_storage_bucket", "google_container_cluster")
        for rtype in traced:
            for body in stack["resource"][rtype].values():
                field = resource_field(envs[name], f"{rtype}.{body['name']}")
                assert field is not None, f"{name}: {rtype}.{body['name']} is traced to no field"
                node = data
                for part in re.findall(r"[^.\[\]]+", field):  # slices.vllm.capacity[1]: a list's item by index
                    if isinstance(node, list):
                        node = node[int(part)]
                        continue
                    if part not in node:  # a field left to its default (buckets.<key> with no name) still names it
                        assert part == field.split(".")[-1] and field.startswith("buckets."), (name, field)
                        break
                    node = node[part]
