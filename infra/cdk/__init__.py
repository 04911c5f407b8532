"""The one import seam between the stacks and their CDK: CDK Terrain (`cdktn`), cdktf's community continuation
(cdktf was archived upstream in December 2025), which reads the same cdktf.json, writes the same output and keeps
the logical IDs.

Constructs and stacks import the CDK's classes from here (`from infra.cdk import TerraformStack`), and
`infra.cdk.bindings` asks `provider_package` for the prebuilt provider bindings. The move from cdktf 0.21 (google
6.50.0) to cdktn 0.24 (google 7.45.0) changed no resource: docs/delivery.md has the comparison.
"""

from __future__ import annotations

import importlib
from typing import Any

CDK = "cdktn"
PROVIDER_PACKAGES = {
    "google": "cdktn_provider_google",
    "kubernetes": "cdktn_provider_kubernetes",
    "helm": "cdktn_provider_helm",
}


def provider_package(provider: str) -> str:
    """The Python package of the prebuilt bindings of `provider` (google, kubernetes, helm)."""
    return PROVIDER_PACKAGES[provider]


def literal(text: str) -> str:
    """`text` as a literal string of the synthesized stack: in Terraform's JSON syntax every string is a template,
    so `${` and `%{` are escaped as `$${` and `%%{` (cdktf's Fn.rawString does the same). What the platform writes
    as it is (a VM's startup script) goes through here; rule tf.literal-text-escaped holds the stack to it."""
    return text.replace("${", "$${").replace("%{", "%%{")


# This package's own modules: found as modules, never looked up in the CDK.
SUBMODULES = ("bindings",)


def __getattr__(name: str) -> Any:
    """`App`, `TerraformStack`, ...: from the CDK in use."""
    if name.startswith("__"):
        raise AttributeError(name)
    if name in SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    return getattr(importlib.import_module(CDK), name)
