"""The catalogue: facts about the outside world, one module per system, each dated and sourced.

Accelerators and their slices, GPUDirect transports and hosts, CPU machines, zones, GKE's calendar,
the Google APIs, resource-name rules, served models, upstream controllers and images, Cluster Toolkit's
pins, the repository's charts and prices. The bottom layer: it imports nothing else of the platform
(`make lint` holds that).
"""
