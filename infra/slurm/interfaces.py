"""Cluster Toolkit's module interfaces at the pinned release: the files, where they are, and what they declare.

    python -m scripts.slurm fetch   download every pinned file into .cache/cluster-toolkit (checksums verified)

The blueprint `infra.slurm.blueprint` writes is validated against these files the way `gcluster` validates a
blueprint before it writes anything: every module's variables (in any of its `*.tf`, or `*.pkr.hcl` for Packer
modules), its outputs, its `metadata.yaml` (the id it injects, whether it must be used, its validators) and the
`versions.tf` of the module and of the modules it calls. `toolkit-files.yaml` pins each file by sha256 at the
release's commit (`infra/catalogue/cluster_toolkit.py`).

Look-up order: $PLATFORM_CTK_DIR, .cache/cluster-toolkit (what `make cluster-toolkit` fetched), ../shared/ctk
beside the checkout. A directory counts only when it holds every pinned file with its pinned checksum.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from infra import settings
from infra.catalogue.cluster_toolkit import CLUSTER_TOOLKIT
from infra.slurm.types import TfType, TypeSyntaxError, parse_type
from workloads import pinned_files as pinned

HERE = Path(__file__).resolve().parent
PINS = HERE / "toolkit-files.yaml"
REPO = HERE.parents[1]
FETCHED = REPO / ".cache" / "cluster-toolkit"
SHARED = REPO.parent / "shared" / "ctk"


class InterfacesMissing(FileNotFoundError):
    """No directory holds the pinned module interfaces."""


@cache
def pins() -> dict[str, str]:
    """{path in the toolkit repository: sha256} of every pinned file."""
    return dict(yaml.safe_load(PINS.read_text())["files"])


def url(path: str) -> str:
    return f"https://github.com/{CLUSTER_TOOLKIT.repository}/raw/{CLUSTER_TOOLKIT.commit}/{path}"


def problems(directory: Path) -> list[str]:
    """What keeps `directory` from being the pinned interfaces (empty: it is)."""
    return pinned.problems(directory, pins())


def candidates() -> list[Path]:
    env = settings.CTK_DIR.path()
    return [env] if env else [FETCHED, SHARED]


@cache
def _locate(key: tuple[Path, ...]) -> Path:
    found, report = pinned.first_complete(key, pins())
    if found is None:
        raise InterfacesMissing(
            f"the module interfaces of Cluster Toolkit {CLUSTER_TOOLKIT.tag} are not available (`make "
            "cluster-toolkit` fetches them; "
            + pinned.local_copy(settings.CTK_DIR.name, [FETCHED, SHARED], PINS)
            + "): "
            + "; ".join(report)
        )
    return found


def locate() -> Path:
    """The directory of the pinned interfaces, or InterfacesMissing saying what is wrong and how to get them."""
    return _locate(tuple(candidates()))


def fetch(target: Path | None = None) -> int:
    """Download every pinned file into `target` (.cache/cluster-toolkit): all verified, or nothing changed.
    Returns how many."""
    offline = pinned.local_copy(settings.CTK_DIR.name, [FETCHED, SHARED], PINS)
    pinned.fetch(target or FETCHED, {name: (url(name), sha) for name, sha in pins().items()}, PINS, offline=offline)
    _locate.cache_clear()
    return len(pins())


# What a module declares --------------------------------------------------------------------------------------

_LOCAL_SOURCE = re.compile(r'^\s*source\s*=\s*"(\.{1,2}/[^"]+)"', re.M)
_CONSTRAINS = re.compile(r"^(terraform|packer)\s*\{", re.M)
_DECLARES = re.compile(r'^((variable|output)\s+"|(terraform|packer)\s*\{)', re.M)


@dataclass(frozen=True)
class Input:
    """One variable of a module: its type, whether it must be set, its default, and where it is declared."""

    name: str
    type: TfType
    required: bool
    default: Any
    file: str
    line: int

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Constraint:
    """A version constraint of a `versions.tf` (or `versions.pkr.hcl`): on Terraform, Packer or a provider."""

    file: str
    subject: str  # "terraform", "packer" or the provider's name
    constraint: str


@dataclass
class ModuleInterface:
    """What `gcluster` reads of one module: inputs, outputs, metadata, and the version constraints of the
    module and of every local module it calls."""

    source: str
    kind: str
    inputs: dict[str, Input] = field(default_factory=dict)
    outputs: set[str] = field(default_factory=set)
    metadata: dict[str, Any] = field(default_factory=dict)
    constraints: list[Constraint] = field(default_factory=list)

    @property
    def inject_module_id(self) -> str | None:
        return ((self.metadata.get("ghpc") or {}).get("inject_module_id")) or None

    @property
    def has_to_be_used(self) -> bool:
        return bool((self.metadata.get("ghpc") or {}).get("has_to_be_used"))

    @property
    def validators(self) -> list[dict[str, Any]]:
        return list((self.metadata.get("ghpc") or {}).get("validators") or [])

    @property
    def services(self) -> list[str]:
        return list(((self.metadata.get("spec") or {}).get("requirements") or {}).get("services") or [])


def _load_hcl(path: Path) -> dict[str, Any]:
    import hcl2
    from hcl2.utils import SerializationOptions

    options = SerializationOptions(
        strip_string_quotes=True, explicit_blocks=False, with_comments=False, preserve_heredocs=False
    )
    with path.open() as f:
        return dict(hcl2.load(f, serialization_options=options))


def _blocks(parsed: dict[str, Any], kind: str) -> list[tuple[str, dict[str, Any]]]:
    return [(name, body) for item in parsed.get(kind) or [] for name, body in item.items()]


def _line_of(text: str, kind: str, name: str) -> int:
    match = re.search(rf'^{kind}\s+"{re.escape(name)}"', text, re.M)
    return text[: match.start()].count("\n") + 1 if match else 0


def _module_files(directory: Path, kind: str) -> list[Path]:
    """The files `gcluster` reads a module's interface from: every `*.tf`, or for Packer every `*.pkr.hcl`."""
    pattern = "*.pkr.hcl" if kind == "packer" else "*.tf"
    return sorted(p for p in directory.glob(pattern) if p.is_file())


