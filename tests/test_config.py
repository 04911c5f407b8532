"""Environment files: the shipped ones load; bad ones fail naming file, field, value and what is allowed."""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.config import ENVIRONMENTS_DIR, ConfigError, Environment
from infra.synth.load import load_all, load_environment
from tests.helpers import REPO

DEV = yaml.safe_load((ENVIRONMENTS_DIR / "dev.yaml").read_text())


def test_every_shipped_environment_loads(envs: dict[str, Environment]) -> None:
    assert set(envs) == {p.stem for p in ENVIRONMENTS_DIR.glob("*.yaml")} >= {"dev", "prod"}


def test_dev_reproduces_the_tutorial_training_slice(envs: dict[str, Environment]) -> None:
    s = envs["dev"].slices["train"].slice
    assert (s.accelerator.name, s.topology, s.machine_type, s.hosts) == ("v6e", "4x4", "ct6e-standard-4t", 4)


def test_prod_differs_from_dev_only_in_fields_it_is_meant_to(envs: dict[str, Environment]) -> None:
    dev, prod = envs["dev"], envs["prod"]
    assert prod.cluster.deletion_protection and not dev.cluster.deletion_protection
    assert all(b.protect for b in prod.buckets.values())
    assert dev.slices.keys() == prod.slices.keys()
    assert dev.identities == prod.identities


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = data
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return mutate


