"""The bootstrap stacks: a state bucket per environment, versioned, with only its own
environment's planner and deployer on it; the federation that admits only this repository's `<env>-plan` jobs and
its `<env>` jobs on main.

Nothing here reaches Google or GitHub: the attribute condition's logic is evaluated here on claims as GitHub
documents them (a small evaluator for the one CEL form the condition uses); that Google's STS evaluates it the
same way, only a real project shows.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from infra.catalogue.deployer_roles import GRANTABLE_PROJECT_ROLES
from infra.config import environments_dir
from infra.constructs.bootstrap import DEPLOYER_ROLES, attribute_condition, deployer_role
from infra.synth.app import shared_state_buckets, synth_bootstrap
from infra.synth.load import load_all, load_environment

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    envs = load_all(environments_dir())
    out = tmp_path_factory.mktemp("bootstrap")
    names = synth_bootstrap(envs, out)
    return {name: json.loads((out / "stacks" / name / "cdk.tf.json").read_text()) for name in names}


def _resources(stack: dict[str, Any], rtype: str) -> list[dict[str, Any]]:
    return list((stack.get("resource") or {}).get(rtype, {}).values())


def test_each_environment_keeps_its_state_in_a_bucket_of_its_own() -> None:
    envs = load_all(environments_dir())
    assert shared_state_buckets(envs) == []
    assert len({env.state.bucket for env in envs.values()}) == len(envs)


def test_a_shared_state_bucket_is_refused() -> None:
    envs = load_all(environments_dir())
    same = {name: env.model_copy(update={"state": envs["dev"].state}) for name, env in envs.items()}
    assert shared_state_buckets(same) == [
        f"state.bucket {envs['dev'].state.bucket} is shared by dev, prod: give each environment its own"
    ]


def test_prods_deployer_may_read_devs_registry_to_promote_and_nothing_else_of_dev(
    bootstrap: dict[str, dict[str, Any]],
) -> None:
    """promote.yml copies dev's images as prod's deployer, which had no read on dev's registry
    (the bootstrap granted it roles in prod only), so every promotion failed at its first copy."""
    envs = load_all(environments_dir())
    (grant,) = _resources(bootstrap["bootstrap-prod"], "google_artifact_registry_repository_iam_member")
    assert grant["project"] == envs["dev"].project and grant["location"] == envs["dev"].region
    assert grant["repository"] == envs["dev"].registry.repository
    assert grant["role"] == "roles/artifactregistry.reader"
    assert grant["member"].startswith("serviceAccount:${google_service_account.bootstrap_deployer")
    # dev promotes from nothing: its deployer reads no other registry.
    assert _resources(bootstrap["bootstrap-dev"], "google_artifact_registry_repository_iam_member") == []


def test_a_promotion_source_that_is_not_an_environment_is_refused_by_field(tmp_path: Path) -> None:
    from infra.synth.app import UnknownPromotionSource, promotion_sources

    envs = load_all(environments_dir())
    delivery = envs["prod"].delivery
    assert delivery is not None
    wrong = {
        **envs,
        "prod": envs["prod"].model_copy(update={"delivery": delivery.model_copy(update={"promotes_from": "stage"})}),
    }
    with pytest.raises(
        UnknownPromotionSource,
        match=r"prod.yaml: delivery.promotes_from: 'stage' is not another environment of this folder \(known: dev\)",
    ):
        promotion_sources(wrong)
    # ENV=prod alone: dev is looked up among every environment of the folder.
    assert promotion_sources({"prod": envs["prod"]}, envs) == {"prod": envs["dev"]}


def test_every_environment_has_a_bootstrap_stack(bootstrap: dict[str, dict[str, Any]]) -> None:
    assert sorted(bootstrap) == ["bootstrap-dev", "bootstrap-prod"]


def test_the_state_bucket_is_versioned_private_kept_and_granted_to_its_environment_only(
    bootstrap: dict[str, dict[str, Any]],
) -> None:
    envs = load_all(environments_dir())
    for env in envs.values():
        stack = bootstrap[f"bootstrap-{env.name}"]
        (bucket,) = _resources(stack, "google_storage_bucket")
        assert bucket["name"] == env.state.bucket and bucket["project"] == env.project
        assert bucket["versioning"] == {"enabled": True}
        assert bucket["uniform_bucket_level_access"] is True
        assert bucket["public_access_prevention"] == "enforced"
        assert bucket["lifecycle"]["prevent_destroy"] is True and bucket["force_destroy"] is False
        grants = {(g["role"], g["member"]) for g in _resources(stack, "google_storage_bucket_iam_member")}
        assert grants == {
            (
                "roles/storage.objectViewer",
                "serviceAccount:${google_service_account.bootstrap_planner_"
                + _id(stack, "google_service_account", env.delivery_identities.planner_id)
                + ".email}",
            ),
            (
                "roles/storage.objectAdmin",
                "serviceAccount:${google_service_account.bootstrap_deployer_"
                + _id(stack, "google_service_account", env.delivery_identities.deployer_id)
                + ".email}",
            ),
        }
        # The platform stack keeps its state there.
        platform = json.loads((REPO / "tests" / "snapshots" / f"platform-{env.name}.json").read_text())
        assert platform["terraform"]["backend"]["gcs"]["bucket"] == env.state.bucket
        assert stack["terraform"]["backend"]["gcs"] == {"bucket": env.state.bucket, "prefix": f"bootstrap/{env.name}"}


def _id(stack: dict[str, Any], rtype: str, account_id: str) -> str:
    (key,) = [k for k, v in stack["resource"][rtype].items() if v["account_id"] == account_id]
    return key.rsplit("_", 1)[1]


def test_the_planner_reads_and_the_deployer_covers_every_resource_type_of_its_stack(
    bootstrap: dict[str, dict[str, Any]],
) -> None:
    for name, stack in bootstrap.items():
        env = name.removeprefix("bootstrap-")
        members = _resources(stack, "google_project_iam_member")
        planner = {m["role"] for m in members if "planner" in m["member"]}
        deployer = {m["role"] for m in members if "deployer" in m["member"]}
        # Where a google provider of the platform stack names the environment's project as its calls' quota
        # project (user_project_override: every one where the accounts are a seed's, the billing alias of a budget),
        # the planner's plan calls through it need serviceusage.services.use there, which roles/viewer lacks.
        platform = json.loads((REPO / "tests" / "snapshots" / f"platform-{env}.json").read_text())
        overrides = [p for p in platform["provider"]["google"] if p.get("user_project_override")]
        assert overrides, f"{env}: both environments have a budget, and prod a seed"
        consumer = {"roles/serviceusage.serviceUsageConsumer"} if overrides else set()
        assert {r for r in planner if r.startswith("roles/")} == {
            "roles/viewer",
            "roles/iam.securityReviewer",
            "roles/container.viewer",
            *consumer,
        }
        assert len(planner) == 4 + len(consumer), "and the platform's own role of what the gate reads in the cluster"
        assert not any(r.endswith(("admin", "Admin", "owner", "editor")) for r in planner)
        assert "roles/owner" not in deployer and "roles/editor" not in deployer
        # The budget's roles are the billing account's, granted there.
        billing = {
            (m["role"], "deployer" if "deployer" in m["member"] else "planner", m["billing_account_id"])
            for m in _resources(stack, "google_billing_account_iam_member")
        }
        assert billing == {
            ("roles/billing.costsManager", "deployer", "01A2B3-C4D5E6-F7A8B9"),
            ("roles/billing.viewer", "planner", "01A2B3-C4D5E6-F7A8B9"),
        }
        for rtype in platform["resource"]:
            role = deployer_role(rtype)
            assert role is not None, f"{rtype}: no deployer role manages it (DEPLOYER_ROLES)"
            assert role in deployer | {r for r, who, _ in billing if who == "deployer"}, (name, rtype, role)
    assert deployer_role("google_project_iam_member") == "roles/resourcemanager.projectIamAdmin"
    assert set(DEPLOYER_ROLES.values()) <= deployer


def _granted_roles(condition: str) -> set[str]:
    """The roles a modifiedGrantsByRole condition lets its holder grant (its hasOnly list)."""
    found = re.fullmatch(
        r"api\.getAttribute\('iam\.googleapis\.com/modifiedGrantsByRole', \[\]\)\.hasOnly\(\[(.*)\]\)", condition
    )
    assert found, condition
    return {r.strip().strip("'") for r in found.group(1).split(",")}


def test_the_deployer_may_grant_exactly_the_project_roles_its_platform_stack_grants(
    bootstrap: dict[str, dict[str, Any]],
) -> None:
    """Its projectIamAdmin is held by a condition to the roles the platform stacks grant: never roles/owner, never a
    role to widen its own rights (before, it was unconditioned)."""
    for name, stack in bootstrap.items():
        env = name.removeprefix("bootstrap-")
        admin = [m for m in _resources(stack, "google_project_iam_member") if m["role"].endswith("projectIamAdmin")]
        (binding,) = admin
        may_grant = _granted_roles(binding["condition"]["expression"])
        assert may_grant == set(GRANTABLE_PROJECT_ROLES)
        assert not may_grant & {"roles/owner", "roles/editor", "roles/resourcemanager.projectIamAdmin"}
        assert not any(r.startswith("roles/iam.") for r in may_grant)
        # The other deployer roles: unconditioned, but storage.admin's (held off the state bucket, below).
        others = [m for m in _resources(stack, "google_project_iam_member") if "deployer" in m["member"]]
        assert sorted(m["role"] for m in others if m.get("condition")) == [binding["role"], "roles/storage.admin"]
        platform = json.loads((REPO / "tests" / "snapshots" / f"platform-{env}.json").read_text())
        granted = {g["role"] for g in platform["resource"]["google_project_iam_member"].values()}
        assert granted <= may_grant, granted - may_grant


# --- the federation -------------------------------------------------------------------------------------------


def _evaluate(condition: str, claims: dict[str, str]) -> bool:
    """The condition's CEL (==, &&, ||, parentheses, assertion.<claim>, '...' strings) on `claims`. A missing
    claim is an error here, taken as a refusal (fail closed); how Google's STS treats a missing claim in a
    comparison, only a real token shows."""
    expr = re.sub(r"assertion\.(\w+)", lambda m: f"claims[{m.group(1)!r}]", condition)
    expr = expr.replace("&&", " and ").replace("||", " or ")
    try:
        return bool(eval(expr, {"__builtins__": {}}, {"claims": claims}))  # the condition text is our own
    except KeyError:
        return False


REPOSITORY = "acme/ml-platform"
OWNER_ID = "100000001"


def _token(**claims: str) -> dict[str, str]:
    """A GitHub OIDC token's claims (https://docs.github.com/en/actions/reference/security/oidc#oidc-token-claims)."""
    return {"repository": REPOSITORY, "repository_owner_id": OWNER_ID, **claims}


