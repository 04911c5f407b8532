"""Derivations shared by several orchestrators: what a GKE node of a pool looks like to the scheduler
(`gke_nodes`), and what a group of GPU hosts with no launcher of its own runs (`gpu_group`)."""
