"""The real Terraform engine the platform builds offline: OpenTofu and the three providers the stacks use.

OpenTofu is built from its Go module (infra/engine/go/opentofu/go.mod pins it). The providers are built from their
upstream sources, tarballs made with `git archive <tag>` and kept in the shared folder (`../shared/vendor/
terraform-providers/`, its README and SHA256SUMS): the provider registries cannot be reached here, and the Go module
proxy serves none of them at a current version (their v2+/v3+ tags have no `/vN` module path). Each tarball's
digest is pinned here, so a tarball swapped beside its SHA256SUMS is refused too.

helm: the stacks' bindings are cdktn-provider-helm at provider 3.2.0, the newest source here is v3.1.2; the stacks
pin 3.1.2 (`HELM_PROVIDER_PIN`), the version that is built and applied here, and `tofu validate` holds every
attribute the 3.2.0 bindings write to 3.1.2's schema (docs/local-cluster.md, "The engine").
"""

from __future__ import annotations

from dataclasses import dataclass

# The OpenTofu release the engine builds (infra/engine/go/opentofu/go.mod requires the same).
OPENTOFU_VERSION = "1.12.6"


@dataclass(frozen=True)
class ProviderSource:
    """One provider: its registry address, the version built, and the upstream tarball it is built from."""

    type: str
    namespace: str
    version: str
    commit: str
    sha256: str
    # The provider's Go package whose ProviderVersion its release build stamps (goreleaser's ldflags), if it has one.
    version_package: str = ""

    @property
    def tarball(self) -> str:
        return f"terraform-provider-{self.type}-v{self.version}.tar.gz"

    @property
    def binary(self) -> str:
        """The file name Terraform and OpenTofu look for in a provider mirror."""
        return f"terraform-provider-{self.type}_v{self.version}"


PROVIDERS: dict[str, ProviderSource] = {
    "google": ProviderSource(
        "google",
        "hashicorp",
        "7.45.0",
        "6f756229ab21d14d238c6280d2255262e4cccfc4",
        "3821ba45c34b94beef33d4f4576fcee1716f709cdc934b8652534c5002b8cbc6",
        "github.com/hashicorp/terraform-provider-google/version",
    ),
    "kubernetes": ProviderSource(
        "kubernetes",
        "hashicorp",
        "3.2.1",
        "28fb611cb6be20c5059efadd6cbf16b9ad64cd6c",
        "d192e50a36de9a4559716e5ae9dc21bb764c4cd9e70acb51203fb24b3207b64d",
    ),
    "helm": ProviderSource(
        "helm",
        "hashicorp",
        "3.1.2",
        "ecffae07748ea9e2e99660e5ad3f852a12fbc5fc",
        "f385a832a9ea5bbbbf07821ae8fb2aa228bde13584352e3a53e5030f0f09a1cb",
    ),
}

# What the stacks' required_providers say for helm: the version built here (the bindings are 3.2.0's).
HELM_PROVIDER_PIN = PROVIDERS["helm"].version

# The registry host names a provider address resolves to: OpenTofu's and Terraform's. The mirror holds each
# provider under both, so either engine finds it.
REGISTRY_HOSTS = ("registry.opentofu.org", "registry.terraform.io")
