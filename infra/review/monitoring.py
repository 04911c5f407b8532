"""What a stack watches, as the review shows it: its dashboards (with their links), its alert policies and who they
notify, and its budget (read from the stack's google_monitoring_* and google_billing_budget resources)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from infra.catalogue.cloud_metrics import dashboard_link
from infra.review.model import Budget, Watching


def watching(stack_json: Mapping[str, Any]) -> Watching:
    resource = stack_json.get("resource") or {}
    dashboards = []
    for body in (resource.get("google_monitoring_dashboard") or {}).values():
        dashboard = json.loads(body.get("dashboard_json") or "{}")
        # projects/<project>/dashboards/<id>: the id the dashboard is created with, so the link holds before apply
        name = re.fullmatch(r"projects/([^/]+)/dashboards/([^/]+)", str(dashboard.get("name", "")))
        url = dashboard_link(name[1], name[2]) if name else ""
        dashboards.append((str(dashboard.get("displayName", "")), url))
    alerts = sorted(
        str(b.get("display_name", "")) for b in (resource.get("google_monitoring_alert_policy") or {}).values()
    )
    notify = sorted(
        str((b.get("labels") or {}).get("email_address", ""))
        for b in (resource.get("google_monitoring_notification_channel") or {}).values()
    )
    budget = None
    for body in (resource.get("google_billing_budget") or {}).values():
        amount = (body.get("amount") or {}).get("specified_amount") or {}
        budget = Budget(
            str(body.get("billing_account", "")),
            float(amount.get("units") or 0),
            tuple(
                (float(r["threshold_percent"]), str(r.get("spend_basis") or "CURRENT_SPEND"))
                for r in body.get("threshold_rules") or []
            ),
        )
    return Watching(sorted(dashboards), alerts, notify, budget)
