"""VM groups on Compute Engine: one derivation of the VMs' properties, taken by the stack's instance template and
by the bulkInsert request; the request held to the Compute Engine client library's types (its enum fields
checked against the library's enum classes, which its protos declare as strings) and to the sourced rules;
`make vm-up` / `make vm-down` as typed calls; the start-up run with the host's tools stood in for."""

from __future__ import annotations

import copy
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import compute_v1

from infra.catalogue.gpudirect import GPU_HOSTS, TCPXO, nccl_env
from infra.catalogue.hosts import HOSTS
from infra.cdk import literal
from infra.config import ConfigError, Environment
from infra.rules.request_subject import RequestContext
from infra.shell import generated_scripts
from infra.synth.load import load_environment
from infra.vms.bulk import bulk_insert
from infra.vms.instance import instance_properties, startup_script, vm_names
from scripts.vms import checked, down_calls, main, run, up_calls, write
from tests.helpers import REPO, assert_request_refused, by_name, of_type
from tests.refused import VM_REFUSED

DEV = (REPO / "infra" / "environments" / "dev.yaml").read_text()


def _ctx(env: Environment) -> RequestContext:
    return RequestContext("compute.v1.BulkInsertInstanceResource", env, "vm_groups.a3mega")


# --- The bulkInsert request -------------------------------------------------------------------------------


def test_the_bulk_insert_request_is_the_client_librarys_type_as_written(
    envs: dict[str, Environment], tmp_path: Path
) -> None:
    for env in envs.values():
        written, lines = write(env, tmp_path)
        assert lines == []
        path = written[0] / "bulk-insert.json"
        request = json.loads(path.read_text())
        parsed = compute_v1.BulkInsertInstanceResource.from_json(path.read_text())
        again = compute_v1.BulkInsertInstanceResource.to_json(
            parsed, use_integers_for_enums=False, always_print_fields_with_no_presence=False
        )
        assert json.loads(again) == request, "no field dropped or renamed by the library"
        assert parsed.count == parsed.min_count == 2
        assert sorted(parsed.per_instance_properties) == vm_names(env, "a3mega")


def test_dev_vms_are_flex_start_with_a_run_limit_and_no_placement_policy(envs: dict[str, Environment]) -> None:
    props = bulk_insert(envs["dev"], "a3mega")["instanceProperties"]
    assert props["scheduling"] == {
        "onHostMaintenance": "TERMINATE",
        "automaticRestart": False,
        "provisioningModel": "FLEX_START",
        "instanceTerminationAction": "DELETE",
        "maxRunDuration": {"seconds": str(8 * 3600)},
    }
    assert props["reservationAffinity"] == {"consumeReservationType": "NO_RESERVATION"}
    assert "resourcePolicies" not in props
    # In the managed group the resize request carries the run limit instead.
    assert "maxRunDuration" not in instance_properties(envs["dev"], "a3mega")["scheduling"]


def test_prod_vms_consume_their_reservation_and_are_placed_compactly(envs: dict[str, Environment]) -> None:
    props = bulk_insert(envs["prod"], "a3mega")["instanceProperties"]
    assert props["scheduling"]["provisioningModel"] == "STANDARD"
    assert props["reservationAffinity"] == {
        "consumeReservationType": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": ["ml-platform-a3mega-vms"],
    }
    assert props["resourcePolicies"] == ["prod-a3mega-compact"]


def test_every_vm_has_a_gvnic_on_each_gpu_network_gke_uses(
    envs: dict[str, Environment], stacks: dict[str, dict[str, Any]]
) -> None:
    props = instance_properties(envs["dev"], "a3mega")
    nics = props["networkInterfaces"]
    assert len(nics) == 1 + TCPXO.extra_nics and {n["nicType"] for n in nics} == {"GVNIC"}
    assert nics[0]["subnetwork"].endswith("/subnetworks/ml-platform-us-east5")
    pool = by_name(stacks["dev"], "google_container_node_pool")["a3mega"]
    networks = of_type(stacks["dev"], "google_compute_network")
    gke = [
        networks[c["network"].split(".")[1]]["name"] for c in pool["network_config"]["additional_node_network_configs"]
    ]
    assert [n["network"].rsplit("/", 1)[1] for n in nics[1:]] == gke


# --- The stack -------------------------------------------------------------------------------------------


