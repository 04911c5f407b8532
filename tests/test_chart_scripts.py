"""The charts' shell scripts are generated scripts too: every container whose command is a shell script,
run under bash -euo pipefail as its container or node runs it, ShellCheck'd, and held to its host's facts."""

from __future__ import annotations

from typing import Any

import pytest

from infra.rules import check_script
from infra.rules.run import stack_releases
from infra.shell.charts import chart_scripts
from infra.shell.commands import commands
from infra.shell.run import run_script, shellcheck


@pytest.fixture(scope="module")
def dev_scripts(stacks: dict[str, dict[str, Any]]) -> dict[str, Any]:
    releases = {name: objs for name, (_, objs) in stack_releases(stacks["dev"]).items()}
    return {s.name: s for s in chart_scripts("dev", releases)}


def test_every_chart_script_is_found_with_its_host(dev_scripts: dict[str, Any]) -> None:
    hosts = {name: s.host for name, s in dev_scripts.items()}
    assert hosts["charts/gpu-networking/daemonset-host-setup.sh"] == "gke-cos-node"  # nsenter -at 1 -- bash -c
    assert hosts["charts/gpu-networking/daemonset-installer.sh"] == "gke-tcpxo-image"
    assert hosts["charts/nccl-test/jobset-nccl-test.sh"] == "gke-tcpxo-image"  # bash /config/run.sh (a ConfigMap)
    assert hosts["charts/serve-llama70b-vllm-mh/leaderworkerset-vllm.sh"] == "gke-container"
    assert {"charts/gpu-training/jobset-train.sh", "charts/serve-llama405b/job-convert.sh"} <= set(hosts)


def test_every_chart_script_runs_and_passes_shellcheck_and_the_host_rules(dev_scripts: dict[str, Any]) -> None:
    scripts = list(dev_scripts.values())
    assert {label: found for label, found in shellcheck(scripts).items() if found} == {}
    for script in scripts:
        outcome = run_script(script)
        assert outcome.ok, f"{script.name}: {outcome.output[-1500:]}"
        assert check_script(script) == [], script.name


def test_a_node_script_calling_what_cos_lacks_is_refused(dev_scripts: dict[str, Any]) -> None:
    import dataclasses

    setup = dev_scripts["charts/gpu-networking/daemonset-host-setup.sh"]
    bad = dataclasses.replace(setup, text=setup.text + "\napt-get install -y ethtool\n")
    found = check_script(bad)
    assert found and "apt-get" in found[0].line() and "host.command-on-path" in found[0].line()


def test_an_array_assignment_is_values_not_commands() -> None:
    """Before the fix the reader took the words of `hosts=(a b)` for commands (the NCCL test's host list)."""
    found = [c.name for c in commands('hosts=(node-0.svc node-1.svc)\nmpirun "${hosts[@]}"\n', ("/usr/bin",), "/root")]
    assert found == ["mpirun"]
