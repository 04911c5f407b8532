"""What GKE and the engines would refuse on a real cluster, held on what the dev stack applies: one test per defect.

Each asserts the real system's rule or the tutorial's configuration on exactly what the dev stack applies
(the synthesized Terraform, the rendered charts), not our own idea of it.
"""

from __future__ import annotations

from typing import Any

from infra.catalogue.controllers import CONTROLLERS
from infra.catalogue.serving_metrics import ADAPTER_PORT
from tests.helpers import by_name, needs_crds, of_type, one, one_of_kind, rendered


@needs_crds
def test_fuse_mounts_never_ask_for_parallel_downloads_without_a_file_cache(stacks: dict[str, dict[str, Any]]) -> None:
    """GKE >= 1.32.0-gke.1795000 fails such a mount: 'file cache should be enabled for parallel download support'."""
    ray = one_of_kind(rendered(stacks["dev"], "ray-training"), "RayCluster")
    for template in (ray["spec"]["headGroupSpec"]["template"], ray["spec"]["workerGroupSpecs"][0]["template"]):
        volume = next(v for v in template["spec"]["volumes"] if "csi" in v)
        # The tutorial's, then the owner that lets the trainer (uid 1000) write.
        assert volume["csi"]["volumeAttributes"]["mountOptions"] == (
            "implicit-dirs,uid=1000,gid=100,file-mode=664,dir-mode=775"
        )
        assert template["metadata"]["annotations"] == {
            "gke-gcsfuse/volumes": "true",
            "gke-gcsfuse/cpu-limit": "0",
            "gke-gcsfuse/memory-limit": "0",
            "gke-gcsfuse/ephemeral-storage-limit": "0",
        }
    # vLLM streams its weights from gs:// (Run:ai streamer): no FUSE file cache of the whole model in memory.
    lws = one_of_kind(rendered(stacks["dev"], "serve-llama70b-vllm"), "LeaderWorkerSet")
    pod = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    assert "--load-format=runai_streamer" in pod["containers"][0]["args"]
    # FUSE mounts only the compilation cache and the adapters' folder (read-only), neither with a file cache.
    fuse = {v["name"]: v["csi"]["volumeAttributes"]["mountOptions"] for v in pod["volumes"] if "csi" in v}
    assert (
        set(fuse) == {"xla-cache", "adapters"}
        and fuse["adapters"] == "implicit-dirs,only-dir=adapters/llama70b-support"
    )
    assert not any("parallel-downloads" in options or "file-cache" in options for options in fuse.values())


@needs_crds
def test_saxml_model_servers_run_on_the_pod_network_so_workload_identity_applies(
    stacks: dict[str, dict[str, Any]],
) -> None:
    jobset = one_of_kind(rendered(stacks["dev"], "serve-saxml"), "JobSet")
    for job in jobset["spec"]["replicatedJobs"]:
        pod = job["template"]["spec"]["template"]["spec"]
        assert "hostNetwork" not in pod and "dnsPolicy" not in pod
        assert pod["serviceAccountName"] == "saxml"


def test_workload_identity_bindings_wait_for_the_cluster(stacks: dict[str, dict[str, Any]]) -> None:
    """In a fresh project `<project>.svc.id.goog` exists only once the cluster does ('Identity Pool does not exist')."""
    for stack in stacks.values():
        (cluster_id,) = of_type(stack, "google_container_cluster")
        members = [
            m
            for rtype in ("google_storage_bucket_iam_member", "google_service_account_iam_member")
            for m in of_type(stack, rtype).values()
            if ".svc.id.goog" in m["member"]
        ]
        assert len(members) >= 4
        for member in members:
            assert f"google_container_cluster.{cluster_id}" in member["depends_on"], member["member"]


