"""kubectl's names of resources resolved as kubectl resolves them, from the aggregated discovery documents the local
cluster's kube-apiserver v1.35.4 served with dev deployed (tests/fixtures/localcluster/, recorded with
`api-resources.txt`, kubectl's own `api-resources --verbs=list,delete -o name` of that server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.localcluster import discovery

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "localcluster"
KNOWN = discovery.resources(
    json.loads((FIXTURES / "discovery-api.json").read_text()),
    json.loads((FIXTURES / "discovery-apis.json").read_text()),
)


def test_what_the_inventory_lists_is_what_kubectl_api_resources_names() -> None:
    listable = {r.qualified for r in KNOWN if {"list", "delete"} <= r.verbs}
    assert listable == set((FIXTURES / "api-resources.txt").read_text().split())


@pytest.mark.parametrize(
    ("token", "group", "version", "plural"),
    [
        ("pods", "", "v1", "pods"),  # not metrics.k8s.io's PodMetrics: the core group first
        ("events", "", "v1", "events"),  # not events.k8s.io's
        ("secret", "", "v1", "secrets"),
        ("hpa", "autoscaling", "v2", "horizontalpodautoscalers"),  # the group's preferred version
        ("crd", "apiextensions.k8s.io", "v1", "customresourcedefinitions"),
        ("jobs", "batch", "v1", "jobs"),
        ("lws", "leaderworkerset.x-k8s.io", "v1", "leaderworkersets"),
        ("LeaderWorkerSet", "leaderworkerset.x-k8s.io", "v1", "leaderworkersets"),
        ("workloads.kueue.x-k8s.io", "kueue.x-k8s.io", "v1beta2", "workloads"),
        ("clusterqueues.kueue.x-k8s.io", "kueue.x-k8s.io", "v1beta2", "clusterqueues"),
    ],
)
def test_a_name_resolves_as_kubectl_resolves_it(token: str, group: str, version: str, plural: str) -> None:
    found = discovery.resolve(token, KNOWN)
    assert found is not None and (found.group, found.version, found.plural) == (group, version, plural)


def test_a_name_no_group_serves_resolves_to_nothing() -> None:
    assert discovery.resolve("probes.probe.platform.local", KNOWN) is None
    assert discovery.resolve("deployments.v1.apps", KNOWN) is None  # kubectl's resource.version.group: kubectl's


def test_paths_of_a_namespaced_and_a_cluster_wide_resource() -> None:
    pods, nodes = (discovery.resolve(t, KNOWN) for t in ("pods", "nodes"))
    assert pods is not None and nodes is not None
    assert pods.path("p", "ml-training") == "/api/v1/namespaces/ml-training/pods/p"
    assert pods.path(None, None) == "/api/v1/pods"
    assert nodes.path(None, "ml-training") == "/api/v1/nodes"


@pytest.mark.parametrize(
    ("args", "read"),
    [
        (("pods",), ("pods", None, "default", False, None)),
        (("pods", "-n", "ml", "-l", "a=b"), ("pods", None, "ml", False, "a=b")),
        (("--namespace=ml", "jobs", "j"), ("jobs", "j", "ml", False, None)),
        (("pods,jobs.batch", "--all-namespaces"), ("pods,jobs.batch", None, "default", True, None)),
        (("nodes", "--selector", "x"), ("nodes", None, "default", False, "x")),
    ],
)
def test_the_arguments_read(args: tuple[str, ...], read: tuple[object, ...]) -> None:
    got = discovery.parse(args)
    assert got is not None
    assert (",".join(got.tokens), got.name, got.namespace, got.all_namespaces, got.selector) == read


@pytest.mark.parametrize(
    "args",
    [
        ("pods", "-o", "name"),
        ("pods", "--field-selector", "x"),
        ("pod/p",),
        ("pods,jobs", "p"),
        ("a", "b", "c"),
        ("-n",),
    ],
)
def test_arguments_left_to_kubectl(args: tuple[str, ...]) -> None:
    assert discovery.parse(args) is None
