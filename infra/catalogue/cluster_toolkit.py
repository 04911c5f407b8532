"""Cluster Toolkit and the tools that deploy what it generates, pinned in one place.

The Slurm cluster of an environment is a Cluster Toolkit blueprint (`infra/slurm`), deployed by
`gcluster` after the platform stack. Everything that decides what that deployment runs is pinned
here: the toolkit release whose module interfaces the blueprint is validated against, the
Slurm-GCP release its image installs, the base image the image is built from, and the Terraform,
Packer and provider versions every module's `versions.tf` must admit.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ToolkitRelease:
    """A Cluster Toolkit release: its tag, and the commit the tag names (a tag can move; a commit cannot)."""

    repository: str
    tag: str
    commit: str


# https://github.com/GoogleCloudPlatform/cluster-toolkit/releases/tag/v1.95.0 (2026-06-25).
CLUSTER_TOOLKIT = ToolkitRelease(
    repository="GoogleCloudPlatform/cluster-toolkit",
    tag="v1.95.0",
    commit="079cf8349a96cfd433cb89945bc467af21818424",
)

# The Terraform every deployment of the platform runs with: the platform stack's `cdktf deploy` in the
# workflows and `gcluster deploy` of the Slurm cluster. Cluster Toolkit v1.94 and later require
# `>= 1.12.2` in every module's versions.tf; 1.12.2 is also the Terraform gcluster v1.95.0 downloads
# for itself (pkg/dependencies/checksums_generated.go). tests/test_slurm.py holds the workflows to it.
TERRAFORM_VERSION = "1.12.2"

# The hashicorp/google provider the Slurm blueprint pins (`terraform_providers`, google and google-beta): one inside
# the range gcluster v1.95.0 writes for a blueprint that pins none, the versions the toolkit is tested with
# (pkg/config/expand.go GoogleProviderVersion). The platform stack's own provider (google 7.45.0, its bindings')
# is newer than that range; the two are separate Terraform configurations, each with its own state.
GOOGLE_PROVIDER_VERSION = "6.50.0"
GCLUSTER_GOOGLE_PROVIDER_RANGE = ">= 6.9.0, <= 7.36.0"

# Slurm-GCP, installed into the node image by the blueprint's image build (ansible-pull of this tag,
# as the toolkit's A3 Mega example does at v1.95.0): Slurm 25.11 with Slurm's own authentication.
SLURM_GCP_REF = "6.12.1"

# The image the Slurm node image is built from: an exact image (never a family, whose newest member
# changes under a rebuild), the one the toolkit's A3 Mega example uses at v1.95.0: Ubuntu 24.04 with the
# NVIDIA 580 driver. A driver newer than the base image's is not supported with GPUDirect-TCPXO
# (GoogleCloudPlatform/cluster-toolkit#3032).
SLURM_BASE_IMAGE = {
    "project": "ubuntu-os-accelerator-images",
    "image": "ubuntu-accelerator-2404-amd64-with-nvidia-580-v20260522",
}

# The Packer that builds the Slurm node image (the blueprint's `image` group). gcluster v1.95.0 downloads Packer
# 1.15.0 for itself (pkg/dependencies/checksums_generated.go), which the toolkit's own custom-image module refuses
# (modules/packer/custom-image/versions.pkr.hcl: ">= 1.15.3, < 2.0.0"); the deploy puts this one on PATH.
PACKER_VERSION = "1.15.3"
