"""The deploy as `make deploy` runs it, with stand-ins for what needs a cloud: cdktf, terraform, gcluster, gcloud,
kubectl and the VM calls record what they are asked (`calls`, `order`) into the test's folder; the preflight reads
recorded answers. Used by the deploy's and the preflight's tests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from infra.catalogue.cluster_toolkit import PACKER_VERSION, TERRAFORM_VERSION
from infra.cdk.layout import read_stack
from infra.config import ENVIRONMENTS_DIR, PLACEHOLDER_DIGEST
from scripts import deploy
from tests.helpers import REPO
from tests.in_process import run_main

STAND_IN = """
import json, os, shutil, subprocess, sys
from tests.stand_ins import HELM_OPENS
out = os.environ["STAND_IN_DIR"]
argv = sys.argv[1:]
given = argv[argv.index("--output") + 1] if "--output" in argv else None
record = {"argv": [a if a != given else "<output>" for a in argv]}
with open(os.path.join(out, "calls.jsonl"), "a") as f:
    f.write(json.dumps(record) + "\\n")
with open(os.path.join(out, "order.log"), "a") as f:
    f.write("cdktf " + " ".join(record["argv"]) + "\\n")
if argv[0] in ("deploy", "destroy"):
    # --skip-synth: cdktf applies the stack in --output as it is; kept where the test reads what was applied.
    stack_dir = os.path.join(given or "", "stacks", argv[1])
    if "--skip-synth" not in argv or not os.path.isfile(os.path.join(stack_dir, "cdk.tf.json")):
        sys.exit("cdktf stand-in: expected --skip-synth --output <a synthesized cdktf.out>")
    # cdktf runs Terraform in the stack's folder: what the real apply could not open fails here too.
    done = subprocess.run([sys.executable, "-c", HELM_OPENS, stack_dir], capture_output=True, text=True)
    if done.returncode:
        sys.exit("cdktf stand-in: " + done.stderr)
    shutil.rmtree(os.path.join(out, "cdktf.out"), ignore_errors=True)
    shutil.copytree(given, os.path.join(out, "cdktf.out"))
"""


# cdktf destroys the stack the command synthesized once (and the preflight checked), without running the app again.
SKIP_SYNTH = ["--skip-synth", "--output", "<output>"]


# terraform's stand-in, run in the stack's folder (scripts/apply.py): records each call, opens what the helm provider
# opens at plan, writes the plan file, shows a plan with no change to the gate, and on apply of that file keeps the
# stack it applied where the test reads it (cdktf.out/stacks/<stack>/cdk.tf.json).
TERRAFORM = """
import json, os, shutil, subprocess, sys
from tests.stand_ins import HELM_OPENS
out = os.environ["STAND_IN_DIR"]
argv = sys.argv[1:]
stack = os.path.basename(os.getcwd())
with open(os.path.join(out, "calls.jsonl"), "a") as f:
    f.write(json.dumps({"terraform": argv, "stack": stack}) + "\\n")
with open(os.path.join(out, "order.log"), "a") as f:
    f.write("terraform " + " ".join(argv) + "\\n")
if argv[0] == "plan":
    print("Terraform will perform the following actions: (the stand-in's raw plan output)")
    done = subprocess.run([sys.executable, "-c", HELM_OPENS], capture_output=True, text=True)
    if done.returncode:
        sys.exit("terraform stand-in: " + done.stderr)
    open(argv[-1].split("=", 1)[1], "w").write("saved plan")
elif argv[0] == "show":
    print(json.dumps({"format_version": "1.2", "resource_changes": []}))
elif argv[0] == "apply":
    if not os.path.isfile(argv[-1]):
        sys.exit("terraform stand-in: no plan file " + argv[-1])
    shutil.rmtree(os.path.join(out, "cdktf.out"), ignore_errors=True)
    os.makedirs(os.path.join(out, "cdktf.out", "stacks", stack))
    shutil.copy("cdk.tf.json", os.path.join(out, "cdktf.out", "stacks", stack))
