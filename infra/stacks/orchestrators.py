"""What the orchestrators beside GKE need from the stack (`slurm`, `vertex`, `vm_groups`): the Slurm cluster's
accounts and firewall rules (its VMs come from `gcluster deploy` of the blueprint `make plan` writes,
infra/slurm/blueprint.py), the Vertex AI jobs' account and network attachment (infra/vertex writes the jobs), and
each VM group, empty, on the platform's subnet and GPU networks (infra/vms)."""

from __future__ import annotations

from collections.abc import Mapping

from infra.cdk import TerraformStack
from infra.config import Environment
from infra.constructs.identity import SlurmServiceAccounts
from infra.constructs.storage import Bucket
from infra.constructs.vertex import VertexJobs
from infra.constructs.vms import VmGroup
from infra.slurm import jobs as slurm_jobs
from infra.stacks.network import Networking
from infra.vertex import job as vertex_job
from infra.vms import instance as vms


class Orchestrators:
    def __init__(self, stack: TerraformStack, env: Environment, net: Networking, buckets: Mapping[str, Bucket]) -> None:
        net.slurm_firewall(stack)
        self.slurm = (
            SlurmServiceAccounts(
                stack,
                "slurm-identity",
                project=env.project,
                name=env.slurm.name,
                bucket=(buckets[env.slurm.bucket].bucket.name, "roles/storage.objectUser"),
                prefix=slurm_jobs.BUCKET_PREFIX,
            )
            if env.slurm is not None
            else None
        )
        self.vertex = _vertex(stack, env, buckets, net)
        self.vm_groups = _vm_groups(stack, env, net)

    @property
    def registry_readers(self) -> list[str]:
        """The hosts that pull the platform's images: the Slurm nodes and the VM groups."""
        return ([self.slurm.node_member] if self.slurm else []) + [group.member for group in self.vm_groups]


def _vertex(
    stack: TerraformStack, env: Environment, buckets: Mapping[str, Bucket], net: Networking
) -> VertexJobs | None:
    """The Vertex AI jobs' account, with objectUser on the training bucket, and the network attachment where the
    environment asks for private access."""
    if env.vertex is None:
        return None
    written = {env.vertex.training.bucket} if env.vertex.training is not None else set()
    cidr = env.network.network_attachment_cidr
    return VertexJobs(
        stack,
        "vertex",
        project=env.project,
        account_id=vertex_job.SERVICE_ACCOUNT_ID,
        buckets={key: buckets[key].bucket.name for key in sorted(written)},
        # Each bucket's grant is held to the jobs' base output directory.
        prefixes=(
            {env.vertex.training.bucket: vertex_job.output_dir(env, env.vertex.training).split("/", 3)[3]}
            if env.vertex.training is not None
            else {}
        ),
        region=env.region,
        network=net.network.vpc.id,
        attachment=(
            (vertex_job.network_attachment_name(env), vertex_job.attachment_subnet_name(env), cidr)
            if cidr is not None
            else None
        ),
    )


def _vm_groups(stack: TerraformStack, env: Environment, net: Networking) -> list[VmGroup]:
    """Each VM group, empty, with its firewall rules."""
    groups = []
    for key, group in env.vm_groups.items():
        spec = env.slices[group.slice]
        net.host_firewall(stack, f"vms-{key}-firewall", vms.network_tag(env, key))
        groups.append(
            VmGroup(
                stack,
                f"vms-{key}",
                project=env.project,
                region=env.region,
                zone=env.zone_of(group.slice),
                name=vms.group_name(env, key),
                account_id=vms.service_account_id(key),
                properties=vms.instance_properties(env, key),
                placement=((vms.placement_policy_name(env, key), spec.slice.hosts) if vms.compact(env, key) else None),
                depends_on=[net.network.subnet, *(net.gpudirect.subnets if net.gpudirect else [])],
            )
        )
    return groups