def test_the_stack_declares_the_group_empty_from_the_same_derivation(
    envs: dict[str, Environment], stacks: dict[str, dict[str, Any]]
) -> None:
    env, stack = envs["dev"], stacks["dev"]
    ((_, template),) = of_type(stack, "google_compute_instance_template").items()
    props = instance_properties(env, "a3mega")
    assert template["machine_type"] == props["machineType"] == "a3-megagpu-8g"
    # Literal text in Terraform's JSON syntax: the script's bash `${...}` escaped as `$${...}`, which OpenTofu reads
    # back as the script itself (tests/test_engine.py plans it).
    assert template["metadata"] == {i["key"]: literal(i["value"]) for i in props["metadata"]["items"]}
    assert template["metadata"]["startup-script"] == literal(startup_script(env, "a3mega"))
    assert template["metadata"]["platform-hosts"] == "dev-a3mega-0,dev-a3mega-1"
    assert [n["nic_type"] for n in template["network_interface"]] == ["GVNIC"] * 9
    assert template["scheduling"]["provisioning_model"] == "FLEX_START"
    assert template["disk"][0]["source_image"].startswith("projects/cos-cloud/global/images/cos-121-")
    group = by_name(stack, "google_compute_instance_group_manager")["dev-a3mega"]
    assert group["target_size"] == 0 and group["zone"] == "us-east5-a"
    assert group["lifecycle"] == {"ignore_changes": ["target_size"]}, "vm-up owns the size, not Terraform"
    assert "google_compute_instance_template" in group["version"][0]["instance_template"]
    firewall = by_name(stack, "google_compute_firewall")
    assert firewall["ml-platform-dev-a3mega-vm-internal"]["target_tags"] == ["dev-a3mega-vm"]
    assert template["tags"] == ["dev-a3mega-vm"]
    readers = [m["member"] for m in of_type(stack, "google_artifact_registry_repository_iam_member").values()]
    assert any("vm-a3mega@" in str(m) or "vms-a3mega_account" in str(m) for m in readers)


def test_prods_group_has_its_compact_placement_policy(stacks: dict[str, dict[str, Any]]) -> None:
    policy = by_name(stacks["prod"], "google_compute_resource_policy")["prod-a3mega-compact"]
    assert policy["group_placement_policy"] == {"collocation": "COLLOCATED", "vm_count": 2}
    ((_, template),) = of_type(stacks["prod"], "google_compute_instance_template").items()
    assert "google_compute_resource_policy" in template["resource_policies"][0]
    assert template["reservation_affinity"]["specific_reservation"]["values"] == ["ml-platform-a3mega-vms"]


# --- What the types and the rules refuse ---------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(VM_REFUSED))
def test_a_bad_request_is_refused_with_file_field_value_and_source(
    case: str, envs: dict[str, Environment], tmp_path: Path
) -> None:
    mutate, field, rule_id, source = VM_REFUSED[case]
    request = copy.deepcopy(bulk_insert(envs["dev"], "a3mega"))
    mutate(request)
    assert_request_refused(request, _ctx(envs["dev"]), tmp_path / "bulk-insert.json", field, rule_id, source)


def test_queued_capacity_for_a_vm_group_is_refused_at_load(tmp_path: Path) -> None:
    path = tmp_path / "dev.yaml"
    old = "    capacity: {type: flex-start, max_run_hours: 8}"
    assert old in DEV
    path.write_text(DEV.replace(old, "    capacity: {type: queued}"))
    with pytest.raises(ConfigError) as err:
        load_environment(path)
    text = str(err.value)
    assert "slices.a3mega-vms.capacity.type: 'queued'" in text and "rule gce.vm-capacity" in text


def test_a_vm_group_runs_on_tcpxo_machines_only(tmp_path: Path) -> None:
    path = tmp_path / "dev.yaml"
    old = "  a3mega-vms:\n    accelerator: a3-mega"
    path.write_text(DEV.replace(old, "  a3mega-vms:\n    accelerator: a3-high"))
    with pytest.raises(ConfigError, match=r"vm_groups\.a3mega\.slice: 'a3mega-vms': a VM group's start-up sets up"):
        load_environment(path)


# --- make vm-up / vm-down -------------------------------------------------------------------------------


