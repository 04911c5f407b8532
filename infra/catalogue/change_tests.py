"""Which way a planned change goes at one attribute: tests on its value before and after (turned off, removed,
widened to the internet, a power role granted to a person, ...), for the rows of infra/catalogue/consequences.py.
Each takes the plan's values as Terraform shows them (a block as a one-element list, an unset value as None)."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

PUBLIC_PRINCIPALS = ("allUsers", "allAuthenticatedUsers")
# Pod Security Standards, most to least restrictive (https://kubernetes.io/docs/concepts/security/pod-security-standards/).
POD_SECURITY_LEVELS = ("restricted", "baseline", "privileged")


def turned_off(before: Any, after: Any) -> bool:
    return before is True and after is not True


def turned_on(before: Any, after: Any) -> bool:
    return before is not True and after is True


def removed(before: Any, after: Any) -> bool:
    return bool(before) and not after


def not_enforced(before: Any, after: Any) -> bool:
    return before == "enforced" and after != "enforced"


def has_public(value: Any) -> bool:
    members = value if isinstance(value, list) else [value]
    return any(str(m) in PUBLIC_PRINCIPALS for m in members)


def public_added(before: Any, after: Any) -> bool:
    return has_public(after) and not has_public(before)


def listed(value: Any) -> list[Any]:
    """A plan's value as a list: a list as it is, one value in a list, nothing empty."""
    return value if isinstance(value, list) else [value] if value else []


def networks(value: Any) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    out = []
    for item in listed(value):
        text = item.get("cidr_block") if isinstance(item, dict) else item
        try:
            out.append(ipaddress.ip_network(str(text), strict=False))
        except ValueError:
            continue
    return out


def widened(before: Any, after: Any) -> bool:
    """A range in `after` that no range of `before` holds (0.0.0.0/0 added to a narrow list, a /8 for a /24)."""
    old = networks(before)
    return any(
        not any(n.version == o.version and n.subnet_of(o) for o in old)  # type: ignore[arg-type]
        for n in networks(after)
    )


def rules(value: Any) -> set[str]:
    return {json.dumps(r, sort_keys=True) for r in listed(value)}


def rule_added(before: Any, after: Any) -> bool:
    return bool(rules(after) - rules(before))


def rule_removed(before: Any, after: Any) -> bool:
    return bool(rules(before) - rules(after))


def types_dropped(before: Any, after: Any) -> bool:
    return bool(set(before or []) - set(after or []))


def weaker_level(before: Any, after: Any) -> bool:
    """A Pod Security level moved towards privileged, or removed (a namespace without one admits anything)."""
    rank = {level: i for i, level in enumerate(POD_SECURITY_LEVELS)}
    if before not in rank:
        return False
    return rank.get(str(after), len(POD_SECURITY_LEVELS)) > rank[before]


def keys_removed(before: Any, after: Any) -> bool:
    """A key removed, or its value emptied (a pod that reads it gets nothing either way)."""
    if not isinstance(before, dict):
        return bool(before)
    after = after if isinstance(after, dict) else {}
    return any(
        key not in after or (value not in ("", None) and after[key] in ("", None)) for key, value in before.items()
    )


# Google's own front ends, which a rule opens to on purpose: IAP's TCP forwarding
# (https://cloud.google.com/iap/docs/using-tcp-forwarding) and the load balancers' health checks and proxies
# (https://cloud.google.com/load-balancing/docs/health-check-concepts#ip-ranges).
GOOGLE_FRONT_ENDS = tuple(ipaddress.ip_network(r) for r in ("35.235.240.0/20", "35.191.0.0/16", "130.211.0.0/22"))


def internet(value: Any) -> bool:
    """Whether ranges hold an address of the internet (0.0.0.0/0, a public block) beyond Google's front ends."""
    return any(
        (n.is_global or n.prefixlen == 0)
        and not any(n.version == g.version and n.subnet_of(g) for g in GOOGLE_FRONT_ENDS)  # type: ignore[arg-type]
        for n in networks(value)
    )


def public_ranges(before: Any, after: Any) -> bool:
    return internet(after) and not internet(before)


def from_internet(body: Any) -> bool:
    return allows(body) and internet(value_at(body, "source_ranges"))


def every_port(rules: Any) -> bool:
    """An allow rule with no port list, or for every protocol: it admits every port."""
    return any(isinstance(r, dict) and (r.get("protocol") == "all" or not r.get("ports")) for r in listed(rules))


def every_port_opened(before: Any, after: Any) -> bool:
    return every_port(after) and not every_port(before)


# Roles that are the project, or any service account's power (https://cloud.google.com/iam/docs/understanding-roles:
# basic roles; https://cloud.google.com/iam/docs/service-account-permissions: impersonation).
POWER_ROLES = (
    "roles/owner", "roles/editor", "roles/iam.securityAdmin", "roles/resourcemanager.projectIamAdmin",
    "roles/iam.serviceAccountAdmin", "roles/iam.serviceAccountTokenCreator", "roles/iam.serviceAccountKeyAdmin",
    "roles/iam.roleAdmin", "roles/iam.workloadIdentityPoolAdmin",
)  # fmt: skip
PEOPLE = ("user:", "group:", "domain:")


def grants_power(body: Any) -> bool:
    body = body if isinstance(body, dict) else {}
    return str(body.get("role")) in POWER_ROLES and str(body.get("member", "")).startswith(PEOPLE)


def power_granted(before: Any, after: Any) -> bool:
    return grants_power(after) and not grants_power(before)


def admits_anything(before: Any, after: Any) -> bool:
    return before != "ALWAYS_ALLOW" and after == "ALWAYS_ALLOW"


def to_dry_run(before: Any, after: Any) -> bool:
    return before == "ENFORCED_BLOCK_AND_AUDIT_LOG" and after != before


def retain_to_delete(before: Any, after: Any) -> bool:
    return before == "Retain" and after != "Retain"


def allows(body: Any) -> bool:
    return bool(value_at(body, "allow"))


def denies(body: Any) -> bool:
    return bool(value_at(body, "deny"))


def enabled_off(before: Any, after: Any) -> bool:
    """Any add-on's `enabled` true -> not true, or `disabled` false -> true, anywhere under the block."""

    def flags(value: Any, path: str = "") -> dict[str, Any]:
        if isinstance(value, list):
            value = value[0] if value else {}
        if not isinstance(value, dict):
            return {}
        out = {}
        for key, inner in value.items():
            here = f"{path}.{key}" if path else key
            if key in ("enabled", "disabled") and not isinstance(inner, (dict, list)):
                out[here] = inner
            else:
                out.update(flags(inner, here))
        return out

    old, new = flags(before), flags(after)
    return any(
        (k.endswith("enabled") and v is True and new.get(k) is not True)
        or (k.endswith("disabled") and v is False and new.get(k) is True)
        for k, v in old.items()
    )


def value_at(body: Any, path: str) -> Any:
    """The value at a dotted path, through the plan's one-element lists of nested blocks; a key may itself hold dots
    (a label's name): the longest key that matches is taken."""
    parts = path.split(".") if path else []
    i = 0
    while i < len(parts):
        while isinstance(body, list):
            body = body[0] if body else None
        if not isinstance(body, dict):
            return None
        for j in range(len(parts), i, -1):
            key = ".".join(parts[i:j])
            if key in body:
                body, i = body[key], j
                break
        else:
            return None
    return body
