"""`kubectl get`'s arguments as the API server's own paths, so that a read of the local cluster is one HTTP request in
this process instead of a kubectl process (about 0.08 CPU-s each; the local-cluster tests ran about 600 of them).

A resource is named as kubectl names it: its plural, singular or short name, or its kind, optionally followed by
`.<group>` (`workloads.kueue.x-k8s.io`), several joined by commas; the core group first and then the others in the
order the API server gives them, at each group's preferred version, as kubectl's RESTMapper resolves one
(https://kubernetes.io/docs/reference/using-api/api-concepts/#aggregated-discovery for the document read here).
Only the flags listed in `parse` are taken; anything else is for kubectl itself (`Cluster.get` falls back to it).
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from typing import Any

# Aggregated discovery (GA in Kubernetes 1.30): every group, its versions in preference order and each version's
# resources, in one answer for /api and one for /apis.
AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    names: frozenset[str]  # what kubectl accepts for it: plural, singular, short names, the kind in lower case
    verbs: frozenset[str]

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """`kubectl api-resources -o name`'s name: the plural, then `.<group>` outside the core group."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(self, name: str | None = None, namespace: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        scoped = f"{base}/namespaces/{namespace}" if self.namespaced and namespace else base
        return f"{scoped}/{self.plural}" + (f"/{name}" if name else "")


def resources(core: dict[str, Any], groups: dict[str, Any]) -> list[Resource]:
    """Every top-level resource (no subresource) of each group's preferred version, core first: from the aggregated
    discovery documents of /api and /apis."""
    found = []
    for item in [*(core.get("items") or []), *(groups.get("items") or [])]:
        group = (item.get("metadata") or {}).get("name") or ""
        versions = item.get("versions") or []
        if not versions:
            continue
        preferred = versions[0]  # the API server lists a group's versions in preference order
        for r in preferred.get("resources") or []:
            kind = (r.get("responseKind") or {}).get("kind") or ""
            names = {r["resource"], r.get("singularResource") or "", *(r.get("shortNames") or []), kind.lower()}
            found.append(
                Resource(
                    group=group,
                    version=preferred["version"],
                    plural=r["resource"],
                    kind=kind,
                    namespaced=r.get("scope") == "Namespaced",
                    names=frozenset(n for n in names if n),
                    verbs=frozenset(r.get("verbs") or []),
                )
            )
    return found


def resolve(token: str, known: list[Resource]) -> Resource | None:
    """The resource kubectl means by `token` (`pods`, `hpa`, `crd`, `workloads.kueue.x-k8s.io`), or None."""
    token = token.lower()
    name, _, group = token.partition(".")
    for resource in known:
        if group and resource.group == group and name in resource.names:
            return resource
    for resource in known:
        if token in resource.names:
            return resource
    return None


@dataclass(frozen=True)
class Get:
    """One `kubectl get` as this module reads it."""

    tokens: tuple[str, ...]
    name: str | None
    namespace: str
    all_namespaces: bool
    selector: str | None

    def query(self) -> str:
        return "?" + urllib.parse.urlencode({"labelSelector": self.selector}) if self.selector else ""


def parse(args: tuple[str, ...]) -> Get | None:
    """`kubectl get`'s arguments (after `get`), or None where they hold anything but a resource list, a name, `-n`,
    `-l` and `-A` (kubectl's own forms: `-n x`, `--namespace=x`, `--all-namespaces`)."""
    positional: list[str] = []
    namespace, everywhere, selector = "default", False, None
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        flag, eq, value = arg.partition("=")
        if flag in ("-n", "--namespace", "-l", "--selector"):
            if not eq:
                if not rest:
                    return None
                value = rest.pop(0)
            if flag in ("-n", "--namespace"):
                namespace = value
            else:
                selector = value
        elif arg in ("-A", "--all-namespaces"):
            everywhere = True
        elif arg.startswith("-"):
            return None
        else:
            positional.append(arg)
    if not 1 <= len(positional) <= 2 or "/" in positional[0]:
        return None
    tokens = tuple(positional[0].split(","))
    if len(positional) == 2 and len(tokens) > 1:
        return None
    return Get(tokens, positional[1] if len(positional) == 2 else None, namespace, everywhere, selector)


def as_kubectl_prints(answers: list[tuple[Resource, dict[str, Any]]]) -> dict[str, Any]:
    """What `kubectl get -o json` prints for lists: one List, each item with its `kind` and `apiVersion` (the API
    server's list leaves them out of its items), without `metadata.managedFields` (`as_kubectl_shows`)."""
    items = []
    for resource, answer in answers:
        items += [
            as_kubectl_shows({"apiVersion": resource.api_version, "kind": resource.kind, **item})
            for item in answer["items"]
        ]
    return {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}


def as_kubectl_shows(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` without `metadata.managedFields`, which kubectl leaves out unless `--show-managed-fields`."""
    metadata = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return {**obj, "metadata": metadata}