def test_a_flex_start_group_comes_up_through_one_resize_request(envs: dict[str, Environment]) -> None:
    ((client, method, kwargs),) = checked(up_calls(envs["dev"], "a3mega", now=1_800_000_000))
    assert (client, method) == ("InstanceGroupManagerResizeRequestsClient", "insert")
    request = compute_v1.InstanceGroupManagerResizeRequest.from_json(
        json.dumps(kwargs["instance_group_manager_resize_request_resource"])
    )
    assert [i.name for i in request.instances] == ["dev-a3mega-0", "dev-a3mega-1"]
    assert request.requested_run_duration.seconds == 8 * 3600 and request.name == "up-1800000000"
    assert kwargs["instance_group_manager"] == "dev-a3mega" and kwargs["zone"] == "us-east5-a"


def test_a_reserved_group_comes_up_by_name_and_bulk_sends_the_bulk_insert(envs: dict[str, Environment]) -> None:
    ((_, method, kwargs),) = checked(up_calls(envs["prod"], "a3mega"))
    assert method == "create_instances"
    assert kwargs["instance_group_managers_create_instances_request_resource"] == {
        "instances": [{"name": "prod-a3mega-0"}, {"name": "prod-a3mega-1"}]
    }
    ((client, method, kwargs),) = checked(up_calls(envs["prod"], "a3mega", bulk=True))
    assert (client, method) == ("InstancesClient", "bulk_insert")
    assert kwargs["bulk_insert_instance_resource_resource"] == bulk_insert(envs["prod"], "a3mega")


class FakeClient:
    def __init__(self, log: list[tuple[str, dict[str, Any]]], missing: set[str]) -> None:
        self.log, self.missing = log, missing

    def __getattr__(self, method: str) -> Any:
        def call(**kwargs: Any) -> None:
            self.log.append((method, kwargs))
            if kwargs.get("instance") in self.missing:
                raise exceptions.NotFound("gone")

        return call


def test_down_deletes_the_group_and_any_bulk_vm_and_a_waiting_request(envs: dict[str, Environment]) -> None:
    calls = checked(down_calls(envs["dev"], "a3mega", ["up-1800000000"]))
    log: list[tuple[str, dict[str, Any]]] = []
    clients = {
        name: FakeClient(log, missing={"dev-a3mega-0", "dev-a3mega-1"})
        for name in ("InstanceGroupManagerResizeRequestsClient", "InstanceGroupManagersClient", "InstancesClient")
    }
    out = run(calls, clients)
    assert [m for m, _ in log] == ["cancel", "delete_instances", "delete", "delete"]
    deleted = log[1][1]["instance_group_managers_delete_instances_request_resource"]
    assert isinstance(deleted, compute_v1.InstanceGroupManagersDeleteInstancesRequest)
    assert list(deleted.instances) == [f"zones/us-east5-a/instances/dev-a3mega-{n}" for n in (0, 1)]
    assert out[-1] == "InstancesClient.delete: nothing to delete (dev-a3mega-1)"


def test_make_vm_up_dry_run_prints_the_calls(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["up", "--env", "dev", "--group", "a3mega", "--dry-run"]) == 0
    assert '"call": "compute_v1.InstanceGroupManagerResizeRequestsClient.insert"' in capsys.readouterr().out
    assert main(["up", "--env", "dev", "--group", "nope", "--dry-run"]) == 2


# --- The start-up, run on a stood-in Container-Optimized OS host ------------------------------------------
#
# The start-up runs under bash with `set -euo pipefail` as it is generated, its host paths moved under a
# directory of the test. The host's tools are stood in for; `mount`, `docker` and `docker-credential-gcr` hold
# it to what COS gives a start-up script (COS_MOUNTS): a read-only root (so /root), a writable but noexec /var,
# /home and /tmp, and bind mounts that keep their source's flags until remounted. A container that loads
# libraries (LD_LIBRARY_PATH, NCCL_LIB_DIR) from a volume on a noexec mount fails as the dynamic loader does;
# `docker-credential-gcr configure-docker` fails where it cannot write $HOME/.docker/config.json.

