"""The charts' tooling at plan time: render them with the Helm SDK and validate every object (check.py), the pinned
upstream CRD schemas they are validated against (crds.py, crds.yaml), the CRDs' own CEL rules (cel.py), and a
training run as the ray-training chart renders it (runs.py). The charts themselves are what runs in the cluster:
workloads/charts/<chart>/."""
