"""Promote a tested release from one environment to the next (dev -> prod).

Only immutable pins move: every image must be an `@sha256:` digest in the
source environment's own registry. The images are copied into the target
registry (same digest), then the target file's release pins are rewritten,
comments and order kept. Running it again changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from infra.config import ENVIRONMENTS_DIR, IMAGE_DIGEST, PLACEHOLDER_DIGEST, Environment
from infra.delivery.release_file import diff, updated_text, validate, write_validated
from infra.synth.load import load_named


class PromotionError(ValueError):
    """A release that may not be promoted; nothing was changed."""


@dataclass
class Promotion:
    source: str
    target: str
    target_path: Path
    copies: list[list[str]] = field(default_factory=list)
    old_text: str = ""
    new_text: str = ""

    @property
    def changed(self) -> bool:
        return self.old_text != self.new_text

    @property
    def diff(self) -> str:
        return diff(self.target_path, self.old_text, self.new_text)


def plan_promotion(source: Environment, target: Environment, target_path: Path) -> Promotion:
    """Check the source's pins and work out the copies and the target's new text."""
    where = f"promote {source.name} -> {target.name}"
    images = source.release.images
    if not images:
        raise PromotionError(f"{where}: {source.name} pins no images (release.images is empty); nothing to promote")
    missing = sorted(set(target.release.images) - set(images))
    if missing:
        raise PromotionError(f"{where}: {target.name} pins images that {source.name} does not: {', '.join(missing)}")
    prefix = source.registry_url + "/"
    new_images: dict[str, str] = {}
    copies: list[list[str]] = []
    for name, ref in sorted(images.items()):
        if not IMAGE_DIGEST.match(ref):
            raise PromotionError(f"{where}: release.images.{name}: {ref!r} is not pinned by an @sha256 digest")
        if ref.endswith(PLACEHOLDER_DIGEST):
            raise PromotionError(f"{where}: release.images.{name} is the placeholder digest; build it first")
        if not ref.startswith(prefix):
            raise PromotionError(
                f"{where}: release.images.{name}: {ref!r} is not in {source.name}'s registry {source.registry_url}"
            )
        path, digest = ref[len(prefix) :].split("@", 1)
        promoted = f"{target.registry_url}/{path}@{digest}"
        new_images[name] = promoted
        if target.release.images.get(name) != promoted:
            tag = f"promoted-{digest.removeprefix('sha256:')[:12]}"
            copies.append(
                ["gcloud", "container", "images", "add-tag", "--quiet", ref, f"{target.registry_url}/{path}:{tag}"]
            )
    pins = {
        "images": new_images,
        "charts": dict(source.release.charts),
        "controllers": dict(source.release.controllers),
    }
    current = {
        "images": target.release.images,
        "charts": target.release.charts,
        "controllers": target.release.controllers,
    }
    changed = any(current[section].get(k) != v for section, values in pins.items() for k, v in values.items())
    old = target_path.read_text()
    new = updated_text(target_path, pins) if changed else old
    return Promotion(source.name, target.name, target_path, copies, old, new)


def promote(
    source_name: str,
    target_name: str,
    *,
    dry_run: bool,
    run: Callable[[Sequence[str]], None],
    environments: Path = ENVIRONMENTS_DIR,
) -> Promotion:
    """Promote; with `dry_run` nothing runs and nothing is written."""
    if source_name == target_name:
        raise PromotionError(f"promote {source_name} -> {target_name}: source and target are the same")
    source = load_named(source_name, environments, argument="FROM")
    target_path = environments / f"{target_name}.yaml"
    target = load_named(target_name, environments, argument="TO")
    promotes_from = target.delivery.promotes_from if target.delivery is not None else None
    if target.delivery is not None and promotes_from != source.name:
        # The copy runs as the target's deployer, which reads only the registry its bootstrap grants it.
        raise PromotionError(
            f"promote {source_name} -> {target_name}: {target_path}: delivery.promotes_from is {promotes_from!r}, "
            f"not {source_name!r}: {target_name}'s deployer may read only that environment's registry (granted by "
            f"bootstrap-{target_name}); set delivery.promotes_from: {source_name} and apply bootstrap-{target_name}"
        )
    promotion = plan_promotion(source, target, target_path)
    if not promotion.changed:
        return promotion
    if dry_run:
        # The real run writes only a file that loads: its dry run refuses what that write would.
        validate(target_path, promotion.new_text)
        return promotion
    for command in promotion.copies:
        run(command)
    write_validated(target_path, promotion.new_text)
    return promotion
