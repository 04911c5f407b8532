"""A real Kubernetes control plane on this machine and the stack's Kubernetes half applied to it (`make
cluster-local`, `make deploy-local`): the cluster (cluster.py, nodes.py, certs.py), the firewall between its
control plane and the pods (firewall.py), the apply by OpenTofu and the real providers (apply.py), the controllers
beside it (controllers.py, stages.py), what a destroy left (destroy.py) and what the components decided
(verdicts.py). docs/local-cluster.md says what is real and what stands in."""
