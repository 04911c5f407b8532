"""When GKE may upgrade the cluster and its nodes: a recurring maintenance window and maintenance exclusions.

TPU and GPU nodes do not live-migrate: a node upgrade stops the workload on them, and a multi-host TPU slice is
interrupted whole (https://cloud.google.com/kubernetes-engine/docs/concepts/handle-disruption-gpu-tpu). A window
says when GKE's automatic upgrades may happen; an exclusion says when they may not
(https://cloud.google.com/kubernetes-engine/docs/concepts/maintenance-windows-and-exclusions: one recurring
window per cluster, several exclusions). Neither governs Compute Engine's own host maintenance.

The checks follow GKE's API as Cluster Toolkit v1.95.0 encodes it (modules/scheduler/gke-cluster/variables.tf
`maintenance_exclusions`: at most three exclusions; scope NO_UPGRADES, NO_MINOR_UPGRADES or
NO_MINOR_OR_NODE_UPGRADES) and as the pinned provider takes it: google 6.50.0's maintenance_exclusion required an
end_time; 7.45.0 (the pinned provider) also takes one without it, ending at the version's end of support
(`exclusion_options.end_time_behavior` UNTIL_END_OF_SUPPORT, added in hashicorp/terraform-provider-google #25120),
which the environment file does not offer yet: every exclusion here has an end time. How long each scope may
last is GKE's to refuse at apply; it is not checked here. A window must leave GKE at least 48 hours of maintenance
in any 32 days, counting only stretches of at least 4 hours (WINDOW_SOURCE): checked here, for the leanest 32 days
the recurrence can give.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, StringConstraints, field_validator, model_validator

from infra.config.base import Model

# RFC 5545 recurrence rules of the two kinds a maintenance window is written with: every day, or on named weekdays
# (GKE's examples: FREQ=DAILY, FREQ=WEEKLY;BYDAY=SA,SU).
_RRULE = re.compile(r"^FREQ=(DAILY|WEEKLY;BYDAY=(MO|TU|WE|TH|FR|SA|SU)(,(MO|TU|WE|TH|FR|SA|SU))*)$")


WINDOW_SOURCE = (
    "https://cloud.google.com/kubernetes-engine/docs/how-to/maintenance-windows-and-exclusions "
    "(Considerations when configuring a maintenance window)"
)
# "You must allow at least 48 hours of maintenance availability in a 32-day rolling window. Only contiguous
# availability windows of at least four hours are considered." (WINDOW_SOURCE)
MIN_HOURS_PER_32_DAYS = 48
# "No upgrades": at most 30 days; the two narrower scopes may last until the minor version's end of support.
EXCLUSION_SOURCE = (
    "https://cloud.google.com/kubernetes-engine/docs/concepts/maintenance-windows-and-exclusions "
    "(Scope of upgrades: No upgrades, up to 30 days)"
)
MAX_NO_UPGRADES_DAYS = 30
MIN_CONTIGUOUS_HOURS = 4
_WEEKDAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")


def fewest_occurrences_in_32_days(recurrence: str) -> int:
    """How many times a window recurring as `recurrence` opens in the leanest 32 consecutive days."""
    if recurrence == "FREQ=DAILY":
        return 32
    days = {_WEEKDAYS.index(d) for d in recurrence.split("BYDAY=", 1)[1].split(",")}
    return min(sum((first + i) % 7 in days for i in range(32)) for first in range(7))


def _when(value: str) -> datetime:
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ")


def _a_real_time(value: str) -> str:
    try:
        _when(value)
    except ValueError as err:  # 2026-02-30: the pattern holds, the calendar does not
        raise ValueError(f"not a time of the calendar ({err})") from None
    return value


# RFC 3339 in UTC, as the API takes it (2026-01-03T02:00:00Z), and a real day and time.
Timestamp = Annotated[
    str,
    StringConstraints(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$"),
    AfterValidator(_a_real_time),
]


class MaintenanceWindow(Model):
    """A recurring window: its first occurrence (start, end) and how it repeats."""

    start: Timestamp
    end: Timestamp
    recurrence: str

    @field_validator("recurrence")
    @classmethod
    def _rrule(cls, value: str) -> str:
        if not _RRULE.match(value):
            raise ValueError(
                "write FREQ=DAILY or FREQ=WEEKLY;BYDAY=<days> with days among MO, TU, WE, TH, FR, SA, SU "
                "(RFC 5545 recurrence rules, as GKE's maintenance windows take them)"
            )
        return value

    @model_validator(mode="after")
    def _ends_after_start(self) -> MaintenanceWindow:
        hours = (_when(self.end) - _when(self.start)).total_seconds() / 3600
        if hours <= 0:
            raise ValueError(f"end {self.end} is not after start {self.start}")
        if hours > 24:
            raise ValueError(f"one occurrence lasts {hours:g} hours; a daily or weekly window lasts at most 24")
        if hours < MIN_CONTIGUOUS_HOURS:  # shorter than a day, an occurrence never touches the next one
            raise ValueError(
                f"one occurrence lasts {hours:g} hours ({self.start} to {self.end}); GKE counts only stretches of at "
                f"least {MIN_CONTIGUOUS_HOURS} hours toward its {MIN_HOURS_PER_32_DAYS} hours in 32 days "
                f"[source: {WINDOW_SOURCE}]"
            )
        opens = fewest_occurrences_in_32_days(self.recurrence)
        if opens * hours < MIN_HOURS_PER_32_DAYS:
            raise ValueError(
                f"{self.recurrence} with {hours:g}-hour occurrences opens {opens} times in the leanest 32 days: "
                f"{opens * hours:g} hours; GKE requires at least {MIN_HOURS_PER_32_DAYS} hours of maintenance in any "
                f"32 days (longer occurrences, {-(-MIN_HOURS_PER_32_DAYS // opens)} hours each, or more days) "
                f"[source: {WINDOW_SOURCE}]"
            )
        return self


class MaintenanceExclusion(Model):
    """A period in which GKE does not upgrade what `scope` names."""

    name: Annotated[str, StringConstraints(pattern=r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")]
    start: Timestamp
    end: Timestamp
    scope: Literal["NO_UPGRADES", "NO_MINOR_UPGRADES", "NO_MINOR_OR_NODE_UPGRADES"]
    """NO_MINOR_OR_NODE_UPGRADES: control plane patches only, no node upgrades (what keeps slices running);
    NO_MINOR_UPGRADES: patches of control plane and nodes; NO_UPGRADES: nothing at all."""

    @model_validator(mode="after")
    def _ends_after_start(self) -> MaintenanceExclusion:
        if _when(self.end) <= _when(self.start):
            raise ValueError(f"end {self.end} is not after start {self.start}")
        days = (_when(self.end) - _when(self.start)).total_seconds() / 86400
        if self.scope == "NO_UPGRADES" and days > MAX_NO_UPGRADES_DAYS:
            raise ValueError(
                f"a NO_UPGRADES exclusion of {days:g} days ({self.start} to {self.end}): GKE allows at most "
                f"{MAX_NO_UPGRADES_DAYS} [source: {EXCLUSION_SOURCE}]; use NO_MINOR_OR_NODE_UPGRADES for longer"
            )
        return self


class Maintenance(Model):
    """The cluster's maintenance policy."""

    window: MaintenanceWindow
    exclusions: list[MaintenanceExclusion] = Field(default_factory=list, max_length=3)

    @model_validator(mode="after")
    def _names_unique(self) -> Maintenance:
        names = [e.name for e in self.exclusions]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"exclusion name {name!r} is used twice")
        return self