def test_devs_pull_requests_plan_with_devs_planner(bootstrap: dict[str, dict[str, Any]]) -> None:
    (provider,) = _resources(bootstrap["bootstrap-dev"], "google_iam_workload_identity_pool_provider")
    assert _evaluate(provider["attribute_condition"], _token(ref="refs/pull/7/merge", environment="dev-plan"))
    assert not _evaluate(provider["attribute_condition"], _token(ref="refs/pull/7/merge", environment="dev"))


@pytest.mark.parametrize(
    ("claims", "admitted", "as_"),
    [
        (_token(ref="refs/heads/main", environment="prod"), True, "deployer"),
        # prod's pull requests plan offline: its planner is the deploy's plan job's, on main (before: any branch).
        (_token(ref="refs/pull/7/merge", environment="prod-plan"), False, None),
        (_token(ref="refs/heads/feature", environment="prod-plan"), False, None),
        (_token(ref="refs/heads/main", environment="prod-plan"), True, "planner"),
        # A branch pushed to the prod environment, a pull request naming it, no environment, a fork's name.
        (_token(ref="refs/heads/feature", environment="prod"), False, None),
        (_token(ref="refs/pull/7/merge", environment="prod"), False, None),
        (_token(ref="refs/heads/main"), False, None),
        ({**_token(ref="refs/heads/main", environment="prod"), "repository": "mallory/ml-platform"}, False, None),
        ({**_token(ref="refs/heads/main", environment="prod"), "repository_owner_id": "9"}, False, None),
        # dev's environments do not reach prod's pool.
        (_token(ref="refs/heads/main", environment="dev"), False, None),
    ],
)
def test_only_an_approved_prod_job_on_main_becomes_prods_deployer(
    bootstrap: dict[str, dict[str, Any]], claims: dict[str, str], admitted: bool, as_: str | None
) -> None:
    stack = bootstrap["bootstrap-prod"]
    (provider,) = _resources(stack, "google_iam_workload_identity_pool_provider")
    assert provider["oidc"] == {"issuer_uri": "https://token.actions.githubusercontent.com"}
    assert provider["attribute_condition"] == attribute_condition(
        REPOSITORY, OWNER_ID, "prod", plans_from_main_only=True
    )
    assert provider["attribute_mapping"]["attribute.environment"] == "assertion.environment"
    assert _evaluate(provider["attribute_condition"], claims) is admitted
    bindings = {
        b["member"].rsplit("/", 1)[1]: b["service_account_id"]
        for b in _resources(stack, "google_service_account_iam_member")
        if b["role"] == "roles/iam.workloadIdentityUser"
    }
    assert set(bindings) == {"prod", "prod-plan"}
    if admitted:
        bound = bindings[claims["environment"]]
        assert ("deployer" if "deployer" in bound else "planner") == as_
    # prod's pool is in its seed project (delivery.seed), named for prod.
    prefix = (
        "principalSet://iam.googleapis.com/projects/100000000009/locations/global/workloadIdentityPools/github-prod/"
    )
    assert {b["member"] for b in _resources(stack, "google_service_account_iam_member")} == {
        f"{prefix}attribute.environment/prod",
        f"{prefix}attribute.environment/prod-plan",
    }


