"""What runs privileged, at which Pod Security level each workload namespace is held, and why.

Pod Security admission enforces a namespace's `pod-security.kubernetes.io/enforce` label
(https://kubernetes.io/docs/concepts/security/pod-security-admission/); the levels are the Pod Security
Standards (https://kubernetes.io/docs/concepts/security/pod-security-standards/). A namespace is held at
`baseline` unless it is named here with the upstream reason it needs more; `restricted` is always warned and
audited, so what would break under it shows in `kubectl` and the audit log before it is enforced.
"""

from __future__ import annotations

from dataclasses import dataclass

PSA_DOC = "https://kubernetes.io/docs/concepts/security/pod-security-admission/"
PSS_DOC = "https://kubernetes.io/docs/concepts/security/pod-security-standards/"
GPUDIRECT_TCPXO_DOC = "https://cloud.google.com/kubernetes-engine/docs/how-to/gpu-bandwidth-gpudirect-tcpx"
TPU_DOC = "https://cloud.google.com/kubernetes-engine/docs/how-to/tpus"

# The Pod Security Standards version the labels pin (`<level>-version`): the standard as of the cluster's minor,
# so a cluster upgrade does not tighten or loosen a namespace by itself.
PSS_VERSION = "v1.35"
DEFAULT_LEVEL = "baseline"
# Always warned about and audited: what `restricted` would refuse, shown without refusing it.
WARN_LEVEL = "restricted"


@dataclass(frozen=True)
class Reason:
    why: str
    source: str


# Namespaces held at `privileged`, each with the upstream reason. Every other workload namespace enforces
# DEFAULT_LEVEL.
PRIVILEGED_NAMESPACES: dict[str, Reason] = {
    "ml-gpu": Reason(
        "GPUDirect-TCPXO pods mount the host's NVIDIA libraries (/home/kubernetes/bin/nvidia), /sys and "
        "/proc/sys by hostPath, and the receive-data-path manager sidecar adds NET_ADMIN; `baseline` refuses "
        "hostPath volumes and capabilities beyond its default set",
        f"{GPUDIRECT_TCPXO_DOC} (the workload manifest's volumes and tcpxo-daemon securityContext); "
        f"{PSS_DOC} (baseline: HostPath Volumes, Capabilities)",
    ),
}

# Containers that run `privileged: true`, by (release, container name): only these, each with its reason.
# Saxml's model servers are not here: they ran privileged as the GKE TPU tutorials did for clusters before
# 1.28 ("privileged: true # Required for GKE versions earlier than 1.28 to access TPUs", TPU_DOC); the
# platform's clusters run 1.35, where the TPU device plugin gives the chips to unprivileged pods (the
# platform's vLLM, JetStream/Pathways and Ray TPU pods run unprivileged on the same pools).
PRIVILEGED_CONTAINERS: dict[tuple[str, str], Reason] = {
    ("gpu-networking", "host-setup"): Reason(
        "runs `nsenter -t 1` in the node's namespaces to prepare the host for the NCCL plugin (kube-system)",
        f"{GPUDIRECT_TCPXO_DOC} (nccl-tcpxo-installer.yaml, GoogleCloudPlatform/container-engine-accelerators "
        "gpudirect-tcpxo)",
    ),
    ("gpu-networking", "installer"): Reason(
        "copies the NCCL plugin onto the host's library directory (kube-system)",
        f"{GPUDIRECT_TCPXO_DOC} (nccl-tcpxo-installer.yaml)",
    ),
    ("gpu-networking", "device-injector"): Reason(
        "the NRI device injector writes container device edits through the host's NRI socket (kube-system)",
        f"{GPUDIRECT_TCPXO_DOC} (nri-device-injector.yaml, GoogleCloudPlatform/container-engine-accelerators)",
    ),
}


def namespace_level(namespace: str) -> str:
    return "privileged" if namespace in PRIVILEGED_NAMESPACES else DEFAULT_LEVEL


def namespace_labels(namespace: str) -> dict[str, str]:
    """The Pod Security admission labels of a workload namespace."""
    level = namespace_level(namespace)
    labels = {
        "pod-security.kubernetes.io/enforce": level,
        "pod-security.kubernetes.io/enforce-version": PSS_VERSION,
    }
    for mode in ("warn", "audit"):
        labels[f"pod-security.kubernetes.io/{mode}"] = WARN_LEVEL
        labels[f"pod-security.kubernetes.io/{mode}-version"] = PSS_VERSION
    return labels
