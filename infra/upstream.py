"""Upstream serving images the platform deploys, pinned to released versions.

These come from their publishers' registries, by the tags their guides pair
together (the Pathways server and proxy with the JetStream image they were
released with). Bump them here, in one place; `make promote` does not carry
them because they are the same in every environment.
"""

from __future__ import annotations

SAXML_ADMIN = "us-docker.pkg.dev/cloud-tpu-images/inference/sax-admin-server:v1.1.0"
SAXML_MODEL = "us-docker.pkg.dev/cloud-tpu-images/inference/sax-model-server:v1.1.0"
SAXML_HTTP = "us-docker.pkg.dev/cloud-tpu-images/inference/sax-http:v1.0.0"

PATHWAYS_SERVER = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:jax-0.5.3"
PATHWAYS_PROXY = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server:jax-0.5.3"
JETSTREAM_PATHWAYS = "us-docker.pkg.dev/cloud-tpu-images/inference/jetstream-pathways:v0.2.0"
JETSTREAM_HTTP = "us-docker.pkg.dev/cloud-tpu-images/inference/jetstream-http:v0.2.3"

# vLLM's TPU image: upstream publishes dated builds; this one is pinned by its date and commits.
VLLM_TPU = "vllm/vllm-tpu:nightly-20260330-2f76400-8c0b626"