"""


def applied(stack: str) -> dict[str, Any]:
    """The last call of a deploy: terraform applying the plan file it gated."""
    return {"terraform": ["apply", "-input=false", "-no-color", "plan.tfplan"], "stack": stack}


# gcluster's stand-in: records its arguments and the blueprint it was given (as `gcluster deploy` reads it).
GCLUSTER = """
import json, os, sys
if sys.argv[1:] == ["--version"]:  # the preflight's question, as the pinned build answers it
    sys.exit(print("Built from: main, commit: 079cf8349a96cfd433cb89945bc467af21818424"))
out = os.environ["STAND_IN_DIR"]
record = {"gcluster": sys.argv[1:]}
if sys.argv[1] in ("deploy", "create"):
    record["blueprint_exists"] = os.path.exists(sys.argv[2])
with open(os.path.join(out, "gcluster.jsonl"), "a") as f:
    f.write(json.dumps(record) + "\\n")
sys.exit(int(os.environ.get("GCLUSTER_EXIT", "0")))
"""


# `python -m scripts.vms`'s stand-in: records its arguments (`down --env <env> --group <group>`).
VMS = """
import json, os, sys
with open(os.path.join(os.environ["STAND_IN_DIR"], "vms.jsonl"), "a") as f:
    f.write(json.dumps({"vms": sys.argv[1:]}) + "\\n")
sys.exit(int(os.environ.get("VMS_EXIT", "0")))
"""


# gcloud's stand-in: records its arguments (order.log) and answers from cloud.json, which the kubectl stand-in
# shares: APIs not yet usable for a number of probes, the cluster's credentials, and what GKE's Gateway controller
# built (listed until the Gateway is deleted, then for `lag` more rounds, as GKE takes a while to clean up).
GCLOUD = """
import json, os, sys
out = os.environ["STAND_IN_DIR"]
with open(os.path.join(out, "order.log"), "a") as f:
    f.write("gcloud " + " ".join(sys.argv[1:]) + "\\n")
path = os.path.join(out, "cloud.json")
state = json.load(open(path)) if os.path.exists(path) else {}
args = sys.argv[1:]
key = " ".join(args[:2])
def save():
    json.dump(state, open(path, "w"))
if key == "services enable":
    sys.exit(0)
if key == "container clusters" and args[2] == "get-credentials":
    state["kubeconfig"] = os.environ.get("KUBECONFIG"); save()
    sys.exit(state.get("credentials_exit", 0))
left = state.setdefault("not_yet", {})
if left.get(key, 0) > 0:
    left[key] -= 1; save()
    print("ERROR: (gcloud) PERMISSION_DENIED: API has not been used in project before or it is disabled. "
          "reason: SERVICE_DISABLED", file=sys.stderr)
    sys.exit(1)
if args[0] == "compute" and args[2] == "list" and "service-name" in " ".join(args):
    if not state.get("svc_deleted"):
        print("\\n".join(state.get("svc_lb", {}).get(args[1], [])))
    sys.exit(0)
if args[0] == "compute" and args[2] == "list":
    gone = state.get("deleted") and state.get("lag", 0) <= 0
    if args[1] == "network-endpoint-groups":
        if state.get("deleted"):
            state["lag"] = state.get("lag", 0) - 1; save()
        if not gone:
            print("\\n".join(n + " " + z for n, z in state.get("negs", [])))
        sys.exit(0)
    if not gone:
        print("\\n".join(state.get("lb", {}).get(args[1], [])))
    sys.exit(0)
sys.exit(0)
"""


KUBECTL = """
import json, os, sys
out = os.environ["STAND_IN_DIR"]
with open(os.path.join(out, "order.log"), "a") as f:
    f.write("kubectl " + " ".join(sys.argv[1:]) + " KUBECONFIG=" + os.environ.get("KUBECONFIG", "") + "\\n")
