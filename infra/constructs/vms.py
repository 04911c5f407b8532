"""A VM group: its identity, compact placement, instance template and a managed instance group of size 0."""

from __future__ import annotations

from typing import Any

from constructs import Construct

from infra.cdk import TerraformResourceLifecycle, literal
from infra.cdk.bindings import google

VM_ROLES = ("roles/logging.logWriter", "roles/monitoring.metricWriter")


def _template_args(props: dict[str, Any]) -> dict[str, Any]:
    """google_compute_instance_template's arguments for the API's InstanceProperties (infra.vms.instance)."""
    scheduling = props["scheduling"]
    sched: dict[str, Any] = {
        "on_host_maintenance": scheduling["onHostMaintenance"],
        "automatic_restart": scheduling["automaticRestart"],
        "provisioning_model": scheduling["provisioningModel"],
    }
    if "instanceTerminationAction" in scheduling:
        sched["instance_termination_action"] = scheduling["instanceTerminationAction"]
    if scheduling["provisioningModel"] == "SPOT":
        # The provider's Spot VM: preemptible with the SPOT model (its resource docs, scheduling.preemptible).
        sched["preemptible"] = True
    if "maxRunDuration" in scheduling:
        sched["max_run_duration"] = {"seconds": int(scheduling["maxRunDuration"]["seconds"])}
    affinity = props["reservationAffinity"]
    reservation: dict[str, Any] = {"type": affinity["consumeReservationType"]}
    if affinity["consumeReservationType"] == "SPECIFIC_RESERVATION":
        reservation["specific_reservation"] = {"key": affinity["key"], "values": affinity["values"]}
    disk = props["disks"][0]
    shielded = props["shieldedInstanceConfig"]
    return {
        "machine_type": props["machineType"],
        "description": props["description"],
        "labels": props["labels"],
        "tags": props["tags"]["items"],
        # The startup script's bash (`${hosts[@]}`) as literal text, not Terraform templates.
        "metadata": {item["key"]: literal(item["value"]) for item in props["metadata"]["items"]},
        "disk": [
            dict(
                boot=disk["boot"],
                auto_delete=disk["autoDelete"],
                type=disk["type"],
                mode=disk["mode"],
                source_image=disk["initializeParams"]["sourceImage"],
                disk_type=disk["initializeParams"]["diskType"],
                disk_size_gb=int(disk["initializeParams"]["diskSizeGb"]),
            )
        ],
        "network_interface": [
            dict(network=n["network"], subnetwork=n["subnetwork"], nic_type=n["nicType"], stack_type=n["stackType"])
            for n in props["networkInterfaces"]
        ],
        "scheduling": sched,
        "reservation_affinity": reservation,
        "shielded_instance_config": {
            "enable_secure_boot": shielded["enableSecureBoot"],
            "enable_vtpm": shielded["enableVtpm"],
            "enable_integrity_monitoring": shielded["enableIntegrityMonitoring"],
        },
    }


class VmGroup(Construct):
    """A group of GPU VMs that exists empty: `make vm-up` creates its VMs by name (a resize request for
    flex-start, all at once), `make vm-down` deletes them.

    The managed group's size belongs to those calls, not to Terraform (`ignore_changes`), so an apply while VMs
    run leaves them be; a new template reaches only VMs created after it (OPPORTUNISTIC), never a running job.
    A failed VM is left for its group's job to fail rather than silently recreated (DO_NOTHING), as Google's
    resize-request example sets it.
    """

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        project: str,
        region: str,
        zone: str,
        name: str,
        account_id: str,
        properties: dict[str, Any],
        placement: tuple[str, int] | None,
        depends_on: list[Any],
    ) -> None:
        super().__init__(scope, id_)
        self.account = google("service_account").ServiceAccount(
            self, "account", project=project, account_id=account_id, display_name=f"VM group {name}"
        )
        member = f"serviceAccount:{self.account.email}"
        for role in VM_ROLES:
            google("project_iam_member").ProjectIamMember(
                self, role.rsplit(".", 1)[-1], project=project, role=role, member=member
            )
        template = google("compute_instance_template")
        args = _template_args(properties)
        # Lists of blocks take the bindings' struct classes (a plain dict reaches jsii with its Python names).
        args["disk"] = [template.ComputeInstanceTemplateDisk(**d) for d in args["disk"]]
        args["network_interface"] = [
            template.ComputeInstanceTemplateNetworkInterface(**n) for n in args["network_interface"]
        ]
        args["service_account"] = {"email": self.account.email, "scopes": properties["serviceAccounts"][0]["scopes"]}
        if placement is not None:
            policy_name, vm_count = placement
            policy = google("compute_resource_policy").ComputeResourcePolicy(
                self,
                "placement",
                project=project,
                region=region,
                name=policy_name,
                group_placement_policy={"vm_count": vm_count, "collocation": "COLLOCATED"},
            )
            args["resource_policies"] = [policy.self_link]
        self.template = template.ComputeInstanceTemplate(
            self,
            "template",
            project=project,
            name_prefix=f"{name}-",
            lifecycle=TerraformResourceLifecycle(create_before_destroy=True),
            depends_on=depends_on,
            **args,
        )
        igm = google("compute_instance_group_manager")
        self.group = igm.ComputeInstanceGroupManager(
            self,
            "group",
            project=project,
            zone=zone,
            name=name,
            base_instance_name=name,
            version=[
                igm.ComputeInstanceGroupManagerVersion(
                    instance_template=self.template.self_link_unique, name="platform"
                )
            ],
            target_size=0,
            wait_for_instances=False,
            update_policy={"type": "OPPORTUNISTIC", "minimal_action": "REPLACE", "max_unavailable_fixed": 1},
            instance_lifecycle_policy={"default_action_on_failure": "DO_NOTHING"},
            lifecycle=TerraformResourceLifecycle(ignore_changes=["target_size"]),
        )

    @property
    def member(self) -> str:
        return f"serviceAccount:{self.account.email}"
