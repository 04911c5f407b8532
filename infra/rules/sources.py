"""Where the rules come from: the documents and upstream paths more than one rule cites, once."""

from __future__ import annotations

DOCS = "https://cloud.google.com/kubernetes-engine/docs"
TPU_DOC = f"{DOCS}/how-to/tpus"
PLAN_TPUS_DOC = f"{DOCS}/concepts/plan-tpus"
QUEUED_DOC = f"{DOCS}/how-to/provisioningrequest"
FLEX_DOC = f"{DOCS}/how-to/dws-flex-start-training"
PRIVATE_DOC = f"{DOCS}/how-to/latest/network-isolation#add_firewall_rules"
WI_DOC = f"{DOCS}/how-to/workload-identity"
GPUDIRECT_DOC = f"{DOCS}/how-to/gpu-bandwidth-gpudirect-tcpx"
IRONWOOD_DOC = f"{DOCS}/concepts/tpu-ironwood"
FUSE_PERF_DOC = f"{DOCS}/how-to/cloud-storage-fuse-csi-driver-perf"
FUSE_SIDECAR_DOC = f"{DOCS}/how-to/cloud-storage-fuse-csi-driver-sidecar"
GCSFUSE_CSI = "GoogleCloudPlatform/gcs-fuse-csi-driver"
TOOLKIT_POOL = "GoogleCloudPlatform/cluster-toolkit modules/compute/gke-node-pool/main.tf (lifecycle preconditions)"
MAXTEXT = "AI-Hypercomputer/maxtext"
RAY_TUTORIAL = (
    "GKE tutorial 'Train an LLM using JAX, Ray Train, and TPU Trillium on GKE' "
    f"({DOCS}/tutorials/distributed-training-tpu), RayCluster manifest"
)
JETSTREAM_TUTORIAL = (
    "GKE tutorial 'Serve LLMs using multi-host TPUs on GKE with JetStream and Pathways' "
    f"({DOCS}/tutorials/serve-multihost-tpu-jetstream)"
)
JETSTREAM_LWS = f"{JETSTREAM_TUTORIAL}, LWS manifest"
