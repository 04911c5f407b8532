"""Checks across sections that the real systems make later: platform limits, names Cloud Storage holds
in one namespace, locations, references between fields, and what GKE refuses of a node pool on a release channel.
Each message names the source of the rule it holds."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from infra.catalogue import labels as label_limits
from infra.catalogue.gcp_names import SERVICE_ACCOUNT_ID
from infra.catalogue.models import MODELS
from infra.catalogue.storage_locations import location_problem
from infra.config.base import Problem
from infra.config.findings import Finding
from infra.config.serving import JetStreamServing

if TYPE_CHECKING:
    from infra.config.environment import Environment

RELEASE_CHANNEL_AUTO_UPGRADE = (
    "https://cloud.google.com/kubernetes-engine/docs/concepts/release-channels (node auto-upgrade is always on "
    "for clusters enrolled in a release channel)"
)
BUCKET_NAMESPACE = "https://cloud.google.com/storage/docs/buckets#naming (bucket names share one global namespace)"
KUBERAY_TPU = (
    "https://cloud.google.com/kubernetes-engine/docs/add-on/ray-on-gke/tutorials/deploy-ray-serve-stable-diffusion-tpu"
)


def label_problems(env: Environment) -> list[Problem]:
    room = label_limits.MAX_LABELS - len(label_limits.ADDED_BY_TERRAFORM)
    if len(env.labels) <= room:
        return []
    return [
        Finding(
            ("labels",),
            f"{len(env.labels)} labels",
            f"a resource carries at most {label_limits.MAX_LABELS} labels, and Terraform adds "
            f"{', '.join(label_limits.ADDED_BY_TERRAFORM)}: at most {room} here [source: {label_limits.SOURCE}]",
        )
    ]


def bucket_problems(env: Environment) -> list[Problem]:
    problems: list[Problem] = []
    holders: dict[str, list[str]] = {}
    for key in env.buckets:
        holders.setdefault(env.bucket_name(key), []).append(key)
    for key, spec in env.buckets.items():
        name = env.bucket_name(key)
        where = ("buckets", key, "name") if spec.name else ("buckets", key)
        others = [k for k in holders[name] if k != key]
        # Named at the keys that write a name (the default name of another key is what they collide with).
        if others and (spec.name or (all(not env.buckets[k].name for k in holders[name]) and key != holders[name][0])):
            problems.append(
                Finding(
                    where,
                    name,
                    f"the same bucket name as buckets.{', buckets.'.join(others)} [source: {BUCKET_NAMESPACE}]",
                )
            )
        if name == env.state.bucket:
            problems.append(
                Finding(
                    where,
                    name,
                    "the Terraform state bucket's name (state.bucket): the stack would create the bucket that "
                    f"holds its own state [source: {BUCKET_NAMESPACE}]",
                )
            )
        if spec.location is not None:
            why = location_problem(spec.location)
            if why:
                problems.append(Finding(("buckets", key, "location"), spec.location, why))
    return problems


def image_problems(env: Environment) -> list[Problem]:
    """Every release image is in this environment's registry, under its own name (as `make image` pushes it and
    `make promote` copies it)."""
    problems: list[Problem] = []
    registry = env.registry_url
    for name, ref in env.release.images.items():
        repository = ref.split("@", 1)[0]
        if repository != f"{registry}/{name}":
            problems.append(
                Finding(
                    ("release", "images", name),
                    repository,
                    f"not this environment's registry: images are {registry}/{name}@sha256:... (`make image` "
                    "pushes there; `make promote` copies another environment's images there first) [source: "
                    "https://cloud.google.com/artifact-registry/docs/docker/names; scripts/promote.py]",
                )
            )
    return problems


_SIZE = re.compile(r"-([0-9.]+)b$")


def conversion_problems(env: Environment) -> list[Problem]:
    """A conversion's model_size names the model the deployment serves (its parameters, and its name where the
    deployment uses MaxText's names)."""
    problems: list[Problem] = []
    for key, d in env.serving.items():
        if not isinstance(d, JetStreamServing) or d.conversion is None:
            continue
        size = d.conversion.model_size
        found = _SIZE.search(size)
        where = ("serving", key, "conversion", "model_size")
        if found and abs(float(found.group(1)) - d.model.parameters_b) > 0.5:
            problems.append(
                Finding(
                    where,
                    size,
                    f"converts a {found.group(1)}B model, but serving.{key}.model has {d.model.parameters_b:g}B "
                    f"parameters ({d.model.name}) [source: MaxText's llama_or_mistral_ckpt.py MODEL_PARAMS_DICT]",
                )
            )
        elif (
            d.model.catalogue_name in MODELS
            and d.model.catalogue_name.startswith("llama")
            and d.model.catalogue_name != size
        ):  # a model MaxText does not know: rule maxtext.tokenizer-matches-model lists those it does
            problems.append(
                Finding(
                    where,
                    size,
                    f"converts {size}, but serving.{key} serves {d.model.catalogue_name} ({d.model.catalogue_field}) "
                    "[source: MaxText's llama_or_mistral_ckpt.py MODEL_PARAMS_DICT: one layout per model size]",
                )
            )
    return problems


def orchestration_problems(env: Environment) -> list[Problem]:
    problems: list[Problem] = []
    for key, spec in env.slices.items():
        if not spec.auto_upgrade and env.slice_holder(key) == "gke":
            problems.append(
                Finding(
                    ("slices", key, "auto_upgrade"),
                    False,
                    f"the cluster is on the {env.cluster.release_channel} release channel, where GKE refuses a node "
                    f"pool without auto-upgrade [source: {RELEASE_CHANNEL_AUTO_UPGRADE}]",
                )
            )
    t = env.training
    if t is not None and t.slice in env.slices and env.slices[t.slice].slice.kind != "tpu":
        problems.append(
            Finding(
                ("training", "slice"),
                t.slice,
                f"slice {t.slice!r} is {env.slices[t.slice].slice.name}, not TPU: the Ray training cluster (chart "
                "ray-training) runs MaxText on a TPU slice; GPU training is `batch` (JobSet), `slurm` or `vertex` "
                f"[source: workloads/charts/ray-training; {KUBERAY_TPU}]",
            )
        )
    for name in env.vm_groups:
        if len(f"vm-{name}") < 6:
            problems.append(
                Finding(
                    ("vm_groups", name),
                    name,
                    f"too short: its service account id 'vm-{name}' would be under 6 characters "
                    f"[source: {SERVICE_ACCOUNT_ID}]",
                )
            )
    return problems
