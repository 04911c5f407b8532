"""Cold starts measured on real slices: how long a vLLM server took from its pod's creation to Ready, in the three
phases its pod's own timestamps separate, per model and slice. A deployment may scale to zero only where its model
has a measured cold start on its slice within its `autoscaling.cold_start_budget_s` (rule `vllm.scale-to-zero`), and
its autoscaler holds a warm server at least that long (infra/serving/cold_start.py).

The phases (kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle: the pod's `creationTimestamp`, its
`PodScheduled` and `Ready` conditions' `lastTransitionTime`, the container's `state.running.startedAt`):
- node: created to scheduled: a node found, or a slice's nodes provisioned by the cluster autoscaler;
- image: scheduled to the server's container started: the image pulled and the init containers run;
- serve: started to Ready: the weights streamed (Run:ai streamer from gs://), the programs compiled or read from
  the XLA cache, the server warmed.

How an entry is made: `make status ENV=<env> JSON=1` on the real cluster prints, for each server, the `cold_start`
of its newest pod (scripts/status.py: cold_start_of); copy the slowest of several starts here, with the date, the
image digest and the environment it was read on. No entry is estimated: where a (model, slice) has none, the
platform holds servers for the startup probe's whole allowance and refuses scale to zero.
"""

from __future__ import annotations

from dataclasses import dataclass

PHASES = ("node", "image", "serve")


def phases_text(phases: dict[str, float]) -> str:
    """The phases as the review and `make status` say them: `node 240 s, image 95 s, serve 410 s`."""
    return ", ".join(f"{name} {seconds:g} s" for name, seconds in phases.items())


@dataclass(frozen=True)
class ColdStart:
    node_s: float
    image_s: float
    serve_s: float
    measured: str  # the date (ISO) it was read
    source: str  # where: the environment, the release and the image digest

    @property
    def total_s(self) -> float:
        return self.node_s + self.image_s + self.serve_s

    def phases(self) -> dict[str, float]:
        return dict(zip(PHASES, (self.node_s, self.image_s, self.serve_s), strict=True))


# (the model's catalogue name, the slice's name) -> its slowest measured cold start. None is recorded yet: no server
# of this platform has run on a real slice (the machine that builds it has no TPU).
MEASURED: dict[tuple[str, str], ColdStart] = {}
