"""The VM groups' generated scripts: each group's startup-script (infra/vms/instance.py), as the template and the
bulkInsert request carry it, on the Container-Optimized OS host record (infra/catalogue/hosts.py: cos-vm-startup)."""

from __future__ import annotations

from infra.config import Environment
from infra.shell import GeneratedScript
from infra.shell.slurm import PROFILE_KEY
from infra.vms.instance import startup_script, vm_names

HOST = "cos-vm-startup"
# Where the harness's `curl` stand-in finds the metadata server's answers: the path of the URL under
# http://metadata.google.internal/computeMetadata/v1/instance.
METADATA = "/run/platform-standins/metadata"


def _aperture_devices(env: Environment, key: str) -> list[tuple[str, str]]:
    """The machine's TCPXO aperture devices in sysfs, which the start-up bind-mounts under /dev/aperture_devices:
    function 1 of each GPU NIC's PCI device (the catalogue's NIC layout), with its resource file."""
    direct = env.slices[env.vm_groups[key].slice].slice.gpudirect
    assert direct is not None and direct.nic_pci is not None
    return [(f"/sys/bus/pci/devices/0000:{bus:02x}:00.1/resource0", "") for bus, _ in direct.nic_pci[1:]]


def scripts(env: Environment) -> list[GeneratedScript]:
    out = []
    for key in env.vm_groups:
        names = vm_names(env, key)
        out.append(
            GeneratedScript(
                env=env.name,
                name=f"vms/{key}/startup.sh",
                text=startup_script(env, key),
                host=HOST,
                # The plugin installer it runs writes the plugin's nccl-env-profile.sh (the `docker` stand-in copies
                # the pinned file there) for the group's workloads to source.
                sources=(PROFILE_KEY,),
                # What the metadata server answers the start-up (the template's `platform-hosts`, for the `curl`
                # stand-in) and which VM this is (the group's first, for the `hostname` stand-in).
                files=(
                    (f"{METADATA}/attributes/platform-hosts", ",".join(names)),
                    ("/etc/hostname", names[0] + "\n"),
                    *_aperture_devices(env, key),
                ),
            )
        )
    return out
