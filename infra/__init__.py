"""The platform's plan-time code: the environments, the stacks, the rules and the review (README.md, "Layers")."""

from __future__ import annotations

import os
from pathlib import Path

# jsii's Node kernel is started by the first import of a CDK package in this process (constructs, cdktn or a
# provider's bindings); what it is given is set here, the root of every module that imports one, so that no import
# order starts the kernel without it, and a child process inherits it.
# - No framed end-of-life banner on every start under Node 20 (the development and CI machines' Node; 22 or 24 is
#   recommended): it went to the output of every command that synthesizes, and into every test's failure report.
#   The Makefile exports it too, for the Node programs make runs itself.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
# - The providers' resource modules loaded as a stack uses them, not all of them at once
#   (infra/cdk/lazy_providers.js: a synth of every environment took 5.7 CPU-s, 2.5 with it). The trainer's images
#   copy this file without infra/cdk: there it adds nothing.
LAZY_PROVIDERS = Path(__file__).resolve().parent / "cdk" / "lazy_providers.js"
if LAZY_PROVIDERS.is_file() and str(LAZY_PROVIDERS) not in os.environ.get("NODE_OPTIONS", ""):
    os.environ["NODE_OPTIONS"] = f'{os.environ.get("NODE_OPTIONS", "")} --require "{LAZY_PROVIDERS}"'.strip()
