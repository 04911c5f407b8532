"""Limits on the labels a Google Cloud resource carries.

Checked 2026-11-26 against https://cloud.google.com/resource-manager/docs/labels-overview#requirements (at most
64 labels per resource; keys 1-63 characters, values at most 63) and the Terraform Google provider's
add_terraform_attribution_label (on by default since 6.0: every resource it creates also carries
goog-terraform-provisioned=true;
https://registry.terraform.io/providers/hashicorp/google/latest/docs/guides/provider_reference#add_terraform_attribution_label).
"""

from __future__ import annotations

CHECKED = "2026-11-26"
MAX_LABELS = 64
MAX_KEY_LENGTH = 63
MAX_VALUE_LENGTH = 63
# Labels added to every resource beside the environment's own.
ADDED_BY_TERRAFORM = ("goog-terraform-provisioned",)
SOURCE = (
    "https://cloud.google.com/resource-manager/docs/labels-overview#requirements; "
    "https://registry.terraform.io/providers/hashicorp/google/latest/docs/guides/provider_reference"
    "#add_terraform_attribution_label"
)
