"""Upstream images the platform deploys, pinned to released versions.

These come from their publishers' registries, by the tags their guides pair
together (the Pathways server and proxy with the JetStream image they were
released with). Bump them here, in one place; `make promote` does not carry
them because they are the same in every environment.
"""

from __future__ import annotations

from infra.catalogue.gpudirect import TCPX, TCPXO

# GPUDirect node set-up (gpu-networking chart). The NCCL plugin installer and
# receive-data-path daemon are paired per machine in infra/catalogue/gpudirect.py.
DEVICE_INJECTOR = (
    "gcr.io/gke-release/nri-device-injector@sha256:6e79483d52abdc28454bf186320b10a56b0f117a10e8d65d5c74dbb821a76970"
)
PAUSE = "gke.gcr.io/pause:3.8@sha256:880e63f94b145e46f1b1082bb71b85e21f16b99b180b9996407d61240ceb9830"
# The TCPXO installer's host set-up step only needs nsenter; it runs privileged in the node's namespaces, so it is
# pinned by digest: the ubuntu:24.04 digest NVIDIA pins for the same step of the same
# installer (NVIDIA/aicr @ 720d7d3c895b1736a795ba150db6b90026fa69f3
# recipes/components/gke-nccl-tcpxo/manifests/nccl-tcpxo-installer.yaml, "ubuntu:24.04 LTS digest-pinned for
# reproducibility").
HOST_SETUP = "ubuntu:24.04@sha256:c4a8d5503dfb2a3eb8ab5f807da5bc69a85730fb49b5cfca2330194ebcc41c7b"

# Serving.
SAXML_ADMIN = "us-docker.pkg.dev/cloud-tpu-images/inference/sax-admin-server:v1.1.0"
SAXML_MODEL = "us-docker.pkg.dev/cloud-tpu-images/inference/sax-model-server:v1.1.0"
SAXML_HTTP = "us-docker.pkg.dev/cloud-tpu-images/inference/sax-http:v1.0.0"
# The port sax-http listens on (workloads/charts/saxml/templates/http.yaml); its network policy opens it.
SAXML_HTTP_PORT = 8888

PATHWAYS_SERVER = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:jax-0.5.3"
PATHWAYS_PROXY = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server:jax-0.5.3"
JETSTREAM_PATHWAYS = "us-docker.pkg.dev/cloud-tpu-images/inference/jetstream-pathways:v0.2.0"
JETSTREAM_HTTP = "us-docker.pkg.dev/cloud-tpu-images/inference/jetstream-http:v0.2.3"

# The GKE Inference Gateway's endpoint picker: gateway-api-inference-extension v1.5.0 (the last release with
# its own inferencepool chart; GKE installs the matching InferencePool v1 CRD from 1.34.0-gke.1626000).
GAIE_EPP = "registry.k8s.io/gateway-api-inference-extension/epp:v1.5.0"
# The port the endpoint picker serves the load balancer's ext-proc calls on, which the InferencePool's
# endpointPickerRef names: the load balancer's proxies (in the proxy-only subnet) reach it there, so the VPC's
# firewall must let them (kubernetes-sigs/gateway-api-inference-extension @ v1.5.0
# config/charts/epplib/templates/_service.yaml `grpc-ext-proc` port `extProcPort | default 9002`;
# config/charts/inferencepool/templates/inferencepool.yaml endpointPickerRef.port.number). Its gRPC health port
# (9003) is probed by the kubelet only, not by the load balancer: not opened.
GAIE_EPP_PORT = 9002

# The Custom Metrics Stackdriver Adapter the serving autoscalers read through (infra/catalogue/serving_metrics.py):
# the image its production manifest pins (GoogleCloudPlatform/k8s-stackdriver
# custom-metrics-stackdriver-adapter/deploy/production/adapter_new_resource_model.yaml @ af49d863, 2026-08-17).
METRICS_ADAPTER = "gcr.io/gke-release/custom-metrics-stackdriver-adapter:v0.16.9-gke.0"

# NCCL's own benchmarks for the Slurm cluster's all-gather gate, built once per cluster inside NVIDIA's PyTorch
# container (what Cluster Toolkit's A3 Mega example does at v1.95.0,
# examples/machine-learning/a3-megagpu-8g/nccl-tests/build-nccl-tests.sh, there from the branch head: here
# pinned to a release and its commit). Its result table keeps the out-of-place busbw in column 8
# (src/util.cu writeResultHeader @ v2.19.6), which check-bandwidth.sh reads.
NCCL_TESTS_IMAGE = "nvcr.io/nvidia/pytorch:24.04-py3"
NCCL_TESTS_REPOSITORY = "https://github.com/NVIDIA/nccl-tests.git"
NCCL_TESTS_TAG = "v2.19.6"
NCCL_TESTS_COMMIT = "a0b82b2260cf5152b9f8c061bbf7eaf0ba096432"


# Upstream images still pinned by tag alone, each with why: no public source reachable offline records their
# digest, and a digest is never guessed. The rule binauthz.images-pinned-by-digest refuses any other image by tag;
# the Binary Authorization policy cannot allowlist these by digest, so it stays in dry run (audit log only) until
# this is empty (infra/constructs/binary_authorization.py). `make image-digests` resolves each where its registry
# is reachable (scripts/image_digests.py); paste the result here and in the constant above.
AWAITING_DIGEST: dict[str, str] = {
    image: "no public source found offline records its digest (searched GitHub and the GKE docs for image@sha256)"
    for image in (
        SAXML_ADMIN,
        SAXML_MODEL,
        SAXML_HTTP,
        PATHWAYS_SERVER,
        PATHWAYS_PROXY,
        JETSTREAM_PATHWAYS,
        JETSTREAM_HTTP,
        GAIE_EPP,
        # Published by tag only: its manifest pins the tag and pulls it Always.
        METRICS_ADAPTER,
        NCCL_TESTS_IMAGE,
        # GPUDirect-TCPX (A3 High), which no environment runs today.
        TCPX.installer_image,
        TCPX.daemon_image,
    )
}

# The upstream images pinned by digest, which the Binary Authorization policy allowlists by that digest.
BY_DIGEST: tuple[str, ...] = (DEVICE_INJECTOR, PAUSE, HOST_SETUP, TCPXO.installer_image, TCPXO.daemon_image)

# The base images the platform's own images are built FROM (images/images.yaml's Dockerfiles, and BuildKit's
# `# syntax` frontend, which the build pulls too), still pinned by tag alone, each with why.
# A Docker Official Image tag is rebuilt and pushed again when its base or its packages change, so its digest moves
# and only its registry says which one it is now; none is recorded here from a source that could be cited, and none
# is guessed. Rule docker.base-images-pinned-by-digest refuses any other base by tag; `make image-digests` resolves
# these too where their registry is reachable; pin the result in the Dockerfile's FROM line (image:tag@sha256:...)
# and drop the entry. The plan review lists what is still here.
BASE_AWAITING_DIGEST: dict[str, str] = {
    image: (
        "a tag its publisher rebuilds; no digest of it recorded offline in a source that can be cited (the registry "
        "was not reachable from here): `make image-digests` resolves it"
    )
    for image in (
        "python:3.12.12-slim-bookworm",  # server, trainer-gpu, vllm-tpu
        "rayproject/ray:2.60.0-py312",  # trainer, checkpoint-converter
        "docker/dockerfile:1.7",  # every Dockerfile's `# syntax` line (BuildKit's frontend image)
    )
}
