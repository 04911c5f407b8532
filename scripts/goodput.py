"""A training run's goodput as MaxText records it (ML Goodput Measurement, `training.goodput`): read from Cloud
Monitoring for `make status` (scripts/status.py), by the name `make train` puts on the run's RayJob or JobSet.

What is read is what ml-goodput-measurement 0.2.3 (MaxText's pin) uploads every 30 s (src/monitoring.py): on the
resource compute.googleapis.com/Workload (workload_id: the run's name), goodput_time by goodput_source (TOTAL),
badput_time by badput_source, and total_elapsed_time (window_type cumulative), each a GAUGE of seconds since the run
first started (infra/catalogue/cloud_metrics.py GOODPUT_METRICS)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

# On a run's RayJob or JobSet (workloads/charts/ray-training, from make train): the name MaxText records its goodput
# under, Cloud Monitoring's workload_id (infra/catalogue/cloud_metrics.py GOODPUT_METRICS).
GOODPUT_WORKLOAD = "platform.ml/goodput-workload"


def duration(seconds: float) -> str:
    """`2h05m`, or `4m07s` under an hour."""
    hours, rest = divmod(max(int(seconds), 0), 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


@dataclass(frozen=True)
class Goodput:
    """A run's goodput as MaxText's ML Goodput Measurement last uploaded it (seconds, since the run first started)."""

    productive_s: float  # compute.googleapis.com/workload/goodput_time, goodput_source TOTAL
    elapsed_s: float  # compute.googleapis.com/workload/total_elapsed_time, window_type cumulative
    badput_s: dict[str, float]  # compute.googleapis.com/workload/badput_time by badput_source

    def text(self) -> str:
        share = f"{self.productive_s / self.elapsed_s:.0%}" if self.elapsed_s else "-"
        worst = sorted(((s, k) for k, s in self.badput_s.items() if s > 0), reverse=True)[:2]
        lost = ", ".join(f"{k.lower()} {duration(s)}" for s, k in worst)
        return f"goodput {share} of {duration(self.elapsed_s)}" + (f" (most badput: {lost})" if lost else "")


GOODPUT_TIME, BADPUT_TIME, ELAPSED = (
    f"compute.googleapis.com/workload/{name}" for name in ("goodput_time", "badput_time", "total_elapsed_time")
)


def read_goodput(project: str, workloads: Iterable[str], since: datetime, now: datetime, client: Any = None) -> dict[
    str, Goodput
]:  # fmt: skip
    """Each workload's newest goodput, badput and elapsed time that MaxText uploaded to Cloud Monitoring between
    `since` and `now` (three reads, every workload at once); a workload with none is left out. `client`: a
    monitoring_v3.MetricServiceClient (made here with the caller's credentials by default)."""
    from google.cloud import monitoring_v3

    wanted = sorted(set(workloads))
    if not wanted:
        return {}
    client = client or monitoring_v3.MetricServiceClient()
    interval = monitoring_v3.TimeInterval(start_time=since, end_time=now)
    ids = ", ".join(json.dumps(w) for w in wanted)
    newest: dict[tuple[str, str, str], tuple[datetime, float]] = {}
    for metric, extra in ((GOODPUT_TIME, ' AND metric.labels.goodput_source = "TOTAL"'), (BADPUT_TIME, ""),
                          (ELAPSED, ' AND metric.labels.window_type = "cumulative"')):  # fmt: skip
        found = client.list_time_series(
            request={
                "name": f"projects/{project}",
                "filter": f'metric.type = "{metric}" AND resource.type = "compute.googleapis.com/Workload" AND '
                f"resource.labels.workload_id = one_of({ids}){extra}",
                "interval": interval,
                "view": monitoring_v3.ListTimeSeriesRequest.TimeSeriesView.FULL,
            }
        )
        for series in found:
            if not series.points:
                continue
            point = series.points[0]  # Cloud Monitoring returns a series' points newest first
            key = (series.resource.labels["workload_id"], metric, series.metric.labels.get("badput_source", ""))
            at = point.interval.end_time
            if key not in newest or at > newest[key][0]:
                newest[key] = (at, point.value.double_value)
    out = {}
    for workload in wanted:
        values = {(m, source): v for (w, m, source), (_, v) in newest.items() if w == workload}
        if (GOODPUT_TIME, "") in values and (ELAPSED, "") in values:
            badput = {source: v for (m, source), v in values.items() if m == BADPUT_TIME}
            out[workload] = Goodput(values[(GOODPUT_TIME, "")], values[(ELAPSED, "")], badput)
    return out
