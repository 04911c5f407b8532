"""The charts' generated shell scripts: every container of every rendered release whose command is a shell script
(`bash -c <script>`, `sh -c <script>`, `nsenter ... -- bash -c <script>`, or `bash <file>` where a ConfigMap of the
release puts the file), with the variables its container sets and the ConfigMap files it mounts, as the container
runs it. Read from the releases `make plan`'s rules step rendered (`<outdir>/rendered/<stack>/<release>.json`,
exactly what the Helm provider sends)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from infra.catalogue.gpudirect import GPU_HOSTS, TCPXO
from infra.catalogue.hosts import HOSTS
from infra.shell import GeneratedScript, Pinned
from infra.shell.commands import commands
from infra.shell.vertex import IMAGE_SCRIPTS
from infra.shell.vms import PROFILE_KEY

SHELLS = ("bash", "/bin/bash", "/usr/bin/bash", "sh", "/bin/sh", "/usr/bin/sh")


def _templates(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
        yield spec.get("template") or {}
    elif kind == "JobSet":
        for job in spec.get("replicatedJobs") or []:
            yield job["template"]["spec"]["template"]
    elif kind == "LeaderWorkerSet":
        lwt = spec.get("leaderWorkerTemplate") or {}
        yield from (t for t in (lwt.get("leaderTemplate"), lwt.get("workerTemplate")) if t)


def _script(argv: list[str], mounted: dict[str, str]) -> tuple[str, bool, tuple[str, ...]] | None:
    """(the script text, whether it runs in the node's namespaces through nsenter, its positional parameters) of a
    container's argv."""
    node = bool(argv) and argv[0].rsplit("/", 1)[-1] == "nsenter"
    if node and "--" in argv:
        argv = argv[argv.index("--") + 1 :]
    if not argv or argv[0] not in SHELLS:
        return None
    if "-c" in argv[1:]:
        i = argv.index("-c")
        # bash -c <script> <$0> <$1> ...
        return (argv[i + 1], node, tuple(argv[i + 3 :])) if i + 1 < len(argv) else None
    rest = [a for a in argv[1:] if not a.startswith("-")]
    return (mounted[rest[0]], node, tuple(rest[1:])) if rest and rest[0] in mounted else None


def _host(image: str, node: bool) -> str:
    if node:
        return "gke-cos-node"
    if "/gpudirect-tcpxo/nccl-plugin" in image:
        return "gke-tcpxo-image"
    return "gke-container"


# What the upstream images hold that the charts' scripts call, stood in for (the real scripts are the images').
# The TCPXO plugin installer's entry (google/nccl-plugin-gpudirect-tcpxo @ v1.0.15 tcpxo.dockerfile: /scripts)
# writes the plugin to /var/lib/tcpxo/lib64; RxDM's entry (tcpgpudmarxd image, GKE's TCPXO guide: /fts).
IMAGE_FILES = {
    "/scripts/container_entry.sh": (
        "#!/bin/bash\nmkdir -p /var/lib/tcpxo/lib64\ntouch /var/lib/tcpxo/lib64/libnccl-net.so\n"
    ),
    "/fts/entrypoint_rxdm_container.sh": "#!/bin/bash\nexit 0\n",
}


# The vLLM group's script asks Ray how many hosts joined and whether the leader's Ray answers: the stand-ins answer
# as a whole group does (workloads/charts/vllm-tpu/files/serve.sh).
VLLM_STANDINS = (
    ("python3", 'case "$*" in *ray.nodes*) echo "${LWS_GROUP_SIZE:-1}";; esac'),
    ("ray", "exit 0"),
)


def _node_files(release: str) -> dict[str, str]:
    """Files of the GKE node the TCPXO host set-up finds: each GPU NIC's aperture device in sysfs (function 1 of its
    PCI device, the catalogue's A3 Mega NIC layout), as on the VM groups (infra/shell/vms.py)."""
    if release != "gpu-networking" or TCPXO.nic_pci is None:
        return {}
    return {f"/sys/bus/pci/devices/0000:{bus:02x}:00.1/resource0": "" for bus, _ in TCPXO.nic_pci[1:]}


def _runtime(kind: str, container: dict[str, Any]) -> dict[str, str]:
    """The variables the container gets: its own `env` (a value from the API, `valueFrom`, as a stand-in string),
    and what its controller adds: JOB_COMPLETION_INDEX on an Indexed Job's pods (pod 0 here; JobSet's Jobs are
    Indexed), and LWS's LWS_LEADER_ADDRESS, LWS_GROUP_SIZE and LWS_WORKER_INDEX (kubernetes-sigs/lws
    pkg/utils/pod: env injected into every pod of a group)."""
    env = {e["name"]: str(e["value"]) if "value" in e else "stand-in" for e in container.get("env") or []}
    if kind in ("Job", "JobSet"):
        env.setdefault("JOB_COMPLETION_INDEX", "0")
    if kind == "LeaderWorkerSet":
        env.setdefault("LWS_LEADER_ADDRESS", "leader.example.svc")
        env.setdefault("LWS_GROUP_SIZE", "2")
        env.setdefault("LWS_WORKER_INDEX", "0")
    return env


def chart_scripts(env: str, releases: dict[str, list[dict[str, Any]]]) -> list[GeneratedScript]:
    """The shell scripts of `env`'s rendered releases (release name -> objects)."""
    out = []
    for release, objects in sorted(releases.items()):
        maps = {o["metadata"]["name"]: o.get("data") or {} for o in objects if o.get("kind") == "ConfigMap"}
        for obj in objects:
            for template in _templates(obj):
                spec = template.get("spec") or {}
                volumes = {v["name"]: maps.get((v.get("configMap") or {}).get("name", ""), {}) for v in
                           spec.get("volumes") or [] if v.get("configMap")}  # fmt: skip
                for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
                    files = {
                        f"{m['mountPath'].rstrip('/')}/{key}": text
                        for m in c.get("volumeMounts") or []
                        if m["name"] in volumes
                        for key, text in volumes[m["name"]].items()
                    }
                    found = _script([*(c.get("command") or []), *(c.get("args") or [])], files)
                    if found is None:
                        continue
                    text, node, args = found
                    host = _host(str(c.get("image", "")), node)
                    image_files: dict[str, str | Pinned] = (
                        {**IMAGE_SCRIPTS, **IMAGE_FILES} if host != "gke-cos-node" else dict(_node_files(release))
                    )
                    sources: tuple[str, ...] = ()
                    if release_chart(objects) == "gpu-jobset":
                        # On GKE the installer DaemonSet writes the plugin and its nccl-env-profile.sh to the node's
                        # /home/kubernetes/bin/nvidia/lib64, mounted at /usr/local/nvidia/lib64 (GPU_HOSTS["gke"]).
                        plugin = GPU_HOSTS["gke"].plugin_dir
                        image_files[f"{plugin}/nccl-env-profile.sh"] = Pinned(PROFILE_KEY)
                        image_files[f"{plugin}/libnccl-net.so"] = ""
                        sources = (PROFILE_KEY,)
                    called = {
                        cmd.name
                        for cmd in commands(text, HOSTS[host].path, "/root")
                        if not cmd.name.startswith(("/", ".", "$"))
                    }
                    out.append(
                        GeneratedScript(
                            env=env,
                            name=f"charts/{release}/{obj.get('kind', '').lower()}-{c['name']}.sh",
                            text=text,
                            host=host,
                            runtime_env=tuple(_runtime(str(obj.get("kind")), c).items()),
                            args=args,
                            standins=VLLM_STANDINS if release_chart(objects) == "vllm-tpu" else (),
                            files=tuple({**image_files, **files}.items()),
                            sources=sources,
                            # An image whose contents are not known offline has every command its script calls.
                            image_commands=frozenset(called) if host == "gke-container" else frozenset(),
                        )
                    )
    return out


def release_chart(objects: list[dict[str, Any]]) -> str:
    """The chart a release's objects come from (the helm.sh/chart label, without its version)."""
    for o in objects:
        chart = ((o.get("metadata") or {}).get("labels") or {}).get("helm.sh/chart")
        if chart:
            return str(chart).rsplit("-", 1)[0]
    return ""


def rendered_scripts(outdir: Path, env: str) -> list[GeneratedScript]:
    """The chart scripts of `env` from the releases the rules step rendered into `outdir`, if it did."""
    directory = outdir / "rendered" / f"platform-{env}"
    releases = {p.stem: json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))}
    return chart_scripts(env, releases)
