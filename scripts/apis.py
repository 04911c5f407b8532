"""The first step of `make deploy`: the environment's APIs enabled, then waited for until each one answers.

`gcloud services enable` of every API the stack enables (the stack's google_project_service resources then find
them on), then each API's read-only probe (infra/catalogue/api_probes.py) every PLATFORM_API_POLL seconds (15)
until it no longer answers SERVICE_DISABLED, for at most PLATFORM_API_WAIT seconds (600). The provider does not
retry that answer on the resources that call the API (infra/catalogue/api_probes.py says where it does retry).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time

from infra import settings
from infra.catalogue.api_probes import NOT_YET, probe
from infra.catalogue.gcp_apis import platform_apis
from infra.config import Environment


def _gcloud() -> list[str]:
    return settings.GCLOUD.command()


def apis(env: Environment) -> tuple[str, ...]:
    """What the stack enables (the same call infra/stacks/platform.py makes)."""
    return platform_apis(vertex=env.vertex is not None, inference_gateway=env.inference_gateway)


def enable_and_wait(env: Environment, *, dry_run: bool) -> int:
    wanted = apis(env)
    enable = [*_gcloud(), "services", "enable", *wanted, f"--project={env.project}"]
    if dry_run:
        print(f"dry run, would run: {shlex.join(enable)}")
        print(f"dry run, would wait until each answers: {', '.join(wanted)} (infra/catalogue/api_probes.py)")
        return 0
    print(f"running: {shlex.join(enable)}", flush=True)
    code = subprocess.run(enable, check=False).returncode
    if code:
        print(f"error: enabling the APIs of {env.project} failed", file=sys.stderr)
        return code
    timeout, poll = settings.API_WAIT.seconds(), settings.API_POLL.seconds()
    deadline = time.monotonic() + timeout
    waiting = list(wanted)
    while True:
        still = []
        for api in waiting:
            done = subprocess.run(
                [*_gcloud(), *probe(api, env.project, env.region)], capture_output=True, text=True, check=False
            )
            if done.returncode != 0 and any(s in done.stderr + done.stdout for s in NOT_YET):
                still.append(api)
        if not still:
            print(f"{env.project}: every API answers: {', '.join(wanted)}")
            return 0
        if time.monotonic() >= deadline:
            print(
                f"error: {env.project}: still not usable after {timeout:.0f}s: {', '.join(still)}; nothing was "
                "applied. Deploy again in a few minutes (Service Usage propagates enablement eventually)",
                file=sys.stderr,
            )
            return 1
        print(f"  not yet usable (enabled recently): {', '.join(still)}", flush=True)
        waiting = still
        time.sleep(poll)
