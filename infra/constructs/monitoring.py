"""The environment's dashboard, alert policies and the email channels they notify (infra/derive/observability.py
derives their bodies; this creates them)."""

from __future__ import annotations

import json
import re
from typing import Any

from constructs import Construct

from infra.cdk.bindings import google
from infra.config.monitoring import Budget


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _struct(module: Any, class_name: str, body: dict[str, Any]) -> Any:
    """An API-shaped block (JSON field names) as the binding's struct of `class_name`: each nested block is the struct
    named after its path (MonitoringAlertPolicyConditions, ...ConditionsConditionThreshold), a list of blocks a list
    of them. jsii takes a dict where one struct is expected, not a list of dicts."""
    kwargs: dict[str, Any] = {}
    for key, value in body.items():
        field = _snake(key)
        nested = class_name + "".join(part.capitalize() for part in field.split("_"))
        if isinstance(value, dict):
            kwargs[field] = _struct(module, nested, value)
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            kwargs[field] = [_struct(module, nested, item) for item in value]
        else:
            kwargs[field] = value
    return getattr(module, class_name)(**kwargs)


class Observability(Construct):
    """One dashboard, one alert policy per key, one email channel per address (each policy notifies every one)."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        project: str,
        dashboard: dict[str, Any],
        policies: dict[str, dict[str, Any]],
        emails: list[str],
    ) -> None:
        super().__init__(scope, id_)
        channels = google("monitoring_notification_channel")
        self.channels = [
            channels.MonitoringNotificationChannel(
                self,
                f"notify-{i}",
                project=project,
                display_name=f"ML platform alerts: {email}",
                type="email",
                labels={"email_address": email},
            )
            for i, email in enumerate(emails)
        ]
        self.dashboard = google("monitoring_dashboard").MonitoringDashboard(
            self, "dashboard", project=project, dashboard_json=json.dumps(dashboard, sort_keys=True)
        )
        alerts = google("monitoring_alert_policy")
        self.policies = {}
        for key, body in policies.items():
            fields = {_snake(k): v for k, v in body.items() if k not in ("conditions", "documentation")}
            self.policies[key] = alerts.MonitoringAlertPolicy(
                self,
                key,
                project=project,
                conditions=[_struct(alerts, "MonitoringAlertPolicyConditions", c) for c in body["conditions"]],
                documentation=_struct(alerts, "MonitoringAlertPolicyDocumentation", body["documentation"]),
                notification_channels=[c.name for c in self.channels],
                **fields,
            )


class ProjectBudget(Construct):
    """A monthly Cloud Billing budget on one project: email alerts through the environment's channels (and the
    billing account's administrators, Cloud Billing's default) when the month's actual spend passes each
    threshold, and when its forecast passes the whole amount."""

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        provider: object,
        project: str,
        project_number: str,
        environment: str,
        budget: Budget,
        channels: list[str],
    ) -> None:
        super().__init__(scope, id_)
        module = google("billing_budget")
        # jsii takes a list of blocks as a list of the binding's structs, not of dicts.
        bases = [(t, "CURRENT_SPEND") for t in budget.thresholds] + ([(1.0, "FORECASTED_SPEND")] * budget.forecast)
        rules = [module.BillingBudgetThresholdRules(threshold_percent=t, spend_basis=basis) for t, basis in bases]
        self.budget = module.BillingBudget(
            self,
            "budget",
            provider=provider,
            billing_account=budget.billing_account,
            display_name=f"ML platform {environment} ({project})"[:60],
            budget_filter={"projects": [f"projects/{project_number}"], "calendar_period": "MONTH"},
            amount={"specified_amount": {"currency_code": "USD", "units": str(budget.monthly_usd)}},
            threshold_rules=rules,
            all_updates_rule={"monitoring_notification_channels": channels} if channels else None,
        )
