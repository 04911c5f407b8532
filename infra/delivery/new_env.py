"""A new environment from an existing one: `make new-env NAME=staging FROM=dev PROJECT=... PROJECT_NUMBER=...
REGION=...`.

Everything the source file ties to its own project, region and name is rewritten; everything else (slices,
sizes, serving, training, versions, guards) is kept, with its comments:
- the project id wherever the file names it (bucket names derive from it, image paths hold it), the project
  number, the name, `labels.environment`;
- the region, the environment's zones and every slice's zone: zones of the new region that offer each machine
  (the dated zone catalogue, infra/catalogue/zones.yaml); when a machine the file uses is offered in no zone of
  the new region, nothing is written and every such machine is listed, with the regions that offer them all;
- every release image: the new environment's own registry, at the placeholder digest until `make image` builds
  it there (dev's images are never pointed at from another environment);
- the cluster's and the Slurm cluster's names, which carry the environment's name;
- every specific reservation of the source's own project: a reservation is its project's and its zone's, so the new
  environment names one of its own (`ml-platform-v6e-train` -> `ml-platform-v6e-train-staging`), to be made in the
  slice's new zone before the deploy (`make preflight` checks it is there and large enough). A reservation shared
  from a third project is kept and listed: whether it is shared with the new project, in its zone, is its owner's.
The result must load (every rule of `make plan`'s load), or nothing is written.
"""

from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from infra.catalogue.accelerators import lookup
from infra.catalogue.cpu_machines import CPU_MACHINES
from infra.catalogue.gcp_names import PROJECT_ID
from infra.catalogue.zones import REGIONS, zones_offering
from infra.config import ConfigError, Environment
from infra.config.environment import stack_name_clash
from infra.config.release import PLACEHOLDER_DIGEST
from infra.delivery.release_file import write_validated
from infra.synth.load import load_environment


class NewEnvironmentError(ValueError):
    """A new environment that cannot be written as asked."""


@dataclass(frozen=True)
class Placement:
    """The zones of the new environment (its own, in order, and each slice's) and the machines that replace one
    the region does not offer ({field path: (old, new)})."""

    zones: list[str]
    slice_zones: dict[str, str]
    substitutes: dict[str, tuple[str, str]]
    # {field path: (source's reservation, the new environment's)}; a shared one of a third project maps to itself.
    reservations: dict[str, tuple[str, str]] = field(default_factory=dict)

    def zone_of(self, key: str) -> str:
        """The zone slice `key` is placed in."""
        return self.slice_zones.get(key, self.zones[0])


def _yaml() -> YAML:
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    return yaml


def _machines(env: Environment) -> dict[str, str]:
    """{what uses it: machine type} of every machine the environment runs (slices, pools, Slurm hosts)."""
    used = {"cluster.system_pool": env.cluster.system_pool.machine_type}
    used |= {f"cpu_pools.{k}": p.machine_type for k, p in env.cpu_pools.items()}
    used |= {f"slices.{k}": s.slice.machine_type for k, s in env.slices.items()}
    if env.slurm is not None:
        used["slurm.controller"] = env.slurm.controller.machine_type
        used["slurm.login"] = env.slurm.login.machine_type
    return used


def _offered(machine: str, region: str) -> list[str]:
    """The zones of `region` the zone catalogue says offer `machine` (none where the catalogue does not know it)."""
    zones = zones_offering(machine) or frozenset()
    return [z for z in REGIONS[region] if z in zones]


def _cpu_substitute(machine: str, region: str) -> str | None:
    """A CPU machine of the catalogue offered in `region` for one that is not: the smallest at least as large, else
    the one with the most memory (whether it is enough is the load's question: a conversion's memory rule)."""
    size = CPU_MACHINES[machine]
    offered = [m for m in CPU_MACHINES if _offered(m, region)]
    large = [
        m for m in offered if CPU_MACHINES[m].vcpus >= size.vcpus and CPU_MACHINES[m].memory_gib >= size.memory_gib
    ]
    if large:
        return min(large, key=lambda m: (CPU_MACHINES[m].memory_gib, CPU_MACHINES[m].vcpus))
    return max(offered, key=lambda m: CPU_MACHINES[m].memory_gib, default=None)


def _slice_substitute(env: Environment, key: str, region: str) -> str | None:
    """Another machine type of the slice's accelerator that offers its topology and is offered in `region`."""
    spec = env.slices[key]
    accelerator = lookup(spec.accelerator)
    return next(
        (
            m
            for m, shape in accelerator.machine_types.items()
            if _offered(m, region) and (spec.slice.kind == "gpu" or spec.slice.topology in shape.topologies)
        ),
        None,
    )