def test_the_planner_may_reach_the_cluster_and_read_what_the_gate_reads_and_no_more(
    bootstrap: dict[str, dict[str, Any]],
) -> None:
    """The gate at the apply reads the release records (ConfigMaps) and the CRDs through the DNS endpoint as the
    planner: container.clusters.connect, granted in a role of the platform's own (review 10, C5: whether
    roles/container.viewer carries it cannot be told offline), with nothing that writes or reads a Secret."""
    from infra.constructs.bootstrap import PLANNER_CLUSTER_PERMISSIONS, PLANNER_CLUSTER_ROLE_ID

    for stack in bootstrap.values():
        (role,) = _resources(stack, "google_project_iam_custom_role")
        assert role["role_id"] == PLANNER_CLUSTER_ROLE_ID
        assert sorted(role["permissions"]) == sorted(PLANNER_CLUSTER_PERMISSIONS)
        assert "container.clusters.connect" in role["permissions"]
        reads = [p for p in role["permissions"] if p.endswith((".get", ".list"))]
        assert sorted([*reads, "container.clusters.connect"]) == sorted(role["permissions"]), "it reads, and connects"
        assert not [p for p in role["permissions"] if "secret" in p.lower()]
        (grant,) = [m for m in _resources(stack, "google_project_iam_member") if "project_iam_custom_role" in m["role"]]
        assert grant["member"].startswith("serviceAccount:${google_service_account.") and "planner" in grant["member"]


