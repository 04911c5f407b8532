"""A JobSet run's MaxText arguments with the local tier (training.launcher: jobset, resilience.local_tier), held
against the pinned MaxText's own configuration: it starts multi-tier checkpointing, reading what GKE's add-on writes
where the JobSet mounts the RAM disk."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.engine.helpers import REPO
from workloads.constants import MTC_MOUNT

pytestmark = pytest.mark.engine

# Run as its own process: MaxText starts JAX's distributed runtime only outside pytest (configs/pyconfig.py,
# `if "pytest" not in sys.modules`). Without the add-on (no GKE here) Orbax would wait 900 s for the file the
# add-on writes, so the process stops at the ask and says where it asked.
PROBE = """
import json
from orbax.checkpoint.experimental.emergency.multi_tier_checkpointing import initialization
from maxtext.configs import pyconfig
from infra.catalogue.accelerators import tpu_slice
from workloads.constants import MTC_MOUNT
from workloads.trainer.maxtext import local_tier_args, maxtext_args, resolve_config_path
from workloads.trainer.recipes import get_recipe

class Asked(Exception):
    pass

def ask(directory, *args, **kwargs):
    raise Asked(str(directory))

initialization._retrieve_jax_init_info = ask
argv = maxtext_args(get_recipe("llama3-8b-2-slices"), tpu_slice("v6e", "4x4", "ct6e-standard-4t"), run_name="r",
                    base_output_directory="/tmp/o", slices=2) + local_tier_args(25, 100, MTC_MOUNT)
try:
    pyconfig.initialize(["train", resolve_config_path(argv[0]), *argv[1:]])
    print(json.dumps({"asked": None}))
except Asked as err:
    print(json.dumps({"asked": str(err)}))
"""


def test_maxtext_starts_multi_tier_checkpointing_from_the_ram_disk_the_jobset_mounts() -> None:
    """Before anything else, MaxText's start asks the add-on for the process's rank and coordinator: the file the
    add-on writes into the RAM disk at MTC_MOUNT. (Its own checks of the values run after that; the platform checks
    them at load, infra/config/training.py.)"""
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    last = next(line for line in reversed(done.stdout.splitlines()) if line.startswith("{"))
    assert json.loads(last) == {"asked": MTC_MOUNT}