def place(env: Environment, region: str) -> Placement:
    """Zones of `region` for the environment and each slice, with a substitute for each machine the region does
    not offer; NewEnvironmentError listing every machine that has none (and the regions that offer them all)."""
    if region not in REGIONS:
        raise NewEnvironmentError(f"REGION={region!r}: not a Compute Engine region; known: {', '.join(REGIONS)}")
    machines = _machines(env)
    substitutes: dict[str, tuple[str, str]] = {}
    missing: dict[str, str] = {}
    for who, machine in machines.items():
        if _offered(machine, region):
            continue
        key = who.split(".", 1)[1]
        other = (
            _slice_substitute(env, key, region)
            if who.startswith("slices.")
            else (_cpu_substitute(machine, region) if machine in CPU_MACHINES else None)
        )
        if other is None:
            missing[who] = machine
        else:
            substitutes[who] = (machine, other)
    if missing:
        everywhere = [r for r in REGIONS if all(_offered(m, r) for m in missing.values())]
        lines = [f"{who}: {machine} is offered in no zone of {region}, nor another machine for it" for who, machine
                 in missing.items()]  # fmt: skip
        lines.append(
            f"regions that offer {', '.join(sorted(set(missing.values())))}: {', '.join(everywhere) or 'none'}"
        )
        raise NewEnvironmentError("\n".join(lines))
    machine_of = {who: substitutes.get(who, (m, m))[1] for who, m in machines.items()}
    system = _offered(machine_of["cluster.system_pool"], region)
    slices = {k: _offered(machine_of[f"slices.{k}"], region) for k in env.slices}
    # The environment's first zone is where a slice without a zone of its own goes: the zone most slices can use.
    ranked = sorted(system, key=lambda z: -sum(z in zones for zones in slices.values()))
    zones = ranked[: max(len(env.zones), 1)]
    slice_zones = {}
    for key, spec in env.slices.items():
        if spec.zone is None and zones[0] in slices[key]:
            continue
        slice_zones[key] = next((z for z in zones if z in slices[key]), slices[key][0])
    zones += [z for z in slice_zones.values() if z not in zones]
    return Placement(zones, slice_zones, substitutes)


def _renamed(old: str, source: str, name: str) -> str:
    """A name that carries the environment's name: `ml-platform-dev` -> `ml-platform-staging`."""
    return old[: -len(source)] + name if old.endswith(source) else f"{old}-{name}"


def _own_reservations(data: Any, env: Environment, project: str, name: str) -> dict[str, tuple[str, str]]:
    """Rename in `data` (the new file, its project already rewritten) every reservation of `env`, the source, that
    its project owns to one of the new environment's; a third project's shared reservation is kept.
    {field path: (the source's reservation, the new file's)}."""
    renamed = {}
    for key, spec in env.slices.items():
        listed = isinstance(spec.capacity, list)
        for at, tier in enumerate(spec.tiers):
            if not tier.reservation:
                continue
            owner, _, short = tier.reservation.rpartition("/reservations/")
            path = f"slices.{key}.capacity" + (f"[{at}]" if listed else "") + ".reservation"
            if owner and owner != f"projects/{env.project}":
                renamed[path] = (tier.reservation, tier.reservation)
                continue
            new = (f"projects/{project}/reservations/" if owner else "") + _renamed(short, env.name, name)
            node = data["slices"][key]["capacity"]
            (node[at] if listed else node)["reservation"] = new
            renamed[path] = (tier.reservation, new)
    return renamed


def _check_name(name: str) -> None:
    if not re.fullmatch(r"[a-z][a-z0-9-]{0,20}", name):
        raise NewEnvironmentError(
            f"NAME={name!r}: 1 to 21 lowercase letters, digits and hyphens, starting with a letter (it is the file's "
            "name and a part of the names made from it)"
        )
    clash = stack_name_clash(name)
    if clash:
        raise NewEnvironmentError(f"NAME={name!r}: {clash}")


