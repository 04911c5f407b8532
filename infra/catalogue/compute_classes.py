"""GKE's custom ComputeClasses as the platform uses them: a class over node pools the stack creates, one
`nodepools` priority per capacity tier. Facts from "About custom ComputeClasses"
(https://cloud.google.com/kubernetes-engine/docs/concepts/about-custom-compute-classes, updated 2026-04-13) and
the ComputeClass CRD's CEL rules (its schema as GKE serves it, collected in datreeio/CRDs-catalog
cloud.google.com/computeclass_v1.json @ 77e49833); GKE publishes no CRD file the platform can pin, so the rule
`gke.compute-class-tiers` holds the objects to these.
"""

from __future__ import annotations

DOC = "https://cloud.google.com/kubernetes-engine/docs/concepts/about-custom-compute-classes"
CRD_SOURCE = "ComputeClass CRD (cloud.google.com/v1) CEL rules, datreeio/CRDs-catalog computeclass_v1.json @ 77e49833"

# Node labels GKE derives from a class's own fields: a Pod that selects a class and one of these is refused
# (the docs' list of "node selectors that you can't use with ComputeClasses").
CLASS_CONTROLLED_LABELS = frozenset(
    {
        "cloud.google.com/machine-family",
        "cloud.google.com/machine-type",
        "cloud.google.com/gke-spot",
        "cloud.google.com/gke-accelerator",
        "cloud.google.com/gke-gpu-driver-version",
        "cloud.google.com/reservation-name",
        "cloud.google.com/reservation-project",
        "cloud.google.com/reservation-affinity",
        "cloud.google.com/gke-ephemeral-storage-local-ssd",
        "cloud.google.com/gke-boot-disk",
        "cloud.google.com/gke-boot-disk-size",
        "cloud.google.com/gke-node-pool-group-name",
        "cloud.google.com/gke-workload-type",
        "node.kubernetes.io/instance-type",
    }
)

# A class's name may not start with these (GKE's own classes).
RESERVED_PREFIXES = ("gke", "autopilot")
WHEN_UNSATISFIABLE = ("ScaleUpAnyway", "DoNotScaleUp")
