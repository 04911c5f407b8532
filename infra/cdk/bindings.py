"""Fast access to the prebuilt provider bindings.

`import cdktn_provider_google` runs a package `__init__` that imports
all ~1,470 resource submodules, which dominates synth time. Each submodule
only needs the package's `_jsii` module (it loads the provider's jsii
assembly), so we register a bare package object with the right `__path__` and
import just the submodules the constructs use. The synthesized output is
byte-identical to a stock import; `tests/test_synth.py` proves it by running
both.

`PLATFORM_STOCK_PROVIDER_IMPORT=1` (read by `infra.synth.app.main`, never at import
time) switches to the stock import, for that test and for the benchmark.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

from infra.cdk import provider_package

_stock = False


def use_stock_import(enabled: bool) -> None:
    """Import provider packages the ordinary way (slow); must be set before first use."""
    global _stock
    _stock = enabled


def _bare_package(package: str) -> None:
    if package in sys.modules:
        return
    spec = importlib.util.find_spec(package)
    if spec is None or spec.submodule_search_locations is None:
        raise ModuleNotFoundError(f"provider bindings {package!r} are not installed; run `make venv`")
    module = types.ModuleType(package)
    module.__spec__ = spec
    module.__path__ = list(spec.submodule_search_locations)
    module.__file__ = spec.origin
    sys.modules[package] = module


def provider_module(package: str, submodule: str) -> Any:
    """Return `<package>.<submodule>`, loading nothing else of the package."""
    if _stock:
        importlib.import_module(package)
    else:
        _bare_package(package)
    return importlib.import_module(f"{package}.{submodule}")


def google(submodule: str) -> Any:
    return provider_module(provider_package("google"), submodule)


def kubernetes(submodule: str) -> Any:
    return provider_module(provider_package("kubernetes"), submodule)


def helm(submodule: str) -> Any:
    return provider_module(provider_package("helm"), submodule)
