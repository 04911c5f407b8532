"""What each environment watches: who its alert policies notify, and when they fire.

Every environment gets its dashboard and alert policies (infra/derive/observability.py derives them from what the
environment runs); this section says where the alerts go and tunes their thresholds.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints, field_validator, model_validator

from infra.config.base import Model

# An address Cloud Monitoring's email channel takes (labels.email_address): one mailbox, no display name.
Email = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$")]
# A Cloud Billing account id: three groups of six upper-case hexadecimal digits (billingAccounts/<id>).
BillingAccount = Annotated[str, StringConstraints(pattern=r"^[0-9A-F]{6}-[0-9A-F]{6}-[0-9A-F]{6}$")]
# A budget's all_updates_rule takes at most 5 monitoring notification channels (google_billing_budget,
# hashicorp/google v7.45.0 website/docs/r/billing_budget.html.markdown: "A maximum of 5 channels are allowed").
# Cloud Monitoring: notification channels per alerting policy (https://cloud.google.com/monitoring/quotas).
POLICY_CHANNELS = 16
BUDGET_CHANNELS = 5


class Budget(Model):
    """A monthly budget on the environment's project (Cloud Billing Budgets): an alert to `notify` and the billing
    account's administrators each time the month's actual spend passes a threshold, and once its forecast passes the
    whole amount."""

    billing_account: BillingAccount
    monthly_usd: int = Field(ge=1, le=100_000_000)
    thresholds: list[float] = Field(default=[0.5, 0.9, 1.0], min_length=1, max_length=10)
    """Shares of `monthly_usd` of actual spend that alert (1.0 is the whole budget; above it, an overrun)."""
    forecast: bool = True
    """Also alert when the month's forecast spend passes the whole budget (spend_basis FORECASTED_SPEND)."""

    @field_validator("thresholds")
    @classmethod
    def _thresholds(cls, thresholds: list[float]) -> list[float]:
        if any(not 0 < t <= 10 for t in thresholds):
            raise ValueError("each threshold is a share of the budget above 0 and at most 10 (1.0 is the budget)")
        if thresholds != sorted(set(thresholds)):
            raise ValueError("thresholds go up, each once")
        return thresholds


class Monitoring(Model):
    """Where the environment's alerts are sent, and the thresholds they fire at."""

    notify: list[Email] = []  # noqa: RUF012
    """Each address becomes an email notification channel of every alert policy. None: incidents open in Cloud
    Monitoring and notify no one."""
    error_rate: float = Field(0.05, gt=0, lt=1)
    """Serving: the share of a deployment's answers that are server errors (5xx) over 5 minutes."""
    queue_stuck_minutes: int = Field(15, ge=5, le=1440)
    """Serving: how long requests may wait while a server generates nothing before the queue counts as stuck."""
    not_ready_minutes: int = Field(10, ge=5, le=1440)
    """Nodes: how long a node may be not Ready, or a multi-host TPU slice not whole, before it pages."""
    budget: Budget | None = None
    """A monthly budget of the project, alerting the same addresses. None: no budget (spend is seen in Billing only)."""

    @field_validator("notify")
    @classmethod
    def _each_address_once(cls, notify: list[str]) -> list[str]:
        seen: dict[str, str] = {}
        for address in notify:
            key = address.lower()  # one mailbox, one channel: addresses are not case-sensitive in practice
            if key in seen:
                raise ValueError(f"{address!r} is listed twice (as {seen[key]!r}): each becomes a channel of every "
                                 "alert policy, and every alert would be mailed twice")  # fmt: skip
            seen[key] = address
        if len(notify) > POLICY_CHANNELS:
            raise ValueError(
                f"{len(notify)} addresses: an alert policy notifies at most {POLICY_CHANNELS} channels (Cloud "
                "Monitoring quotas, notification channels per alerting policy: "
                "https://cloud.google.com/monitoring/quotas); use a group address"
            )
        return notify

    @model_validator(mode="after")
    def _budget_channels(self) -> Monitoring:
        if self.budget is not None and len(self.notify) > BUDGET_CHANNELS:
            raise ValueError(
                f"{len(self.notify)} addresses in `notify`: a budget notifies at most {BUDGET_CHANNELS} channels "
                "(Cloud Billing Budgets, all_updates_rule.monitoring_notification_channels); list at most "
                f"{BUDGET_CHANNELS}, or a group address"
            )
        return self