def _constraints(parsed: dict[str, Any], relative: str) -> list[Constraint]:
    out = []
    for block_kind in ("terraform", "packer"):
        for block in parsed.get(block_kind) or []:
            if "required_version" in block:
                out.append(Constraint(relative, block_kind, str(block["required_version"])))
            for section in ("required_providers", "required_plugins"):
                for item in block.get(section) or []:
                    for name, spec in item.items():
                        version = spec.get("version") if isinstance(spec, dict) else spec
                        if version:
                            out.append(Constraint(relative, name, str(version)))
    return out


@cache
def read_module(root: Path, source: str, kind: str = "terraform") -> ModuleInterface:
    """The interface of module `source` (a path inside the toolkit, `modules/...` or `community/modules/...`)."""
    directory = root / source
    files = _module_files(directory, kind)
    if not files:
        raise FileNotFoundError(f"{source}: no {kind} module at Cluster Toolkit {CLUSTER_TOOLKIT.tag}")
    module = ModuleInterface(source=source, kind=kind)
    seen: set[Path] = set()
    pending = [directory]
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        for path in _module_files(current, kind):
            relative = path.relative_to(root).as_posix()
            text = path.read_text()
            # Parse only what declares something read here (parsing is the slow part): the module's own
            # variables and outputs, and the version constraints of the module and the modules it calls.
            wanted = _DECLARES if current == directory else _CONSTRAINS
            if wanted.search(text):
                parsed = _load_hcl(path)
                module.constraints += _constraints(parsed, relative)
            else:
                parsed = {}
            if current == directory:
                for name, body in _blocks(parsed, "variable"):
                    try:
                        type_ = parse_type(body.get("type"))
                    except TypeSyntaxError as err:
                        raise TypeSyntaxError(f"{relative}: variable {name!r}: {err}") from None
                    module.inputs[name] = Input(
                        name=name,
                        type=type_,
                        required="default" not in body,
                        default=body.get("default"),
                        file=relative,
                        line=_line_of(text, "variable", name),
                    )
                module.outputs |= {name for name, _ in _blocks(parsed, "output")}
            for local in _LOCAL_SOURCE.findall(text):
                pending.append(Path(os.path.normpath(current / local)))
    metadata = directory / "metadata.yaml"
    if metadata.is_file():
        module.metadata = yaml.safe_load(metadata.read_text()) or {}
    return module


# What the pin covers: the modules the platform's blueprint uses, and those of the toolkit's own A3 Mega
# example, which the validator is held against (tests/test_slurm.py: the example passes with no finding).
EXAMPLE = (
    "examples/machine-learning/a3-megagpu-8g/a3mega-slurm-blueprint.yaml",
    "examples/machine-learning/a3-megagpu-8g/a3mega-slurm-deployment.yaml",
)
PINNED_MODULES = (
    "modules/network/pre-existing-vpc",
    "modules/network/vpc",
    "modules/network/multivpc",
    "modules/network/private-service-access",
    "modules/scripts/startup-script",
    "modules/packer/custom-image",
    "modules/file-system/pre-existing-network-storage",
    "modules/file-system/cloud-storage-bucket",
    "modules/file-system/managed-lustre",
    "community/modules/compute/schedmd-slurm-gcp-v6-nodeset",
    "community/modules/compute/schedmd-slurm-gcp-v6-partition",
    "community/modules/scheduler/schedmd-slurm-gcp-v6-login",
    "community/modules/scheduler/schedmd-slurm-gcp-v6-controller",
)


def pinned_files(root: Path) -> list[str]:
    """Every file of `PINNED_MODULES` (and the local modules they call) that the validator reads, and the example."""
    files: set[str] = set(EXAMPLE)
    pending = [root / m for m in PINNED_MODULES]
    seen: set[Path] = set()
    while pending:
        directory = pending.pop()
        if directory in seen:
            continue
        seen.add(directory)
        for path in sorted(directory.iterdir()):
            if path.is_file() and (
                path.suffix == ".tf" or path.name.endswith(".pkr.hcl") or path.name == "metadata.yaml"
            ):
                files.add(path.relative_to(root).as_posix())
                if path.suffix == ".tf":
                    pending += [Path(os.path.normpath(directory / s)) for s in _LOCAL_SOURCE.findall(path.read_text())]
    return sorted(files)


def write_pins(root: Path) -> int:
    """Rewrite toolkit-files.yaml from a checkout of the pinned release at `root` (after moving the pin)."""
    files = {name: pinned.sha256(root / name) for name in pinned_files(root)}
    header = (
        "# Cluster Toolkit's module interfaces the Slurm blueprint is validated against, pinned by sha256 at the\n"
        f"# release of infra/catalogue/cluster_toolkit.py ({CLUSTER_TOOLKIT.tag}, {CLUSTER_TOOLKIT.commit}).\n"
        "# `make cluster-toolkit` fetches them; `python -m scripts.slurm pin <checkout>` rewrites this file.\n"
    )
    PINS.write_text(header + yaml.safe_dump({"files": files}, sort_keys=True, width=200))
    pins.cache_clear()
    return len(files)


def available() -> bool:
    try:
        locate()
    except InterfacesMissing:
        return False
    return True
