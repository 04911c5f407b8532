"""Project IAM: every project role a platform stack grants is one the deployer's projectIamAdmin may grant.

The bootstrap holds the deployer's projectIamAdmin to GRANTABLE_PROJECT_ROLES by an IAM condition on
`iam.googleapis.com/modifiedGrantsByRole` (infra/constructs/bootstrap.py): a deployer that runs whatever is merged
cannot grant itself or anyone roles/owner. A stack that grants another project role would fail at the apply with
a permission error; this rule says so at plan, and what to change.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from infra.catalogue.deployer_roles import GRANTABLE_PROJECT_ROLES
from infra.rules import Finding, rule

LIMITS_DOC = "https://cloud.google.com/iam/docs/setting-limits-on-granting-roles"


@rule(
    id="iam.project-grants-the-deployer-may-make",
    system="IAM",
    layer="apply",
    summary=(
        "Every project role the stack grants is one the deployer's projectIamAdmin may grant (its IAM condition on "
        "modifiedGrantsByRole lists GRANTABLE_PROJECT_ROLES, infra/catalogue/deployer_roles.py)."
    ),
    source=f"{LIMITS_DOC} (api.getAttribute('iam.googleapis.com/modifiedGrantsByRole', []).hasOnly([...]))",
    subject="terraform",
    types=("google_project_iam_member", "google_project_iam_binding"),
)
def _grantable(grants: list[tuple[str, dict[str, Any]]], stack: dict[str, Any]) -> Iterator[Finding]:
    for where, grant in grants:
        if grant.get("role") not in GRANTABLE_PROJECT_ROLES:
            yield Finding(
                f"{where}.role",
                grant.get("role"),
                "the deployer may not grant it: add it to GRANTABLE_PROJECT_ROLES (infra/catalogue/"
                "deployer_roles.py) if the platform must, and have a person apply the bootstrap again",
            )
