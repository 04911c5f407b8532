"""Cloud Storage's predefined object roles as the platform grants them
(https://cloud.google.com/storage/docs/access-control/iam-roles, checked 2026-11-29): objectViewer reads objects;
objectUser and objectAdmin also create, overwrite and delete them (objectAdmin also sets their ACLs)."""

from __future__ import annotations

ROLES_DOC = "https://cloud.google.com/storage/docs/access-control/iam-roles"
OBJECT_WRITE_ROLES = ("roles/storage.objectUser", "roles/storage.objectAdmin")
