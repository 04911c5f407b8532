"""The one import seam between the stacks and their CDK: cdktf (the default) or its community continuation,
CDK Terrain (`cdktn`), which reads the same cdktf.json and keeps the logical IDs.

Constructs and stacks import the CDK's classes from here (`from infra.cdk import TerraformStack`), and
`infra.cdk.bindings` asks `provider_package` for the prebuilt provider bindings, so switching is one call,
`use("cdktn")`, made by `python -m infra` when `PLATFORM_CDK=cdktn` (read at call time, never at import).
`make cdktn-parity` synthesizes every stack both ways and compares them. To switch for good: install
requirements-cdktn.lock instead of the cdktf packages and set PLATFORM_CDK=cdktn (docs/delivery.md).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

# jsii prints a framed end-of-life banner on every start under Node 20 (the development and CI machines' Node;
# 22 or 24 is recommended); `make` silences it (Makefile), and so does every other way in: `python -m
# scripts.review_example` printed it before its one line of output.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

FLAVOURS: dict[str, tuple[str, dict[str, str]]] = {
    "cdktf": (
        "cdktf",
        {
            "google": "cdktf_cdktf_provider_google",
            "kubernetes": "cdktf_cdktf_provider_kubernetes",
            "helm": "cdktf_cdktf_provider_helm",
        },
    ),
    "cdktn": (
        "cdktn",
        {"google": "cdktn_provider_google", "kubernetes": "cdktn_provider_kubernetes", "helm": "cdktn_provider_helm"},
    ),
}
_flavour = "cdktf"


def use(flavour: str) -> None:
    """Synthesize with `flavour` (cdktf or cdktn); call before the first construct is imported."""
    global _flavour
    if flavour not in FLAVOURS:
        raise ValueError(f"unknown CDK {flavour!r}; known: {', '.join(FLAVOURS)}")
    _flavour = flavour


def flavour() -> str:
    return _flavour


def provider_package(provider: str) -> str:
    """The Python package of the prebuilt bindings of `provider` (google, kubernetes, helm) for this CDK."""
    return FLAVOURS[_flavour][1][provider]


# This package's own modules: found as modules, never looked up in the CDK (which may not be the one installed
# before the flavour is chosen: `from infra.cdk import bindings` runs before `use(...)`).
SUBMODULES = ("bindings",)


def __getattr__(name: str) -> Any:
    """`App`, `TerraformStack`, ...: from the CDK in use."""
    if name.startswith("__"):
        raise AttributeError(name)
    if name in SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    return getattr(importlib.import_module(FLAVOURS[_flavour][0]), name)
