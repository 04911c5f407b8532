"""The `PLATFORM_*` environment variables the code reads, in one place: each one's name, who reads it, what it does
and its default, read at call time (a test sets one with monkeypatch). docs/reference.md's table of them is
`table()` (tests/test_settings.py holds it to this list); a value that does not parse is refused
naming the variable, the value and what is allowed.

The lowest layer: the catalogue and everything above may read a setting; a setting reads nothing of the platform.
"""

from __future__ import annotations

import math
import os
import shlex
from dataclasses import dataclass
from pathlib import Path


class SettingError(ValueError):
    """A PLATFORM_* variable whose value does not parse: names the variable, the value and what is allowed."""


@dataclass(frozen=True)
class Setting:
    name: str
    read_by: str
    what: str
    # The default as the docs show it ("" where the reader has no single default); `command` and `seconds` take it.
    default: str = ""

    def raw(self) -> str | None:
        """The value set, or None (unset or empty)."""
        return os.environ.get(self.name) or None

    def command(self, fallback: list[str] | None = None) -> list[str]:
        """A command line (shell words); when unset, `fallback` or the default's."""
        raw = self.raw()
        return shlex.split(raw) if raw else (fallback or shlex.split(self.default))

    def path(self) -> Path | None:
        raw = self.raw()
        return Path(raw) if raw else None

    def names(self) -> list[str]:
        """A comma-separated list, empty items dropped."""
        return [name for name in (self.raw() or "").split(",") if name]

    def on(self) -> bool:
        """`1` turns it on; anything else, or unset, leaves it off."""
        return self.raw() == "1"

    def seconds(self) -> float:
        raw = self.raw() or self.default
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value >= 0):
            raise SettingError(f"{self.name}={raw!r}: not a number of seconds; 0 or more (default {self.default})")
        return value


def _command(name: str, default: str, read_by: str, what: str) -> Setting:
    return Setting(name, read_by, f"{what} (default `{default}`; tests pass a stand-in)", default)