def test_the_deployer_administers_every_bucket_but_the_state_bucket(bootstrap: dict[str, dict[str, Any]]) -> None:
    """Its storage.admin covered the state bucket's IAM policy, versioning and public access prevention (review 10,
    C6): one merge could open or unversion the state. Held by a resource condition, evaluated here on the names
    Cloud Storage gives a bucket and its objects; the state's objects stay the deployer's through its bucket grant."""
    for stack in bootstrap.values():
        (state,) = _resources(stack, "google_storage_bucket")
        (admin,) = [m for m in _resources(stack, "google_project_iam_member") if m["role"] == "roles/storage.admin"]
        expression = admin["condition"]["expression"]

        def admits(name: str, expression: str = expression) -> bool:
            cel = expression.replace("!(", "not (").replace("||", " or ").replace("==", " == ")
            cel = re.sub(r"resource\.name\.startsWith\(('[^']*')\)", r"name.startswith(\1)", cel)
            return bool(eval(cel.replace("resource.name", "name"), {"__builtins__": {}}, {"name": name}))

        bucket = f"projects/_/buckets/{state['name']}"
        assert not admits(bucket) and not admits(f"{bucket}/objects/platform/terraform.tfstate")
        assert admits(f"{bucket}-models") and admits("projects/_/buckets/acme-ml-platform-dev-checkpoints/objects/a")
        (objects,) = [m for m in _resources(stack, "google_storage_bucket_iam_member") if "deployer" in m["member"]]
        assert objects["role"] == "roles/storage.objectAdmin" and "condition" not in objects


