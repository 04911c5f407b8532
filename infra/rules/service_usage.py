"""Service Usage: every API a stack calls is enabled by the stack itself, before the first call."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Any

from infra.catalogue.gcp_apis import IMPERSONATION_API, apis_needed
from infra.rules import Finding, rule
from infra.rules.terraform_subject import dependency_graph, reaches

SERVICE = "google_project_service"


@rule(
    id="gcp.apis-enabled-before-use",
    system="Service Usage",
    layer="apply",
    summary=(
        "Every API a resource (or a feature of the cluster) calls is enabled by a google_project_service of the "
        "stack, kept on at destroy, and the resource waits for it."
    ),
    source=(
        "https://cloud.google.com/service-usage/docs/enable-disable ('API has not been used in project ... "
        "before or it is disabled'); https://registry.terraform.io/providers/hashicorp/google/7.45.0/docs/"
        "resources/google_project_service; https://cloud.google.com/binary-authorization/docs/setting-up"
    ),
    subject="terraform",
)
def _apis(stack: dict[str, Any]) -> Iterator[Finding]:
    services = {
        body.get("service"): f"{SERVICE}.{logical_id}"
        for logical_id, body in ((stack.get("resource") or {}).get(SERVICE) or {}).items()
    }
    for logical_id, body in ((stack.get("resource") or {}).get(SERVICE) or {}).items():
        if body.get("disable_on_destroy") is not False:
            yield Finding(f"{SERVICE}.{logical_id}.disable_on_destroy", body.get("disable_on_destroy"), "must be false")
    graph = dependency_graph(stack)
    reach = cache(lambda key: reaches(graph, key))
    for rtype, items in (stack.get("resource") or {}).items():
        for logical_id, body in items.items():
            where = f"{rtype}.{body.get('name', logical_id)}"
            try:
                needed = apis_needed(rtype, body)
            except KeyError as err:
                yield Finding(where, rtype, str(err.args[0]))
                continue
            for api in sorted(needed):
                if api not in services:
                    yield Finding(where, api, "this API is not enabled by the stack (google_project_service)")
                elif services[api] not in reach(f"{rtype}.{logical_id}"):
                    yield Finding(where, api, f"must depend on {services[api]} (first apply in a fresh project)")
    impersonated = any(
        m.get("role") == "roles/iam.workloadIdentityUser"
        for m in ((stack.get("resource") or {}).get("google_service_account_iam_member") or {}).values()
    )
    if impersonated and IMPERSONATION_API[0] not in services:
        yield Finding(
            "google_service_account_iam_member", IMPERSONATION_API[0], f"not enabled ({IMPERSONATION_API[1]})"
        )