def test_the_control_plane_reaches_the_webhooks_of_the_pinned_controllers(
    stacks: dict[str, dict[str, Any]], envs: dict[str, Any]
) -> None:
    """GKE's own rule for private clusters opens 443 and 10250 only. JobSet, Kueue and LWS serve their webhooks on
    9443, Kueue its visibility API on 8082, and where a server autoscales the metrics adapter serves the custom
    metrics API on 6443: every one is opened from the control plane's range (dev's HPAs read their metric through
    6443)."""
    opened = {}
    for name, stack in stacks.items():
        cluster = one(stack, "google_container_cluster")
        master = cluster["private_cluster_config"]["master_ipv4_cidr_block"]
        rule = by_name(stack, "google_compute_firewall")[f"{envs[name].network.name}-control-plane-webhooks"]
        assert rule["source_ranges"] == [master] and rule["direction"] == "INGRESS"
        controllers = [CONTROLLERS[c] for c in envs[name].release.controllers]
        ports = {c.webhook_port for c in controllers} | {p for c in controllers for p in c.api_ports}
        ports |= {ADAPTER_PORT} if envs[name].autoscales else set()
        assert rule["allow"] == [{"protocol": "tcp", "ports": [str(p) for p in sorted(ports)]}]
        opened[name] = rule["allow"][0]["ports"]
    assert opened == {"dev": ["6443", "8082", "9443"], "prod": ["8082", "9443"]}


@needs_crds
def test_ray_workers_are_pinned_to_the_training_pool_and_carry_the_tutorials_tpu_env(
    stacks: dict[str, dict[str, Any]],
) -> None:
    """dev has two identical v6e 4x4 pools (train, serve): without the pool, Ray could take the serving slice."""
    ray = one_of_kind(rendered(stacks["dev"], "ray-training"), "RayCluster")
    worker = ray["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert worker["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": "4x4",
        "cloud.google.com/gke-nodepool": "train",
    }
    env = {e["name"]: e["value"] for e in worker["containers"][0]["env"]}
    assert env == {"JAX_PLATFORMS": "tpu", "ENABLE_PJRT_COMPATIBILITY": "true"}


def test_the_queued_a3_mega_pool_follows_the_dws_guide(stacks: dict[str, dict[str, Any]]) -> None:
    """--enable-queued-provisioning --flex-start --enable-autoscaling --num-nodes=0 --location-policy=ANY
    --reservation-affinity=none --no-enable-autorepair (GKE: provisioningrequest, flex-start with queued
    provisioning)."""
    pool = by_name(stacks["dev"], "google_container_node_pool")["a3mega"]
    assert pool["queued_provisioning"] == {"enabled": True}
    assert pool["node_config"]["flex_start"] is True and "max_run_duration" not in pool["node_config"]
    assert pool["management"] == {"auto_repair": False, "auto_upgrade": True}
    assert pool["initial_node_count"] == 0 and "node_count" not in pool
    assert pool["autoscaling"] == {"total_min_node_count": 0, "total_max_node_count": 2, "location_policy": "ANY"}
    assert pool["node_config"]["reservation_affinity"] == {"consume_reservation_type": "NO_RESERVATION"}


def test_checkpoint_conversions_run_on_a_cpu_pool_that_holds_them(stacks: dict[str, dict[str, Any]]) -> None:
    for stack in stacks.values():
        pool = by_name(stack, "google_container_node_pool")["convert"]
        # m1-ultramem-80 (before the fix) is not offered in us-east5; C4 boots only from Hyperdisk.
        assert pool["node_config"]["machine_type"] == "c4-highmem-288"
        assert pool["node_config"]["disk_type"] == "hyperdisk-balanced"
        assert pool["autoscaling"]["total_min_node_count"] == 0
        assert pool["node_config"]["taint"] == [{"key": "platform.pool", "value": "convert", "effect": "NO_SCHEDULE"}]


# --- what the engines refuse ------------------------------------------------------------------------------------


@needs_crds
def test_jetstream_leaves_the_lws_name_to_the_headless_service_lws_creates(stacks: dict[str, dict[str, Any]]) -> None:
    """LWS creates its headless Service `<lws>` only if no Service of that name exists
    (CreateHeadlessServiceIfNotExists); without it `LWS_LEADER_ADDRESS` (<lws>-0.<lws>.<ns>) never resolves."""
    for release in ("serve-llama405b", "serve-llama70b-disagg"):
        objects = rendered(stacks["dev"], release)
        lws = one_of_kind(objects, "LeaderWorkerSet")["metadata"]["name"]
        services = [o["metadata"]["name"] for o in objects if o["kind"] == "Service"]
        assert services == [f"{release}-svc"] and lws not in services


