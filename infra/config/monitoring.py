"""What each environment watches: who its alert policies notify, and when they fire.

Every environment gets its dashboard and alert policies (infra/derive/observability.py derives them from what the
environment runs); this section says where the alerts go and tunes their thresholds.
"""

from __future__ import annotations

import re
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
# The Cloud Billing detailed usage cost export's table, as BigQuery names it: <project>.<dataset>.<table>, the table
# gcp_billing_export_resource_v1_<billing account id, its dashes as underscores>
# (https://cloud.google.com/billing/docs/how-to/export-data-bigquery-tables/detailed-usage).
DETAILED_EXPORT = re.compile(
    r"^(?P<project>[a-z][a-z0-9-]{4,28}[a-z0-9])\.(?P<dataset>[A-Za-z0-9_]{1,1024})\."
    r"gcp_billing_export_resource_v1_(?P<account>[0-9A-F]{6}_[0-9A-F]{6}_[0-9A-F]{6})$"
)
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
    billing_export: str | None = None
    """The Cloud Billing detailed usage cost export's BigQuery table
    (`<project>.<dataset>.gcp_billing_export_resource_v1_<account>`): `make cost` reads what each team, node pool and
    service spent from it. None: `make cost` refuses."""

    @field_validator("billing_export")
    @classmethod
    def _detailed_export(cls, table: str | None) -> str | None:
        if table is None or DETAILED_EXPORT.match(table):
            return table
        if ".gcp_billing_export_v1_" in table:
            raise ValueError(
                "the standard usage cost export: GKE's cost allocation (what each namespace spent) is only in the "
                "detailed usage cost export, table gcp_billing_export_resource_v1_<account> in the same dataset "
                "(https://cloud.google.com/kubernetes-engine/docs/how-to/cost-allocations)"
            )
        raise ValueError(
            "not the detailed usage cost export's table: write <project>.<dataset>.gcp_billing_export_resource_v1_"
            "<billing account id with underscores>, e.g. acme-billing.billing.gcp_billing_export_resource_v1_"
            "01A2B3_C4D5E6_F7A8B9 (https://cloud.google.com/billing/docs/how-to/export-data-bigquery-tables/"
            "detailed-usage)"
        )

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

    @model_validator(mode="after")
    def _export_of_the_budgets_account(self) -> Monitoring:
        matched = DETAILED_EXPORT.match(self.billing_export or "")
        if matched and self.budget is not None:
            account = matched["account"].replace("_", "-")
            if account != self.budget.billing_account:
                raise ValueError(
                    f"billing_export {self.billing_export!r} is the export of billing account {account}, and "
                    f"budget.billing_account is {self.budget.billing_account}: the project is billed to one account; "
                    "name that account's export"
                )
        return self
