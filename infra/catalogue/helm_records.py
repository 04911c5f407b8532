"""Helm's release records as the configmap driver keeps them in the cluster (the helm provider's helm_driver,
infra/constructs/providers.py): one ConfigMap per revision, labelled owner=helm, name, status and version
(helm.sh/helm/v3 v3.18.4 pkg/storage/driver/cfgmaps.go)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The statuses Helm writes before it sends a release's objects and replaces after its wait (helm.sh/helm/v3 v3.18.4
# pkg/release/status.go); a newest record in one of them is an operation that never finished.
PENDING = ("pending-install", "pending-upgrade", "pending-rollback")


def interrupted_record(configmaps: Mapping[str, Any]) -> tuple[str, str] | None:
    """(record's name, status) where the newest of a release's Helm records (a ConfigMap list, as `kubectl get
    configmaps -l owner=helm,name=<release> -o json` gives it) is pending: an apply killed during that release's
    install or upgrade (a cancelled job, a lost runner). Every later install or upgrade of it fails "another
    operation (install/upgrade/rollback) is in progress" (pkg/action/upgrade.go errPending) until the record goes:
    removed, the release's last finished revision is current again (none: it is installed anew, and Helm adopts
    the objects the interrupted install made, which carry its annotations)."""
    found = newest(configmaps)
    if found is None:
        return None
    status = found["metadata"]["labels"].get("status")
    return (found["metadata"]["name"], status) if status in PENDING else None


def newest(configmaps: Mapping[str, Any]) -> dict[str, Any] | None:
    """The record of the highest revision (its `version` label) in a ConfigMap list of Helm's records, if any."""
    records = [i for i in configmaps.get("items") or [] if (i.get("metadata") or {}).get("labels", {}).get("version")]
    return max(records, key=lambda i: int(i["metadata"]["labels"]["version"])) if records else None