def test_every_api_the_stack_calls_is_enabled_by_the_stack_and_kept_on_destroy(
    stacks: dict[str, dict[str, Any]],
) -> None:
    """Binary Authorization was enforced on the cluster while binaryauthorization.googleapis.com was never enabled."""
    for stack in stacks.values():
        services = {s["service"]: (k, s) for k, s in of_type(stack, "google_project_service").items()}
        key, binauthz = services["binaryauthorization.googleapis.com"]
        assert binauthz["disable_on_destroy"] is False
        assert one(stack, "google_container_cluster")["binary_authorization"]
        assert f"google_project_service.{key}" in one(stack, "google_container_cluster")["depends_on"]
        assert {"container.googleapis.com", "compute.googleapis.com", "iamcredentials.googleapis.com"} <= set(services)


def test_dedicated_cpu_pools_are_pinned_to_the_environments_zones(
    stacks: dict[str, dict[str, Any]], envs: dict[str, Any]
) -> None:
    """Without node_locations the `convert` pool spans every zone of us-east5; creating it fails in any zone
    that does not offer the machine type."""
    for name, stack in stacks.items():
        for key in envs[name].cpu_pools:
            assert by_name(stack, "google_container_node_pool")[key]["node_locations"] == envs[name].zones


@needs_crds
def test_vllm_compiles_once_into_a_persistent_cache_per_host_and_waits_for_a_cold_start(
    stacks: dict[str, dict[str, Any]],
) -> None:
    """The cache sat in the container's /tmp (every restart compiled from nothing) and the startup budget was
    20 minutes, below a cold compile of a 70B model (about 30 minutes, tpu-inference PR #3408). Replicas and the
    hosts of a group each write their own folder: writers sharing a path fail (GKE's vLLM TPU guide)."""
    lws = one_of_kind(rendered(stacks["dev"], "serve-llama70b-vllm-mh"), "LeaderWorkerSet")
    for role in ("leaderTemplate", "workerTemplate"):
        pod = lws["spec"]["leaderWorkerTemplate"][role]["spec"]
        (vllm,) = pod["containers"]
        env = {e["name"]: e for e in vllm["env"]}
        assert env["VLLM_XLA_CACHE_PATH"]["value"] == "/data/xla-cache/group-$(PLATFORM_GROUP)/host-$(PLATFORM_HOST)"
        assert env["PLATFORM_GROUP"]["valueFrom"]["fieldRef"]["fieldPath"] == (
            "metadata.labels['leaderworkerset.sigs.k8s.io/group-index']"
        )
        assert env["PLATFORM_HOST"]["valueFrom"]["fieldRef"]["fieldPath"] == (
            "metadata.labels['leaderworkerset.sigs.k8s.io/worker-index']"
        )
        mount = next(m for m in vllm["volumeMounts"] if m["mountPath"] == "/data/xla-cache")
        volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
        assert volume["csi"]["volumeAttributes"] == {
            "bucketName": "acme-ml-platform-dev-pathways",
            "mountOptions": (
                "implicit-dirs,only-dir=xla-cache/serve-llama70b-vllm-mh,uid=1000,gid=100,file-mode=664,dir-mode=775"
            ),
        }
    # A group is replaced, never doubled (its successor reuses the same folders).
    assert lws["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"]["maxSurge"] == 0
    probe = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["startupProbe"]
    assert probe["httpGet"]["path"] == "/health"  # not behind the API key
    assert probe["periodSeconds"] * probe["failureThreshold"] >= 3600


def test_every_pool_goes_only_to_zones_that_offer_its_machine_type(
    stacks: dict[str, dict[str, Any]], envs: dict[str, Any]
) -> None:
    """Before the fix: m1-ultramem-80 (offered in no us-east5 zone) and A3 Mega in us-east5-b (only -a offers
    it). Held against the dated zone catalogue (infra/catalogue/zones.yaml)."""
    from infra.catalogue.zones import REGIONS, zones_offering

    for name, stack in stacks.items():
        for pool in of_type(stack, "google_container_node_pool").values():
            machine = pool["node_config"]["machine_type"]
            zones = pool.get("node_locations") or REGIONS[envs[name].region]
            offered = zones_offering(machine)
            assert offered is not None and set(zones) <= offered, (name, pool["name"], machine, zones)
    assert by_name(stacks["dev"], "google_container_node_pool")["a3mega"]["node_locations"] == ["us-east5-a"]