def new_environment_text(
    source: Path, *, name: str, project: str, project_number: str, region: str
) -> tuple[str, Placement]:
    """The text of environment `name` made from the file `source` (see the module's docstring), and where it
    placed things."""
    env = load_environment(source)
    _check_name(name)
    # Checked before it goes into the file's text (a value with YAML syntax in it would break the parse).
    if not re.fullmatch(r"[a-z][a-z0-9-]{4,28}[a-z0-9]", project):
        raise NewEnvironmentError(
            f"PROJECT={project!r}: a project id is 6-30 lowercase letters, digits and hyphens, starting with a letter "
            f"and not ending with a hyphen ({PROJECT_ID})"
        )
    if not re.fullmatch(r"[0-9]{6,20}", project_number):
        raise NewEnvironmentError(
            f"PROJECT_NUMBER={project_number!r}: the project's number, 6 to 20 digits (gcloud projects describe "
            f"{project} --format='value(projectNumber)')"
        )
    placement = place(env, region)
    text = source.read_text().replace(env.project, project)
    yaml = _yaml()
    data: Any = yaml.load(text)
    data["name"] = name
    data["project_number"] = type(data["project_number"])(project_number)
    data["region"] = region
    data["zones"].clear()
    data["zones"].extend(placement.zones)
    if "labels" in data and "environment" in data["labels"]:
        data["labels"]["environment"] = name
    for key, zone in placement.slice_zones.items():
        data["slices"][key]["zone"] = zone
    grown = []
    for who, (old, machine) in placement.substitutes.items():
        section, key = who.split(".", 1)
        node = data["cluster"][key] if section == "cluster" else data[section][key]
        node["machine_type"] = machine
        if section == "cpu_pools" and CPU_MACHINES[machine].memory_gib < CPU_MACHINES[old].memory_gib:
            # A smaller machine: as many more nodes as the pool needs to hold what the old ones held.
            pool = env.cpu_pools[key]
            nodes = math.ceil(pool.max_nodes * CPU_MACHINES[old].memory_gib / CPU_MACHINES[machine].memory_gib)
            node["max_nodes"] = nodes
            grown.append(f"{who}.max_nodes: {pool.max_nodes} -> {nodes} (smaller machines)")
    data["cluster"]["name"] = _renamed(env.cluster.name, env.name, name)
    if data.get("slurm"):
        data["slurm"]["name"] = _renamed(env.slurm.name, env.name, name) if env.slurm else data["slurm"]["name"]
    placement = replace(placement, reservations=_own_reservations(data, env, project, name))
    registry = f"{env.registry.host(region)}/{project}/{env.registry.repository}"
    images = (data.get("release") or {}).get("images") or {}
    for image in list(images):
        images[image] = f"{registry}/{image}@{PLACEHOLDER_DIGEST}"
    out = io.StringIO()
    yaml.dump(data, out)
    changed = [
        f"{who}: {old} -> {new} ({old} is not listed for {region} in infra/catalogue/zones.yaml)"
        for who, (old, new) in placement.substitutes.items()
    ]
    header = [
        f"# Made by `make new-env` from {source.name}: project, region, zones, names and image paths rewritten, and",
        f"# the comments' mentions of {env.name}; a comment about {env.region}'s zones is marked [{env.region}]:",
        f"# it was written for {source.name} and may not hold in {region}.",
        *[f"# {line}" for line in [*changed, *grown]],
        *[
            f"# {who}: {new}, {name}'s own ({env.name} draws on {old}): make it before the deploy"
            for who, (old, new) in placement.reservations.items()
            if old != new
        ],
    ]
    return "\n".join(header) + "\n" + _comments_rewritten(out.getvalue(), env.name, name, env.region), placement


def _comments_rewritten(text: str, old: str, new: str, region: str) -> str:
    """`text` whose comments name environment `new` where they named `old` (make image ENV=dev, platform-dev,
    cdktf.out/slurm/dev/), and whose comments about zones of `region` are marked [region]: a statement of where
    things are offered holds for the source's region only."""
    name = re.compile(rf"(?<![\w.-]){re.escape(old)}(?![\w])")
    lines = []
    for line in text.splitlines(keepends=True):
        at = line.find("#") if line.lstrip().startswith("#") else line.find(" #")
        if at < 0:
            lines.append(line)
            continue
        code, comment = line[:at], line[at:]
        comment = name.sub(new, comment.replace(f"platform-{old}", f"platform-{new}"))
        if region in comment:
            comment = comment.replace("#", f"# [{region}]", 1)
        lines.append(code + comment)
    return "".join(lines)


def write_new_environment(
    source: Path, target: Path, *, name: str, project: str, project_number: str, region: str
) -> Placement:
    """Write environment `name` to `target` (refused if it exists); return where it placed things. Validated
    before it is written: a refusal writes nothing."""
    _check_name(name)
    if target.exists():
        raise NewEnvironmentError(f"NAME={name!r}: {target} exists already: choose another NAME or remove it first")
    text, placement = new_environment_text(
        source, name=name, project=project, project_number=project_number, region=region
    )
    try:
        write_validated(target, text)
    except ConfigError as err:
        target.unlink(missing_ok=True)
        raise NewEnvironmentError(str(err)) from err
    return placement
