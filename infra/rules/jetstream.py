"""JetStream: a startup budget that covers restoring a large checkpoint; one shape for disaggregated slices."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from infra.config.serving import JetStreamServing
from infra.rules import Finding, containers, probe_budget, rule, where
from infra.rules.manifest_subject import TUTORIAL_STARTUP_BUDGET_S, ReleaseContext
from infra.rules.sources import JETSTREAM_LWS, MAXTEXT

if TYPE_CHECKING:
    from infra.config import Environment


@rule(
    id="jetstream.startup-probe-covers-restore",
    system="Kubernetes kubelet / JetStream",
    layer="pod-start",
    summary=(
        "The JetStream server's startup probe allows as long as the tutorial's (600 s + 10000 x 1 s): a 405B "
        "restore plus warm-up takes far more than 30 minutes, and a failed probe restarts the whole group."
    ),
    source=f"{JETSTREAM_LWS} (startupProbe initialDelaySeconds 600, periodSeconds 1, failureThreshold 10000)",
    kinds=("LeaderWorkerSet",),
    subject="manifest",
)
def _startup_probe(objects: list[dict[str, Any]], ctx: ReleaseContext) -> Iterator[Finding]:
    for obj in objects:
        leader = obj["spec"]["leaderWorkerTemplate"].get("leaderTemplate") or {}
        images = " ".join(str(c.get("image", "")) for _, c in containers(leader.get("spec") or {}))
        if "jetstream" not in images:
            continue  # another engine's group (vLLM's has its own rule)
        for path, c in containers(leader.get("spec") or {}):
            probe = c.get("startupProbe")
            if probe is None:
                continue
            budget = probe_budget(probe)
            if budget < TUTORIAL_STARTUP_BUDGET_S:
                yield Finding(
                    f"{where(obj)}: leaderTemplate.spec.{path}.startupProbe",
                    probe,
                    f"allows {budget} s; at least {TUTORIAL_STARTUP_BUDGET_S} s",
                )


@rule(
    id="jetstream.prefill-and-decode-one-shape",
    system="JetStream / MaxText (disaggregated serving)",
    layer="engine-start",
    summary=(
        "A disaggregated JetStream deployment's prefill and decode slices have one shape (topology and machine "
        "type): its one set of MaxText arguments gives ici parallelism for the first slice's chips, and MaxText "
        "refuses a product that is not its devices."
    ),
    source=(
        f"infra/serving/jetstream_args.py (maxtext_serving_args: parallelism over the first slice's chips); {MAXTEXT} "
        "src/maxtext/utils/max_utils.py create_device_mesh (the ici parallelism's product is the slice's devices)"
    ),
    subject="environment",
)
def _one_shape(env: Environment) -> Iterator[Finding]:
    for key, d in env.serving.items():
        if not isinstance(d, JetStreamServing) or d.prefill_slice is None or d.decode_slice is None:
            continue
        prefill, decode = env.slices[d.prefill_slice].slice, env.slices[d.decode_slice].slice
        if (prefill.topology, prefill.machine_type) != (decode.topology, decode.machine_type):
            yield Finding(
                ("serving", key, "decode_slice"),
                d.decode_slice,
                f"prefill and decode slices must have one shape: {prefill.topology} on {prefill.machine_type} vs "
                f"{decode.topology} on {decode.machine_type}",
            )
