"""Vertex AI custom jobs from the environment: each job's CustomJob request (`job`), held to the client
library's types and the service's sourced rules (`infra/rules/vertex_ai.py`), written by `make plan` and
submitted by `make vertex-submit` (`python -m scripts.vertex`)."""
