"""How long a server takes to warm, from its node to Ready: what its autoscaler holds a warm server for, and what
scale to zero is held to.

A vLLM server's warm-up is its model's measured cold start on its slice (infra/catalogue/cold_starts.py), or, where
none is measured, the startup probe's whole allowance: a cold start streams the weights from gs:// (the Run:ai
streamer, the fastest path a TPU host has: infra/serving/vllm_args.py) and compiles every program from nothing
(about 30 minutes for a 70B model, tpu-inference PR #3408) after the node and the image.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from infra.catalogue.cold_starts import MEASURED, ColdStart, phases_text
from infra.catalogue.serving_metrics import HPA_SYNC_SECONDS, SCRAPE_INTERVAL
from infra.config import Environment
from infra.config.serving import VllmServing
from infra.serving import vllm_args

# A vLLM server's startup probe allows 90 minutes: a cold 70B compile is about 30 (tpu-inference PR #3408 raised
# its own cold-start timeout to 2400 s), after the node, the image and the weights.
VLLM_WARM_UP_S = 5400
# The canary server loads a small checkpoint from the bucket in seconds: Kubernetes' own scale-down window.
CANARY_WARM_UP_S = 300
# From zero, before a server starts: the endpoint picker's queue scraped (every 15 s) and read by the HPA (every 15 s).
# What Cloud Monitoring takes to make the scraped point readable to the adapter is not counted (not published).
FROM_ZERO_LAG_S = int(SCRAPE_INTERVAL.removesuffix("s")) + HPA_SYNC_SECONDS


@dataclass(frozen=True)
class WarmUp:
    seconds: int
    basis: str  # where `seconds` comes from, as the review shows it
    measured: ColdStart | None = None


CANARY_WARM_UP = WarmUp(CANARY_WARM_UP_S, "the canary loads a small checkpoint in seconds: Kubernetes' default")


def vllm_warm_up(env: Environment, d: VllmServing) -> WarmUp:
    """The deployment's server warm-up: its model's measured cold start on its slice, else the probe's allowance."""
    measured = MEASURED.get((d.model.catalogue_name, env.slices[d.slice].slice.name))
    # Which path the weights take (the fastest a TPU host has: vllm_args.LOAD_FORMAT), for the review to say.
    load = f"{d.model.weights_gb:g} GB of weights streamed from gs:// ({vllm_args.LOAD_FORMAT})"
    if measured is None:
        return WarmUp(VLLM_WARM_UP_S, f"not measured: the startup probe's allowance; {load}")
    phases = phases_text(measured.phases())
    return WarmUp(math.ceil(measured.total_s), f"measured {measured.measured} ({phases}); {load}", measured)