def test_prods_deployer_and_planner_live_outside_the_project_the_deployer_administers(
    bootstrap: dict[str, dict[str, Any]],
) -> None:
    """The deployer's roles/iam.serviceAccountAdmin (the stack makes the workload service accounts and binds their
    Workload Identity) cannot be held by an IAM condition: in its own project it covers the deployer's account, so
    a merged change could grant anyone token creation on the deployer. prod's seed project holds its planner, its
    deployer and their federation; every role they hold is on prod's project, none on the seed's."""
    envs = load_all(environments_dir())
    prod = envs["prod"]
    assert prod.delivery is not None and prod.delivery.seed is not None
    seed = prod.delivery.seed.project
    stack = bootstrap["bootstrap-prod"]
    accounts = {a["account_id"]: a["project"] for a in _resources(stack, "google_service_account")}
    assert accounts == {"planner-prod": seed, "deployer-prod": seed}
    (pool,) = _resources(stack, "google_iam_workload_identity_pool")
    (provider,) = _resources(stack, "google_iam_workload_identity_pool_provider")
    assert (pool["project"], pool["workload_identity_pool_id"]) == (seed, "github-prod")
    assert provider["project"] == seed
    # The token exchange and the impersonation are the seed's APIs.
    assert {a["service"] for a in _resources(stack, "google_project_service") if a["project"] == seed} >= {
        "sts.googleapis.com",
        "iamcredentials.googleapis.com",
    }
    # Every project role is on prod's project: the deployer's serviceAccountAdmin included, which therefore does not
    # reach the deployer's own account.
    grants = _resources(stack, "google_project_iam_member")
    assert {g["project"] for g in grants} == {prod.project}
    assert [g for g in grants if g["role"] == "roles/iam.serviceAccountAdmin" and "deployer" in g["member"]]
    # The state bucket stays in prod's project, out of the deployer's storage.admin by its condition.
    (state,) = _resources(stack, "google_storage_bucket")
    assert state["project"] == prod.project
    # A client-based API charges a service account's calls to the account's project, the seed, where prod's APIs are
    # not enabled: prod's stack names prod's project as every call's quota project, and its planner may (the
    # deployer's serviceUsageAdmin carries serviceusage.services.use).
    for name, quota in (("prod", {"billing_project": prod.project, "user_project_override": True}), ("dev", {})):
        platform = json.loads((REPO / "tests" / "snapshots" / f"platform-{name}.json").read_text())
        (main,) = [p for p in platform["provider"]["google"] if "alias" not in p]
        assert {k: main[k] for k in ("billing_project", "user_project_override") if k in main} == quota
    planner = {g["role"] for g in grants if "planner" in g["member"]}
    assert "roles/serviceusage.serviceUsageConsumer" in planner
    # What the deploy's tools name: the drift audit's own writes, the preflight's planner.
    assert prod.delivery_identities.deployer_email == f"deployer-prod@{seed}.iam.gserviceaccount.com"
    assert (
        envs["dev"].delivery_identities.deployer_email
        == "platform-deployer@acme-ml-platform-dev.iam.gserviceaccount.com"
    )


def test_an_environment_with_a_seed_project_and_a_name_too_long_for_its_accounts_is_refused(tmp_path: Path) -> None:
    """deployer-<env> is a service account id: at most 30 characters, so the name at most 21."""
    from infra.config import ConfigError

    owner_line = '    repository_owner_id: "100000001"\n'
    path = tmp_path / "research-platform-east.yaml"
    text = (environments_dir() / "dev.yaml").read_text()
    path.write_text(
        text.replace("\nname: dev\n", "\nname: research-platform-east\n", 1).replace(
            owner_line, owner_line + '  seed: {project: acme-ml-platform-seed, project_number: "100000000009"}\n', 1
        )
    )
    with pytest.raises(ConfigError) as refused:
        load_environment(path)
    said = str(refused.value)
    assert "research-platform-east.yaml" in said and "delivery.seed" in said
    assert "deployer-research-platform-east" in said and "at most 21" in said
