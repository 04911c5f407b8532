"""`python -m scripts.vms`: the environments' VM groups: their bulkInsert requests and start-ups, and the VMs up
and down.

    write <outdir>                     every group's <outdir>/vms/<env>/<group>/bulk-insert.json (held as written
                                       to the API's types and the request rules) and startup.sh (`make plan`)
    up --env ENV --group G [--bulk]    create the group's VMs (`make vm-up`): a flex-start group through a resize
                                       request of its managed group (all at once, deleted after the slice's
                                       max_run_hours), any other by creating them in the managed group by name;
                                       --bulk sends the bulkInsert request instead (all or none, outside the group)
    down --env ENV --group G           delete the group's VMs and cancel a resize request still waiting (`make vm-down`)
    --dry-run                          (up, down) print each call and its request; call nothing

Exit codes: 0 done; 1 a refused request, or the API refused a call; 2 a bad environment file or usage.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from infra.config import ConfigError, Environment, api_types, environments_dir
from infra.rules import rules_for
from infra.rules.request_subject import RequestContext, write_checked
from infra.synth.load import load_all, load_planned
from infra.vms.bulk import bulk_insert
from infra.vms.instance import group_name, startup_script, vm_names
from scripts.parser import ArgumentParser, refuse

# A call of the Compute Engine client: (client class, method, keyword arguments with the request as JSON).
Call = tuple[str, str, dict[str, Any]]


def write(env: Environment, outdir: Path) -> tuple[list[Path], list[str]]:
    """Write and check every group of `env`: (directories written, violation lines)."""
    written, lines = [], []
    for key in env.vm_groups:
        target = outdir / "vms" / env.name / key
        ctx = RequestContext("compute.v1.BulkInsertInstanceResource", env, f"vm_groups.{key}")
        lines += write_checked(target / "bulk-insert.json", bulk_insert(env, key), ctx)
        (target / "startup.sh").write_text(startup_script(env, key))
        written.append(target)
    return written, lines


def _where(env: Environment, key: str) -> dict[str, str]:
    return {"project": env.project, "zone": env.zone_of(env.vm_groups[key].slice)}


def up_calls(env: Environment, key: str, *, bulk: bool = False, now: float | None = None) -> list[Call]:
    """The calls that create group `key`'s VMs."""
    where = _where(env, key)
    if bulk:
        return [
            (
                "InstancesClient",
                "bulk_insert",
                {**where, "bulk_insert_instance_resource_resource": bulk_insert(env, key)},
            )
        ]
    names = vm_names(env, key)
    capacity = env.slices[env.vm_groups[key].slice].primary
    group = {**where, "instance_group_manager": group_name(env, key)}
    if capacity.type == "flex-start":
        assert capacity.max_run_hours is not None
        request = {
            "name": f"up-{int(now if now is not None else time.time())}",
            "instances": [{"name": n} for n in names],
            "requestedRunDuration": {"seconds": str(capacity.max_run_hours * 3600)},
        }
        return [
            (
                "InstanceGroupManagerResizeRequestsClient",
                "insert",
                {**group, "instance_group_manager_resize_request_resource": request},
            )
        ]
    request = {"instances": [{"name": n} for n in names]}
    return [
        (
            "InstanceGroupManagersClient",
            "create_instances",
            {**group, "instance_group_managers_create_instances_request_resource": request},
        )
    ]


def down_calls(env: Environment, key: str, pending_resize_requests: list[str]) -> list[Call]:
    """The calls that delete group `key`'s VMs, whether the group or a bulkInsert created them."""
    where = _where(env, key)
    group = {**where, "instance_group_manager": group_name(env, key)}
    calls: list[Call] = [
        ("InstanceGroupManagerResizeRequestsClient", "cancel", {**group, "resize_request": name})
        for name in pending_resize_requests
    ]
    instances = [f"zones/{where['zone']}/instances/{n}" for n in vm_names(env, key)]
    calls.append(
        (
            "InstanceGroupManagersClient",
            "delete_instances",
            {
                **group,
                "instance_group_managers_delete_instances_request_resource": {
                    "instances": instances,
                    # A VM the group does not hold (a bulkInsert's) is deleted by name below.
                    "skipInstancesOnValidationError": True,
                },
            },
        )
    )
    calls += [("InstancesClient", "delete", {**where, "instance": n}) for n in vm_names(env, key)]
    return calls


# The request message of each call's JSON argument (its type is checked before anything is sent).
REQUEST_TYPES = {
    "bulk_insert_instance_resource_resource": "BulkInsertInstanceResource",
    "instance_group_manager_resize_request_resource": "InstanceGroupManagerResizeRequest",
    "instance_group_managers_create_instances_request_resource": "InstanceGroupManagersCreateInstancesRequest",
    "instance_group_managers_delete_instances_request_resource": "InstanceGroupManagersDeleteInstancesRequest",
}