ENVIRONMENTS_DIR = Setting(
    "PLATFORM_ENVIRONMENTS_DIR", "every loader", "load the environment files from another directory"
)
ENVS = Setting(
    "PLATFORM_ENVS",
    "`python -m infra`, `make plan ENV=`'s steps (`scripts.slurm`, `scripts.vertex`, `scripts.vms`, `scripts.shell`)",
    "synthesize, write and check only these environments (comma-separated)",
)
OMIT_UNBUILT = Setting(
    "PLATFORM_OMIT_UNBUILT",
    "`python -m infra`",
    "`1`: leave out the releases whose images are not built yet (`make deploy-infra`)",
)
TODAY = Setting(
    "PLATFORM_TODAY", "the GKE calendar rules", "`YYYY-MM-DD`: judge the pinned GKE versions as on that day"
)
CRDS_DIR = Setting(
    "PLATFORM_CRDS_DIR",
    "chart validation, CEL rules",
    "the directory of the pinned CRD schemas (default: `.cache/crds`, then `../shared/crds`)",
)
GO_BIN_CACHE = Setting(
    "PLATFORM_GO_BIN_CACHE",
    "`infra/engine/build.py` (`make cluster-local`, `make tofu`, `make deploy-local`, `make test`)",
    "where the Go programs (the local cluster's, OpenTofu) are kept once built, by component and digest (default "
    "`~/.cache/platform/go-bin`)",
)
PROVIDER_SOURCES = Setting(
    "PLATFORM_PROVIDER_SOURCES",
    "`infra/engine/providers.py` (`make tofu`)",
    "the folder of the Terraform providers' source tarballs and their SHA256SUMS (default "
    "`../shared/vendor/terraform-providers` beside the checkout)",
)
PROVIDER_MIRROR = Setting(
    "PLATFORM_PROVIDER_MIRROR",
    "`infra/engine/providers.py`, `infra/engine/tofu.py` (`make tofu`, the engine's tests)",
    "the provider mirror the built providers are installed in and OpenTofu reads (default "
    "`~/.cache/platform/terraform-providers`)",
)
TOFU_PROVIDERS = Setting(
    "PLATFORM_TOFU_PROVIDERS",
    "`infra/engine/tofu.py`",
    "`registry`: `tofu init` takes the providers from their registry (a machine that reaches one) instead of the "
    "mirror `make tofu` builds",
)
PREFLIGHT_ANSWERS = Setting(
    "PLATFORM_PREFLIGHT_ANSWERS",
    "`scripts/preflight.py` (`make preflight`, `make deploy`)",
    "a folder of recorded Google Cloud API answers (`index.json`: method, url, status, answer file) the preflight "
    "reads instead of calling the APIs (the tests: `tests/fixtures/preflight/`)",
)
CDKTF = _command("PLATFORM_CDKTF", "npx --no-install cdktf", "`scripts/deploy.py`", "the cdktf CLI to run")
GCLUSTER = _command(
    "PLATFORM_GCLUSTER",
    "gcluster",
    "`scripts/deploy.py`, `scripts/preflight.py`",
    "the Cluster Toolkit CLI to run and check",
)
TERRAFORM = _command(
    "PLATFORM_TERRAFORM", "terraform", "`scripts/apply.py`", "the Terraform the gate at the apply runs"
)
VMS = _command(
    "PLATFORM_VMS",
    "python -m scripts.vms",
    "`scripts/deploy.py`",
    "what deletes a VM group's VMs at destroy",
)
GCLOUD = _command(
    "PLATFORM_GCLOUD",
    "gcloud",
    "`scripts/apis.py`, `scripts/teardown.py`, `scripts/adopt_crds.py` (`make deploy`, `make destroy`)",
    "the gcloud CLI to run",
)
KUBECTL = _command(
    "PLATFORM_KUBECTL",
    "kubectl",
    "`scripts/teardown.py`, `scripts/adopt_crds.py` (`make destroy`)",
    "the kubectl CLI to run",
)
KUBECONFIG = Setting(
    "PLATFORM_KUBECONFIG",
    "`scripts/cluster_access.py` (`make status`, `make train` (runs as jobs), `make training-pause`, "
    "`make training-resume`; the gate's reads at the apply)",
    "a kubeconfig that reaches the environment's cluster, used instead of gcloud's credentials (the local "
    "cluster's: `.cache/cluster-local/kubeconfig`)",
)
API_WAIT = Setting(
    "PLATFORM_API_WAIT",
    "`scripts/apis.py` (`make deploy`)",
    "seconds to wait for the just-enabled APIs to answer",
    "600",
)
API_POLL = Setting("PLATFORM_API_POLL", "`scripts/apis.py` (`make deploy`)", "seconds between two asks", "15")
TEARDOWN_TIMEOUT = Setting(
    "PLATFORM_TEARDOWN_TIMEOUT",
    "`scripts/teardown.py` (`make destroy`)",
    "seconds to wait for GKE to remove a Gateway's load balancer",
    "900",
)
TEARDOWN_POLL = Setting(
    "PLATFORM_TEARDOWN_POLL", "`scripts/teardown.py` (`make destroy`)", "seconds between two lists", "20"
)
CONTROLLER_CRDS = Setting(
    "PLATFORM_CONTROLLER_CRDS",
    "`python -m infra.delivery.crd_postrender` (the controllers' Helm post-renderer)",
    "where the controllers' pinned CRD files are kept once fetched (default `.cache/controller-crds`)",
)
CTK_DIR = Setting(
    "PLATFORM_CTK_DIR",
    "`python -m scripts.slurm`, the blueprint tests",
    "the directory of Cluster Toolkit's pinned module interfaces (default: `.cache/cluster-toolkit`, then "
    "`../shared/ctk`)",
)
PINNED_SCRIPTS_DIR = Setting(
    "PLATFORM_PINNED_SCRIPTS_DIR",
    "`python -m scripts.shell`, tests/test_shell.py",
    "the directory of the pinned upstream files generated scripts source (default: `.cache/pinned-scripts`)",
)
DRY_RUN_DIR = Setting(
    "PLATFORM_DRY_RUN_DIR",
    "`python -m scripts.deploy --dry-run`",
    "the `.cdktf.out-*` folder at the repository root a dry run keeps its synthesized stack in (default "
    "`.cdktf.out-dry-run-platform-<env>`)",
)
CONFIRMED_AT = Setting(
    "PLATFORM_CONFIRMED_AT",
    "`infra/delivery/confirmations.py` (`make plan`, `make review`, the apply's gate)",
    "a git ref (the pull request's base, the commit before the merge) whose environment files' `confirm:` entries "
    "were merged before the change: only those confirm a change that loses data or weakens security (unset: none "
    "does; a person confirms it with CONFIRM_CHANGE)",
)

SETTINGS: tuple[Setting, ...] = tuple(v for v in list(globals().values()) if isinstance(v, Setting))


def table() -> str:
    """docs/reference.md's table of the PLATFORM_* variables."""
    rows = ["| variable | read by | what it does |", "|---|---|---|"]
    for s in SETTINGS:
        default = f" (default {s.default})" if s.default and s.default not in s.what else ""
        rows.append(f"| `{s.name}` | {s.read_by} | {s.what}{default} |")
    return "\n".join(rows)
