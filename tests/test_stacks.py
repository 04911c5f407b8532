"""Invariants of the synthesized stacks (one synth per session, see conftest)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from infra.cdk.layout import read_stack
from infra.config import Environment
from infra.review import accelerator_inventory
from infra.rules.run import check_synthesized
from infra.synth.app import synth
from tests.helpers import by_name, of_type, one


def test_every_environment_is_synthesized_as_platform_env(
    stacks: dict[str, dict[str, Any]], envs: dict[str, Environment]
) -> None:
    assert set(stacks) == set(envs)
    for name, stack in stacks.items():
        assert stack["//"]["metadata"]["stackName"] == f"platform-{name}"


def test_each_environment_has_its_own_state_prefix(
    stacks: dict[str, dict[str, Any]], envs: dict[str, Environment]
) -> None:
    prefixes = {name: stack["terraform"]["backend"]["gcs"]["prefix"] for name, stack in stacks.items()}
    assert prefixes == {name: f"platform/{name}" for name in envs}
    assert len(set(prefixes.values())) == len(prefixes)


def test_dev_has_the_v6e_4x4_pool_of_the_tutorial(stacks: dict[str, dict[str, Any]]) -> None:
    pool = next(p for p in of_type(stacks["dev"], "google_container_node_pool").values() if p["name"] == "train")
    assert pool["node_config"]["machine_type"] == "ct6e-standard-4t"
    assert pool["node_count"] == 4
    assert pool["placement_policy"] == {"type": "COMPACT", "tpu_topology": "4x4"}
    assert pool["node_locations"] == ["us-east5-b"]


def test_every_slice_pool_matches_its_slice(stacks: dict[str, dict[str, Any]], envs: dict[str, Environment]) -> None:
    for name, env in envs.items():
        pools = by_name(stacks[name], "google_container_node_pool")
        slice_pools = {p for key, spec in env.gke_slices.items() for p in spec.pools(key)}
        assert set(pools) == {*slice_pools, "system", *env.cpu_pools}, "no pool for another orchestrator's slice"
        for key, spec in env.gke_slices.items():
            s, pool = spec.slice, pools[key]
            assert pool["node_config"]["machine_type"] == s.machine_type
            scaling = env.pool_node_ranges(key)[0]  # the slice's (first) pool
            if spec.falls_back:
                # Each capacity tier's pool, from zero to a host per server, joins the slice's ComputeClass.
                for name_, tier in spec.tier_pools(key):
                    body = pools[name_]
                    assert (body["autoscaling"]["min_node_count"], body["autoscaling"]["max_node_count"]) == (
                        0,
                        s.hosts * env.slice_copies(key),
                    )
                    assert body["node_config"]["labels"]["cloud.google.com/compute-class"] == f"slice-{key}"
                    assert body["node_config"]["taint"] == [
                        {"key": "cloud.google.com/compute-class", "value": f"slice-{key}", "effect": "NO_SCHEDULE"}
                    ]
                    assert body["management"]["auto_repair"] is spec.repairs_tier(tier)
            elif scaling is None:
                # A single-host slice holds one host per replica of the vLLM server on it.
                assert pool["node_count"] == s.hosts * env.slice_copies(key)
            elif spec.node_range is None:
                # A single-host slice under an autoscaled vLLM: a host per server, from its fewest to its most.
                assert "node_count" not in pool
                counts = "" if s.kind == "tpu" else "total_"
                low, high = scaling
                assert (
                    pool["autoscaling"][f"{counts}min_node_count"],
                    pool["autoscaling"][f"{counts}max_node_count"],
                ) == (
                    low,
                    high,
                )
                assert high == s.hosts * env.slice_copies(key)
            else:
                low, high = spec.node_range
                assert "node_count" not in pool
                assert (pool["autoscaling"]["total_min_node_count"], pool["autoscaling"]["total_max_node_count"]) == (
                    low,
                    high,
                )
                assert high == s.hosts
            assert pool["node_locations"] == [env.zone_of(key)], "a slice lives in one zone"
            if s.kind == "tpu" and s.multi_host:
                assert pool["placement_policy"] == {"type": "COMPACT", "tpu_topology": s.topology}
            assert pool["management"]["auto_repair"] is spec.repairs_tier(spec.primary)
            assert "auto_upgrade" in pool["management"]


def test_nodes_use_workload_identity_metadata_and_a_dedicated_account(
    stacks: dict[str, dict[str, Any]], envs: dict[str, Environment]
) -> None:
    for name, stack in stacks.items():
        accounts = {a["account_id"]: addr for addr, a in of_type(stack, "google_service_account").items()}
        nodes = accounts[f"{envs[name].cluster.name}-nodes"]
        pathways = accounts[f"{envs[name].cluster.name}-pathways"]
        for pool in of_type(stack, "google_container_node_pool").values():
            config = pool["node_config"]
            # JetStream + Pathways pools run with the GCE metadata server (the GKE tutorial), as their own account.
            gce = pool["name"] in envs[name].pathways_slices
            assert config["workload_metadata_config"] == {"mode": "GCE_METADATA" if gce else "GKE_METADATA"}
            account = pathways if gce else nodes
            assert config["service_account"] == f"${{google_service_account.{account}.email}}"
            assert config["shielded_instance_config"]["enable_secure_boot"] is True
        roles = {m["role"] for m in of_type(stack, "google_project_iam_member").values() if nodes in m["member"]}
        assert roles == {"roles/container.defaultNodeServiceAccount"}, "node account holds no broad role"


def test_cluster_is_private_hardened_and_runs_ray_and_fuse(
    stacks: dict[str, dict[str, Any]], envs: dict[str, Environment]
) -> None:
    for name, stack in stacks.items():
        cluster = one(stack, "google_container_cluster")
        assert cluster["workload_identity_config"] == {"workload_pool": f"{envs[name].project}.svc.id.goog"}
        assert cluster["addons_config"]["ray_operator_config"][0]["enabled"] is True
        assert cluster["addons_config"]["gcs_fuse_csi_driver_config"] == {"enabled": True}
        assert cluster["private_cluster_config"]["enable_private_nodes"] is True
        # No network authorized: the IP endpoint answers on its private address alone.
        networks = envs[name].network.authorized_networks
        assert len(cluster["master_authorized_networks_config"]["cidr_blocks"]) == len(networks)
        assert cluster["private_cluster_config"]["enable_private_endpoint"] is (not networks)
        assert cluster["datapath_provider"] == "ADVANCED_DATAPATH"
        assert cluster["enable_shielded_nodes"] is True
        assert cluster["remove_default_node_pool"] is True
        assert cluster["release_channel"]["channel"] == envs[name].cluster.release_channel


def test_prod_cluster_cannot_be_destroyed(stacks: dict[str, dict[str, Any]]) -> None:
    cluster = one(stacks["prod"], "google_container_cluster")
    assert cluster["deletion_protection"] is True
    assert cluster["lifecycle"]["prevent_destroy"] is True


def test_no_bucket_is_public_and_all_are_versioned_with_soft_delete(stacks: dict[str, dict[str, Any]]) -> None:
    for stack in stacks.values():
        buckets = of_type(stack, "google_storage_bucket")
        assert buckets
        for bucket in buckets.values():
            assert bucket["uniform_bucket_level_access"] is True
            assert bucket["public_access_prevention"] == "enforced"
            assert bucket["versioning"] == {"enabled": True}
            assert bucket["soft_delete_policy"]["retention_duration_seconds"] >= 7 * 86400
            assert bucket["lifecycle_rule"]
        for member in of_type(stack, "google_storage_bucket_iam_member").values():
            assert member["member"] not in ("allUsers", "allAuthenticatedUsers")


def test_prod_checkpoint_bucket_cannot_be_destroyed(
    stacks: dict[str, dict[str, Any]], envs: dict[str, Environment]
) -> None:
    prod = envs["prod"]
    data = {prod.bucket_name(key) for key in prod.buckets}
    buckets = {b["name"]: b for b in of_type(stacks["prod"], "google_storage_bucket").values()}
    assert data <= set(buckets)
    for name in data:
        assert buckets[name]["lifecycle"]["prevent_destroy"] is True
        assert buckets[name]["force_destroy"] is False
    # The only other bucket: Cloud Build's staged sources, deleted after a week anyway.
    assert set(buckets) - data == {prod.build_staging_bucket}


def test_prod_registry_cannot_be_destroyed(stacks: dict[str, dict[str, Any]]) -> None:
    assert one(stacks["prod"], "google_artifact_registry_repository")["lifecycle"]["prevent_destroy"] is True
    assert one(stacks["dev"], "google_artifact_registry_repository")["lifecycle"]["prevent_destroy"] is False


def test_registry_is_docker_with_immutable_tags_and_cleanup(stacks: dict[str, dict[str, Any]]) -> None:
    for stack in stacks.values():
        repo = one(stack, "google_artifact_registry_repository")
        assert repo["format"] == "DOCKER"
        assert repo["docker_config"] == {"immutable_tags": True}
        assert {p["action"] for p in repo["cleanup_policies"]} == {"DELETE", "KEEP"}
        assert repo["cleanup_policy_dry_run"] is False


def test_workload_identity_in_both_shapes(stacks: dict[str, dict[str, Any]], envs: dict[str, Environment]) -> None:
    stack, env = stacks["dev"], envs["dev"]
    members = [m["member"] for m in of_type(stack, "google_storage_bucket_iam_member").values()]
    trainer = env.identities["trainer"]
    direct = (
        f"principal://iam.googleapis.com/projects/{env.project_number}/locations/global/workloadIdentityPools/"
        f"{env.project}.svc.id.goog/subject/ns/{trainer.namespace}/sa/{trainer.service_account}"
    )
    assert members.count(direct) == len(trainer.bucket_roles)

    serving = env.identities["serving"]
    bindings = {
        b["member"]: b
        for b in of_type(stack, "google_service_account_iam_member").values()
        if b["role"] == "roles/iam.workloadIdentityUser"
    }
    impersonating = [k for k, i in env.identities.items() if i.mode == "impersonation"]
    # serving, saxml and the checkpoint conversions' converter
    assert len(bindings) == len(impersonating) == 3, "one binding per impersonation identity"
    binding = bindings[f"serviceAccount:{env.project}.svc.id.goog[{serving.namespace}/{serving.service_account}]"]
    assert binding["role"] == "roles/iam.workloadIdentityUser"
    ksas = {k["metadata"]["name"]: k["metadata"] for k in of_type(stack, "kubernetes_service_account_v1").values()}
    assert "iam.gke.io/gcp-service-account" in ksas[serving.service_account]["annotations"]
    assert not ksas[trainer.service_account].get("annotations")


def test_kubernetes_and_helm_providers_talk_to_the_stacks_cluster_through_its_dns_endpoint(
    stacks: dict[str, dict[str, Any]],
) -> None:
    """The DNS-based endpoint authorizes with IAM, so CI runners outside the authorized networks can deploy
    (GKE: network isolation, DNS-based endpoint); the IP endpoint stays limited to the authorized networks (none:
    private)."""
    for stack in stacks.values():
        cluster_id, cluster = next(iter(of_type(stack, "google_container_cluster").items()))
        assert cluster["control_plane_endpoints_config"] == {"dns_endpoint_config": {"allow_external_traffic": True}}
        assert "master_authorized_networks_config" in cluster
        dns = f"google_container_cluster.{cluster_id}.control_plane_endpoints_config[0].dns_endpoint_config[0].endpoint"
        kube = stack["provider"]["kubernetes"][0]
        helm = stack["provider"]["helm"][0]["kubernetes"]
        for config in (kube, helm):
            assert config["host"] == f"https://${{{dns}}}"
            assert "cluster_ca_certificate" not in config  # the DNS endpoint serves a publicly trusted certificate
            # The token comes from GKE's credential plugin when the provider needs one: before, a token read from
            # google_client_config was stored in the state and lasted one hour of a longer first apply.
            assert "token" not in config
            plugin = config["exec"][0] if isinstance(config["exec"], list) else config["exec"]
            assert plugin["command"] == "gke-gcloud-auth-plugin"
            assert plugin["api_version"] == "client.authentication.k8s.io/v1beta1"
        assert "google_client_config" not in json.dumps(stack)


def test_environment_labels_apply_through_provider_default_labels(
    stacks: dict[str, dict[str, Any]], envs: dict[str, Environment]
) -> None:
    for name, stack in stacks.items():
        assert stack["provider"]["google"][0]["default_labels"] == envs[name].labels


def test_gpu_and_spot_slices_get_their_accelerators_and_capacity(tmp_path: Path, envs: dict[str, Environment]) -> None:
    data = envs["dev"].model_dump(mode="json", exclude_none=True)
    data["slices"]["gpu"] = {"accelerator": "a3-mega", "nodes": 2, "zone": "us-east5-a", "capacity": {"type": "spot"}}
    data["slices"]["small"] = {"accelerator": "v5e", "topology": "2x2", "capacity": {"type": "spot"}}
    data["slices"]["elastic"] = {"accelerator": "a3-high", "nodes": 4, "min_nodes": 1, "capacity": {"type": "spot"}}
    env = Environment.model_validate(data)
    synth({"dev": env}, tmp_path)
    stack = read_stack(tmp_path, "platform-dev")
    pools = by_name(stack, "google_container_node_pool")
    gpu = pools["gpu"]
    assert gpu["node_count"] == 2
    assert gpu["node_config"]["machine_type"] == "a3-megagpu-8g"
    assert gpu["node_config"]["spot"] is True
    assert gpu["node_config"]["guest_accelerator"] == [
        {
            "count": 8,
            "gpu_driver_installation_config": {"gpu_driver_version": "DEFAULT"},
            "type": "nvidia-h100-mega-80gb",
        }
    ]
    assert "placement_policy" not in gpu
    assert "placement_policy" not in pools["small"], "a single-host slice needs no placement policy"
    assert pools["small"]["node_count"] == 1
    elastic = pools["elastic"]
    assert "node_count" not in elastic
    assert elastic["autoscaling"]["total_min_node_count"] == 1
    assert elastic["autoscaling"]["total_max_node_count"] == 4
    # A3 High uses the first 4 of the 8 GPUDirect networks the A3 Mega pools need.
    assert len(elastic["network_config"]["additional_node_network_configs"]) == 4
    assert (
        elastic["network_config"]["additional_node_network_configs"]
        == (pools["gpu"]["network_config"]["additional_node_network_configs"][:4])
    )
    # dev's own queued A3 Mega pool plus this one, 2 nodes x 8 GPUs each.
    assert accelerator_inventory(stack)[("a3-mega", "us-east5-a")] == 32


def test_dynamic_workload_scheduler_pools_have_no_static_node_count(
    tmp_path: Path, envs: dict[str, Environment]
) -> None:
    data = envs["dev"].model_dump(mode="json", exclude_none=True)
    data["slices"]["flex"] = {
        "accelerator": "v6e",
        "topology": "2x4",
        "capacity": {"type": "flex-start", "max_run_hours": 8},
    }
    data["slices"]["queued"] = {"accelerator": "a3-mega", "nodes": 2, "capacity": {"type": "queued"}}
    data["batch"]["slices"].append("queued")  # only Kueue requests queued capacity
    synth({"dev": Environment.model_validate(data)}, tmp_path)
    stack = read_stack(tmp_path, "platform-dev")
    pools = by_name(stack, "google_container_node_pool")
    flex, queued = pools["flex"], pools["queued"]
    # GKE's DWS guides: --enable-autoscaling --num-nodes=0 --location-policy=ANY --reservation-affinity=none
    # --no-enable-autorepair. A multi-host TPU slice is sized by the per-zone maximum (total_* is refused
    # for it); a GPU pool by the total.
    assert flex["autoscaling"] == {"min_node_count": 0, "max_node_count": 2, "location_policy": "ANY"}
    assert queued["autoscaling"] == {"total_min_node_count": 0, "total_max_node_count": 2, "location_policy": "ANY"}
    for pool in (flex, queued):
        assert "node_count" not in pool
        assert pool["initial_node_count"] == 0
        assert pool["node_config"]["reservation_affinity"] == {"consume_reservation_type": "NO_RESERVATION"}
        assert pool["management"]["auto_repair"] is False
    assert flex["node_config"]["flex_start"] is True
    assert flex["node_config"]["max_run_duration"] == "28800s"
    assert queued["queued_provisioning"] == {"enabled": True}
    assert "spot" not in queued["node_config"]
    terraform, _, _ = check_synthesized(stack)
    assert [v.line() for v in terraform] == []
    # The shipped v6e slices (train 16, serve 16, prefill 8, decode 8, vllm 3 x 8, vllm-multihost 2 x 16) and this one.
    assert accelerator_inventory(stack)[("v6e", "us-east5-b")] == 104 + 8


def test_an_ironwood_slice_gets_its_workload_policy_as_gke_documents_it(
    tmp_path: Path, envs: dict[str, Environment]
) -> None:
    """GKE's Ironwood guide: `resource-policies create workload-policy --type=HIGH_THROUGHPUT
    --accelerator-topology=2x2x2`, then the pool with `--placement-policy`; no policy for one host."""
    from infra.rules import check_stack

    data = envs["dev"].model_dump(mode="json", exclude_none=True)
    data["slices"]["iron"] = {"accelerator": "tpu7x", "topology": "2x2x2", "capacity": {"type": "spot"}}
    data["slices"]["iron-one"] = {"accelerator": "tpu7x", "topology": "2x2x1", "capacity": {"type": "spot"}}
    synth({"dev": Environment.model_validate(data)}, tmp_path)
    stack = read_stack(tmp_path, "platform-dev")
    (policy_id, policy), *_ = of_type(stack, "google_compute_resource_policy").items()
    assert policy["workload_policy"] == {"type": "HIGH_THROUGHPUT", "accelerator_topology": "2x2x2"}
    assert policy["region"] == "us-east5"
    pools = by_name(stack, "google_container_node_pool")
    assert pools["iron"]["placement_policy"] == {
        "type": "COMPACT",
        "tpu_topology": "2x2x2",
        "policy_name": f"${{google_compute_resource_policy.{policy_id}.name}}",
    }
    assert pools["iron"]["node_count"] == 2  # 8 chips, 4 per tpu7x-standard-4t
    assert pools["iron"]["node_config"]["disk_type"] == "hyperdisk-balanced"
    assert "placement_policy" not in pools["iron-one"] and pools["iron-one"]["node_count"] == 1
    assert [v.line() for v in check_stack(stack)] == []


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_every_release_waits_for_the_controller_of_each_kind_its_chart_writes(
    env: str, stacks: dict[str, dict[str, Any]]
) -> None:
    """Derived from the charts' templates, not a hand map: vllm-tpu and jetstream-pathways (LeaderWorkerSet)
    after lws, saxml and gpu-jobset (JobSet) after jobset, kueue-queues after kueue."""
    from infra.catalogue.controllers import controllers_of_chart

    releases = of_type(stacks[env], "helm_release")
    address = {r["name"]: f"helm_release.{k}" for k, r in releases.items()}
    waited = {}
    for r in releases.values():
        chart = r["chart"].rsplit("/", 1)[-1]
        if r["chart"].startswith("../"):
            waited[r["name"]] = (chart, {address[c] for c in controllers_of_chart(chart)} - set(r["depends_on"]))
    assert {name: missing for name, (_, missing) in waited.items() if missing} == {}
    charts = {chart for chart, _ in waited.values()}
    assert {"vllm-tpu", "jetstream-pathways", "saxml", "gpu-jobset", "kueue-queues"} <= charts


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_the_inference_gateway_feature_brings_its_api_and_both_ports(
    env: str, stacks: dict[str, dict[str, Any]], envs: dict[str, Environment]
) -> None:
    """What the feature needs, from one place (infra/catalogue: the API, the picker's port; the servers' port):
    the API enabled, and the model servers' and the picker's ports open from the proxy-only subnet."""
    from infra.catalogue import upstream
    from infra.catalogue.gcp_apis import INFERENCE_GATEWAY_API
    from infra.serving import vllm_args

    assert envs[env].inference_gateway
    stack = stacks[env]
    assert INFERENCE_GATEWAY_API[0] in {s["service"] for s in of_type(stack, "google_project_service").values()}
    proxy = next(
        s for s in of_type(stack, "google_compute_subnetwork").values() if s.get("purpose") == "REGIONAL_MANAGED_PROXY"
    )
    rule = next(
        f for f in of_type(stack, "google_compute_firewall").values() if proxy["ip_cidr_range"] in f["source_ranges"]
    )
    assert rule["allow"] == [{"protocol": "tcp", "ports": sorted([str(vllm_args.PORT), str(upstream.GAIE_EPP_PORT)])}]


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_controllers_wait_for_the_system_pool_and_their_firewall_not_for_accelerator_pools(
    env: str, stacks: dict[str, dict[str, Any]]
) -> None:
    """Before the fix every controller depended on every slice pool: one spot slice short of capacity failed the
    apply before any controller was installed, while the system pool they run on was not waited for."""
    stack = stacks[env]
    pools = {
        f"google_container_node_pool.{k}": p["name"] for k, p in of_type(stack, "google_container_node_pool").items()
    }
    firewalls = {f"google_compute_firewall.{k}" for k in of_type(stack, "google_compute_firewall")}
    for release in of_type(stack, "helm_release").values():
        if "repository" not in release:
            continue
        waits = release["depends_on"]
        assert [pools[d] for d in waits if d in pools] == ["system"], release["name"]
        assert any(d in firewalls for d in waits), release["name"]
