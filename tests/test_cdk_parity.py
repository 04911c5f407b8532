"""The cdktf/cdktn comparison: what it treats as the same, and what it refuses."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from infra import cdk
from scripts.cdk_parity import _normalized, differences


def _stack(version: str, source: str) -> dict[str, Any]:
    return {
        "//": {"metadata": {"backend": "gcs", "stackName": "platform-dev", "version": version}},
        "terraform": {"required_providers": {"google": {"source": source, "version": "6.50.0"}}},
        "resource": {"google_storage_bucket": {"bucket_models_1A2B": {"name": "acme-models"}}},
    }


def test_version_metadata_and_the_default_provider_namespace_are_not_differences() -> None:
    assert differences(_normalized(_stack("0.21.0", "google")), _normalized(_stack("0.22.1", "hashicorp/google"))) == []


def test_a_changed_logical_id_or_body_is_a_difference() -> None:
    a = _stack("0.21.0", "google")
    renamed = copy.deepcopy(a)
    renamed["resource"]["google_storage_bucket"] = {"bucket_models_9Z9Z": {"name": "acme-models"}}
    assert differences(_normalized(a), _normalized(renamed)) == [
        "resource.google_storage_bucket.bucket_models_1A2B: only in cdktf",
        "resource.google_storage_bucket.bucket_models_9Z9Z: only in cdktn",
    ]
    changed = copy.deepcopy(a)
    changed["resource"]["google_storage_bucket"]["bucket_models_1A2B"]["name"] = "other"
    assert differences(_normalized(a), _normalized(changed)) == [
        'resource.google_storage_bucket.bucket_models_1A2B.name: "acme-models" != "other"'
    ]


def test_the_seam_names_each_cdks_packages_and_refuses_another() -> None:
    assert cdk.FLAVOURS["cdktf"][1]["google"] == "cdktf_cdktf_provider_google"
    assert cdk.FLAVOURS["cdktn"][1]["google"] == "cdktn_provider_google"
    with pytest.raises(ValueError, match="known: cdktf, cdktn"):
        cdk.use("pulumi")
    assert cdk.flavour() == "cdktf"


def test_the_seam_loads_its_own_modules_where_cdktf_is_not_installed() -> None:
    """cdktn's environment has no `cdktf` package: `from infra.cdk import bindings` (before the flavour is chosen)
    must find the module, not look `bindings` up in cdktf (make cdktn-parity failed with "No module named
    'cdktf'" when the seam moved into a package)."""
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "class NoCdktf:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'cdktf' or name.startswith('cdktf.'):\n"
        "            raise ModuleNotFoundError(\"No module named 'cdktf'\", name='cdktf')\n"
        "sys.meta_path.insert(0, NoCdktf())\n"
        "from infra.cdk import bindings\n"
        "print(bindings.__name__)\n"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "infra.cdk.bindings", run.stderr[-2000:]
