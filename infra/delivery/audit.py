"""Who changed a drifted resource: the newest Admin Activity audit log entry of it that the deployer did not write.

Cloud Audit Logs' Admin Activity log records every change of a Google Cloud resource's configuration and, on GKE,
every write to the Kubernetes API, always on and kept 400 days
(https://cloud.google.com/logging/docs/audit#admin-activity). An entry names the resource in
`protoPayload.resourceName` and the caller in `protoPayload.authenticationInfo.principalEmail`. Terraform's
state gives the resource's id (`projects/p/locations/l/clusters/c/nodePools/np`) or, for a Kubernetes object, its
namespace and name; the entry's resourceName writes both its own way (`.../zones/z/clusters/c/nodePools/np`,
`core/v1/namespaces/ns/configmaps/name`), so the filter matches the part the two share. Read with
`gcloud logging read` (roles/logging.viewer, which the planner holds through roles/viewer).
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

ACTIVITY = 'logName:"cloudaudit.googleapis.com%2Factivity"'
# How far back a change is looked for: a scheduled drift check runs daily; a week covers a missed run or two.
FRESHNESS = "7d"


def resource_terms(rtype: str, state: dict[str, Any] | None) -> list[str] | None:
    """The resourceName substrings an audit entry of this resource has, from its state before the refresh (its
    `id` for a Google resource, namespace and name for a Kubernetes object); None where the state says neither."""
    if not isinstance(state, dict):
        return None
    if rtype.startswith("google_"):
        rid = str(state.get("id") or "")
        # The last two segments (`nodePools/np`, `buckets/b`) are named alike in the id and the entry; the
        # location segment is not (locations/us-east5 against zones/us-east5-a).
        parts = [p for p in rid.split("/") if p]
        return [f"{parts[-2]}/{parts[-1]}"] if len(parts) >= 2 else ([parts[0]] if parts else None)
    if rtype.startswith("kubernetes_"):
        metadata = state.get("metadata")
        metadata = metadata[0] if isinstance(metadata, list) and metadata else metadata
        if not isinstance(metadata, dict) or not metadata.get("name"):
            return None
        namespace = metadata.get("namespace")
        return [*([f"namespaces/{namespace}/"] if namespace else []), f"/{metadata['name']}"]
    return None


def audit_filter(terms: list[str], exclude: str) -> str:
    """The Logging query: Admin Activity entries whose resourceName holds every term, not written by `exclude`."""
    names = " AND ".join(f'protoPayload.resourceName:"{term}"' for term in terms)
    return f'{ACTIVITY} AND {names} AND NOT protoPayload.authenticationInfo.principalEmail="{exclude}"'


def who_changed(project: str, rtype: str, state: dict[str, Any] | None, exclude: str) -> str:
    """`by <principal> at <time> (<method>)` from the newest matching entry, or why it could not be said."""
    terms = resource_terms(rtype, state)
    if terms is None:
        return "who: not looked up (the state names no id for it)"
    argv = [
        "gcloud", "logging", "read", audit_filter(terms, exclude), f"--project={project}",
        f"--freshness={FRESHNESS}", "--limit=1", "--order=desc", "--format=json",
    ]  # fmt: skip
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"who: the audit log could not be read ({err})"
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return f"who: the audit log could not be read ({last})"
    try:
        entries = json.loads(done.stdout or "[]")
    except json.JSONDecodeError:
        return "who: the audit log's answer was not JSON"
    if not entries:
        return f"who: no Admin Activity entry in {FRESHNESS} but the deployer's"
    payload = entries[0].get("protoPayload") or {}
    principal = (payload.get("authenticationInfo") or {}).get("principalEmail") or "an unknown caller"
    return f"by {principal} at {entries[0].get('timestamp', '?')} ({payload.get('methodName', '?')})"
