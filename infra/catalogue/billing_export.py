"""The Cloud Billing detailed usage cost export to BigQuery, as `make cost` and the preflight read it: its columns and
GKE's labels on its rows.

Sources: https://cloud.google.com/billing/docs/how-to/export-data-bigquery-tables/detailed-usage (the schema; GKE's
label keys: goog-k8s-node-pool-name, and k8s-namespace with cost allocation on) and
https://cloud.google.com/kubernetes-engine/docs/how-to/cost-allocations (cost allocation: the detailed export only).
"""

from __future__ import annotations

# The detailed export's columns the query reads, with the fields it reads of each (the schema page: labels.key and
# .value, cost, currency, credits.amount, usage_start_time, project.id, service.description), and `resource`, the
# column the standard export lacks.
EXPORT_COLUMNS: dict[str, frozenset[str]] = {
    "labels": frozenset({"key", "value"}),
    "cost": frozenset(),
    "currency": frozenset(),
    "credits": frozenset({"amount"}),
    "usage_start_time": frozenset(),
    "project": frozenset({"id"}),
    "service": frozenset({"description"}),
    "resource": frozenset({"name", "global_name"}),
}
NAMESPACE = "k8s-namespace"
NODE_POOL = "goog-k8s-node-pool-name"
# GKE cost allocation's namespace values for what no namespace's pods requested.
NOT_REQUESTED = {"kube:unallocated": "unallocated", "kube:system-overhead": "system overhead"}