def _delete(path: str) -> Callable[[dict[str, Any]], None]:
    def mutate(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = data
        for key in parents:
            node = node[key]
        del node[last]

    return mutate


# (mutation, field path in the message, fragments that must appear: the value and what is allowed)
BAD_FILES: dict[str, tuple[Callable[[dict[str, Any]], None], str, list[str]]] = {
    "topology 3x3": (_set("slices.train.topology", "3x3"), "slices.train.topology", ["'3x3'", "4x4", "8x8"]),
    "2-D topology on v5p": (
        _set("slices.train", {"accelerator": "v5p", "topology": "4x4", "capacity": {"type": "spot"}}),
        "slices.train.topology",
        ["'4x4'", "2x2x2"],
    ),
    "4x4 on an 8-chip machine": (
        _set("slices.train.machine_type", "ct6e-standard-8t"),
        "slices.train.topology",
        ["'4x4'", "ct6e-standard-8t", "2x4"],
    ),
    "unknown accelerator": (_set("slices.train.accelerator", "v7x"), "slices.train.accelerator", ["'v7x'", "v6e"]),
    "misspelled key": (_set("cluster.nodeselector", "x"), "cluster.nodeselector", ["unknown key", "release_channel"]),
    "unknown release channel": (
        _set("cluster.release_channel", "FAST"),
        "cluster.release_channel",
        ["'FAST'", "RAPID", "STABLE"],
    ),
    "image by tag": (
        _set("release.images", {"trainer": "us-east5-docker.pkg.dev/p/r/trainer:latest"}),
        "release.images.trainer",
        ["trainer:latest", "@sha256:"],
    ),
    "chart version range": (_set("release.charts", {"ray": "^1.2"}), "release.charts.ray", ["'^1.2'", "1.2.3"]),
    "overlapping ranges": (_set("network.pods_cidr", "10.10.0.0/16"), "network", ["pods_cidr", "overlaps"]),
    "host bits set in CIDR": (_set("network.subnet_cidr", "10.10.0.1/20"), "network.subnet_cidr", ["10.10.0.1/20"]),
    "zone outside region": (_set("zones", ["europe-west4-a"]), "zones[0]", ["europe-west4-a", "us-east5"]),
    "reservation without name": (
        _set("slices.train.capacity", {"type": "reservation"}),
        "slices.train.capacity",
        ["reservation: <reservation name>"],
    ),
    "identity grants a bucket that does not exist": (
        _set("identities.trainer.bucket_roles", {"logs": "roles/storage.objectViewer"}),
        "identities.trainer.bucket_roles.logs",
        ["'logs'", "checkpoints"],
    ),
    "project-wide role instead of a bucket role": (
        _set("identities.trainer.bucket_roles", {"checkpoints": "roles/storage.admin"}),
        "identities.trainer.bucket_roles.checkpoints",
        ["roles/storage.admin", "roles/storage.objectUser"],
    ),
    "deletion protection as a string": (
        _set("cluster.deletion_protection", "yes"),
        "cluster.deletion_protection",
        ["'yes'", "boolean"],
    ),
    "missing cluster": (_delete("cluster"), "cluster", ["required"]),
    "project number as an integer": (
        _set("project_number", 100000000001),
        "project_number",
        ["100000000001", "string"],
    ),
    "GKE minor out of every channel": (
        _set("cluster.min_master_version", "1.30"),
        "cluster.min_master_version",
        ["'1.30'", "not in the platform's calendar", "1.35", "release-schedule"],
    ),
    "GPU slice with a topology": (
        _set("slices.train", {"accelerator": "a3-mega", "topology": "2x4", "capacity": {"type": "spot"}}),
        "slices.train.topology",
        ["'2x4'", "nodes"],
    ),
    "identity name too long for its service account": (
        _set("identities", {"a-very-long-identity-name-for-serving": DEV["identities"]["serving"]}),
        "identities.a-very-long-identity-name-for-serving",
        ["would exceed 30 characters"],
    ),
    "TPU slice without a topology": (
        _delete("slices.train.topology"),
        "slices.train.topology",
        ["needs a topology", "4x4"],
    ),
    "training on a slice that does not exist": (
        _set("training.slice", "nope"),
        "training.slice",
        ["'nope'", "train"],
    ),
    "training identity that cannot write checkpoints": (
        _set("training.identity", "serving"),
        "training.identity",
        ["'serving'", "roles/storage.objectUser", "roles/storage.objectViewer"],
    ),
    "flex-start without a maximum run duration": (
        _set("slices.train.capacity", {"type": "flex-start"}),
        "slices.train.capacity",
        ["flex-start", "needs `max_run_hours` (1 to 168)"],
    ),
    "maximum run duration on on-demand capacity": (
        _set("slices.train.capacity", {"type": "on-demand", "max_run_hours": 4}),
        "slices.train.capacity",
        ["`max_run_hours` is only allowed with capacity type 'flex-start', not 'on-demand'"],
    ),
    "queued provisioning with a reservation": (
        _set("slices.a3mega.capacity", {"type": "queued", "reservation": "r1"}),
        "slices.a3mega.capacity",
        ["queued provisioning cannot consume a reservation"],
    ),
    "flex-start with a reservation": (
        _set("slices.a3mega.capacity", {"type": "flex-start", "max_run_hours": 8, "reservation": "r1"}),
        "slices.a3mega.capacity",
        ["flex-start cannot consume a reservation"],
    ),
    "reservation name on spot capacity": (
        _set("slices.a3mega.capacity", {"type": "spot", "reservation": "r1"}),
        "slices.a3mega.capacity",
        ["`reservation` is only allowed with capacity type 'reservation', not 'spot'"],
    ),
    "queued provisioning with a minimum of nodes": (
        _set("slices.a3mega.min_nodes", 1),
        "slices.a3mega",
        ["queued provisioning needs min_nodes 0, not 1"],
    ),
    "flex-start with a static node count": (
        _set(
            "slices.a3mega",
            {
                "accelerator": "a3-mega",
                "nodes": 2,
                "min_nodes": 2,
                "capacity": {"type": "flex-start", "max_run_hours": 8},
            },
        ),
        "slices.a3mega",
        ["flex-start takes no static node count (min_nodes 2)"],
    ),
    "min_nodes on a TPU slice": (
        _set("slices.train.min_nodes", 1),
        "slices.train",
        ["a TPU slice is provisioned as one unit", "remove `min_nodes`"],
    ),
    "min_nodes above nodes": (
        _set("slices.a3mega", {"accelerator": "a3-mega", "nodes": 2, "min_nodes": 3, "capacity": {"type": "spot"}}),
        "slices.a3mega",
        ["min_nodes 3 is above nodes 2"],
    ),
    "queued provisioning without Kueue": (
        lambda d: (d.pop("batch"), d.pop("teams")),
        "slices.a3mega.capacity.type",
        ["'queued'", "list this slice in `batch.slices`"],
    ),
    "GPUDirect slice without GPUDirect networks": (
        _delete("network.gpudirect_cidr"),
        "network.gpudirect_cidr",
        ["slices a3mega, a3mega-slurm, a3mega-vms need 8 GPUDirect networks", "192.168.0.0/16"],
    ),
    "GPUDirect range too small": (
        _set("network.gpudirect_cidr", "192.168.0.0/24"),
        "network",
        ["gpudirect_cidr 192.168.0.0/24 is too small", "/20 or larger"],
    ),
    "batch on a TPU slice": (
        _set("batch.slices", ["a3mega", "train"]),
        "batch.slices[1]",
        ["'train'", "this is a TPU slice"],
    ),
    "NCCL test on more nodes than the slice has": (
        _set("batch.nccl_test.nodes", 4),
        "batch.nccl_test.nodes",
        ["4", "slice 'a3mega' has only 2 nodes"],
    ),
    "batch without the controllers": (
        _set("release.controllers", {"kueue": "0.17.3"}),
        "release.controllers",
        ["pin jobset"],
    ),
    "unknown controller": (
        _set("release.controllers", {"jobset": "0.12.0", "kueue": "0.17.3", "volcano": "1.0.0"}),
        "release.controllers",
        ["unknown controller(s) volcano", "known: jobset, kueue"],
    ),
    "GPU training identity that cannot write checkpoints": (
        _set("batch.identity", "serving"),
        "batch.identity",
        ["'serving'", "roles/storage.objectUser", "roles/storage.objectViewer"],
    ),
    "flex-start with auto-repair on": (
        _set(
            "slices.train",
            {
                "accelerator": "v6e",
                "topology": "4x4",
                "capacity": {"type": "flex-start", "max_run_hours": 8},
                "auto_repair": True,
            },
        ),
        "slices.train",
        ["flex-start", "auto_repair off"],
    ),
    "hyphen in a label key": (_set("labels", {"cost-center": "ml"}), "labels.cost-center", ["cost-center"]),
    "billing account id in lower case": (
        _set("monitoring.budget.billing_account", "01a2b3-c4d5e6-f7a8b9"),
        "monitoring.budget.billing_account",
        ["01a2b3-c4d5e6-f7a8b9", "^[0-9A-F]{6}-[0-9A-F]{6}-[0-9A-F]{6}$"],
    ),
    "budget thresholds out of order": (
        _set("monitoring.budget.thresholds", [0.9, 0.5]),
        "monitoring.budget.thresholds",
        ["thresholds go up, each once"],
    ),
    "budget threshold of nothing": (
        _set("monitoring.budget.thresholds", [0, 1.0]),
        "monitoring.budget.thresholds",
        ["above 0 and at most 10"],
    ),
    "a queued training cluster without Kueue": (
        _delete("release.controllers.kueue"),
        "training.queue",
        ["'training'", "pin it in release.controllers.kueue"],
    ),
    "a training queue named as the batch queue": (
        _set("training.queue", "gpu"),
        "training.queue",
        ["'gpu'", "batch.queue names a ClusterQueue 'gpu' already"],
    ),
    "a budget notifying six addresses": (
        _set("monitoring.notify", [f"oncall{i}@acme.example" for i in range(6)]),
        "monitoring",
        ["6 addresses in `notify`: a budget notifies at most 5 channels"],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_environment_fails_naming_file_field_value_and_allowed(case: str, tmp_path: Path) -> None:
    mutate, field, fragments = BAD_FILES[case]
    data = copy.deepcopy(DEV)
    mutate(data)
    path = tmp_path / "dev.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        load_environment(path)
    message = str(err.value)
    line = next((p for p in err.value.problems if p.startswith(field)), None)
    assert line is not None, f"no problem reported at {field}:\n{message}"
    assert str(path) in message
    for fragment in fragments:
        assert fragment in line, f"{fragment!r} missing from {line!r}"


def test_file_name_must_match_environment_name(tmp_path: Path) -> None:
    path = tmp_path / "staging.yaml"
    path.write_text(yaml.safe_dump(DEV))
    with pytest.raises(ConfigError, match="must equal the file's name 'staging'"):
        load_environment(path)


def test_not_yaml_and_not_a_mapping_fail_clearly(tmp_path: Path) -> None:
    broken = tmp_path / "dev.yaml"
    broken.write_text("name: [dev\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_environment(broken)
    broken.write_text("- dev\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_environment(broken)


def test_all_faults_of_all_files_are_reported_together(tmp_path: Path) -> None:
    for name, topology in (("dev", "3x3"), ("prod", "5x5")):
        data = copy.deepcopy(DEV)
        data["name"] = name
        data["slices"]["train"]["topology"] = topology
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        load_all(tmp_path)
    assert any(p.startswith("dev.yaml: slices.train.topology: '3x3'") for p in err.value.problems)
    assert any(p.startswith("prod.yaml: slices.train.topology: '5x5'") for p in err.value.problems)


def test_models_are_frozen(envs: dict[str, Environment]) -> None:
    with pytest.raises(ValueError, match="frozen"):
        envs["dev"].cluster.deletion_protection = True  # type: ignore[misc]


def test_loading_an_environment_imports_no_cdk() -> None:
    """The trainer image loads environments (with their rules) but installs no CDK: loading must not import it."""
    code = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("cdktn", "constructs", "jsii", "cdktn_provider_google"):
            raise ImportError("not in the trainer image: " + name)
sys.meta_path.insert(0, Block())
from infra.config import ENVIRONMENTS_DIR
from infra.synth.load import load_all
from workloads.trainer.recipes import get_recipe
print(sorted(load_all(ENVIRONMENTS_DIR)))
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "['dev', 'prod']"


DEV_TEXT = (ENVIRONMENTS_DIR / "dev.yaml").read_text()


def _line(text: str) -> int:
    """The line of dev.yaml that starts with `text`, counted from 1."""
    return DEV_TEXT[: DEV_TEXT.index(text)].count("\n") + 1


@pytest.mark.parametrize(
    ("before", "after", "problem"),
    [
        # The production guard turned off by a second key in the same mapping.
        (
            "  deletion_protection: false\n",
            "  deletion_protection: true\n  deletion_protection: false\n",
            f"cluster.deletion_protection: written twice, at lines {_line('  deletion_protection: false')} and "
            f"{_line('  deletion_protection: false') + 1}",
        ),
        # A second `train:` slice (here 8x8: four times the chips) silently replacing the first.
        (
            "slices:\n",
            "slices:\n  train:\n    accelerator: v6e\n    topology: 8x8\n    capacity: {type: on-demand}\n",
            # The inserted `train:` on the line after `slices:`, the file's own four lines later.
            f"slices.train: written twice, at lines {_line('slices:') + 1} and {_line('slices:') + 5}",
        ),
    ],
    ids=["cluster.deletion_protection", "slices.train"],
)
def test_a_key_written_twice_is_refused_naming_both_lines(
    before: str, after: str, problem: str, tmp_path: Path
) -> None:
    path = tmp_path / "dev.yaml"
    path.write_text(DEV_TEXT.replace(before, after, 1))
    with pytest.raises(ConfigError) as err:
        load_environment(path)
    assert err.value.problems == [
        f"{problem}; a key may appear once (YAML), and the second would silently replace the first"
    ]
    assert str(path) in str(err.value)


def test_a_file_that_is_not_utf8_is_refused_naming_the_byte_offset(tmp_path: Path) -> None:
    path = tmp_path / "dev.yaml"
    raw = DEV_TEXT.encode()
    path.write_bytes(raw[:500] + b"\xff" + raw[500:])
    with pytest.raises(ConfigError) as err:
        load_environment(path)
    line = raw[:500].count(b"\n") + 1
    assert err.value.problems == [f"not valid UTF-8 at byte offset 500 (line {line}): b'\\xff'"]


@pytest.mark.parametrize("number", [".inf", "-.inf", ".nan"])
def test_infinite_and_nan_numbers_are_refused_at_load(number: str, tmp_path: Path) -> None:
    """Before the fix `.inf` in a numeric field synthesized invalid JSON into a Helm value."""
    path = tmp_path / "dev.yaml"
    path.write_text(DEV_TEXT.replace("    max_nodes: 5\n", f"    max_nodes: {number}\n", 1))
    with pytest.raises(ConfigError) as err:
        load_environment(path)
    (line,) = err.value.problems
    assert line.startswith("cluster.system_pool.max_nodes: ")


def test_a_long_reservation_name_and_a_shared_reservation_path_are_taken(envs: dict[str, Environment]) -> None:
    """Once wrongly refused: a 43-character reservation name (Compute Engine allows 63) and a shared
    reservation's path, projects/<project>/reservations/<name>, which GKE and Cluster Toolkit take."""
    from infra.config.compute import Capacity

    long_name = Capacity(type="reservation", reservation="r" * 43)
    shared = Capacity(type="reservation", reservation="projects/acme-shared-tpus/reservations/v6e-256")
    assert (
        long_name.reservation_path("p-123456", "us-east5-b")
        == f"projects/p-123456/zones/us-east5-b/reservations/{'r' * 43}"
    )
    assert shared.reservation_path("p-123456", "us-east5-b") == (
        "projects/acme-shared-tpus/zones/us-east5-b/reservations/v6e-256"
    )
    with pytest.raises(ValueError, match="String should match pattern"):
        Capacity(type="reservation", reservation="projects/x/zones/z/reservations/r")
