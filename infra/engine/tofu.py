"""OpenTofu on a synthesized stack, with the providers of the mirror (infra/engine/providers.py).

A `Workspace` is one folder holding a stack's `cdk.tf.json` as `make plan` synthesized it. `tofu init` installs the
providers the stack's required_providers name from the filesystem mirror (the CLI configuration written beside it:
`provider_installation { filesystem_mirror { ... } }`, then a plugin cache so each workspace links the binaries
instead of copying them); where the providers should come from a registry instead (a machine that reaches one:
PLATFORM_TOFU_PROVIDERS=registry), the same `init` runs without that configuration. One code path; the source of the
providers is the only difference.

What OpenTofu is given beside the stack is Terraform's own override mechanism (a `*_override.tf.json` file merged
into the configuration): a local backend in place of the stack's Cloud Storage one, and whatever the caller passes
(the offline plan: the controller releases' charts from their Go modules, `registry_charts` of
infra/localcluster/apply.py).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from infra import settings
from infra.catalogue.terraform_engine import PROVIDERS, REGISTRY_HOSTS
from infra.cdk.layout import STACK_FILE
from infra.engine import build as gobuild
from infra.engine import providers

STATE_FILE = "terraform.tfstate"  # the local backend's path in a workspace (its override)


class EngineError(RuntimeError):
    """OpenTofu refused or failed: the command, the workspace and OpenTofu's own words."""


def tofu() -> Path:
    """The OpenTofu binary: built from its pinned Go module, or found in the cache."""
    return gobuild.build_all(["opentofu"])["tofu"]


def use_registry() -> bool:
    return settings.TOFU_PROVIDERS.raw() == "registry"


def cli_config(mirror: Path, plugin_cache: Path) -> str:
    """The CLI configuration: the platform's three providers from the mirror, any other from its registry."""
    addresses = [f"{host}/{p.namespace}/{p.type}" for p in PROVIDERS.values() for host in REGISTRY_HOSTS]
    listed = json.dumps(addresses)
    return (
        f"plugin_cache_dir = {json.dumps(str(plugin_cache))}\n"
        "plugin_cache_may_break_dependency_lock_file = true\n"
        "provider_installation {\n"
        f"  filesystem_mirror {{\n    path    = {json.dumps(str(mirror))}\n    include = {listed}\n  }}\n"
        f"  direct {{\n    exclude = {listed}\n  }}\n"
        "}\n"
    )


@dataclass
class Workspace:
    """A folder where OpenTofu runs one stack: its configuration, its state and its CLI configuration."""

    folder: Path
    stack: dict[str, Any]
    overrides: dict[str, Any] = field(default_factory=dict)
    binary: Path | None = None

    OVERRIDE: ClassVar[str] = "platform_override.tf.json"

    def __post_init__(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / STACK_FILE).write_text(json.dumps(self.stack, indent=2))
        self.write_overrides(self.overrides)
        if not use_registry():
            mirror = providers.mirror_dir()
            cache = mirror / ".plugin-cache"
            cache.mkdir(parents=True, exist_ok=True)
            (self.folder / "tofu.rc").write_text(cli_config(mirror, cache))

    def write_overrides(self, overrides: dict[str, Any] | Any) -> None:
        """The override file: the local backend (state in the workspace), and `overrides`."""
        merged = {"terraform": {"backend": {"local": {"path": STATE_FILE}}}, **overrides}
        (self.folder / self.OVERRIDE).write_text(json.dumps(merged, indent=2))

    def env(self) -> dict[str, str]:
        env = {
            **os.environ,
            "TF_IN_AUTOMATION": "1",
            "TF_INPUT": "0",
            "CHECKPOINT_DISABLE": "1",
        }
        if (self.folder / "tofu.rc").is_file():
            env["TF_CLI_CONFIG_FILE"] = str(self.folder / "tofu.rc")
        return env

    def run(
        self, *args: str, check: bool = True, extra_env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        if self.binary is None:
            self.binary = tofu()
        done = subprocess.run(
            [str(self.binary), *args],
            cwd=self.folder,
            capture_output=True,
            text=True,
            env={**self.env(), **(extra_env or {})},
            check=False,
        )
        if check and done.returncode:
            words = (done.stderr.strip() or done.stdout.strip())[-4000:]
            raise EngineError(f"tofu {' '.join(args)} failed in {self.folder} (exit {done.returncode}):\n{words}")
        return done

    def provider_schemas(self) -> dict[str, Any]:
        """The providers' schemas (`tofu providers schema -json`'s provider_schemas), once the workspace is init."""
        schemas: dict[str, Any] = json.loads(self.run("providers", "schema", "-json").stdout)["provider_schemas"]
        return schemas

    def init(self, *, backend: bool = True) -> None:
        self.run("init", "-no-color", *([] if backend else ["-backend=false"]))

    def validate(self) -> list[dict[str, Any]]:
        """OpenTofu's diagnostics of the configuration against the providers' schemas (errors and warnings)."""
        done = self.run("validate", "-json", "-no-color", check=False)
        try:
            report: dict[str, Any] = json.loads(done.stdout)
        except json.JSONDecodeError as err:
            raise EngineError(f"tofu validate in {self.folder}: no JSON report:\n{done.stderr[-4000:]}") from err
        diagnostics: list[dict[str, Any]] = report.get("diagnostics", [])
        return diagnostics


# What the google provider is given to plan with: a token that is no credential. With no refresh and no data
# source, a plan of resources that do not exist yet calls no Google API (the provider builds its clients lazily),
# so the provider's own diff and its plan-time checks (CustomizeDiff, RequiresReplace) run offline.
OFFLINE_TOKEN = "offline-plan-not-a-credential"


def plan(workspace: Workspace) -> dict[str, Any]:
    """OpenTofu's plan of the workspace's stack from an empty state, as `tofu show -json` writes it. No refresh:
    nothing is read from Google Cloud."""
    workspace.init()
    (workspace.folder / STATE_FILE).unlink(missing_ok=True)  # an earlier change's stand-in state
    extra = {"GOOGLE_OAUTH_ACCESS_TOKEN": OFFLINE_TOKEN}
    workspace.run("plan", "-refresh=false", "-lock=false", "-no-color", "-out=plan.bin", extra_env=extra)
    shown = workspace.run("show", "-json", "plan.bin", extra_env=extra)
    planned: dict[str, Any] = json.loads(shown.stdout)
    return planned