# Mount points of a COS VM at boot, (read-only, noexec), from the catalogue's record of the host
# (infra/catalogue/hosts.py, cos-vm-startup: its sources are COS's disks-and-filesystem and security pages): the root
# file system read-only, /var /home /tmp writable and noexec, a few directories under /var executable mounts.
COS = HOSTS["cos-vm-startup"]
COS_MOUNTS: dict[str, tuple[bool, bool]] = {
    "/": (True, False),
    **{d: (True, False) for d in COS.read_only},
    **{d: (False, True) for d in COS.noexec},
    **{d: (False, False) for d in COS.exec_dirs},
}

# One program for the three tools that hold the host's facts (by the name it is called as).
_COS_TOOLS = r"""
import json, os, sys
from pathlib import Path

root = os.environ["COS_ROOT"]
table = Path(root) / ".mounts.json"
tool, args = sys.argv[1], sys.argv[2:]
with open(os.environ["COS_LOG"], "a") as log:
    log.write(" ".join([tool, *args]) + "\n")


def host(path):
    return path[len(root):] if path.startswith(root + "/") else path


def mount_of(path):
    mounts = json.loads(table.read_text())
    path = host(path).rstrip("/") or "/"
    while path not in mounts:
        path = path.rsplit("/", 1)[0] or "/"
    return path, mounts[path]


def fail(message, code=1):
    print(f"{tool}: {message}", file=sys.stderr)
    sys.exit(code)


if tool == "mount":
    mounts = json.loads(table.read_text())
    if args[:1] == ["--bind"]:
        source, target = args[1], args[2]
        if host(source).startswith("/sys/"):  # a NIC's PCI device: its resource files where it is mounted
            Path(target, "resource0").touch()
        elif not os.path.isdir(source):
            fail(f"special device {host(source)} does not exist", 32)
        else:
            mounts[host(target)] = mount_of(source)[1]
    elif args[:1] == ["-o"] and args[1].startswith("remount,"):
        target = host(args[2])
        if target not in mounts:
            fail(f"{target}: mount point not mounted or bad option", 32)
        for option in args[1].split(",")[1:]:
            if option in ("exec", "noexec"):
                mounts[target] = [mounts[target][0], option == "noexec"]
    else:
        fail(f"not stood in for: {args}", 2)
    table.write_text(json.dumps(mounts))
elif tool == "docker-credential-gcr":
    home = os.environ.get("HOME") or "/root"
    where, (read_only, _) = mount_of(home)
    if read_only:
        fail(f"Unable to save docker config: open {host(home)}/.docker/config.json: read-only file system")
    registries = [a.split("=", 1)[1] for a in args if a.startswith("--registries=")]
    config = Path(root + host(home), ".docker", "config.json")
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps({"credHelpers": {r: "gcr" for r in ",".join(registries).split(",")}}))
elif tool == "docker":
    with open(os.environ["COS_LOG"] + ".home", "a") as homes:
        homes.write(os.environ.get("HOME", "") + "\n")
    if args[:1] == ["logs"]:
        # The daemon logs on after the line the start-up waits for, more than a pipe holds: a reader that stops at
        # the line leaves docker writing to a closed pipe, and the Go CLI dies of SIGPIPE (exit 141 in a pipeline).
        try:
            print("Buffer manager initialization complete")
            for n in range(3000):
                print(f"I1126 rxdm.cc:{n}] receive-data-path manager up")
            sys.stdout.flush()
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(141)
    elif args[:1] == ["run"]:
        env, volumes = {}, []
        for arg in args:
            if arg.startswith("--env="):
                key, _, value = arg[len("--env="):].partition("=")
                env[key] = value
            elif arg.startswith("--env-file="):
                for line in Path(arg[len("--env-file="):]).read_text().splitlines():
                    key, _, value = line.partition("=")
                    env[key] = value
            elif arg.startswith("--volume="):
                volumes.append(arg[len("--volume="):].split(":")[:2])
        libraries = [d for d in env.get("LD_LIBRARY_PATH", "").split(":") + [env.get("NCCL_LIB_DIR", "")] if d]
        for source, target in volumes:
            if target in libraries and mount_of(source)[1][1]:
                fail(f"{target}/libnccl-net.so: failed to map segment from shared object: Operation not permitted "
                     f"({host(source)} is on the noexec mount {mount_of(source)[0]})", 127)
        if "install" in args and "--install-nccl" in args:  # the plugin installer, writing the host's /var/lib
            lib = Path(root, "var/lib/tcpxo/lib64")
            lib.mkdir(parents=True, exist_ok=True)
            for name in ("libnccl-net.so", "nccl-env-profile.sh"):
                (lib / name).touch()
        if "--name=nccl-test" in args:
            sys.exit(int(os.environ.get("NCCL_VERDICT", "0")))
"""