def checked(calls: list[Call]) -> list[Call]:
    """The calls, each request held to its message type of the client library (ValueError on a refusal)."""
    from google.cloud import compute_v1

    for _, method, kwargs in calls:
        for arg, type_name in REQUEST_TYPES.items():
            if arg in kwargs:
                cls = getattr(compute_v1, type_name)
                found = api_types.refusals(kwargs[arg], cls)
                if found:
                    raise ValueError(f"{method}: {type_name}: " + "; ".join(f"{p}: {v!r}: {m}" for p, v, m in found))
    return calls


def run(calls: list[Call], clients: dict[str, Any] | None = None) -> list[str]:
    """Make the calls (waiting for each operation); returns one line per call. NotFound on a delete is done."""
    from google.api_core import exceptions
    from google.cloud import compute_v1

    out = []
    made: dict[str, Any] = dict(clients or {})
    for client_name, method, kwargs in calls:
        if client_name not in made:
            made[client_name] = getattr(compute_v1, client_name)()
        client = made[client_name]
        args = dict(kwargs)
        for arg, type_name in REQUEST_TYPES.items():
            if arg in args:
                args[arg] = getattr(compute_v1, type_name).from_json(json.dumps(args[arg]))
        try:
            operation = getattr(client, method)(**args)
            if hasattr(operation, "result"):
                operation.result()
            out.append(f"{client_name}.{method}: done")
        except exceptions.NotFound:
            if method not in ("delete", "cancel"):
                raise
            out.append(
                f"{client_name}.{method}: nothing to delete ({args.get('instance') or args.get('resize_request')})"
            )
    return out


def pending_resize_requests(env: Environment, key: str, client: Any = None) -> list[str]:
    """The group's resize requests still waiting for capacity (ACCEPTED or CREATING)."""
    from google.cloud import compute_v1

    client = client or compute_v1.InstanceGroupManagerResizeRequestsClient()
    listed = client.list(**_where(env, key), instance_group_manager=group_name(env, key))
    return [r.name for r in listed if r.state in ("ACCEPTED", "CREATING")]


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m scripts.vms",
        description="The environments' VM groups: bulkInsert requests and start-ups, VMs up and down.",
        epilog="Exit codes: 0 done; 1 a refused request or a refused call; 2 a bad environment file or usage.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    write_cmd = sub.add_parser("write", help="write and validate every group's bulkInsert request and start-up")
    write_cmd.add_argument("outdir", type=Path)
    for name, helptext in (("up", "create a group's VMs"), ("down", "delete a group's VMs")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("--env", required=True)
        p.add_argument("--group", required=True)
        p.add_argument("--dry-run", action="store_true", help="print the calls; call nothing")
        if name == "up":
            p.add_argument("--bulk", action="store_true", help="send the bulkInsert request (all VMs or none)")
    args = parser.parse_args(argv)
    try:
        envs = (load_planned if args.command == "write" else load_all)(environments_dir())
    except ConfigError as err:
        return refuse(err)
    if args.command == "write":
        refused = False
        for each in envs.values():
            written, lines = write(each, args.outdir)
            for line in lines:
                print(f"error: {line}", file=sys.stderr)
            for target in written:
                verdict = (
                    f"{len([r for r in rules_for('request') if r.system == 'Compute Engine'])} request rules: "
                    + ("valid" if not lines else f"{len(lines)} violation(s)")
                )
                print(f"vms: {each.name}: group {target.name}: {target}/bulk-insert.json: {verdict}")
            refused = refused or bool(lines)
        return 1 if refused else 0
    env = envs.get(args.env)
    if env is None or args.group not in env.vm_groups:
        known = f"groups: {', '.join(env.vm_groups) or '(none)'}" if env else f"environments: {', '.join(envs)}"
        print(f"error: no VM group {args.group!r} in environment {args.env!r}; {known}", file=sys.stderr)
        return 2
    try:
        with tempfile.TemporaryDirectory() as tmp:
            _, lines = write(env, Path(tmp))
        if lines:
            for line in lines:
                print(f"error: {line}", file=sys.stderr)
            return 1
        if args.command == "up":
            calls = checked(up_calls(env, args.group, bulk=args.bulk))
        else:
            pending = [] if args.dry_run else pending_resize_requests(env, args.group)
            calls = checked(down_calls(env, args.group, pending))
        if args.dry_run:
            for client, method, kwargs in calls:
                print(json.dumps({"call": f"compute_v1.{client}.{method}", **kwargs}, indent=2))
            return 0
        for line in run(calls):
            print(line)
    except ValueError as err:
        return refuse(err, 1)
    except Exception as err:  # the API's refusal (google.api_core.exceptions.*) or no credentials
        print(f"error: Compute Engine refused: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