path = os.path.join(out, "cloud.json")
state = json.load(open(path)) if os.path.exists(path) else {}
args = sys.argv[1:]
if args[:3] == ["get", "namespace", "kube-system"]:
    print("6f1c2a9e-uid")
elif args[:2] == ["get", "gateway"]:
    if not state.get("deleted") and state.get("lb"):
        lb = state["lb"]
        print(json.dumps({"metadata": {"annotations": {
            "networking.gke.io/forwarding-rules": ", ".join(
                "/projects/1/regions/us-east5/forwardingRules/" + n for n in lb["forwarding-rules"]),
            "networking.gke.io/target-http-proxies": ", ".join(lb["target-http-proxies"]),
            "networking.gke.io/url-maps": ", ".join(lb["url-maps"]),
            "networking.gke.io/backend-services": ", ".join(lb["backend-services"]),
            "networking.gke.io/health-checks": ", ".join(lb["health-checks"]),
            "networking.gke.io/firewalls": ", ".join(lb["firewall-rules"]),
            "networking.gke.io/last-reconcile-time": "Thursday, 26-Nov-26 01:00:00 UTC"}}}))
elif args[:2] == ["get", "servicenetworkendpointgroups"]:
    items = [{"status": {"networkEndpointGroups": [
        {"selfLink": "https://www.googleapis.com/compute/v1/projects/p/zones/" + z + "/networkEndpointGroups/" + n}
        for n, z in state.get("negs", [])]}}]
    print(json.dumps({"items": [] if state.get("deleted") else items}))
elif args[:2] == ["get", "crd"]:
    crd = state.get("crds", {}).get(args[2])
    if crd is not None:
        print(json.dumps({"metadata": {"name": args[2], "annotations": crd}}))
elif args[0] in ("label", "annotate"):
    pass
elif args[:2] == ["delete", "service"]:
    state["svc_deleted"] = True
    json.dump(state, open(path, "w"))
elif args[0] == "delete":
    state["deleted"] = True
    json.dump(state, open(path, "w"))
"""


# What GKE's Gateway controller builds for dev's Inference Gateway (ml-serving/serve-llama70b-vllm).
GKE_LB = {
    "forwarding-rules": ["gkegw1-3k2f-ml-serving-serve-llama70b-vllm-h2kz0x8d1c9v"],
    "target-http-proxies": ["gkegw1-3k2f-ml-serving-serve-llama70b-vllm-h2kz0x8d1c9v"],
    "url-maps": ["gkegw1-3k2f-ml-serving-serve-llama70b-vllm-h2kz0x8d1c9v"],
    "backend-services": ["gkegw1-3k2f-ml-serving-serve-llama70b-vllm-8000-m1d2"],
    "health-checks": ["gkegw1-3k2f-ml-serving-serve-llama70b-vllm-8000-m1d2"],
    "firewall-rules": ["gkegw1-3k2f-l7-ml-platform-dev-vpc"],
}


GKE_NEGS = [["k8s1-6f1c2a9e-ml-serving-serve-llama70b-vllm-8000-5c1a2b3d", "us-east5-b"]]


def cloud_state(tmp_path: Path, **state: Any) -> None:
    (tmp_path / "cloud.json").write_text(json.dumps(state))


def recorded_order(tmp_path: Path) -> list[str]:
    path = tmp_path / "order.log"
    return path.read_text().splitlines() if path.exists() else []


def tools_on_path(tmp_path: Path, terraform: str = TERRAFORM_VERSION, packer: str = PACKER_VERSION) -> Path:
    """A PATH directory with terraform and packer that answer `version` as the real ones do."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    tools = (("terraform", f"Terraform v{terraform}"), ("packer", f"Packer v{packer}"))
    for tool, line in (*tools, ("gke-gcloud-auth-plugin", "Kubernetes v1.30.0+stand-in")):
        script = bin_dir / tool
        script.write_text(f"#!/bin/sh\necho '{line}'\n")
        script.chmod(0o755)
    return bin_dir


