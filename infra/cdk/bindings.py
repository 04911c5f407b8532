"""The prebuilt provider bindings, one resource module at a time.

The constructs ask for the submodules they use (`google("container_cluster")`); nothing else of a provider's
package is imported. cdktn's packages import their ~1,470 resource modules lazily (a module `__getattr__`), so
the package itself costs little; the provider's jsii assembly, loaded by its `_jsii` module, is most of a synth
(docs/performance.md).
"""

from __future__ import annotations

import importlib
from typing import Any

from infra.cdk import provider_package


def provider_module(package: str, submodule: str) -> Any:
    """Return `<package>.<submodule>`."""
    return importlib.import_module(f"{package}.{submodule}")


def google(submodule: str) -> Any:
    return provider_module(provider_package("google"), submodule)


def kubernetes(submodule: str) -> Any:
    return provider_module(provider_package("kubernetes"), submodule)


def helm(submodule: str) -> Any:
    return provider_module(provider_package("helm"), submodule)