def _tool(bin_: Path, name: str, body: str) -> None:
    path = bin_ / name
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


# Host paths the start-up writes, moved under the test's directory.
_MOVED = ("/etc/platform", "/tmp/platform", "/dev/aperture_devices", "/var/lib/")


def _boot(
    tmp_path: Path, env: Environment, hostname: str, home: str = dict(COS.env)["HOME"]
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run the group's start-up as `hostname` would on COS, as root with `home` (COS's metadata script runner
    runs it as root). Paths it writes on the VM are moved under tmp_path; every host tool logs its arguments."""
    root, bin_ = tmp_path / "root", tmp_path / "bin"
    bin_.mkdir()
    log = tmp_path / "calls.log"
    logged = f'echo "$(basename "$0") $*" >> {log}\n'
    for tool in ("umount", "modprobe", "iptables"):
        _tool(bin_, tool, logged)
    # COS's driver installer writes the driver under /var/lib/nvidia.
    _tool(bin_, "cos-extensions", logged + f"mkdir -p {root}/var/lib/nvidia/lib64\n")
    program = tmp_path / "cos_tools.py"
    program.write_text(_COS_TOOLS)
    for tool in ("mount", "docker", "docker-credential-gcr"):
        _tool(bin_, tool, f'exec {sys.executable} {program} {tool} "$@"\n')
    _tool(bin_, "lspci", logged + 'echo "0000:06:00.0 Ethernet controller [0200]: Google, Inc. Device [1ae0:0084]"\n')
    _tool(bin_, "readlink", 'echo "$2"\n')
    _tool(bin_, "hostname", f"echo {hostname}\n")
    _tool(bin_, "sleep", "exit 0\n")
    hosts = ",".join(vm_names(env, "a3mega"))  # what the template's metadata holds
    _tool(bin_, "curl", logged + f'case "$*" in *attributes/platform-hosts*) echo -n {hosts} ;; esac\n')
    script = startup_script(env, "a3mega")
    for path in _MOVED:
        script = script.replace(path, f"{root}{path}")
    script = script.replace("/sbin/iptables", "iptables")
    (root / "dev").mkdir(parents=True)
    (root / ".mounts.json").write_text(json.dumps(COS_MOUNTS))
    done = subprocess.run(
        ["bash", "-c", script],
        env={
            "PATH": f"{bin_}:{os.environ['PATH']}",
            "HOME": home,
            "NCCL_VERDICT": "0",
            "COS_ROOT": str(root),
            "COS_LOG": str(log),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done, root


def _mounts(root: Path) -> dict[str, list[bool]]:
    return json.loads((root / ".mounts.json").read_text())


def test_a_vm_boots_into_its_rank_and_runs_the_gate(envs: dict[str, Environment], tmp_path: Path) -> None:
    env = envs["dev"]
    done, root = _boot(tmp_path, env, "dev-a3mega-1")
    assert done.returncode == 0, done.stderr
    calls = (tmp_path / "calls.log").read_text().splitlines()
    group_env = dict(line.split("=", 1) for line in (root / "etc/platform/group.env").read_text().splitlines())
    assert group_env["PLATFORM_HOSTS"] == "dev-a3mega-0,dev-a3mega-1" and group_env["PLATFORM_RANK"] == "1"
    # The NCCL environment of a COS host: NICs eth0..eth8 and the installer's profile in /var/lib/tcpxo/lib64.
    moved = nccl_env(TCPXO, GPU_HOSTS["cos"])
    for path in _MOVED:
        moved = {k: v.replace(path, f"{root}{path}") for k, v in moved.items()}
    assert group_env.items() >= moved.items()
    runs = [c for c in calls if c.startswith("docker run")]
    assert "install --install-nccl" in runs[0] and TCPXO.installer_image in runs[0]
    assert TCPXO.daemon_image in runs[1] and "--num_nics=8" in runs[1] and "--device=/dev/nvidia7" in runs[1]
    assert "--name=nccl-test" in runs[2] and "all-gather-mpi.sh" in runs[2]
    shipped = (REPO / "workloads/nccl/all-gather-mpi.sh").read_text().replace("/tmp/platform", f"{root}/tmp/platform")
    assert (root / "tmp/platform/all-gather-mpi.sh").read_text() == shipped
    reports = [c for c in calls if "guest-attributes" in c]
    assert any("platform/group" in r and "rank 1 of 2" in r for r in reports)
    assert any("platform/nccl-test" in r and "exit 0" in r for r in reports)
    assert "cos-extensions install gpu -- --version=default" in calls


def test_a_vm_outside_its_group_stops_and_says_so(envs: dict[str, Environment], tmp_path: Path) -> None:
    done, _ = _boot(tmp_path, envs["dev"], "stray-vm")
    assert done.returncode == 1
    assert "stray-vm is not one of dev-a3mega-0,dev-a3mega-1" in (tmp_path / "calls.log").read_text()


def test_the_nccl_plugin_and_the_driver_load_from_exec_mounts_on_cos(
    envs: dict[str, Environment], tmp_path: Path
) -> None:
    """COS mounts /var noexec; the start-up remounted only /var/lib/nvidia exec, and the plugin
    the installer writes to /var/lib/tcpxo could not be loaded (the NCCL test's container failed to map it)."""
    done, root = _boot(tmp_path, envs["dev"], "dev-a3mega-0")
    assert done.returncode == 0, done.stderr
    mounts = _mounts(root)
    group_env = dict(line.split("=", 1) for line in (root / "etc/platform/group.env").read_text().splitlines())
    plugin = group_env["NCCL_LIB_DIR"].replace(str(root), "")
    assert plugin == GPU_HOSTS["cos"].plugin_dir
    for path in (plugin, "/var/lib/nvidia/lib64"):
        point = max((m for m in mounts if path == m or path.startswith(m.rstrip("/") + "/")), key=len)
        assert point != "/var" and mounts[point] == [False, False], f"{path} is on {point} {mounts[point]}"
    assert (root / "var/lib/tcpxo/lib64/libnccl-net.so").exists()


def test_the_start_up_configures_docker_in_a_writable_home_on_cos(envs: dict[str, Environment], tmp_path: Path) -> None:
    """COS's /root is on the read-only root file system; `docker-credential-gcr configure-docker`
    as root wrote /root/.docker/config.json and the start-up stopped there. The docker calls after it see the
    configuration it wrote."""
    env = envs["dev"]
    assert dict(COS.env)["HOME"] == "/root"
    done, root = _boot(tmp_path, env, "dev-a3mega-0")
    assert done.returncode == 0, done.stderr
    homes = set((tmp_path / "calls.log.home").read_text().split())
    assert len(homes) == 1, homes
    (home,) = homes
    assert home.startswith(f"{root}/var/"), "a home on COS's writable /var"
    config = json.loads(Path(home, ".docker", "config.json").read_text())
    assert config["credHelpers"] == {env.registry.host(env.region): "gcr"}


def test_the_start_up_sees_the_receive_data_path_manager_ready_under_pipefail(
    envs: dict[str, Environment], tmp_path: Path
) -> None:
    """`docker logs ... | grep -q` under `set -o pipefail`: grep stops at the line, docker dies writing the rest of
    the log (SIGPIPE), and the pipeline fails though the line was there; the start-up waited 300 s and stopped."""
    done, _ = _boot(tmp_path, envs["dev"], "dev-a3mega-0")
    calls = (tmp_path / "calls.log").read_text()
    assert "guest-attributes/platform/receive-datapath-manager" in calls
    assert "not ready after" not in calls and done.returncode == 0, done.stderr


def test_the_start_up_is_in_the_inventory_of_generated_scripts_on_the_cos_host(envs: dict[str, Environment]) -> None:
    for env in envs.values():
        scripts = {s.name: s for s in generated_scripts(env) if s.name.startswith("vms/")}
        assert sorted(scripts) == [f"vms/{key}/startup.sh" for key in sorted(env.vm_groups)]
        for key in env.vm_groups:
            script = scripts[f"vms/{key}/startup.sh"]
            assert script.host == "cos-vm-startup" and script.text == startup_script(env, key)
            assert str(dict(script.files)["/etc/hostname"]).strip() in vm_names(env, key)