# The preflight's answers: every API on, every permission held, quota for every pool (tests/test_preflight.py
# holds a deploy to each failure), and credentials a login would have left (never used: the answers are recorded).
PREFLIGHT_ANSWERS = REPO / "tests" / "fixtures" / "preflight" / "granted"


ADC = {
    "type": "authorized_user",
    "client_id": "test.apps.googleusercontent.com",
    "client_secret": "s",
    "refresh_token": "r",
}


def run_deploy(
    args: list[str], tmp_path: Path, envs_dir: Path = ENVIRONMENTS_DIR, **extra: str
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "adc.json").write_text(json.dumps(ADC))
    stand_in = tmp_path / "cdktf_stand_in.py"
    stand_in.write_text(STAND_IN)
    terraform = tmp_path / "terraform_stand_in.py"
    terraform.write_text(TERRAFORM)
    gcluster = tmp_path / "gcluster_stand_in.py"
    gcluster.write_text(GCLUSTER)
    vms = tmp_path / "vms_stand_in.py"
    vms.write_text(VMS)
    stand_ins = {}
    for name, text in (("gcloud", GCLOUD), ("kubectl", KUBECTL)):
        (tmp_path / f"{name}_stand_in.py").write_text(text)
        stand_ins[name] = f"{sys.executable} {tmp_path / f'{name}_stand_in.py'}"
    bin_dir = tmp_path / "bin" if (tmp_path / "bin").exists() else tools_on_path(tmp_path)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PLATFORM_CDKTF": f"{sys.executable} {stand_in}",
        "PLATFORM_TERRAFORM": f"{sys.executable} {terraform}",
        "PLATFORM_GCLUSTER": f"{sys.executable} {gcluster}",
        "PLATFORM_VMS": f"{sys.executable} {vms}",
        "PLATFORM_GCLOUD": stand_ins["gcloud"],
        "PLATFORM_KUBECTL": stand_ins["kubectl"],
        "PLATFORM_API_POLL": "0",
        "PLATFORM_TEARDOWN_POLL": "0",
        "STAND_IN_DIR": str(tmp_path),
        "PLATFORM_ENVIRONMENTS_DIR": str(envs_dir),
        "PLATFORM_PREFLIGHT_ANSWERS": str(PREFLIGHT_ANSWERS),
        "GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "adc.json"),
        **extra,
    }
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    # A dry run keeps its folder at the repository root: one per test, read and removed here (tests run side by side).
    kept = f".cdktf.out-dry-run-test-{os.getpid()}-{tmp_path.name}"
    try:
        return run_main(deploy.main, args, env={**env, "PYTHONPATH": str(REPO), "PLATFORM_DRY_RUN_DIR": kept}, cwd=work)
    finally:
        if (REPO / kept).exists():
            shutil.copytree(REPO / kept, tmp_path / "dry-run", dirs_exist_ok=True)
            shutil.rmtree(REPO / kept)


def recorded_calls(tmp_path: Path, tool: str = "calls") -> list[dict[str, Any]]:
    path = tmp_path / f"{tool}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def stack_releases(tmp_path: Path, env: str) -> set[str]:
    stack = read_stack(tmp_path / "cdktf.out", f"platform-{env}")
    return {r["name"] for r in stack["resource"]["helm_release"].values()}


def built_environments(tmp_path: Path) -> Path:
    """The environments after `make image` pinned every image of dev (digests no longer zero)."""
    envs = tmp_path / "envs"
    envs.mkdir()
    for path in ENVIRONMENTS_DIR.glob("*.yaml"):
        (envs / path.name).write_text(path.read_text().replace(PLACEHOLDER_DIGEST, "sha256:" + "ab" * 32))
    return envs
