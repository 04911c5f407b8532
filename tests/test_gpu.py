"""The GPU training path: A3 Mega with GPUDirect-TCPXO, Kueue and JobSet, the NCCL test, JAX on a JobSet."""

from __future__ import annotations

import copy
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.charts.check import render, validate
from infra.config import ENVIRONMENTS_DIR, Environment
from infra.constructs.releases import gpu_networking_values, nccl_test_values
from infra.synth.load import load_environment
from tests.helpers import REPO, by_name, losses, needs_crds, of_type, release_values, rendered

DEV = yaml.safe_load((ENVIRONMENTS_DIR / "dev.yaml").read_text())


def resolve(reference: str, attribute: str) -> tuple[str, str]:
    """(resource type, logical id) of a `${type.id.attribute}` reference."""
    match = re.fullmatch(rf"\$\{{([a-z_]+)\.([^.]+)\.{attribute}\}}", reference)
    assert match, f"{reference!r} is not a reference to a resource's {attribute}"
    return match.group(1), match.group(2)


def kind(objects: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == name]


# --- the stack -------------------------------------------------------------------------------------------


def test_a3_mega_pool_has_eight_node_networks_each_on_its_own_subnet(stacks: dict[str, dict[str, Any]]) -> None:
    dev = stacks["dev"]
    pool = by_name(dev, "google_container_node_pool")["a3mega"]
    config = pool["node_config"]
    assert config["machine_type"] == "a3-megagpu-8g"
    assert config["guest_accelerator"] == [
        {
            "type": "nvidia-h100-mega-80gb",
            "count": 8,
            "gpu_driver_installation_config": {"gpu_driver_version": "DEFAULT"},
        }
    ]
    assert config["gvnic"] == {"enabled": True}
    extra = pool["network_config"]["additional_node_network_configs"]
    assert len(extra) == 8
    for n, nic in enumerate(extra, start=1):
        # References, so Terraform creates the networks before the pool.
        net_type, net_id = resolve(nic["network"], "name")
        sub_type, sub_id = resolve(nic["subnetwork"], "name")
        network = of_type(dev, net_type)[net_id]
        subnet = of_type(dev, sub_type)[sub_id]
        assert (net_type, sub_type) == ("google_compute_network", "google_compute_subnetwork")
        assert (network["name"], network["mtu"]) == (f"ml-platform-gpu-{n}", 8244)
        assert (subnet["name"], subnet["ip_cidr_range"]) == (f"ml-platform-gpu-{n}-us-east5", f"192.168.{n}.0/24")
        # The subnet is in that same network: each NIC has its own network and subnet.
        assert resolve(subnet["network"], "id") == (net_type, net_id)
    assert len({nic["subnetwork"] for nic in extra}) == 8


def test_cluster_turns_on_multi_networking_and_dataplane_v2_only_where_gpudirect_is_used(
    stacks: dict[str, dict[str, Any]], envs: dict[str, Environment]
) -> None:
    for env, stack in stacks.items():
        cluster = next(iter(of_type(stack, "google_container_cluster").values()))
        assert cluster["datapath_provider"] == "ADVANCED_DATAPATH"
        assert cluster.get("enable_multi_networking") is (True if envs[env].gpudirect_networks else None)


def test_queued_pool_is_autoscaled_from_zero_with_no_reservation(stacks: dict[str, dict[str, Any]]) -> None:
    pool = by_name(stacks["dev"], "google_container_node_pool")["a3mega"]
    assert pool["queued_provisioning"] == {"enabled": True}
    assert pool["autoscaling"] == {"total_min_node_count": 0, "total_max_node_count": 2, "location_policy": "ANY"}
    assert "node_count" not in pool
    assert pool["node_config"]["reservation_affinity"] == {"consume_reservation_type": "NO_RESERVATION"}
    prod = by_name(stacks["prod"], "google_container_node_pool")["a3mega"]
    assert prod["node_count"] == 2
    assert prod["node_config"]["reservation_affinity"]["values"] == ["ml-platform-a3mega"]


