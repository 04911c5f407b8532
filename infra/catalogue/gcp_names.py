"""Names Google Cloud accepts, checked where the environment file writes them (and again on the synthesized
stack). Each function returns what is wrong with a name, or None; the messages say what is allowed."""

from __future__ import annotations

import re

BUCKET_NAMING = "https://cloud.google.com/storage/docs/buckets#naming"
SERVICE_ACCOUNT_ID = "https://cloud.google.com/iam/docs/service-accounts-create#creating (account ID: 6-30 characters)"
PROJECT_ID = (
    "https://cloud.google.com/resource-manager/docs/creating-managing-projects#before_you_begin (6-30 characters; "
    "no restricted strings such as google, null, undefined, ssl)"
)
_GOOGLE_LIKE = re.compile(r"g[o0]{2}g[l1]e")


def bucket_name_problem(name: str) -> str | None:
    """Cloud Storage's naming rules for a bucket without dots (dotted names need a verified domain)."""
    if "." in name:
        return "no dots: a dotted bucket name needs a verified domain (use - or _)"
    if not re.fullmatch(r"[a-z0-9][a-z0-9_-]{1,61}[a-z0-9]", name):
        return "3-63 characters of a-z, 0-9, - and _, starting and ending with a letter or digit"
    if name.startswith("goog"):
        return "must not start with 'goog'"
    if _GOOGLE_LIKE.search(name):
        return "must not contain 'google' or a close misspelling such as 'g00gle'"
    return None


def service_account_id_problem(account_id: str) -> str | None:
    if not re.fullmatch(r"[a-z]([-a-z0-9]{4,28}[a-z0-9])", account_id):
        return "6-30 characters: a lowercase letter, then a-z, 0-9 or -, ending with a letter or digit"
    return None


def project_id_problem(project: str) -> str | None:
    if not re.fullmatch(r"[a-z][a-z0-9-]{4,28}[a-z0-9]", project):
        return "6-30 characters: a lowercase letter, then a-z, 0-9 or -, ending with a letter or digit"
    for word in ("google", "null", "undefined", "ssl"):
        if word in project:
            return f"must not contain the restricted string {word!r}"
    return None
