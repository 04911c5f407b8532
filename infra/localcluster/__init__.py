"""A real Kubernetes control plane on this machine and the stack's Kubernetes half applied to it (`make
cluster-local`, `make deploy-local`): what is built (build.py), the cluster (cluster.py, nodes.py), what the apply
sends (manifests.py, apply.py), the controllers beside it (controllers.py) and what the components decided
(verdicts.py). docs/local-cluster.md says what is real and what stands in."""
