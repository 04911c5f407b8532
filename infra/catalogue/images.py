"""The platform's own container images (images/images.yaml): the user each one runs as, and the job it runs.

Read from the Dockerfiles themselves, not typed again: the last `USER` of the stage an entry builds
(its `target`, else the file's last stage), following `FROM <earlier stage>` back through the file.
A rule needs it to know whether a container may write to a volume it mounts (a Cloud Storage FUSE mount
belongs to root unless told otherwise: infra/rules/gcsfuse.py). Images of other publishers are not here:
the rules take their user as unknown, and unknown as not root.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
CATALOGUE = REPO / "images" / "images.yaml"

_FROM = re.compile(r"^FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?\s*$", re.I)
# BuildKit's parser directive: the frontend image the build pulls first (https://docs.docker.com/reference/dockerfile/#syntax).
_SYNTAX = re.compile(r"^#\s*syntax\s*=\s*(\S+)\s*$", re.I)
_USER = re.compile(r"^USER\s+(\S+)\s*$", re.I)


@dataclass(frozen=True)
class ImageUser:
    """The user an image's processes run as, unless a pod's securityContext says otherwise."""

    uid: int | None  # None: a user name (resolved only inside the image) or no USER at all
    gid: int | None  # None: not given (the user's primary group, inside the image)
    source: str  # where it was read: "<dockerfile> (stage <name>): USER <value>"


@dataclass
class _Stage:
    name: str | None
    base: str
    user: str | None = None


def _stages(text: str) -> list[_Stage]:
    stages: list[_Stage] = []
    for line in text.splitlines():
        if m := _FROM.match(line.strip()):
            stages.append(_Stage(m.group(2), m.group(1)))
        elif (m := _USER.match(line.strip())) and stages:
            stages[-1].user = m.group(1)
    return stages


def dockerfile_user(text: str, target: str | None = None) -> str | None:
    """The `USER` value the stage `target` (else the last stage) of a Dockerfile ends with, None if it sets none."""
    stages = _stages(text)
    by_name = {s.name: s for s in stages if s.name}
    stage = by_name[target] if target else stages[-1]
    seen: set[int] = set()
    while stage.user is None and stage.base in by_name and id(stage) not in seen:
        seen.add(id(stage))
        stage = by_name[stage.base]
    return stage.user


def _parse(value: str | None, source: str) -> ImageUser:
    user, _, group = (value or "").partition(":")
    return ImageUser(
        uid=int(user) if user.isdigit() else (0 if user == "root" else None),
        gid=int(group) if group.isdigit() else None,
        source=source,
    )


@cache
def image_users() -> dict[str, ImageUser]:
    """{image name in images/images.yaml: the user it runs as}."""
    out = {}
    for name, entry in (yaml.safe_load(CATALOGUE.read_text()) or {}).items():
        dockerfile, target = entry["dockerfile"], entry.get("target")
        value = dockerfile_user((REPO / dockerfile).read_text(), target)
        where = f"{dockerfile}{f' (stage {target})' if target else ''}: USER {value}"
        out[name] = _parse(value, where)
    return out


def image_name(image: str, registries: set[str]) -> str | None:
    """The catalogue name of an image reference `<registry>/<name>[:tag][@digest]` in one of `registries`."""
    repository = image.split("@", 1)[0]
    registry, _, last = repository.rpartition("/")
    if registry not in registries:
        return None
    return last.split(":", 1)[0]


def dockerfile_bases(text: str) -> list[str]:
    """The images a Dockerfile's build pulls: its `# syntax` frontend, then every FROM that is not an earlier stage."""
    bases: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if m := _SYNTAX.match(line.strip()):
            bases.append(m.group(1))
            continue
        if not line.lstrip().startswith("#"):
            break  # parser directives come first, before any instruction or blank line
    stages: set[str] = set()
    for stage in _stages(text):
        if stage.base not in stages:
            bases.append(stage.base)
        if stage.name:
            stages.add(stage.name)
    return list(dict.fromkeys(bases))


@cache
def base_images() -> dict[str, list[str]]:
    """{base image: the images/images.yaml entries built from it, each `<name> (<dockerfile>)`}."""
    out: dict[str, list[str]] = {}
    for name, entry in (yaml.safe_load(CATALOGUE.read_text()) or {}).items():
        dockerfile = entry["dockerfile"]
        for base in dockerfile_bases((REPO / dockerfile).read_text()):
            out.setdefault(base, []).append(f"{name} ({dockerfile})")
    return out


# The jobs an image of the catalogue runs (its `runs`), and the environment fields that take an image for each.
JOBS: dict[str, str] = {
    "ray-trainer": "the Ray Train JaxTrainer launcher on TPU slices (training.image)",
    "gpu-trainer": "the trainer on a GPU slice, one process per node (batch.training.image, slurm.training.image, "
    "vertex.training.image)",
    "checkpoint-converter": "the checkpoint conversion before JetStream serves (serving.<key>.conversion.image)",
    "canary-server": "the canary server (serving.<key>.image, engine canary)",
    "vllm-server": "vLLM on TPU (serving.<key>.image, engine vllm)",
}


@dataclass(frozen=True)
class CatalogueImage:
    """An entry of images/images.yaml as the rules read it."""

    name: str
    runs: str  # a key of JOBS
    built_from: str  # "<dockerfile>[ (stage <target>)]"
    description: str


@cache
def catalogue_images() -> dict[str, CatalogueImage]:
    """{image name in images/images.yaml: what it is built from and the job it runs}."""
    out = {}
    for name, entry in (yaml.safe_load(CATALOGUE.read_text()) or {}).items():
        target = entry.get("target")
        built_from = entry["dockerfile"] + (f" (stage {target})" if target else "")
        out[name] = CatalogueImage(name, entry["runs"], built_from, entry.get("description", ""))
    return out
