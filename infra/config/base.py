"""What every part of the environment model shares: the base model, the annotated field types, problems."""

from __future__ import annotations

import difflib
import ipaddress
import re
import unicodedata
from collections.abc import Iterable
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, StringConstraints

from infra.catalogue.address_ranges import VALID_RANGES_SOURCE
from infra.config.findings import Finding

# One fault found across fields (the platform's one Finding shape): (field path, value, message).
Problem = Finding


class Model(BaseModel):
    """Base of every config model: immutable, unknown keys rejected, no infinite or NaN numbers (no GCP field
    holds one, and JSON, which Terraform and Helm read, cannot write one). A field's docstring (the string under
    it) is its description in the JSON schema editors read (docs/environment.schema.json)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, allow_inf_nan=False, use_attribute_docstrings=True
    )


def _cidr(value: str) -> str:
    if "/" not in value:
        raise ValueError(
            "a bare address where a range is meant: write <address>/<prefix length>, like 10.10.0.0/20 (a single "
            f"host is /32) [source: {VALID_RANGES_SOURCE}]"
        )
    try:
        net = ipaddress.ip_network(value, strict=True)
    except ValueError as err:
        raise ValueError(f"not a CIDR range with its host bits zero ({err})") from None
    if net.version != 4:
        raise ValueError(
            "an IPv6 range: the platform's networks (and this field) take IPv4 ranges only "
            f"[source: {VALID_RANGES_SOURCE}]"
        )
    return str(net)


Cidr = Annotated[str, AfterValidator(_cidr)]


def _bucket_path(value: str) -> str:
    if "://" in value or value.startswith("gs:"):
        raise ValueError(
            "a URL where a path inside the bucket is meant (the bucket is its own field): write the path alone, "
            "like models/llama (the platform writes gs://<bucket>/<path>, so a URL here would become "
            "gs://<bucket>/gs://...) [source: infra/config/base.py BucketPath]"
        )
    return value


# A path inside a bucket named by another field: no leading or trailing slash, no gs:// URL.
BucketPath = Annotated[str, StringConstraints(pattern=r"^[^/].*[^/]$"), AfterValidator(_bucket_path)]
Name = Annotated[str, StringConstraints(pattern=r"^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$")]
ProjectId = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")]
ProjectNumber = Annotated[str, StringConstraints(pattern=r"^[0-9]{6,20}$")]
KubernetesName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")]
BucketRole = Literal[
    "roles/storage.objectViewer",
    "roles/storage.objectCreator",
    "roles/storage.objectUser",
    "roles/storage.objectAdmin",
]
# No hyphens in label keys: cdktf rewrites provider-level map keys to snake
# case, so `managed-by` in the provider's default_labels would silently
# become `managed_by`.
LabelKey = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,62}$")]
IMAGE_DIGEST = re.compile(r"^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+@sha256:[0-9a-f]{64}$")
VERSION = re.compile(r"^v?[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?$")


def _image_digest(value: str) -> str:
    if not IMAGE_DIGEST.match(value):
        repository, at, digest = value.partition("@")
        if not at:
            raise ValueError("not pinned by digest: <registry>/<path>@sha256:<64 hex digits> (`make image` pins it)")
        if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
            raise ValueError(f"{digest!r} is not a whole digest: sha256: and 64 lowercase hex digits")
        raise ValueError(
            f"{repository!r} is not a repository path <registry>/<path> (lowercase letters, digits, '.', '_', '-'; "
            "no tag beside the digest)"
        )
    return value


def _exact_version(value: str) -> str:
    if not VERSION.match(value):
        raise ValueError("a version must be exact, like 1.2.3 (no ranges, no 'latest')")
    return value


ImageDigest = Annotated[str, AfterValidator(_image_digest)]
ExactVersion = Annotated[str, AfterValidator(_exact_version)]


def non_ascii(text: str) -> str:
    """The characters of `text` outside ASCII, each once, by code point and Unicode name."""
    return ", ".join(f"U+{ord(c):04X} {unicodedata.name(c, '?')}" for c in dict.fromkeys(text) if not c.isascii())


def lookalike(text: str, allowed: Iterable[str]) -> str | None:
    """The allowed name `text` spells with look-alike characters (the ASCII ones in place, each other one standing
    for one character: U+0435, a Cyrillic e, in v6e), said with the odd characters; None when there is none."""
    if text.isascii():
        return None
    for candidate in allowed:
        if len(candidate) == len(text) and all(_stands_for(k, c) for k, c in zip(text, candidate, strict=True)):
            return f"{candidate!r} written with look-alike characters ({non_ascii(text)})"
    return None


def _stands_for(typed: str, meant: str) -> bool:
    """Whether character `typed` may stand for ASCII `meant`: itself; a compatibility form of it (the fullwidth
    four, U+FF14, is '4' under NFKC); a numeral of its value (the CJK four, U+56DB, is 4); any other non-ASCII
    letter (a Cyrillic e for an e: no table of look-alikes is kept)."""
    if typed == meant:
        return True
    if typed.isascii():
        return False
    folded = unicodedata.normalize("NFKC", typed)
    if folded.isascii():
        return folded == meant
    value = unicodedata.numeric(typed, None)
    if value is not None:
        return meant.isdigit() and float(meant) == value
    return True


def did_you_mean(value: str, names: Iterable[str]) -> str | None:
    """`did you mean '<the closest of names>'?`, or None when none is close."""
    close = difflib.get_close_matches(value, list(names), n=1)
    return f"did you mean {close[0]!r}?" if close else None


def _not_in(loc: tuple[str | int, ...], value: str, known: Iterable[str], label: str) -> list[Problem]:
    """No problem when `value` is one of `known`; otherwise one naming what is allowed."""
    names = list(known)
    if value in names:
        return []
    like = lookalike(value, names) or did_you_mean(value, names)
    return [Finding(loc, value, f"not in {label}: {', '.join(names) or '(none)'}" + (f"; {like}" if like else ""))]


class _CrossReferenceError(ValueError):
    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(msg for _, _, msg in problems))
