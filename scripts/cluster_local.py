"""A local Kubernetes control plane for an environment (infra/localcluster): real etcd, kube-apiserver,
kube-controller-manager and kube-scheduler at the environments' Kubernetes minor, built from their Go modules, with
KWOK standing in for the kubelets of one node per node of every pool of the environment's stack.

  python -m scripts.cluster_local up [--env dev] [--dir .cache/cluster-local]   start it (kept while healthy)
  python -m scripts.cluster_local down [--dir ...]                              stop it, remove its state
  python -m scripts.cluster_local status [--dir ...]                            which components run, the nodes
  python -m scripts.cluster_local build [component ...]                         build (or find cached) the programs

Exit codes: 0 done, 1 a component failed to build or start (its log named), 2 bad input.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from infra.cdk.layout import read_stack, stack_name
from infra.config import ConfigError
from infra.engine.build import BuildError, build_all
from infra.localcluster.cluster import Cluster, ClusterError
from infra.synth.load import load_named
from scripts.parser import ArgumentParser, refuse

DEFAULT_DIR = Path(".cache/cluster-local")


def stack_of(env_name: str) -> tuple[dict[str, object], str]:
    """(synthesized stack, region) of one environment."""
    from infra.synth.app import synth

    env = load_named(env_name)
    with tempfile.TemporaryDirectory(prefix="platform-cluster-local-") as tmp:
        synth({env.name: env}, Path(tmp))
        stack = read_stack(Path(tmp), stack_name(env.name))
    return stack, env.region


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m scripts.cluster_local", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["up", "down", "status", "build"])
    parser.add_argument("components", nargs="*", help="build: the components (default: all)")
    parser.add_argument("--env", default="dev", help="up: whose node pools become the nodes (default dev)")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="the cluster's folder")
    args = parser.parse_args(argv)
    cluster = Cluster(args.dir.resolve())
    try:
        if args.action == "build":
            for name, path in build_all(args.components or None).items():
                print(f"{name}\t{path}")
        elif args.action == "up":
            stack, region = stack_of(args.env)
            cluster.up(stack, region)
        elif args.action == "down":
            cluster.down()
        else:
            running = cluster.running()
            print("\n".join(f"{name}\tpid {pid}" for name, pid in running.items()) or "cluster-local: not running")
            if running and cluster.ready():
                print(cluster.kubectl("get", "nodes", "-L", "cloud.google.com/gke-nodepool").stdout, end="")
    except ConfigError as err:
        return refuse(err)
    except (BuildError, ClusterError) as err:
        print(f"error: cluster-local: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
