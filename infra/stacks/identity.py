"""The stack's identities: the GKE nodes' service accounts, and each workload's Kubernetes service account with its
Google roles (`identities`), in the namespaces they name."""

from __future__ import annotations

from collections.abc import Mapping

from infra.cdk import TerraformStack
from infra.config import Environment
from infra.config.training import GOODPUT_ROLES
from infra.constructs.identity import Namespaces, NodeServiceAccount, WorkloadIdentity
from infra.constructs.storage import Bucket


class NodeIdentities:
    """The nodes' service account, and the Pathways pools' own: those pools use the GCE metadata server, so their
    pods act as it (Environment.pathways_slices), and it holds only what those deployments need."""

    def __init__(self, stack: TerraformStack, env: Environment) -> None:
        self.env = env
        self.nodes = NodeServiceAccount(
            stack, "node-identity", project=env.project, account_id=f"{env.cluster.name}-nodes"
        )
        self.pathways = (
            NodeServiceAccount(
                stack, "pathways-node-identity", project=env.project, account_id=f"{env.cluster.name}-pathways"
            )
            if env.pathways_slices
            else None
        )

    @property
    def gke_nodes(self) -> list[str]:
        """The GKE nodes' accounts: the firewall rules that open ports for GKE's pods target them alone."""
        return [self.nodes.email] + ([self.pathways.email] if self.pathways else [])

    @property
    def members(self) -> list[str]:
        """The nodes' accounts as IAM members (they pull images from the registry)."""
        return [self.nodes.member] + ([self.pathways.member] if self.pathways else [])

    def of_slice(self, key: str) -> str:
        """The account of slice `key`'s nodes."""
        return (self.pathways or self.nodes).email if key in self.env.pathways_slices else self.nodes.email

    def grant_pathways_buckets(self, buckets: Mapping[str, Bucket]) -> None:
        """The Pathways pools' account gets the bucket roles of the JetStream deployments' identities."""
        if self.pathways is None:
            return
        env = self.env
        self.pathways.grant_buckets(
            {
                f"{b}-{role.rsplit('.', 1)[-1]}": (buckets[b].bucket.name, role)
                for d in env.serving.values()
                if d.engine == "jetstream"
                for b, role in env.identities[d.identity].bucket_roles.items()
            }
        )


def _conversion_grants(
    roles: Mapping[str, str], paths: dict[str, dict[str, list[str]]]
) -> dict[str, list[tuple[str, list[str]]]]:
    """The bucket grants of a checkpoint conversion's identity, held to the paths its conversions touch
    (Environment.conversion_paths): its role on a bucket it writes, under the outputs; and where it also reads there,
    objectViewer under the sources; its role on a bucket it only reads, under the sources."""
    grants: dict[str, list[tuple[str, list[str]]]] = {}
    for bucket, touched in paths.items():
        if bucket not in roles:
            continue
        if touched["write"]:
            grants[bucket] = [(roles[bucket], sorted(set(touched["write"])))]
            if touched["read"]:
                grants[bucket].append(("roles/storage.objectViewer", sorted(set(touched["read"]))))
        else:
            grants[bucket] = [(roles[bucket], sorted(set(touched["read"])))]
    return grants


class WorkloadIdentities:
    """The workloads' namespaces, and each identity's Kubernetes service account with its bucket roles (and the
    training identity's goodput roles)."""

    def __init__(self, stack: TerraformStack, env: Environment, buckets: Mapping[str, Bucket], cluster: object) -> None:
        self.namespaces = Namespaces(
            stack,
            "namespaces",
            names=env.namespaces,
            labels={"app.kubernetes.io/managed-by": "cdktf"},
            pod_security=True,
            teams={name: team for name in env.namespaces if (team := env.team_of(name))},
        )
        self.by_key: dict[str, WorkloadIdentity] = {}
        conversions = env.conversion_paths()
        for key, ident in env.identities.items():
            self.by_key[key] = WorkloadIdentity(
                stack,
                key,
                project=env.project,
                project_number=env.project_number,
                workload_pool=env.workload_pool,
                namespace=ident.namespace,
                service_account=ident.service_account,
                mode=ident.mode,
                bucket_roles={b: (buckets[b].bucket.name, role) for b, role in ident.bucket_roles.items()},
                depends_on=[self.namespaces.by_name[ident.namespace]],
                cluster=cluster,
                # A conversion's identity writes its outputs and reads its sources only.
                prefix_grants=_conversion_grants(ident.bucket_roles, conversions.get(key, {})),
            )
        if env.training is not None and env.training.goodput:
            self.by_key[env.training.identity].grant_project_roles(GOODPUT_ROLES)

    def accounts(self, *keys: str) -> list[object]:
        """The Kubernetes service accounts of these identities (what a release running as them waits for)."""
        return [self.by_key[key].service_account for key in keys]
