"""Who deploys an environment from where: the GitHub repository whose workflows plan and apply it. The bootstrap
stack (infra/stacks/bootstrap.py) binds the environment's planner and deployer to it."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import StringConstraints, field_validator

from infra.config.base import Model, Name, ProjectId, ProjectNumber

# The planner's and deployer's service accounts and the GitHub federation's pool, in the environment's own project.
# In a seed project, which several environments may share, each environment's accounts and pool carry its name:
# planner-<env>, deployer-<env>, github-<env> (DeliveryIdentities).
PLANNER_ID = "platform-planner"
DEPLOYER_ID = "platform-deployer"
POOL_ID = "github"
# A service account's id is 6-30 characters (https://cloud.google.com/iam/docs/service-accounts-create#creating); a
# workload identity pool's 4-32, and a deleted pool's id cannot be reused for 30 days
# (https://cloud.google.com/iam/docs/reference/rest/v1/projects.locations.workloadIdentityPools/create).
SEEDED_ENV_NAME_MAX = 30 - len("deployer-")
SEED_SOURCE = (
    "Google's example foundation keeps its Terraform service accounts in a seed project, terraform-google-modules/"
    "terraform-example-foundation 0-bootstrap/README.md (Outputs: seed_project_id); docs/delivery.md, step 0"
)


class GitHub(Model):
    """The repository, and its owner's numeric id: Google recommends conditioning on the immutable ids, since an
    owner's name can be taken by someone else after a rename or deletion
    (https://cloud.google.com/iam/docs/workload-identity-federation-with-deployment-pipelines#github-actions)."""

    repository: str
    repository_owner_id: Annotated[str, StringConstraints(pattern=r"^[0-9]+$")]

    @field_validator("repository")
    @classmethod
    def _as_the_token_names_it(cls, value: str) -> str:
        # The federation compares it with the token's `repository` claim, `owner/name` (the clone form
        # acme/ml-platform.git passed, and no token would ever match it).
        if not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", value) or value.endswith(".git"):
            raise ValueError(
                "owner/name as GitHub's OIDC token's `repository` claim names it (acme/ml-platform): no URL, no "
                "trailing .git [source: https://docs.github.com/en/actions/security-for-github-actions/"
                "security-hardening-your-deployments/about-security-hardening-with-openid-connect]"
            )
        return value


class Seed(Model):
    """A project of its own for the environment's planner and deployer, their GitHub federation and nothing else,
    outside the project they administer: Google's example foundation keeps its Terraform service accounts in a seed
    project ("Project where service accounts and core APIs will be enabled", terraform-google-modules/terraform-
    example-foundation 0-bootstrap/README.md, Outputs, @ 005550ff).

    Why: the deployer administers the environment's service accounts (roles/iam.serviceAccountAdmin: the platform
    stack makes them and binds their Workload Identity), and no IAM condition narrows that role (the IAM API is not
    among the services a resource condition can name). In the same project that covers the deployer's own account,
    so one merged change could let anyone act as the deployer (roles/iam.serviceAccountTokenCreator on it). In a
    seed project neither the deployer's account nor the planner's is within its reach. The state bucket stays in the
    environment's project, held from the deployer's storage.admin by its condition (docs/delivery.md)."""

    project: ProjectId
    project_number: ProjectNumber


@dataclass(frozen=True)
class DeliveryIdentities:
    """Where an environment's planner, deployer and federation pool live, and their ids."""

    project: str
    project_number: str
    planner_id: str
    deployer_id: str
    pool_id: str
    seeded: bool = False
    """Whether they live in a seed project (delivery.seed), not the environment's own."""

    @property
    def planner_email(self) -> str:
        return f"{self.planner_id}@{self.project}.iam.gserviceaccount.com"

    @property
    def deployer_email(self) -> str:
        return f"{self.deployer_id}@{self.project}.iam.gserviceaccount.com"


def delivery_identities(env_name: str, project: str, project_number: str, seed: Seed | None) -> DeliveryIdentities:
    """In the environment's project: platform-planner, platform-deployer, pool github. In a seed project (shared by
    environments): planner-<env>, deployer-<env>, pool github-<env>."""
    if seed is None:
        return DeliveryIdentities(project, project_number, PLANNER_ID, DEPLOYER_ID, POOL_ID)
    return DeliveryIdentities(
        seed.project,
        seed.project_number,
        f"planner-{env_name}",
        f"deployer-{env_name}",
        f"{POOL_ID}-{env_name}",
        seeded=True,
    )


class Delivery(Model):
    github: GitHub
    seed: Seed | None = None
    """The project that holds this environment's planner, deployer and GitHub federation, outside the one they
    administer (Seed). Without it they live in the environment's project, where the deployer's serviceAccountAdmin
    reaches its own account."""
    promotes_from: Name | None = None
    """The environment whose tested images a promotion copies into this one (`make promote FROM=<it> TO=<this>`,
    promote.yml): this environment's bootstrap stack grants its deployer read on that environment's registry, which
    the copy needs (gcloud container images add-tag reads the source image)."""
    pull_request_plans: Literal["real", "offline"] = "real"
    """What a pull request's plan of this environment is: `real` (its read-only planner plans it: the `<env>-plan`
    GitHub environment admitted from any branch) or `offline` (the synthesized review alone; the planner is admitted
    from main only, for the deploy's own plan job). `offline` keeps pull-request code from reading the environment
    with the planner's roles (viewer, securityReviewer, container.viewer)."""


class Confirmation(Model):
    """A gated change the author confirms, reviewed in the pull request with the change itself.

    It confirms the resource at `address` in the one configuration `config_sha256` names (the sha256 of its body in
    the synthesized stack, or `absent` for its removal), so it lets through the change it was written for and no
    later one: once that change is applied, the next change of the resource has another configuration, and the
    confirmation is reported stale. The gate's refusal prints the entry to add."""

    address: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*\.[A-Za-z0-9_-]+$")]
    config_sha256: Annotated[str, StringConstraints(pattern=r"^([0-9a-f]{64}|absent)$")]
    reason: Annotated[str, StringConstraints(min_length=1)]
    before: dict[Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]+$")], Any] | None = None
    """What the change changes, as it was before it: each changed path's value (an update: every changed value; a
    replacement: the paths that force it), as the gate's refusal prints them. Where the plan at the apply changes the
    resource from other values (it was changed outside Terraform since), the change is not the one confirmed and the
    entry confirms nothing. Without it, the entry is bound to the configuration alone."""

    @property
    def key(self) -> str:
        """`<address>@<config_sha256>`: how the stack's state records the entry once an apply has carried it out
        (APPLIED_CONFIRMATIONS), so the next plan knows it is spent."""
        return f"{self.address}@{self.config_sha256}"


# The stack output that records, in the state, the confirm: entries the last apply carried out: an entry found there
# confirms nothing more (a later replacement of the same configuration, from drift, is not the change it was for).
APPLIED_CONFIRMATIONS = "platform_confirmations_applied"
ABSENT = "absent"


def config_sha256(stack: dict[str, Any], address: str) -> str:
    """The sha256 of the resource's body in the synthesized stack (`absent` when the stack has no such resource)."""
    rtype, _, name = address.partition(".")
    body = (stack.get("resource") or {}).get(rtype, {}).get(name)
    if body is None:
        return ABSENT
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def carried_out(entries: Iterable[Confirmation], stack: dict[str, Any]) -> list[str]:
    """The keys of the entries an apply of `stack` carries out: those written for the configuration it has. An
    entry merged ahead of its change (the configuration it names is not the stack's yet) is carried out by the
    apply that brings the change, not by this one."""
    return sorted(e.key for e in entries if config_sha256(stack, e.address) == e.config_sha256)


def record_carried_out(stack: dict[str, Any], entries: Iterable[Confirmation]) -> bool:
    """Set the stack's APPLIED_CONFIRMATIONS output to `carried_out` (it depends on the resource bodies, so it is
    known only once the stack is synthesized); whether that changed the stack."""
    output = (stack.get("output") or {}).get(APPLIED_CONFIRMATIONS)
    keys = carried_out(entries, stack)
    if output is None or output.get("value") == keys:
        return False
    output["value"] = keys
    return True