def test_jobset_and_kueue_are_pinned_releases_from_their_registries(
    stacks: dict[str, dict[str, Any]], envs: dict[str, Environment]
) -> None:
    for env, stack in stacks.items():
        releases = by_name(stack, "helm_release")
        for name, registry in (
            ("jobset", "oci://registry.k8s.io/jobset/charts"),
            ("kueue", "oci://registry.k8s.io/kueue/charts"),
        ):
            release = releases[name]
            assert release["repository"] == registry
            assert release["version"] == envs[env].release.controllers[name]
            assert release["version"][0].isdigit()


# --- the charts, from the stack's values --------------------------------------------------------------


@needs_crds
def test_nccl_jobset_spans_every_node_with_all_gpus_and_the_tcpxo_networks(
    stacks: dict[str, dict[str, Any]],
) -> None:
    objects = rendered(stacks["dev"], "nccl-test")
    (jobset,) = kind(objects, "JobSet")
    assert jobset["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu"
    assert jobset["metadata"]["annotations"]["alpha.jobset.sigs.k8s.io/exclusive-topology"] == (
        "cloud.google.com/gke-nodepool"
    )
    job = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["parallelism"] == job["completions"] == 2
    assert job["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    pod = job["template"]
    main = pod["spec"]["containers"][0]
    assert main["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert pod["spec"]["nodeSelector"] == {
        "cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb",
        "cloud.google.com/gke-nodepool": "a3mega",
    }
    interfaces = json.loads(pod["metadata"]["annotations"]["networking.gke.io/interfaces"])
    assert interfaces[0] == {"interfaceName": "eth0", "network": "default"}
    assert [(i["interfaceName"], i["network"]) for i in interfaces[1:]] == [(f"eth{n}", f"vpc{n}") for n in range(1, 9)]
    (daemon,) = pod["spec"]["initContainers"]
    assert daemon["name"] == "tcpxo-daemon" and daemon["restartPolicy"] == "Always"
    assert "tcpgpudmarxd-dev:v1.0.21@sha256:" in daemon["image"]  # pinned by digest
    assert "devices.gke.io/container.tcpxo-daemon" in pod["metadata"]["annotations"]
    # Every Network the pods name exists, and points at the stack's own GPU VPC.
    networks = {o["metadata"]["name"]: o for o in kind(rendered(stacks["dev"], "gpu-networking"), "GKENetworkParamSet")}
    assert set(networks) == {i["network"] for i in interfaces[1:]}
    assert networks["vpc3"]["spec"] == {
        "vpc": "ml-platform-gpu-3",
        "vpcSubnet": "ml-platform-gpu-3-us-east5",
        "deviceMode": "NetDevice",
    }


@needs_crds
def test_kueue_quota_and_provisioning_check_come_from_the_pools(stacks: dict[str, dict[str, Any]]) -> None:
    objects = rendered(stacks["dev"], "kueue-queues")
    (flavor,) = kind(objects, "ResourceFlavor")
    assert flavor["spec"]["nodeLabels"] == {"cloud.google.com/gke-nodepool": "a3mega"}
    # The slice's two nodes hold 16 GPUs, 416 vCPUs and 3,744 GB: the platform's queue and dev's one team (research,
    # tests/test_team_queues.py) are guaranteed half each, and every queue checks the provisioning.
    queues = kind(objects, "ClusterQueue")
    totals: dict[str, int] = {}
    for queue in queues:
        for r in queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"]:
            totals[r["name"]] = totals.get(r["name"], 0) + int(r["nominalQuota"].removesuffix("G"))
        assert queue["spec"]["admissionChecksStrategy"]["admissionChecks"] == [
            {"name": "dws-provisioning", "onFlavors": ["a3mega"]}
        ]
    # (google.com/tpu: the queues also name the training slice, which the team may borrow: none of it is theirs.)
    assert totals == {"nvidia.com/gpu": 16, "cpu": 416, "memory": 3744, "google.com/tpu": 0}
    (config,) = kind(objects, "ProvisioningRequestConfig")
    assert config["spec"]["provisioningClassName"] == "queued-provisioning.gke.io"
    local = {q["metadata"]["name"]: q for q in kind(objects, "LocalQueue")}
    assert (local["gpu"]["metadata"]["namespace"], local["gpu"]["spec"]["clusterQueue"]) == ("ml-gpu", "gpu")
    # A reservation needs no provisioning check.
    prod = rendered(stacks["prod"], "kueue-queues")
    assert not kind(prod, "AdmissionCheck")
    assert "admissionChecksStrategy" not in kind(prod, "ClusterQueue")[0]["spec"]


@needs_crds
def test_gpu_training_jobset_runs_one_jax_process_per_node(stacks: dict[str, dict[str, Any]]) -> None:
    objects = rendered(stacks["dev"], "gpu-training")
    (jobset,) = kind(objects, "JobSet")
    name = jobset["metadata"]["name"]
    job = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["parallelism"] == job["completions"] == 2 and "successPolicy" not in job
    assert jobset["spec"]["failurePolicy"]["maxRestarts"] == 3
    # dev's resilience: a restart only on 42 and a kill by a signal; any other exit code fails the job set at once.
    (policy,) = job["podFailurePolicy"]["rules"]
    codes = policy["onExitCodes"]
    assert (policy["action"], codes["containerName"], codes["operator"]) == ("FailJob", "train", "NotIn")
    assert codes["values"] == [42, *range(128, 256)]
    assert jobset["spec"]["failurePolicy"]["rules"] == [
        {"name": "exitCodeNotRetried", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}
    ]
    pod = job["template"]
    assert pod["metadata"]["annotations"]["gke-gcsfuse/volumes"] == "true"
    bucket = next(v for v in pod["spec"]["volumes"] if v["name"] == "checkpoints")
    assert bucket["csi"]["volumeAttributes"]["bucketName"] == "acme-ml-platform-dev-checkpoints"
    script = kind(objects, "ConfigMap")[0]["data"]["run.sh"]
    assert f'--coordinator "{name}-node-0-0.{name}:8476"' in script
    # Its rank: the pod's JOB_COMPLETION_INDEX, which the trainer reads itself (workloads/trainer/discovery.py).
    assert "--processes 2" in script and "--process-id" not in script
    assert 'source "${NCCL_LIB_DIR}/nccl-env-profile.sh"' in script


def test_a_jobset_is_renamed_when_its_values_change(stacks: dict[str, dict[str, Any]]) -> None:
    """JobSet pod templates are immutable: a change (or `run: 2`) must create a new JobSet."""
    _found, values = release_values(stacks["dev"], "nccl-test")
    first = render("gpu-jobset", values, name="nccl-test", namespace="ml-gpu")
    again = render("gpu-jobset", copy.deepcopy(values), name="nccl-test", namespace="ml-gpu")
    rerun = render("gpu-jobset", {**values, "run": values["run"] + 1}, name="nccl-test", namespace="ml-gpu")
    names = [kind(o, "JobSet")[0]["metadata"]["name"] for o in (first, again, rerun)]
    assert names[0] == names[1] != names[2]


@needs_crds
def test_a3_high_gets_four_tcpx_networks_and_its_own_installer(tmp_path: Path) -> None:
    data = copy.deepcopy(DEV)
    data["slices"]["a3mega"]["accelerator"] = "a3-high"
    path = tmp_path / "dev.yaml"
    path.write_text(yaml.safe_dump(data))
    env = load_environment(path)
    assert env.gke_gpudirect_networks == 4, "GKE's pool takes 4 of the 8 networks the Slurm slice needs"
    assert env.gpudirect_networks == 8
    net = render("gpu-networking", gpu_networking_values(env), name="gpu-networking", namespace="kube-system")
    (installer,) = [o for o in kind(net, "DaemonSet") if o["metadata"]["name"].startswith("nccl-")]
    assert installer["metadata"]["name"] == "nccl-tcpx-installer"
    affinity = installer["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == ["nvidia-h100-80gb"]
    assert len(kind(net, "Network")) == 4
    test = render("gpu-jobset", nccl_test_values(env), name="nccl-test", namespace="ml-gpu")
    for obj in net + test:
        validate(obj)
    pod = kind(test, "JobSet")[0]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert len(json.loads(pod["metadata"]["annotations"]["networking.gke.io/interfaces"])) == 5
    env_vars = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env_vars["NCCL_GPUDIRECTTCPX_SOCKET_IFNAME"] == "eth1,eth2,eth3,eth4"
    assert pod["spec"]["initContainers"][0]["name"] == "tcpx-daemon"


# --- the NCCL verdict -----------------------------------------------------------------------------------

NCCL_OUTPUT = """\
# nThread 1 nGpus 1 minBytes 1048576 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 100
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576         16384     float    none      -1    210.5    4.98    4.67      0    205.1    5.11    4.79      0
   268435456       4194304     float    none      -1   1612.0  166.52  156.11      0   1598.4  167.94  157.44      0
  8589934592     134217728     float    none      -1  {time}  {algbw}  {busbw}      0  43010.2  199.72  187.24      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 120.33
"""


def check_bandwidth(tmp_path: Path, text: str, minimum: float) -> subprocess.CompletedProcess[str]:
    log = tmp_path / "nccl.log"
    log.write_text(text)
    script = REPO / "workloads/charts/gpu-jobset/files/check-bandwidth.sh"
    return subprocess.run(["sh", str(script), str(log), str(minimum)], capture_output=True, text=True)


def test_nccl_check_passes_a_healthy_a3_mega_result(tmp_path: Path) -> None:
    result = check_bandwidth(tmp_path, NCCL_OUTPUT.format(time="42810.7", algbw="200.65", busbw="188.11"), 185)
    assert result.returncode == 0, result.stdout
    assert "largest message 8589934592 bytes: bus bandwidth 188.11 GB/s" in result.stdout


def test_nccl_check_fails_below_the_threshold_reading_the_largest_message(tmp_path: Path) -> None:
    # The smaller 256 MiB row (156 GB/s) must not be what is judged; the 8 GiB row is slow.
    result = check_bandwidth(tmp_path, NCCL_OUTPUT.format(time="61012.3", algbw="140.79", busbw="131.99"), 185)
    assert result.returncode == 1
    assert "bus bandwidth 131.99 GB/s (minimum 185.00 GB/s)" in result.stdout and "FAIL" in result.stdout


def test_nccl_check_fails_when_the_benchmark_printed_no_results(tmp_path: Path) -> None:
    result = check_bandwidth(tmp_path, "mpirun: connection refused\n# Avg bus bandwidth    : 0\n", 185)
    assert result.returncode == 2 and "no result rows" in result.stdout


def test_the_chart_ships_the_tested_check_script(stacks: dict[str, dict[str, Any]]) -> None:
    found, values = release_values(stacks["dev"], "nccl-test")
    objects = render("gpu-jobset", values, name=found["name"], namespace=found["namespace"])
    shipped = kind(objects, "ConfigMap")[0]["data"]["check-bandwidth.sh"]
    assert shipped.strip() == (REPO / "workloads/charts/gpu-jobset/files/check-bandwidth.sh").read_text().strip()
    assert "check-bandwidth.sh /tmp/nccl.log 185" in kind(objects, "ConfigMap")[0]["data"]["run.sh"]


# --- JAX on a JobSet, two processes on this machine -----------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_jobset_processes_form_one_jax_group_and_train(tmp_path: Path) -> None:
    """What each JobSet pod runs, as two local processes with two CPU devices each."""
    coordinator = f"127.0.0.1:{_free_port()}"
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
    }
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "workloads.trainer",
                "jobset",
                "--coordinator",
                coordinator,
                "--processes",
                "2",
                "--process-id",
                str(i),
                "--steps",
                "2",
                "--checkpoint-dir",
                str(tmp_path),
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=240) for p in procs]
    for proc, (_out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err[-2000:]
    summaries = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    assert [s["process_id"] for s in summaries] == [0, 1]
    assert all(s["devices"] == 4 and s["end_step"] == 2 for s in summaries)
    assert summaries[0]["loss_last"] == summaries[1]["loss_last"]
    metrics = [step for step, _ in losses(tmp_path)]
    assert metrics == [1, 2]
