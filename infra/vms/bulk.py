"""A VM group's `instances.bulkInsert` request: all of the group's VMs or none.

Terraform has no resource that creates a group of VMs all at once; the Compute Engine API does
(`BulkInsertInstanceResource`: "If minCount instances cannot be created, then no instances will be created and
instances already created will be deleted", google-cloud-compute 1.57.0). The request takes the same instance
properties as the stack's template (`infra.vms.instance`), the VMs' names explicitly (so the group's
`platform-hosts` holds), and `minCount` equal to the count. `make plan` writes it, validated; `make vm-up
METHOD=bulk` sends it.
"""

from __future__ import annotations

from typing import Any

from infra.config import Environment
from infra.vms.instance import instance_properties, vm_names


def bulk_insert(env: Environment, key: str) -> dict[str, Any]:
    """The group's BulkInsertInstanceResource (JSON field names; int64 fields as strings, as the API writes them)."""
    names = vm_names(env, key)
    return {
        "count": str(len(names)),
        "minCount": str(len(names)),
        "perInstanceProperties": {name: {"name": name} for name in names},
        "instanceProperties": instance_properties(env, key, standalone=True),
    }
