"""What each environment watches: who its alert policies notify, and when they fire.

Every environment gets its dashboard and alert policies (infra/derive/observability.py derives them from what the
environment runs); this section says where the alerts go and tunes their thresholds.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from infra.config.base import Model

# An address Cloud Monitoring's email channel takes (labels.email_address): one mailbox, no display name.
Email = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$")]


class Monitoring(Model):
    """Where the environment's alerts are sent, and the thresholds they fire at."""

    # Each address becomes an email notification channel of every alert policy. None: incidents open in Cloud
    # Monitoring and notify no one.
    notify: list[Email] = []  # noqa: RUF012
    # Serving: the share of a deployment's answers that are server errors (5xx) over 5 minutes.
    error_rate: float = Field(0.05, gt=0, lt=1)
    # Serving: how long requests may wait while a server generates nothing before the queue counts as stuck.
    queue_stuck_minutes: int = Field(15, ge=5, le=1440)
    # Nodes: how long a node may be not Ready, or a multi-host TPU slice not whole, before it pages.
    not_ready_minutes: int = Field(10, ge=5, le=1440)
